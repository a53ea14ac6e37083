"""The history's cursor goes with its view: after End, ctrl+end or a prompt sent, keys start from what is on screen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hotloop.tui.app import HotloopApp
from hotloop.tui.items import ToolCallsItem, UserItem
from hotloop.tui.widgets.history_view import HistoryView

from tui_support import idle, press, running_app, send, wait_until, write_config

LONG = {"text": "A line of the answer.\n\n" * 60}
READ = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}
SCENARIO = [READ, LONG, LONG, LONG, LONG]


def near_the_bottom(history: HistoryView) -> bool:
    return history.max_scroll_y > 0 and history.scroll_y > history.max_scroll_y - history.size.height


def cursor_shows(history: HistoryView) -> bool:
    """Whether a line of the cursor's place (its entry's, or its whole item's) is on screen."""
    place = history._layout.places()[history.cursor]
    start = history._layout.starts[place.slot]
    if place.key is not None:
        top, end = start + place.line, start + place.line + 1
    else:
        top, end = start, start + history._layout.slots[place.slot].height
    first = history.scroll_offset.y - history._pad
    return top < first + history.scrollable_content_region.height and end > first


def moved_from(history: HistoryView, before: int) -> Callable[[], bool]:
    """Whether the cursor has left place `before`, asked later."""
    return lambda: history.cursor != before


def in_the_last_turn(history: HistoryView) -> bool:
    """Whether the cursor is on the last turn's prompt or after it."""
    last_prompt = max(n for n, item in enumerate(history.items) if isinstance(item, UserItem))
    return history._layout.places()[history.cursor].slot >= last_prompt


async def cursor_on_the_first_call(app: HotloopApp) -> tuple[HistoryView, str]:
    """Tab into the history and go up to turn 1's tool call, the view following the cursor there."""
    history = app.main.transcript.history
    call = next(item for item in history.items if isinstance(item, ToolCallsItem)).calls[0].call_id
    press(app, "tab")
    await wait_until(lambda: app.focused is history, what="the history to take the focus")
    while history._layout.places()[history.cursor].key != call:
        before = history.cursor
        press(app, "up")
        await wait_until(moved_from(history, before), what="the cursor to move up")
    assert not near_the_bottom(history)
    return history, call


async def test_end_takes_the_cursor_to_the_bottom_with_the_view(isolated_home: Path) -> None:
    (isolated_home / "README.md").write_text("# Demo\n")
    write_config(isolated_home, SCENARIO)
    async with running_app() as (app, pilot):
        for prompt in ("one", "two", "three"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        history, call = await cursor_on_the_first_call(app)
        tools = next(item for item in history.items if isinstance(item, ToolCallsItem))
        for end in ("end", "ctrl+end"):
            press(app, end)
            await wait_until(lambda: near_the_bottom(history) and history.following, what=f"{end} to follow")
            assert cursor_shows(history) and history._layout.places()[history.cursor].key != call
            at = history.cursor
            press(app, "up")  # from the bottom: to the item before, in the last turn, not to turn 1
            await wait_until(moved_from(history, at), what="the cursor to move up")
            assert in_the_last_turn(history)
        press(app, "end", "enter")  # acts on what is on screen, not on turn 1's call
        await pilot.pause()
        assert call not in tools.expanded


async def test_a_prompt_sent_takes_the_cursor_to_its_answer(isolated_home: Path) -> None:
    (isolated_home / "README.md").write_text("# Demo\n")
    write_config(isolated_home, SCENARIO)
    async with running_app() as (app, pilot):
        for prompt in ("one", "two"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        history, _ = await cursor_on_the_first_call(app)
        await send(app, pilot, "three")
        await idle(app, pilot)
        await wait_until(lambda: near_the_bottom(history))
        press(app, "tab")  # into the history again: its view stays at the answer
        await wait_until(lambda: app.focused is history)
        await pilot.pause()
        assert near_the_bottom(history) and in_the_last_turn(history)
        assert cursor_shows(history)


async def test_scrolled_with_page_keys_the_cursor_stays_in_sight(isolated_home: Path) -> None:
    (isolated_home / "README.md").write_text("# Demo\n")
    write_config(isolated_home, SCENARIO)
    async with running_app() as (app, pilot):
        for prompt in ("one", "two", "three"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        history = app.main.transcript.history
        press(app, "tab")
        await wait_until(lambda: app.focused is history)
        press(app, *["pageup"] * 8)
        await wait_until(lambda: not history.following and not near_the_bottom(history))
        await pilot.pause()
        top, shown = history.scroll_y, history.cursor
        assert cursor_shows(history)
        press(app, "up")  # the place before the one in sight: never a jump down to the bottom
        await wait_until(lambda: history.cursor == shown - 1)
        await pilot.pause()
        assert history.scroll_y <= top
