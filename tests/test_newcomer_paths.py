"""The small things a newcomer met first (issue 35, item 8): each drawn by the real app or printed by the real CLI.

The server panel wrapped "no requests yet" onto a line of its own at 160×45; `__init__.py` in a tool result came out
bold "init.py" in the answer; a `--speed 0` replay said `1×`; `sessions list --from` didn't name opencode; the usage
line made the command look required.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hotloop.sessions.store import read_session
from hotloop.tui.replay_app import ReplayApp
from hotloop.tui.screens.replay import ReplayScreen
from hotloop.tui.widgets.server_panel import NONE_YET, ServerPanel

from support import rows
from tui_support import FAST_SIM, drawn, idle, press, running_app, send, wait_until, write_config


def hotloop(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    return subprocess.run(
        [sys.executable, "-m", "hotloop", *args], cwd=home, env=environment, capture_output=True, text=True, timeout=60
    )


async def test_the_server_panel_keeps_each_figure_beside_its_label_at_160_by_45(isolated_home: Path) -> None:
    """Before the first request (no pre-warm, no titles) four figures read "no requests yet": each stays on its
    label's line, so the panel draws exactly the lines it renders, none wrapped."""
    write_config(isolated_home, sim='[cache]\nprewarm = "off"\n')
    async with running_app(size=(160, 45)) as (app, pilot):
        await wait_until(lambda: bool(app.query(ServerPanel)) and app.query_one(ServerPanel).report is not None)
        panel = app.query_one(ServerPanel)
        await wait_until(lambda: panel.report is not None and panel.report.stats is not None, what="a scrape")
        await pilot.pause()
        text = str(panel.render())
        assert rows(text)["since start"] == rows(text)["TTFT p95"] == NONE_YET
        shown = [panel.render_line(y).text.strip() for y in range(panel.size.height)]
        assert [line for line in shown if line] == [line.strip() for line in text.splitlines() if line.strip()]


async def test_a_tool_result_quoted_in_the_answer_keeps_its_underscores(isolated_home: Path) -> None:
    """The simulator quotes a tool's first line as code, as a model does: `__init__.py` on screen, not a bold "init.py"
    (Markdown's strong emphasis took the underscores)."""
    workspace = isolated_home / "project"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg" / "__init__.py").write_text("")
    write_config(isolated_home)
    async with running_app(size=(120, 36), workspace=workspace) as (app, pilot):
        await send(app, pilot, "list the files in pkg, then say what you found")
        await idle(app, pilot)
        screen = drawn(app)
    assert "first: __init__.py  0 B" in screen


async def test_a_replay_at_speed_zero_says_so_until_it_plays(isolated_home: Path) -> None:
    """`hotloop replay --speed 0` draws the whole session at once and its header says "at once", not `1×`; a step
    back plays on at the replay's speed, and the header says that speed then."""
    (isolated_home / "config.toml").write_text(FAST_SIM)
    assert hotloop(isolated_home, "run", "hello").returncode == 0
    [log] = (isolated_home / "data" / "sessions").glob("*.jsonl")
    app = ReplayApp(read_session(log), speed=0)
    async with app.run_test(size=(120, 36)):
        await wait_until(lambda: isinstance(app.screen, ReplayScreen) and app.screen.replay.done)

        def title() -> str:
            return str(app.screen.query_one("#title").render())

        await wait_until(lambda: "step 1 of 1 · done" in title())
        assert " · at once · " in title() and "×" not in title()
        press(app, "left")
        await wait_until(lambda: " · 1× · " in title())


def test_sessions_list_from_names_every_agent_it_takes(isolated_home: Path) -> None:
    """The help names opencode beside Claude Code and Codex, and `--from opencode` is taken."""
    (isolated_home / "config.toml").write_text(FAST_SIM)
    helped = hotloop(isolated_home, "sessions", "list", "--help")
    assert "(claude-code, codex, opencode)" in " ".join(helped.stdout.split())
    listed = hotloop(isolated_home, "sessions", "list", "--from", "opencode")
    assert listed.returncode == 0, listed.stderr


def test_the_usage_shows_the_command_as_optional(isolated_home: Path) -> None:
    """`hotloop` alone opens the app, so the usage line brackets the command: `[COMMAND ...]`."""
    usage = hotloop(isolated_home, "--help").stdout.split("\n\n", 1)[0]
    assert " ".join(usage.split()).endswith("[--resume ID | -c] [COMMAND ...]")
    assert "With no command, it opens the app." in hotloop(isolated_home, "--help").stdout


async def test_ctrl_q_quits_the_app_as_the_quick_start_says(isolated_home: Path) -> None:
    """The README's Quick start says ctrl+q quits: from the prompt, with the session ready, the app exits."""
    write_config(isolated_home)
    async with running_app() as (app, _pilot):
        press(app, "ctrl+q")
        await wait_until(lambda: app.return_code is not None, what="the app to exit")
    assert app.return_code == 0
