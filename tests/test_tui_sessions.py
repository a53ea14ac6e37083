"""Replaying and resuming sessions in the real app, driven with Pilot."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.widgets import Input, OptionList

from hotloop.agent.events import ToolFinished, ToolStarted, TurnFinished, fan_out
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.core.session import SessionOptions
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sessions.log import SessionLog
from hotloop.sessions.replay import Replay
from hotloop.sessions.store import read_session
from hotloop.tui.items import AnswerItem, NoticeItem, ToolCallsItem
from hotloop.tui.replay_app import ReplayApp
from hotloop.tui.screens import replay as replay_screen
from hotloop.tui.screens.replay import ReplayScreen

from support import Recorder, killed_mid_answer, present, sim_with_scenario
from tui_support import idle, live_panes, press, running_app, send, sessions_sidebar, wait_until, write_config

PAUSES = (0.6, 0.4, 0.8)


def replay_drawn(app: App[Any]) -> bool:
    """The replay screen is current and its transcript composed, so keys and queries reach it."""
    return isinstance(app.screen, ReplayScreen) and bool(app.screen.query("HistoryView"))


def replaying(app: App[Any]) -> ReplayScreen:
    assert isinstance(app.screen, ReplayScreen)
    return app.screen


async def record_parallel_session(tmp_path: Path, folder: Path) -> tuple[Path, list[int]]:
    """A logged session whose one step runs three pauses side by side; returns its log and the pause calls made."""
    ran: list[int] = []

    async def pause(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(1)
        # Real time: the log keeps when each call started and ended, and a replay at speed 1 is held to that pace.
        await asyncio.sleep(args["seconds"])
        return "paused"

    schema = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
    calls = [{"name": "pause", "arguments": {"seconds": s}} for s in PAUSES]
    sim = sim_with_scenario(tmp_path, [{"text": "Three at once.\n", "tool_calls": calls}, {"text": "All done."}])
    provider = OpenAIChatProvider(ProviderOptions(name="sim", model="sim-fast", base_url=sim.base_url, max_retries=0))
    try:
        with SessionLog.create(folder, provider="sim", model="sim-fast", workspace=tmp_path) as log:
            agent = Agent(
                provider,
                ToolRegistry([Tool("pause", "Pause.", schema, pause)]),
                emit=fan_out(Recorder(), log.write),
                workspace=tmp_path,
            )
            await agent.run_turn("pause three times")
    finally:
        await provider.aclose()
        sim.stop()
    return log.path, ran


@pytest.fixture(scope="module")
def parallel_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """One such session for the module's replays, which only read it: it takes real time to record."""
    folder = tmp_path_factory.mktemp("parallel")
    return asyncio.run(record_parallel_session(folder, folder / "sessions"))


class ReplayClock:
    """The replay's clock: real time, plus whatever jumps the test makes."""

    def __init__(self) -> None:
        self.jumped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.jumped


