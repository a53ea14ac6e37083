"""The acting tools in the app: an edit waits with its diff, shell calls run side by side and die with Esc."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hotloop.agent.events import ToolFinished, ToolOutput, ToolStarted
from hotloop.core.session import SessionOptions
from hotloop.sessions.store import read_session
from hotloop.tui.items import ToolCallsItem
from hotloop.tui.live_panes import LivePane

from support import alive
from tui_support import answer, drawn, idle, live_panes, press, running_app, send, wait_until, write_config


def shell(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in commands]}


async def test_an_edit_shows_its_diff_and_waits_for_approval(isolated_home: Path, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# hotloop\n\nfast\n")
    edit = {"path": "README.md", "old_string": "fast", "new_string": "fast, and it says why"}
    write_config(isolated_home, [{"tool_calls": [{"name": "edit_file", "arguments": edit}]}, {"text": "done"}])
    async with running_app(workspace=tmp_path) as (app, pilot):
        await send(app, pilot, "improve the README")
        pane = await _pane(app)
        await wait_until(lambda: pane.status == "waiting" and pane.preview is not None)
        assert pane.preview is not None
        diff = pane.preview.code
        await wait_until(lambda: "+fast, and it says why" in drawn(app))  # the diff shows in the pane
        # From its first hunk: the pane's title names the file, as the question does.
        assert diff.startswith("@@ -1,3 +1,3 @@\n") and "-fast\n+fast, and it says why" in diff
        assert pane.title() == "edit_file README.md"
        assert readme.read_text() == "# hotloop\n\nfast\n"  # nothing written before the answer
        await answer(app, "y")  # the answer's keys are the bar's
        await idle(app, pilot)
        assert readme.read_text() == "# hotloop\n\nfast, and it says why\n"
        (item,) = [i for i in app.main.transcript.history.items if isinstance(i, ToolCallsItem)]
        lines = [line.text for line in item.render(app.main.transcript.context(96)).lines]
        assert lines[0].strip().endswith("edit README.md +1 −1") or "edit README.md +1 −1" in lines[0]


async def test_three_shell_calls_run_side_by_side_streaming_their_output(isolated_home: Path, tmp_path: Path) -> None:
    commands = [f"echo start {n}; sleep 1; echo end {n}" for n in range(3)]
    write_config(isolated_home, [shell(*commands), {"text": "done"}])
    async with running_app(workspace=tmp_path, options=SessionOptions(yes=True)) as (app, pilot):
        await send(app, pilot, "run the three checks")
        await idle(app, pilot)
        assert app.session.log is not None
        app.session.log.flush()
        events = read_session(app.session.log.path).events
    finished = {e.call_id: e for e in events if isinstance(e, ToolFinished)}
    assert [e.status for e in finished.values()] == ["ok"] * 3
    for call_id, end in finished.items():
        first = next(e for e in events if isinstance(e, ToolOutput) and e.call_id == call_id)
        assert first.ts < end.ts - 0.5  # "start" was on screen while the command still slept
    # Together, not one after another: all three had started before the first one ended.
    started = [e.ts for e in events if isinstance(e, ToolStarted)]
    assert len(started) == 3 and max(started) < min(e.ts for e in finished.values())


async def test_esc_kills_every_running_shell_with_its_children(isolated_home: Path, tmp_path: Path) -> None:
    commands = [f"sleep 300 & echo pid $! $$; wait # {n}" for n in range(3)]
    write_config(isolated_home, [shell(*commands), {"text": "never"}])
    async with running_app(workspace=tmp_path, options=SessionOptions(yes=True)) as (app, pilot):
        await send(app, pilot, "start three servers")
        await wait_until(lambda: len(_pids(app)) == 6)
        pids = _pids(app)
        assert all(alive(pid) for pid in pids)
        press(app, "escape")
        await wait_until(lambda: not app.main.turn_running)
        await wait_until(lambda: not any(alive(pid) for pid in pids), what="every shell and its child to be gone")
        panes = [call.status for call in app.main.transcript.fold.calls]
        assert panes == [] or set(panes) == {"cancelled"}


def _pids(app: Any) -> list[int]:
    text = " ".join("".join(call.output) for call in app.main.transcript.fold.calls)
    return [int(pid) for pair in re.findall(r"pid (\d+) (\d+)", text) for pid in pair]


async def _pane(app: Any) -> LivePane:
    await wait_until(lambda: bool(live_panes(app.main.transcript)))
    return live_panes(app.main.transcript)[0]
