"""Words a user reads: counts in the right number, copies named as the user names things, a denied change said to be
not made, the new-output marker beside the text, a screenshot that saves, and a tier on every simulator side."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_history_cursor import moved_from

from hotloop.agent.events import Notice, StepStarted
from hotloop.core.session import SessionOptions
from hotloop.providers.events import TextDelta
from hotloop.tui.app import HotloopApp
from hotloop.tui.items import ToolCallsItem
from hotloop.tui.live_usage import LiveUsage
from hotloop.tui.render import Palette
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.new_output import NewOutput

from support import make_agent, sim_with_scenario
from tui_support import answer, idle, press, running_app, send, wait_until, write_config

WRITE = {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "one line\n"}}]}
READ = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}
PALETTE = Palette("cyan", "grey50", "grey50", "green", "yellow", "red", "grey11", "grey30", True)


def said(app: HotloopApp) -> list[str]:
    return [str(notification.message) for notification in app._notifications]


def test_one_chunk_is_one_chunk() -> None:
    usage = LiveUsage(lambda: 1.0)
    usage.start(StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=0.0))
    usage.token(0.5)
    text = usage.text(PALETTE)
    assert text is not None and text.plain.endswith("streaming · 1 chunk")


async def test_a_step_cap_of_one_says_one_step(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [READ, {"text": "done"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, max_steps=1)
        await agent.run_turn("read it")
    finally:
        sim.stop()
    notices = [e.message for e in recorder.events if isinstance(e, Notice)]
    assert "stopped after 1 step (the step cap)" in notices


async def test_copying_from_the_history_names_what_was_copied(isolated_home: Path) -> None:
    (isolated_home / "README.md").write_text("# Demo\n")
    write_config(isolated_home, [READ, {"text": "Read."}])
    async with running_app(workspace=isolated_home) as (app, pilot):
        await send(app, pilot, "read the readme")
        await idle(app, pilot)
        history = app.main.transcript.history
        press(app, "tab")
        await wait_until(lambda: app.focused is history)
        while history.cursor != 0:
            before = history.cursor
            press(app, "ctrl+c", "up")
            await wait_until(moved_from(history, before))
        press(app, "ctrl+c")
        await wait_until(lambda: len([s for s in said(app) if s.startswith("copied")]) == 3)
        copies = [s for s in said(app) if s.startswith("copied")]
    assert copies == ["copied the answer", "copied the tool call and the output", "copied your prompt"]


async def test_a_denied_write_says_it_was_not_written(isolated_home: Path) -> None:
    write_config(isolated_home, [WRITE, {"text": "Not written, then."}])
    async with running_app(workspace=isolated_home) as (app, pilot):
        await send(app, pilot, "write the notes")
        await answer(app, "n")
        await idle(app, pilot)
        (tools,) = [item for item in app.main.transcript.history.items if isinstance(item, ToolCallsItem)]
        first = tools.render(app.main.transcript.context(96)).lines[0].text
    assert not (isolated_home / "notes.txt").exists()
    assert "✗ create notes.txt +1 −0 · not written, denied by you" in first


async def test_the_new_output_marker_takes_a_line_rather_than_covering_one(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "A line of the answer.\n\n" * 60}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "one")
        await idle(app, pilot)
        transcript = app.main.transcript
        transcript.scroll_to_start()
        await wait_until(lambda: not transcript.following)
        app.show(TextDelta("more", ts=0.0))
        marker = app.query_one(NewOutput)
        history = app.query_one(HistoryView)
        # The marker and the history are laid out together: once the marker has its line, the history ends above it.
        await wait_until(lambda: marker.display and marker.region.height == 1)
        assert history.region.bottom <= marker.region.y


async def test_the_palettes_screenshot_saves_where_there_is_no_downloads_folder(
    isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    write_config(isolated_home)
    async with running_app() as (app, _):
        app.deliver_screenshot()  # what the palette's Screenshot does
        await wait_until(lambda: any("screenshot" in s.lower() for s in said(app)), what="the screenshot's notice")
        notices = said(app)
    assert not (home / "Downloads").exists()
    (saved,) = (isolated_home / "data" / "screenshots").glob("*.svg")
    assert saved.read_text().startswith("<svg") and any(str(saved.parent) in s for s in notices)


@pytest.mark.parametrize("provider", ["sim-anthropic", "sim-responses"])
async def test_every_simulator_side_shows_its_tier(isolated_home: Path, provider: str) -> None:
    write_config(isolated_home)
    async with running_app(size=(160, 30), options=SessionOptions(provider=provider)) as (app, _):
        await wait_until(lambda: app.main.status.provider == provider)
        assert app.main.status.tier == "balanced"
        assert "sim-balanced · balanced" in str(app.main.status.render())