async def test_a_replay_redraws_parallel_panes_overlapping_as_they_did(
    parallel_session: tuple[Path, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three panes run at once again, and start and finish in the logged order, taking about as long."""
    path, ran = parallel_session
    session = read_session(path)
    logged = [(type(e).__name__, e.call_id, e.ts) for e in session.events if isinstance(e, ToolStarted | ToolFinished)]
    calls_before = len(ran)
    seen: list[tuple[str, str, float]] = []
    deliver = ReplayScreen.deliver

    def watched(screen: ReplayScreen, event: Any) -> None:
        if isinstance(event, ToolStarted | ToolFinished):
            seen.append((type(event).__name__, event.call_id, time.monotonic()))
        deliver(screen, event)

    monkeypatch.setattr(ReplayScreen, "deliver", watched)
    app = ReplayApp(session, speed=1.0)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(lambda: replay_drawn(app))
        screen = replaying(app)
        transcript = screen.transcript
        await wait_until(lambda: len(live_panes(transcript, "running")) == 3)
        await wait_until(lambda: screen.replay.done)
        await pilot.pause()
        tools = [item for item in transcript.history.items if isinstance(item, ToolCallsItem)]

    assert len(ran) == calls_before  # the replay ran no tool
    assert [(kind, call) for kind, call, _ in seen] == [(kind, call) for kind, call, _ in logged]
    first_finish = next(n for n, (kind, _, _) in enumerate(seen) if kind == "ToolFinished")
    assert first_finish == 3  # all three started before any finished, as in the log
    recorded = logged[-1][2] - logged[0][2]
    replayed = seen[-1][2] - seen[0][2]
    assert 0.6 < replayed / recorded < 1.6
    assert len(tools) == 1 and [call.status for call in tools[0].calls] == ["ok", "ok", "ok"]


async def test_a_replay_closing_mid_play_draws_nothing_more(parallel_session: tuple[Path, list[int]]) -> None:
    """Once the app quits, events the player already holds are not drawn: the widgets are being torn down (CI once
    failed with `NoMatches: Transcript` from the player during shutdown)."""
    path, _ = parallel_session
    session = read_session(path)
    app = ReplayApp(session, speed=0.25)
    async with app.run_test(size=(120, 36)):
        await wait_until(lambda: replay_drawn(app))
        screen = replaying(app)
        press(app, "space")
        await wait_until(lambda: screen.replay.paused)
        drawn_before = [type(item) for item in screen.transcript.history.items]
        app.exit()
        for event in session.events:
            screen.deliver(event)
        assert [type(item) for item in screen.transcript.history.items] == drawn_before
        assert ToolCallsItem not in drawn_before  # the log's events held the step's tool panes


async def test_replay_keys_pause_step_and_change_speed(
    parallel_session: tuple[Path, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = parallel_session
    session = read_session(path)
    clock = ReplayClock()
    monkeypatch.setattr(replay_screen, "Replay", functools.partial(Replay, now=clock))
    app = ReplayApp(session, speed=0.25)
    async with app.run_test(size=(120, 36)):
        await wait_until(lambda: replay_drawn(app))
        replay = replaying(app).replay
        await wait_until(lambda: replay.position > replay.timeline.step_starts[0])  # inside step 1
        press(app, "space")
        await wait_until(lambda: replay.paused)
        held = replay.position
        clock.jumped += 3600  # an hour passes: playing, the replay would now be due to show every event
        press(app, "plus")  # a speed change wakes the player, which must find itself paused
        await wait_until(lambda: replay.speed == 0.5)
        press(app, "minus")
        await wait_until(lambda: replay.speed == 0.25)
        assert replay.paused and replay.position == held and replay.speed == 0.25
        press(app, "right")
        await wait_until(lambda: replay.position != held)
        assert replay.position == replay.timeline.step_starts[1]  # straight to step 2, still paused
        assert any(isinstance(item, ToolCallsItem) for item in replaying(app).transcript.history.items)
        press(app, "left")
        await wait_until(lambda: replay.position < replay.timeline.step_starts[1])
        assert replay.position == 0 and not replaying(app).transcript.history.items  # back to the start: redrawn
        press(app, "space")
        await wait_until(lambda: replay.position > 0)  # playing again
        press(app, "plus", "plus")
        await wait_until(lambda: replay.speed > 0.5)
        assert replay.speed == 1.0
        press(app, "minus")
        await wait_until(lambda: replay.speed < 1.0)
        assert replay.speed == 0.5
        title = str(app.screen.query_one("#title").render())
        assert "replay · session" in title and "0.5×" in title


async def test_speed_zero_draws_the_whole_session_at_once(parallel_session: tuple[Path, list[int]]) -> None:
    path, _ = parallel_session
    app = ReplayApp(read_session(path), speed=0)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(lambda: replay_drawn(app))
        await pilot.pause()
        screen = replaying(app)
        assert screen.replay.done
        kinds = [type(item).__name__ for item in screen.transcript.history.items]
        assert kinds == ["UserItem", "AnswerItem", "ToolCallsItem", "UsageItem", "AnswerItem", "UsageItem"]


async def test_continue_after_kill_9_shows_the_interrupted_partial_answer(isolated_home: Path) -> None:
    path = killed_mid_answer(isolated_home)
    async with running_app(options=SessionOptions(resume=path)) as (app, pilot):
        await wait_until(lambda: any(isinstance(item, AnswerItem) for item in app.main.transcript.history.items))
        [partial] = [item for item in app.main.transcript.history.items if isinstance(item, AnswerItem)]
        assert partial.interrupted and partial.text.startswith("word word")
        notices = [item.message for item in app.main.transcript.history.items if isinstance(item, NoticeItem)]
        assert any("its partial answer is kept, marked interrupted" in n for n in notices)
        assert app.session.log is not None and app.session.log.path == path
        await send(app, pilot, "go on")
        await idle(app, pilot)
        answers = [item for item in app.main.transcript.history.items if isinstance(item, AnswerItem)]
        assert answers[-1].text == "Picked up again."
    events = read_session(path).events
    assert [(e.turn, e.reason) for e in events if isinstance(e, TurnFinished)] == [(1, "interrupted"), (2, "answer")]


async def test_the_sidebar_searches_replays_and_continues(isolated_home: Path) -> None:
    (isolated_home / "ws").mkdir()
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "first session about caches")
        await idle(app, pilot)
        first_log = present(app.session.log).path
        await pilot.press("ctrl+n")
        await send(app, pilot, "second session about panes")
        await idle(app, pilot)

        press(app, "ctrl+b")
        sidebar = await sessions_sidebar(app)
        await wait_until(lambda: sidebar.query_one(OptionList).option_count == 2)
        sidebar.query_one(Input).focus()
        await wait_until(lambda: app.focused is sidebar.query_one(Input))
        press(app, *"caches")
        await wait_until(lambda: sidebar.query_one(OptionList).option_count == 1)
        press(app, "enter")  # from the search box to the list
        await wait_until(lambda: app.focused is sidebar.query_one(OptionList))
        press(app, "r")
        await wait_until(lambda: replay_drawn(app))
        assert replaying(app).session.header.id == first_log.stem.rsplit("_", 1)[1]
        await pilot.press("escape")
        await wait_until(lambda: not isinstance(app.screen, ReplayScreen))

        await pilot.press("c")
        await wait_until(lambda: app.session.log is not None and app.session.log.path == first_log)
        assert present(app.agent).turn == 1 and len(present(app.agent).messages) == 2
        await send(app, pilot, "and more")
        await idle(app, pilot)
    assert sum(type(e).__name__ == "TurnStarted" for e in read_session(first_log).events) == 2


async def test_f3_shows_the_waterfall_of_the_session_and_of_a_replay(parallel_session: tuple[Path, list[int]]) -> None:
    from hotloop.tui.screens.waterfall import WaterfallScreen

    path, _ = parallel_session
    app = ReplayApp(read_session(path), speed=0)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(lambda: replay_drawn(app))
        await pilot.press("f3")
        await wait_until(lambda: isinstance(app.screen, WaterfallScreen) and bool(app.screen.plain))  # composed
        assert isinstance(app.screen, WaterfallScreen)
        shown = app.screen.plain
        assert "turn 1 · " in shown and shown.count("  pause") == 3 and "by parallel tools" in shown


async def test_typing_rc_in_the_sidebar_only_fills_its_search_box(isolated_home: Path) -> None:
    """The sidebar opens on its search box: letters that are the list's keys elsewhere start nothing."""
    (isolated_home / "ws").mkdir()
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "a session to find")
        await idle(app, pilot)
        log = app.session.log
        press(app, "ctrl+b")
        sidebar = await sessions_sidebar(app)
        await wait_until(lambda: sidebar.query_one(OptionList).option_count == 1)
        press(app, "r", "c")
        await wait_until(lambda: sidebar.query_one(Input).value == "rc")
        await pilot.pause()
        assert app.focused is sidebar.query_one(Input)
        assert not isinstance(app.screen, ReplayScreen) and app.session.log is log  # no replay, no continue
        press(app, "ctrl+b")
        await wait_until(lambda: not sidebar.has_class("-open"))
        assert sidebar.query_one(Input).value == ""  # closed: the search is gone
