"""Calls with side effects run only once allowed (by a rule, a flag or the user); a refusal is a result, not a crash."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.approvals import ApprovalRules, Approvals, Reply, Request, session_rules, subject_of
from hotloop.agent.events import AgentEvent, ApprovalAsked, ApprovalDecided, ToolFinished, ToolStarted
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.providers.conversation import ToolResultMessage

from support import Recorder, make_agent, sim_with_scenario

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def acting(ran: list[str], name: str = "run_shell", destructive: bool = False) -> Tool:
    """A stand-in for a tool that acts: it records what it was asked to run."""

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(arguments["command"])
        return "exit 0"

    async def preview(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"$ {arguments['command']}"

    return Tool(name, "Run a command.", SCHEMA, handler, side_effects=True, destructive=destructive, preview=preview)


def shell_step(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in commands]}


async def run(
    tmp_path: Path, steps: list[dict[str, Any]], tool: Tool, approvals: Approvals, turns: int = 1
) -> tuple[Agent, Recorder]:
    sim = sim_with_scenario(tmp_path, steps)
    try:
        agent, recorder = make_agent(sim, tmp_path, tools=[tool], approvals=approvals)
        for n in range(turns):
            await asyncio.wait_for(agent.run_turn(f"turn {n + 1}"), 30)
        await agent.provider.aclose()
    finally:
        sim.stop()
    return agent, recorder


async def test_with_no_one_to_ask_a_call_fails_naming_the_flag_that_allows_it(tmp_path: Path) -> None:
    ran: list[str] = []
    _, recorder = await run(tmp_path, [shell_step("pytest -q"), {"text": "ok"}], acting(ran), Approvals())
    assert ran == []
    (finished,) = recorder.of(ToolFinished)
    assert finished.status == "error" and "--allow 'run_shell:pytest -q' or --yes" in finished.result
    (decided,) = recorder.of(ApprovalDecided)
    assert not decided.allowed and decided.by == "no one to ask"
    assert not recorder.of(ApprovalAsked)


async def test_rules_allow_matching_calls_and_deny_rules_win(tmp_path: Path) -> None:
    ran: list[str] = []
    rules = ApprovalRules(allow=("run_shell:pytest*", "run_shell:rm*"), deny=("run_shell:rm -rf*",))
    steps = [shell_step("pytest -q", "rm -rf /", "make"), {"text": "ok"}]
    _, recorder = await run(tmp_path, steps, acting(ran), Approvals(rules))
    assert ran == ["pytest -q"]
    decided = {e.call_id: e for e in recorder.of(ApprovalDecided)}
    assert [(d.allowed, d.by) for d in decided.values()] == [
        (True, "rule run_shell:pytest*"),
        (False, "rule run_shell:rm -rf*"),
        (False, "no one to ask"),
    ]


async def test_yes_allows_everything_but_allow_rules_never_cover_a_destructive_tool(tmp_path: Path) -> None:
    ran: list[str] = []
    _, recorder = await run(tmp_path, [shell_step("make"), {"text": "ok"}], acting(ran), Approvals(allow_all=True))
    assert ran == ["make"] and recorder.of(ApprovalDecided)[0].by == "--yes"
    ran.clear()
    rules = ApprovalRules(allow=("run_shell",))
    tool = acting(ran, destructive=True)
    _, recorder = await run(tmp_path, [shell_step("drop table"), {"text": "ok"}], tool, Approvals(rules))
    assert ran == [] and "only --yes gives" in recorder.of(ToolFinished)[0].result


async def test_always_for_this_session_stops_the_next_identical_ask(tmp_path: Path) -> None:
    ran: list[str] = []
    asked: list[Request] = []

    async def ask(request: Request) -> Reply:
        asked.append(request)
        return Reply("session")

    steps = [shell_step("pytest -q"), {"text": "ok"}, shell_step("pytest -q"), {"text": "ok"}, shell_step("make")]
    steps.append({"text": "ok"})
    _, recorder = await run(tmp_path, steps, acting(ran), Approvals(ask=ask), turns=3)
    assert ran == ["pytest -q", "pytest -q", "make"]
    assert [r.subject for r in asked] == ["pytest -q", "make"]  # the second pytest was not asked about
    assert [e.preview for e in recorder.of(ApprovalAsked)] == ["$ pytest -q", "$ make"]
    assert [d.by for d in recorder.of(ApprovalDecided)] == [
        "you, for this session",
        "rule run_shell:pytest -q",
        "you, for this session",
    ]


async def test_a_denial_reaches_the_model_as_an_error_result_with_the_reason(tmp_path: Path) -> None:
    ran: list[str] = []

    async def ask(request: Request) -> Reply:
        return Reply("deny", "use make test instead")

    agent, _ = await run(tmp_path, [shell_step("pytest"), {"text": "ok"}], acting(ran), Approvals(ask=ask))
    assert ran == []
    results = [m for m in agent.messages if isinstance(m, ToolResultMessage) and m.call_id]
    assert results[0].is_error and "the user denied this call: use make test instead" in results[0].content


async def test_a_read_only_call_of_the_same_step_runs_while_a_call_waits_for_approval(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes")
    ran: list[str] = []
    read_done = asyncio.Event()
    order: list[str] = []

    async def ask(request: Request) -> Reply:
        await asyncio.wait_for(read_done.wait(), 10)  # the answer comes only after the read finished
        order.append("answered")
        return Reply("once")

    step = {
        "tool_calls": [
            {"name": "run_shell", "arguments": {"command": "make"}},
            {"name": "read_file", "arguments": {"path": "notes.txt"}},
        ]
    }
    tool = acting(ran)
    sim = sim_with_scenario(tmp_path, [step, {"text": "ok"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, tools=[tool], approvals=Approvals(ask=ask))

        def watch(event: AgentEvent) -> None:
            recorder(event)
            if isinstance(event, ToolStarted | ToolFinished):
                order.append(f"{type(event).__name__} {event.name}")
            if isinstance(event, ToolFinished) and event.name == "read_file":
                read_done.set()

        agent.emit = watch
        await asyncio.wait_for(agent.run_turn("go"), 30)
        await agent.provider.aclose()
    finally:
        sim.stop()
    assert ran == ["make"]
    assert order.index("ToolFinished read_file") < order.index("answered") < order.index("ToolStarted run_shell")


async def test_cancelling_the_turn_while_a_call_waits_gives_it_a_cancelled_result(tmp_path: Path) -> None:
    ran: list[str] = []
    waiting = asyncio.Event()

    async def ask(request: Request) -> Reply:
        waiting.set()
        await asyncio.Event().wait()  # never answered
        raise AssertionError

    sim = sim_with_scenario(tmp_path, [shell_step("make"), {"text": "ok"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, tools=[acting(ran)], approvals=Approvals(ask=ask))
        turn = asyncio.create_task(agent.run_turn("go"))
        await asyncio.wait_for(waiting.wait(), 10)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(turn, 10)
        await agent.provider.aclose()
    finally:
        sim.stop()
    assert ran == []
    assert [e.status for e in recorder.of(ToolFinished)] == ["cancelled"]


def test_an_exact_rule_matches_only_its_own_subject() -> None:
    tool = acting([])
    subject = subject_of(tool, {"command": "ls *.py"}, Path("."))
    (rule,) = session_rules("run_shell", subject)
    assert rule == "run_shell:ls '[*].py'"
    approvals = Approvals()
    approvals.allow(rule)
    assert approvals.ruling(tool, subject) is not None
    assert approvals.ruling(tool, subject_of(tool, {"command": "ls secret.py"}, Path("."))) is None
