"""The app as a daily driver: queued prompts, keys that never misfire, no dead ends, help that can't drift."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console
from textual import events
from textual.binding import Binding
from textual.widgets import Static

from hotloop.agent.events import TurnStarted
from hotloop.config import load_config
from hotloop.core.session import SessionOptions
from hotloop.core.slash import COMMANDS
from hotloop.providers.conversation import AssistantMessage
from hotloop.sessions.store import read_session
from hotloop.tui.app import HotloopApp
from hotloop.tui.screens.help import HelpScreen
from hotloop.tui.screens.main import MainScreen
from hotloop.tui.screens.replay import ReplayScreen
from hotloop.tui.screens.session_view import SessionView
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.widgets.approval_bar import AnswerList
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.sessions_sidebar import SessionList, SessionsSidebar

from support import present
from tui_support import HELD, drawn, holding, idle, press, running_app, send, wait_until, write_config

# An answer that stops mid-way (30 s, past any test's end) until ctrl+s or Esc cuts it.
MID_ANSWER = {"text": "word " * 300, "stall": {"after_chunks": 20, "seconds": 30}}


def prompts_sent(app: HotloopApp) -> list[str]:
    assert app.session.log is not None
    app.session.log.flush()
    events = read_session(app.session.log.path).events
    return [event.prompt.split("\n\n<context>")[0] for event in events if isinstance(event, TurnStarted)]


async def type_during_the_turn(app: HotloopApp, text: str) -> PromptInput:
    box = app.query_one(PromptInput)
    await wait_until(lambda: app.main.turn_running and app.agent is not None and app.agent.turn == 1)
    box.load_text(text)
    return box


async def test_keys_typed_before_the_prompt_had_the_focus_are_typed_in_it(isolated_home: Path) -> None:
    """Keys typed as the app starts reach the screen before anything has the focus, and are handled once the prompt
    has it: typed in the prompt, in order, not dropped as keys the prompt had already taken."""
    write_config(isolated_home, [{"text": "ok"}])
    async with running_app() as (app, _):
        box = app.query_one(PromptInput)
        assert app.focused is box
        for key in "hi there":
            # As Textual's app hands a key to the screen when nothing has the focus: marked forwarded, so it doesn't
            # come back to the app to go to the focused box.
            app.main._forward_event(events.Key("space" if key == " " else key, key))
        await wait_until(lambda: box.text == "hi there")


async def test_enter_during_a_turn_queues_the_prompt_and_sends_it_when_the_turn_ends(isolated_home: Path) -> None:
    write_config(isolated_home, [HELD, {"text": "First answer."}, {"text": "Second answer."}])
    async with running_app() as (app, pilot):
        release = holding(app)
        await send(app, pilot, "first")
        box = await type_during_the_turn(app, "second")
        press(app, "enter")
        queued = app.query_one(QueuedPrompts)
        await wait_until(lambda: queued.prompts == ("second",) and queued.display)
        assert box.text == "" and app.agent is not None and app.agent.turn == 1  # queued, not sent, not refused
        release.set()
        await wait_until(lambda: app.agent is not None and app.agent.turn == 2 and not app.main.turn_running)
        assert prompts_sent(app) == ["first", "second"]
        assert queued.prompts == () and not queued.display


async def test_up_in_an_empty_box_takes_a_queued_prompt_back_to_edit(isolated_home: Path) -> None:
    write_config(isolated_home, [HELD, {"text": "First answer."}, {"text": "Edited answer."}])
    async with running_app() as (app, pilot):
        release = holding(app)
        await send(app, pilot, "first")
        box = await type_during_the_turn(app, "secnod")
        press(app, "enter")
        await wait_until(lambda: app.query_one(QueuedPrompts).prompts == ("secnod",))
        press(app, "up")
        await wait_until(lambda: box.text == "secnod" and app.query_one(QueuedPrompts).prompts == ())
        box.load_text("second")
        press(app, "enter")
        await wait_until(lambda: app.query_one(QueuedPrompts).prompts == ("second",))
        release.set()
        await wait_until(lambda: app.agent is not None and app.agent.turn == 2 and not app.main.turn_running)
        assert prompts_sent(app) == ["first", "second"]


async def test_esc_stops_the_turn_and_gives_the_queued_prompts_back(isolated_home: Path) -> None:
    write_config(isolated_home, [HELD, {"text": "never"}])
    async with running_app() as (app, pilot):
        holding(app)  # never let go: Esc ends the turn
        await send(app, pilot, "first")
        box = await type_during_the_turn(app, "second")
        press(app, "enter")
        await wait_until(lambda: app.query_one(QueuedPrompts).prompts == ("second",))
        press(app, "escape")
        await wait_until(lambda: not app.main.turn_running and box.text == "second")
        await pilot.pause()
        assert app.agent is not None and app.agent.turn == 1 and prompts_sent(app) == ["first"]


async def test_ctrl_s_sends_now_in_place_of_the_turn_in_flight(isolated_home: Path) -> None:
    write_config(isolated_home, [MID_ANSWER, {"text": "Right away."}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "first")
        await type_during_the_turn(app, "stop, do this instead")
        await wait_until(lambda: app.main.transcript.answer.text)  # cut mid-answer
        press(app, "ctrl+s")
        await wait_until(lambda: app.agent is not None and app.agent.turn == 2 and not app.main.turn_running)
        assert prompts_sent(app) == ["first", "stop, do this instead"]
        answers = [m for m in present(app.agent).messages if isinstance(m, AssistantMessage)]
        assert [a.interrupted for a in answers] == [True, False]  # the first answer was cut where the second began


async def test_keys_typed_outside_the_box_go_to_the_prompt_not_to_commands(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "An answer to copy."}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "hello")
        await idle(app, pilot)
        history = app.query_one(HistoryView)
        history.focus()
        await wait_until(lambda: app.focused is history)
        press(app, *"copy")
        box = app.query_one(PromptInput)
        try:
            await wait_until(lambda: box.text == "copy" and app.focused is box)
        except TimeoutError:  # once on CI under load, not reproduced since: what the screen had is the lead
            raise AssertionError(f"the prompt holds {box.text!r}, the focus is on {app.focused!r}") from None
        assert not any("copied" in str(n.message) for n in app._notifications)


async def test_an_unreachable_start_provider_is_retried_and_another_can_be_picked(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "The simulator answers."}])
    options = SessionOptions(provider="openai", base_url="http://127.0.0.1:9/v1")
    app = HotloopApp(load_config(), options)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(lambda: app.main.status.state.startswith("connecting… retry in"))
        titles = [option.title for option in await app.switch_options()]
        assert "provider: sim" in titles or any(title.startswith("model: sim · ") for title in titles)
        box = app.query_one(PromptInput)
        box.load_text("typed while connecting")
        press(app, "enter")
        await wait_until(lambda: app.query_one(QueuedPrompts).prompts == ("typed while connecting",))
        box.load_text("/provider sim")
        press(app, "enter")
        await wait_until(lambda: app.agent is not None and app.agent.turn == 1 and not app.main.turn_running)
        assert present(app.agent).provider.name == "sim" and app.main.status.state == "ready"
        assert prompts_sent(app) == ["typed while connecting"]
        await pilot.pause()


async def test_page_keys_scroll_the_transcript_from_the_prompt(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "line\n\n" * 120}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "a long one")
        await idle(app, pilot)
        transcript = app.main.transcript.history  # the one widget that scrolls
        await wait_until(lambda: transcript.max_scroll_y > 0 and transcript.scroll_y == transcript.max_scroll_y)
        press(app, "pageup")
        await wait_until(lambda: transcript.scroll_y < transcript.max_scroll_y)
        assert isinstance(app.focused, PromptInput)
        press(app, "ctrl+home")
        await wait_until(lambda: transcript.scroll_y == 0)
        press(app, "ctrl+end")
        await wait_until(lambda: transcript.scroll_y == transcript.max_scroll_y)


def described(bindings: list[Any]) -> list[str]:
    return [
        (entry if isinstance(entry, Binding) else Binding(*entry)).tooltip
        or (entry if isinstance(entry, Binding) else Binding(*entry)).description
        for entry in bindings
    ]


async def test_the_help_lists_every_key_and_command_there_is(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app(size=(120, 60)) as (app, pilot):
        press(app, "f1")
        await wait_until(lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        console = Console(width=110, file=io.StringIO(), record=True)
        for static in app.screen.query(Static):
            console.print(static.content)
        shown = " ".join(console.export_text().split())
        for bindings in (
            HotloopApp.BINDINGS,
            MainScreen.BINDINGS,
            PromptInput.BINDINGS,
            HistoryView.BINDINGS,
            AnswerList.BINDINGS,
            SessionsSidebar.BINDINGS,
            SessionList.BINDINGS,
            SessionView.BINDINGS,
            ReplayScreen.BINDINGS,
            WaterfallScreen.BINDINGS,
        ):
            for text in described(list(bindings)):
                assert " ".join(text.split()) in shown, text
        for name, text in COMMANDS.items():
            assert name in shown and " ".join(text.split()) in shown  # /tier's "fast|balanced|strong" whole
        for key in ("^p", "pgup", "f3", "^s"):
            assert key in shown.lower(), key


async def test_f3_on_a_saved_session_shows_that_session_s_waterfall(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "First."}, {"text": "Second."}])
    async with running_app(size=(120, 36)) as (app, pilot):
        await send(app, pilot, "the first session")
        await idle(app, pilot)
        assert app.session.log is not None
        first = app.session.log.path
        await pilot.press("ctrl+n")
        await send(app, pilot, "the second session")
        await idle(app, pilot)
        app.session.log.flush()
        saved = read_session(first)
        await app.push_screen(SessionView(saved, app.palette))
        await wait_until(lambda: isinstance(app.screen, SessionView))
        press(app, "f3")
        await wait_until(lambda: isinstance(app.screen, WaterfallScreen) and bool(app.screen.plain))  # composed
        assert isinstance(app.screen, WaterfallScreen)
        assert app.screen.events == saved.events and "the first session" in app.screen.plain


async def test_the_server_panel_follows_the_width_the_terminal_now_has(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app(size=(100, 30)) as (app, pilot):
        await wait_until(lambda: bool(app.query(ServerPanel)))
        panel = app.query_one(ServerPanel)
        assert not panel.display
        await pilot.resize_terminal(140, 30)
        await wait_until(lambda: panel.display)
        await pilot.resize_terminal(100, 30)
        await wait_until(lambda: not panel.display)


async def test_the_welcome_text_comes_back_with_a_new_conversation(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "An answer."}])
    async with running_app() as (app, pilot):
        await wait_until(lambda: "Ask for anything." in drawn(app))
        await send(app, pilot, "hello")
        await idle(app, pilot)
        await wait_until(lambda: "Ask for anything." not in drawn(app))
        press(app, "ctrl+n")
        await wait_until(lambda: "Ask for anything." in drawn(app))
