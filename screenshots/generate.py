"""Regenerate the SVG screenshots in this folder from the real app, running against the embedded simulator.

    python screenshots/generate.py

Each picture is a real turn: the simulator follows a short scenario (so the pictures are the
same from run to run), streams it over loopback HTTP, and the app draws it.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
AGENTS = Path("/work/agents/node_modules/.bin")  # where the tests find the agent CLIs from npm, too
ANSWER = """## What the cache did

Each step resends the whole conversation, so **the prefix cache** decides what a step costs:

- the system prompt and tools: read from cache every step
- the new tool results: prefilled once, then cached

```python
def cached_tokens(prompt_tokens: int, hit_blocks: int, block: int = 16) -> int:
    # vLLM always recomputes the last prompt token
    return min(hit_blocks * block, (prompt_tokens - 1) // block * block)
```

| step | prompt | cache read |
|---|---|---|
| 1 | 612 | not reported |
| 2 | 1,394 | 1,296 |
"""
PAUSES = [{"name": "pause", "arguments": {"seconds": s}} for s in (3.0, 2.2, 3.4)]
READS = [{"name": "read_file", "arguments": {"path": p}} for p in ("app.py", "cache.py")]
SUITES = [
    {
        "name": "run_shell",
        "arguments": {"command": f"for t in 1 2 3 4 5 6; do echo {suite}: test $t ok; sleep 0.5; done"},
    }
    for suite in ("unit", "integration", "lint")
]
EDIT = {"path": "README.md", "old_string": "A fast consle.", "new_string": "A fast console."}
SCENARIO = [
    {"text": ANSWER},
    {"text": "Checking three things at once.\n", "tool_calls": PAUSES},
    {"text": "All three finished."},
    {"text": "Reading both.\n", "tool_calls": READS},
    {"tool_calls": [{"name": "grep", "arguments": {"pattern": "TODO"}}]},
    {"text": "`app.py` starts the server; `cache.py` holds the prefix cache. No TODOs left."},
    {"text": "Running the three suites side by side.\n", "tool_calls": SUITES},
    {"text": "All three suites pass."},
    {"tool_calls": [{"name": "edit_file", "arguments": EDIT}]},
    {"text": "Fixed the typo."},
    {"text": "Same question, over Anthropic's API this time.\n", "tool_calls": READS},
    {"text": "Same files, same answer: the conversation carried over, and from its second step the cache read it."},
]


async def pause(args: dict[str, Any], ctx: Any) -> str:
    ctx.emit_output(f"waiting {args['seconds']} s")
    await asyncio.sleep(args["seconds"])
    return "done"


def running_panes(transcript: Any) -> int:
    """How many of the step in flight's tool panes are running."""
    return sum(pane.status == "running" for pane in transcript.panes.panes.values())


