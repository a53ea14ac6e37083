"""In the app, a call with side effects waits in its pane, showing what it would do, for an answer above the prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hotloop.agent.events import ApprovalDecided
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.sessions.store import read_session
from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.prompt_input import PromptInput

from tui_support import drawn, idle, live_panes, press, running_app, send, wait_until, write_config

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def acting(ran: list[str]) -> Tool:
    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(arguments["command"])
        return "exit 0"

    async def preview(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return arguments["command"]

    return Tool("run_shell", "Run a command.", SCHEMA, handler, side_effects=True, preview=preview)


def calls(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in commands]}


async def test_a_call_waits_in_its_pane_and_runs_when_allowed_once(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make test"), {"text": "done"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        app.session.runtime.tools.replace(acting(ran))
        await send(app, pilot, "test it")
        bar = app.query_one(ApprovalBar)
        await wait_until(
            lambda: bar.display and bar.requests and app.focused is not None and bar in app.focused.ancestors
        )
        (pane,) = live_panes(app.transcript)
        await wait_until(lambda: pane.status == "waiting" and "⏸ waiting for approval" in drawn(app))
        assert ran == []
        assert pane.preview is not None and pane.preview.code == "make test"  # a Syntax: highlighted as shell
        assert "make test" in drawn(app)
        press(app, "y")
        await idle(app, pilot)
        assert ran == ["make test"] and not bar.display and isinstance(app.focused, PromptInput)
        app.session.log.flush()
        decided = [e for e in read_session(app.session.log.path).events if isinstance(e, ApprovalDecided)]
        assert [(d.allowed, d.by) for d in decided] == [(True, "you, once")]  # the log keeps the decision


async def test_several_waiting_calls_can_be_allowed_together_and_a_denial_says_why(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make a", "make b"), {"text": "ok"}, calls("rm -rf build"), {"text": "ok"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        app.session.runtime.tools.replace(acting(ran))
        await send(app, pilot, "build both")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: len(bar.requests) == 2)
        answers = bar.query_one("AnswerList")
        await wait_until(lambda: app.focused is answers)
        answers.highlighted = answers.get_option_index("every")
        press(app, "enter")
        await idle(app, pilot)
        assert sorted(ran) == ["make a", "make b"]

        await send(app, pilot, "clean")
        await wait_until(lambda: len(bar.requests) == 1 and app.focused is answers)
        press(app, "r")
        await wait_until(lambda: app.focused is bar.query_one("Input"))
        press(app, *"keep it", "enter")
        await idle(app, pilot)
        assert "rm -rf build" not in ran
        result = [m for m in app.agent.messages if getattr(m, "call_id", None)][-1]
        assert result.is_error and "the user denied this call: keep it" in result.content


async def test_always_for_this_session_stops_the_next_identical_ask(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make test"), {"text": "ok"}, calls("make test"), {"text": "ok again"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        app.session.runtime.tools.replace(acting(ran))
        await send(app, pilot, "test it")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: len(bar.requests) == 1 and app.focused is bar.query_one("AnswerList"))
        press(app, "a")
        await idle(app, pilot)
        await send(app, pilot, "test it again")
        await idle(app, pilot)
        assert ran == ["make test", "make test"] and not bar.requests
        app.session.log.flush()
        decided = [e.by for e in read_session(app.session.log.path).events if isinstance(e, ApprovalDecided)]
        assert decided == ["you, for this session", "rule run_shell:make test"]


async def test_a_read_only_call_of_the_step_runs_while_another_waits(isolated_home: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes")
    step = {
        "tool_calls": [
            {"name": "run_shell", "arguments": {"command": "make"}},
            {"name": "read_file", "arguments": {"path": "notes.txt"}},
        ]
    }
    write_config(isolated_home, [step, {"text": "ok"}])
    ran: list[str] = []
    async with running_app(workspace=tmp_path) as (app, pilot):
        app.session.runtime.tools.replace(acting(ran))
        await send(app, pilot, "go")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: bool(bar.requests))
        read = next(c for c in app.transcript.fold.calls if c.name == "read_file")
        await wait_until(lambda: read.status == "ok")  # done while run_shell still waits for its answer
        assert ran == []
        await wait_until(lambda: app.focused is bar.query_one("AnswerList"))
        press(app, "y")
        await idle(app, pilot)
        assert ran == ["make"]
