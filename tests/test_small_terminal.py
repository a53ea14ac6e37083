"""80×24 is a first-class size: the diff being approved and the question fit, the status bar names what answers,
F1 is on screen, and toasts leave the status bar alone."""

from __future__ import annotations

from pathlib import Path

from hotloop.config import load_config
from hotloop.tui.app import HotloopApp
from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.status_bar import StatusBar

from tui_support import answer, connected, drawn, held_toasts, idle, running_app, send, wait_until, write_config

SIZE = (80, 24)
LINES = "".join(f"line {n}\n" for n in ("one", "two", "three", "four", "five", "six"))
THREE = {
    "tool_calls": [
        {"name": "write_file", "arguments": {"path": "notes.txt", "content": LINES}},
        {"name": "read_file", "arguments": {"path": "README.md"}},
        {"name": "grep", "arguments": {"pattern": "TODO"}},
    ]
}


async def test_a_diff_being_approved_beside_two_panes_shows_whole_with_the_question(isolated_home: Path) -> None:
    (isolated_home / "README.md").write_text("# Demo\n\nTODO: write the docs.\n")
    write_config(isolated_home, [THREE, {"text": "Written."}])
    async with running_app(size=SIZE, workspace=isolated_home) as (app, pilot):
        await send(app, pilot, "write the notes, read the README and grep TODO")
        await wait_until(lambda: bool(app.query_one(ApprovalBar).requests), what="the question")
        keys = ("y  allow once", "a  allow for this session", "n  deny", "r  deny, saying why")
        # The diff from its first line to its last, the pane's top and every answer, on one frame: the panes beside
        # it finish and the layout settles while it waits, so each is looked for in the same drawing.
        whole = ("@@ -0,0 +1,6 @@", "+line six", "╔═ write_file", *keys)
        await wait_until(lambda: all(map(drawn(app).__contains__, whole)), what="the whole diff and the question")
        await answer(app, "y")
        await idle(app, pilot)
    assert (isolated_home / "notes.txt").read_text() == LINES


async def test_the_status_bar_keeps_provider_and_model_before_the_totals(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app(size=SIZE) as (app, pilot):
        await send(app, pilot, "list the files")
        await idle(app, pilot)
        status = str(app.main.query_one(StatusBar).render())
    assert "sim · sim-balanced" in status and "cache hit" in status
    assert "prompt" not in status  # the totals gave way first


async def test_f1_is_in_the_footer_whatever_has_the_focus(isolated_home: Path) -> None:
    write_config(
        isolated_home, [{"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": ""}}]}]
    )
    async with running_app(size=SIZE, workspace=isolated_home) as (app, pilot):
        assert drawn(app).splitlines()[-1].startswith(" f1 Help")
        await send(app, pilot, "write a.txt")
        await wait_until(lambda: bool(app.query_one(ApprovalBar).requests), what="the question")
        await wait_until(lambda: "y Allow once" in drawn(app), what="the answers' keys in the footer")
        assert drawn(app).splitlines()[-1].startswith(" f1 Help")


async def test_a_toast_leaves_the_status_bar_on_screen(isolated_home: Path) -> None:
    write_config(isolated_home)
    app = HotloopApp(load_config())
    async with app.run_test(size=SIZE, notifications=True):  # tests run without toasts unless asked
        await connected(app)
        app.main.say("a notice long enough to take two lines of a toast at eighty columns, or more")
        toasts = await held_toasts(app)
        await wait_until(lambda: all(toast.region.height for toast in toasts), what="the toast laid out")
        status = app.main.query_one(StatusBar).region
        for toast in toasts:
            assert not toast.region.overlaps(status)
        assert "● ready" in drawn(app).splitlines()[-2]