async def shoot(workspace: Path) -> None:
    from hotloop.agent.tools.registry import Tool
    from hotloop.config import load_config
    from hotloop.tui.app import HotloopApp
    from hotloop.tui.widgets.prompt_input import PromptInput

    async def turn(app: HotloopApp, pilot: Any, prompt: str, wait: bool = True) -> None:
        app.query_one(PromptInput).load_text(prompt)
        await pilot.press("enter")
        while wait and (app.main.turn_running or not app.main.transcript.history.items):
            await asyncio.sleep(0.05)
        await pilot.pause(0.3)

    app = HotloopApp(load_config(), workspace=workspace)
    async with app.run_test(size=(100, 30)) as pilot:
        while app.agent is None:
            await asyncio.sleep(0.05)
        app.query_one(PromptInput).cursor_blink = False
        schema = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
        app.session.runtime.tools.add(Tool("pause", "Wait a while.", schema, pause))
        await pilot.pause(0.3)
        app.save_screenshot("empty.svg", str(HERE))

        await turn(app, pilot, "How much did the prefix cache save?")
        app.save_screenshot("answer-with-code.svg", str(HERE))

        await turn(app, pilot, "Check three things at once", wait=False)
        while running_panes(app.main.transcript) < 3:
            await asyncio.sleep(0.05)
        await pilot.pause(1.5)
        app.save_screenshot("tool-panes.svg", str(HERE))
        while app.main.turn_running:
            await asyncio.sleep(0.05)

        await turn(app, pilot, "Read app.py and cache.py, then grep for TODO")
        app.save_screenshot("usage-and-status.svg", str(HERE))

        await turn(app, pilot, "Run the unit, integration and lint suites", wait=False)
        while len(app.screen.query("ApprovalBar.-asking")) == 0 or len(app.query_one("ApprovalBar").requests) < 3:
            await asyncio.sleep(0.05)
        answers = app.query_one("AnswerList")
        while not (app.query_one("ApprovalBar").armed and app.focused is answers):  # a key in the grace isn't one
            await asyncio.sleep(0.05)
        answers.highlighted = answers.get_option_index("every")
        await pilot.press("enter")  # allow all three once
        while running_panes(app.main.transcript) < 3:
            await asyncio.sleep(0.05)
        await pilot.pause(1.6)
        app.save_screenshot("shell-panes.svg", str(HERE))
        while app.main.turn_running:
            await asyncio.sleep(0.05)

        await turn(app, pilot, "Fix the typo in the README", wait=False)
        while not any(pane.status == "waiting" for pane in app.main.transcript.panes.panes.values()):
            await asyncio.sleep(0.05)
        await pilot.pause(0.5)
        app.save_screenshot("edit-approval.svg", str(HERE))
        while not app.query_one("ApprovalBar").armed:
            await asyncio.sleep(0.05)
        await pilot.press("y")
        while app.main.turn_running:
            await asyncio.sleep(0.05)

        await pilot.press("f3")  # where this session's time went, turn by turn
        await pilot.pause(0.8)
        app.save_screenshot("waterfall.svg", str(HERE))
        await pilot.press("escape")

        await pilot.press("f1")
        await pilot.pause(0.5)
        app.save_screenshot("help.svg", str(HERE))
        await pilot.press("escape")

        await pilot.press("ctrl+p")
        for key in "tier":
            await pilot.press(key)
        await pilot.pause(0.8)
        app.save_screenshot("palette.svg", str(HERE))
        await pilot.press("escape")

        await pilot.press("ctrl+p")
        for key in "anthropic":
            await pilot.press(key)
        await pilot.pause(0.8)
        app.save_screenshot("switch-cost.svg", str(HERE))
        await pilot.press("down", "enter")
        while app.agent.provider.name != "sim-anthropic":
            await asyncio.sleep(0.05)
        await turn(app, pilot, "Read app.py and cache.py again")
        app.save_screenshot("switched-to-anthropic.svg", str(HERE))

        await pilot.press("ctrl+b")
        await pilot.pause(0.8)
        app.save_screenshot("sessions-sidebar.svg", str(HERE))
        await pilot.press("ctrl+b")

        await pilot.resize_terminal(200, 50)
        await pilot.pause(1.0)
        app.save_screenshot("wide-200x50.svg", str(HERE))

        # Back on the vLLM-like API, 140 columns: the server panel shows; auto picks a tier per turn.
        await pilot.resize_terminal(140, 36)
        await turn(app, pilot, "/provider sim", wait=False)
        await turn(app, pilot, "/tier auto", wait=False)
        await turn(app, pilot, "hi there")
        await turn(app, pilot, "Read app.py, then grep for TODO")
        await pilot.pause(1.5)  # a scrape of /metrics after the turn
        app.save_screenshot("server-panel-and-auto.svg", str(HERE))

        await pilot.press("f2")  # the panel away: room for every figure of the status bar
        await pilot.resize_terminal(200, 40)
        await pilot.pause(1.0)
        app.save_screenshot("cost-and-context.svg", str(HERE))


async def shoot_replay(sessions: Path) -> None:
    """The session just shot, replayed at its recorded pace, caught while its three panes run again."""
    from hotloop.sessions.store import find_session, read_session
    from hotloop.tui.replay_app import ReplayApp
    from hotloop.tui.widgets.transcript import Transcript

    app = ReplayApp(read_session(find_session(sessions)), speed=1)
    async with app.run_test(size=(100, 30)) as pilot:
        while not app.screen.query("Transcript") or running_panes(app.screen.query_one(Transcript)) < 3:
            await asyncio.sleep(0.05)
        await pilot.pause(1.5)
        app.save_screenshot("replay.svg", str(HERE))


