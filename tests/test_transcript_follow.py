"""Following the stream: on at the bottom, off when the user scrolls up by any means, back on when they ask."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.pilot import Pilot
from textual.widget import Widget

from hotloop.tui.app import HotloopApp
from hotloop.tui.items import AnswerItem
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.new_output import NewOutput
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.transcript import Transcript

from tui_support import HELD, holding, idle, live_panes, press, running_app, send, wait_until, write_config

LONG = {"text": "A line of the answer.\n\n" * 60}
SLOW = {"text": "streaming " * 200, "decode_ms": 5}  # a second of output arriving below the view


def at_bottom(transcript: Transcript) -> bool:
    view = transcript.history  # the one widget that scrolls
    return view.max_scroll_y > 0 and view.scroll_y >= view.max_scroll_y


def marker(app: HotloopApp) -> NewOutput:
    return app.query_one(NewOutput)


async def answer_held(app: HotloopApp, pilot: Pilot[None]) -> tuple[asyncio.Event, Transcript]:
    """A long answer, then a second turn held in its tool until the event is set: its answer is still to come."""
    release = holding(app)
    await send(app, pilot, "one")
    await idle(app, pilot)
    transcript = app.main.transcript
    await send(app, pilot, "two")
    await wait_until(lambda: bool(live_panes(transcript, "running")))
    return release, transcript


async def test_scrolled_up_with_keys_a_new_prompt_brings_its_answer_into_view(isolated_home: Path) -> None:
    write_config(isolated_home, [LONG, LONG, {"text": "The newest answer."}])
    async with running_app() as (app, pilot):
        for prompt in ("one", "two"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        transcript = app.main.transcript
        await wait_until(lambda: at_bottom(transcript))
        press(app, "pageup", "pageup")
        await wait_until(
            lambda: not transcript.following and transcript.history.scroll_y < transcript.history.max_scroll_y - 20
        )
        await send(app, pilot, "three")
        await idle(app, pilot)
        await wait_until(lambda: at_bottom(transcript) and transcript.following)
        assert not marker(app).has_class("-shown")
        history = transcript.history
        last = history.items[-2]  # the answer, then its usage line
        assert isinstance(last, AnswerItem) and last.text == "The newest answer."
        top = history._layout.starts[-2]
        assert transcript.history.scroll_y <= top < transcript.history.scroll_y + transcript.history.size.height


async def test_output_arriving_below_the_view_shows_the_marker_and_end_follows_again(isolated_home: Path) -> None:
    write_config(isolated_home, [LONG, HELD, SLOW])
    async with running_app() as (app, pilot):
        release, transcript = await answer_held(app, pilot)
        press(app, "ctrl+home")
        await wait_until(lambda: transcript.history.scroll_y == 0 and not transcript.following)
        release.set()  # the answer streams below the view
        await wait_until(lambda: marker(app).has_class("-shown") and marker(app).display)
        assert transcript.history.scroll_y == 0  # the stream did not pull the view down
        press(app, "ctrl+end")
        await wait_until(lambda: transcript.following and not marker(app).has_class("-shown"))
        await idle(app, pilot)
        await wait_until(lambda: at_bottom(transcript))


async def test_the_marker_follows_when_clicked_and_scrolling_to_the_bottom_follows(isolated_home: Path) -> None:
    write_config(isolated_home, [LONG, HELD, SLOW])
    async with running_app() as (app, pilot):
        release, transcript = await answer_held(app, pilot)
        for _ in range(20):  # the mouse wheel's way, above the tool's pane (it folds to one line when it ends)
            transcript.history.scroll_up(animate=False, immediate=True)
        await wait_until(lambda: not transcript.following)
        release.set()  # the answer streams below the view
        await wait_until(lambda: marker(app).has_class("-shown"))
        shown = marker(app)
        # Drawn where a click lands (the screen's map is rebuilt on the next refresh).
        await wait_until(lambda: shown.region and app.get_widget_at(*shown.region.offset)[0] is shown)
        await pilot.click(NewOutput)
        await wait_until(lambda: transcript.following and not marker(app).has_class("-shown"))
        await idle(app, pilot)
        transcript.history.scroll_page_up(animate=False)
        await wait_until(lambda: not transcript.following)
        transcript.history.scroll_end(animate=False, immediate=True)  # back at the bottom by scrolling
        await wait_until(lambda: transcript.following)


async def test_tab_goes_from_the_prompt_to_the_history_and_back_with_no_invisible_stop(
    isolated_home: Path,
) -> None:
    write_config(isolated_home, [LONG])
    async with running_app() as (app, pilot):
        await send(app, pilot, "one")
        await idle(app, pilot)
        focused: list[Widget] = []
        for _ in range(4):
            before = app.focused
            press(app, "tab")
            await wait_until(lambda: app.focused is not before, what="tab to move the focus")  # noqa: B023
            assert app.focused is not None
            focused.append(app.focused)
        assert [type(w) for w in focused] == [HistoryView, PromptInput, HistoryView, PromptInput]
        assert all(w.display and w.region.height > 0 for w in focused)


async def test_tab_into_a_long_history_does_not_jump_to_its_top(isolated_home: Path) -> None:
    write_config(isolated_home, [LONG, LONG, LONG])
    async with running_app() as (app, pilot):
        for prompt in ("one", "two", "three"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        transcript = app.main.transcript
        await wait_until(lambda: at_bottom(transcript))
        bottom = transcript.history.max_scroll_y
        press(app, "tab")
        await wait_until(lambda: isinstance(app.focused, HistoryView))
        await pilot.pause()
        await pilot.pause()
        # The cursor is on the last item: the view shows it, near the bottom, not turn 1.
        assert transcript.history.scroll_y > bottom - transcript.history.size.height


async def test_end_in_the_history_follows_again(isolated_home: Path) -> None:
    write_config(isolated_home, [LONG, LONG])
    async with running_app() as (app, pilot):
        for prompt in ("one", "two"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        transcript = app.main.transcript
        press(app, "tab")
        await wait_until(lambda: isinstance(app.focused, HistoryView))
        press(app, "home")
        await wait_until(lambda: transcript.history.scroll_y == 0 and not transcript.following)
        press(app, "end")
        await wait_until(lambda: at_bottom(transcript) and transcript.following)