async def shoot_watch(workspace: Path) -> None:
    """A real `claude -p` (Claude Code from npm) through `hotloop watch` to the simulator, in the watch app."""
    import shutil
    import time

    from hotloop.agent.events import AgentEvent, StepFinished
    from hotloop.config import load_config
    from hotloop.config.settings import SimSettings
    from hotloop.core.runtime import simulator_config
    from hotloop.sim.embedded import EmbeddedSimulator
    from hotloop.tui.watch_app import WatchApp
    from hotloop.watch import Watch, upstream_at

    claude = shutil.which("claude", path=f"{os.environ.get('HOTLOOP_AGENTS_DIR', AGENTS)}:{os.environ['PATH']}")
    if claude is None:
        print(f"watch-claude-code.svg kept as it was: no claude here (npm install --prefix {AGENTS.parent.parent} …)")
        return
    simulator = EmbeddedSimulator(simulator_config(SimSettings())).start()
    watch = Watch(
        upstream_at(simulator.url, "sim"), lambda _c, _e: None, folder=workspace.parent / "watched", workspace=workspace
    )
    app = WatchApp(watch, "127.0.0.1", 0, load_config())  # with the upstream's server panel
    try:
        async with app.run_test(size=(120, 32)) as pilot:
            await pilot.pause()
            steps: list[AgentEvent] = []
            drawn = watch.sink
            watch.sink = lambda c, e: (drawn(c, e), steps.append(e) if isinstance(e, StepFinished) else None)
            env = {
                **os.environ,
                "HOME": str(workspace.parent),
                "ANTHROPIC_BASE_URL": app.url,
                "ANTHROPIC_API_KEY": "sk-ant-not-a-key",
                "ANTHROPIC_DEFAULT_HAIKU_MODEL": "sim-fast",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
            task = "read README.md and list the files here"
            process = await asyncio.create_subprocess_exec(
                claude,
                "-p",
                task,
                "--model",
                "sim-fast",
                "--allowedTools",
                "Read,Bash",
                cwd=workspace,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.wait_for(process.wait(), 120)
            deadline = time.monotonic() + 10
            while len(steps) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await pilot.pause(0.5)
            app.save_screenshot("watch-claude-code.svg", str(HERE))
    finally:
        simulator.stop()


async def shoot_bench() -> None:
    """`hotloop bench --agents 1,8,32` against the simulator: its final table and chart, as the terminal shows them."""
    from rich.console import Console

    from hotloop.config import Choice
    from hotloop.headless.bench import bench

    out = Console(record=True, width=80, force_terminal=True)
    await bench(Choice(), [1, 8, 32], None, json_out=False, out=out)
    out.save_svg(str(HERE / "bench.svg"), title="hotloop bench --agents 1,8,32")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "scenario.json").write_text(json.dumps(SCENARIO))
        # The simulator priced as a self-hosted GPU server would be: the status bar shows an estimated cost.
        (home / "config.toml").write_text(
            f'[sim]\nscenario = "{home / "scenario.json"}"\ncache_min_tokens = 512\n'
            '[providers.sim]\nkind = "sim"\ncost_per_hour = 2.5\n'
        )
        workspace = home / "project"
        workspace.mkdir()
        (workspace / "app.py").write_text("from cache import PrefixCache\n\n\ndef main():\n    return PrefixCache()\n")
        (workspace / "cache.py").write_text("class PrefixCache:\n    BLOCK_SIZE = 16\n")
        (workspace / "README.md").write_text("# demo\n\nA fast consle.\n\nRun `python app.py`.\n")
        os.environ["HOTLOOP_CONFIG"] = str(home / "config.toml")
        os.environ["HOTLOOP_DATA_DIR"] = str(home / "data")
        asyncio.run(shoot(workspace))
        asyncio.run(shoot_replay(home / "data" / "sessions"))
        asyncio.run(shoot_watch(workspace))
        # The bench's own prompts drive the simulator: the screenshots' scenario would answer them instead.
        (home / "bench.toml").write_text("")
        os.environ["HOTLOOP_CONFIG"] = str(home / "bench.toml")
        asyncio.run(shoot_bench())
    print(f"screenshots written to {HERE}")


if __name__ == "__main__":
    main()
