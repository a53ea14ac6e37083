"""The agent loop against the embedded simulator over loopback HTTP."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import AssistantMessage, ToolResultMessage
from hotloop.providers.events import TextDelta, ToolCallReady
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sim.embedded import EmbeddedSimulator

from support import make_agent, present, sim_with_scenario, start_sim, wait_until

SCHEMA = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}


def sleep_tool(together: int = 1) -> Tool:
    """A tool that sleeps for its `seconds`, once `together` calls of it have started: none ends before all start.

    Run one at a time, `together` calls would never all start: the first gives up after 5 s, with an error.
    """
    started: list[str] = []
    all_started = asyncio.Event()

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        started.append(ctx.call_id)
        if len(started) >= together:
            all_started.set()
        ctx.emit_output(f"sleeping {args['seconds']} s")
        await asyncio.wait_for(all_started.wait(), 5)
        await asyncio.sleep(args["seconds"])
        return f"slept {args['seconds']} s"

    return Tool("sleep", "Sleep for a while.", SCHEMA, handler)


def hang_tool(timeout: float | None = None) -> Tool:
    """A tool that never ends by itself: it waits until it is cancelled, or times out."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.emit_output("hanging")
        await asyncio.Event().wait()
        return "never"

    return Tool("hang", "Hang.", {"type": "object"}, handler, timeout=timeout)


def sleeps(*seconds: float) -> dict[str, Any]:
    return {"tool_calls": [{"name": "sleep", "arguments": {"seconds": s}} for s in seconds]}


def hangs(count: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "hang", "arguments": {}} for _ in range(count)]}


@pytest.mark.wall_clock
async def test_three_independent_tools_run_concurrently(tmp_path: Path) -> None:
    # The first call sleeps longest after the three have met, so it is the one the tool phase waits for.
    sim = sim_with_scenario(tmp_path, [sleeps(0.05, 0.03, 0.04), {"text": "all done"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, [sleep_tool(together=3)])
        finished = await agent.run_turn("sleep three times")
    finally:
        sim.stop()

    assert finished.reason == "answer" and finished.steps == 2
    assert [e.status for e in recorder.of(ToolFinished)] == ["ok", "ok", "ok"]
    step = recorder.of(StepFinished)[0]
    durations = [e.duration for e in recorder.of(ToolFinished)]
    assert len(durations) == 3 and step.tool_count == 3
    # The tool phase takes about as long as the slowest call, not the sum (measured by the loop itself).
    assert step.tool_wall < 1.3 * max(durations)
    assert step.tool_sum == pytest.approx(sum(durations))
    last_start = max(e.ts for e in recorder.of(ToolStarted))
    first_end = min(e.ts for e in recorder.of(ToolFinished))
    assert last_start < first_end


async def test_consecutive_requests_extend_each_other_byte_for_byte(tmp_path: Path) -> None:
    """Five steps: each request body starts with the previous one, and the cache reads all of it."""
    (tmp_path / "notes.md").write_text("# Notes\n" + "Some notes about the project.\n" * 40)
    steps = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md", "offset": n}}]} for n in (1, 5, 9, 13)
    ]
    sim = sim_with_scenario(tmp_path, [*steps, {"text": "finished reading"}])
    try:
        agent, recorder = make_agent(sim, tmp_path)
        await agent.run_turn("read notes.md in four pages")
        bodies = [r.body for r in sim.server.requests]
    finally:
        sim.stop()

    assert len(bodies) == 5
    for previous, current in itertools.pairwise(bodies):
        # The messages come last, so only the closing "]}" of the previous body is not a prefix.
        assert previous.endswith(b"]}") and current.startswith(previous[:-2] + b",")
    assert json.loads(bodies[-1])["messages"][0]["role"] == "system"

    usage = [present(step.usage) for step in recorder.of(StepFinished)]
    for earlier, later in itertools.pairwise(usage):
        assert later.cache_read is not None and later.cache_read >= present(earlier.prompt_total) - 32
    # The figures are the simulator's own.
    assert [u.cache_read or 0 for u in usage] == [r.cached_tokens for r in sim.server.requests]


async def test_a_raising_tool_becomes_an_error_result_and_others_go_on(tmp_path: Path) -> None:
    async def boom(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("kaput")

    (tmp_path / "a.txt").write_text("alpha")
    sim = sim_with_scenario(
        tmp_path,
        [
            {"tool_calls": [{"name": "boom", "arguments": {}}, {"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"text": "ok"},
        ],
    )
    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("boom", "Fails.", {"type": "object"}, boom)])
        finished = await agent.run_turn("go")
    finally:
        sim.stop()

    results = {e.name: (e.status, e.result) for e in recorder.of(ToolFinished)}
    assert results == {"boom": ("error", "error: boom raised RuntimeError: kaput"), "read_file": ("ok", "alpha")}
    assert finished.reason == "answer"
    sent = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert [(m.name, m.is_error) for m in sent] == [("boom", True), ("read_file", False)]


@pytest.mark.wall_clock
async def test_a_hanging_tool_times_out_into_an_error_result(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [hangs(1), {"text": "ok"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, [hang_tool(timeout=0.05)])
        finished = await agent.run_turn("hang")
    finally:
        sim.stop()
    (result,) = recorder.of(ToolFinished)
    assert (result.status, result.result) == ("error", "error: hang timed out after 0.05 s")
    assert result.duration < 5 and finished.reason == "answer"


async def test_malformed_arguments_and_unknown_tools_are_reported_to_the_model(tmp_path: Path) -> None:
    ran: list[dict[str, Any]] = []

    async def record(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(args)
        return "ran"

    sim = sim_with_scenario(
        tmp_path,
        [
            {"tool_calls": [{"name": "record", "arguments": '{"path": '}, {"name": "nonesuch", "arguments": {}}]},
            {"text": "ok"},
        ],
    )
    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("record", "Records.", {"type": "object"}, record)])
        finished = await agent.run_turn("go")
    finally:
        sim.stop()

    assert ran == [] and finished.reason == "answer"
    finished_calls = {event.name: event for event in recorder.of(ToolFinished)}
    bad_json, unknown = finished_calls["record"], finished_calls["nonesuch"]
    assert bad_json.status == "error" and "are not valid JSON" in bad_json.result and '{"path": ' in bad_json.result
    assert (
        unknown.status == "error"
        and "unknown tool 'nonesuch' (available: grep, list_dir, read_file, record)" in unknown.result
    )


async def wait_for(recorder: Any, kind: type, count: int = 1) -> None:
    await wait_until(lambda: len(recorder.of(kind)) >= count, what=f"{count} {kind.__name__} event(s)")


async def test_cancel_during_tools_leaves_a_valid_conversation(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [hangs(2), {"text": "unused"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, [hang_tool()])
        turn = asyncio.create_task(agent.run_turn("sleep"))
        await wait_for(recorder, ToolStarted, 2)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

        assert [e.status for e in recorder.of(ToolFinished)] == ["cancelled", "cancelled"]
        assert recorder.of(TurnFinished)[-1].reason == "cancelled"
        calls = agent.messages[-3]
        assert isinstance(calls, AssistantMessage) and len(calls.tool_calls) == 2
        results = [m.call_id for m in agent.messages[-2:] if isinstance(m, ToolResultMessage)]
        assert results == [c.id for c in calls.tool_calls]
        # The strict simulator accepts the next turn: every issued call has its result.
        finished = await agent.run_turn("and now?")
        assert finished.reason == "answer"
    finally:
        sim.stop()


async def test_cancel_mid_stream_keeps_the_partial_answer(tmp_path: Path) -> None:
    # Silent after 10 tokens for longer than any test runs: the cancel comes mid-answer, however busy the machine.
    cut = {"text": "word " * 200, "stall": {"after_chunks": 10, "seconds": 30}}
    sim = sim_with_scenario(tmp_path, [cut, {"text": "second answer"}])
    try:
        agent, recorder = make_agent(sim, tmp_path)
        turn = asyncio.create_task(agent.run_turn("talk"))
        await wait_for(recorder, TextDelta, 3)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

        partial = agent.messages[-1]
        assert isinstance(partial, AssistantMessage) and partial.interrupted
        assert partial.text == "".join(e.text for e in recorder.of(TextDelta)) and 0 < len(partial.text) < 1000
        finished = await agent.run_turn("go on")
        answer = agent.messages[-1]
        assert finished.reason == "answer" and isinstance(answer, AssistantMessage) and answer.text == "second answer"
    finally:
        sim.stop()


async def test_unreachable_provider_ends_the_turn_with_an_error(tmp_path: Path) -> None:
    provider = OpenAIChatProvider(
        ProviderOptions(name="local", model="m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    )
    recorder_events: list[AgentEvent] = []
    agent = Agent(provider, ToolRegistry(), emit=recorder_events.append, workspace=tmp_path)
    finished = await agent.run_turn("hi")

    assert finished.reason == "error"
    (notice,) = [e for e in recorder_events if isinstance(e, Notice)]
    assert notice.level == "error" and notice.message.startswith("cannot reach local (http://127.0.0.1:9/v1)")
    assert "\n" not in notice.message


async def test_unknown_model_lists_what_the_server_has(sim: EmbeddedSimulator) -> None:
    provider = OpenAIChatProvider(ProviderOptions(name="sim", model="gpt-9", base_url=sim.base_url, max_retries=0))
    events: list[AgentEvent] = []
    await Agent(provider, ToolRegistry(), emit=events.append, workspace=Path(".")).run_turn("hi")
    (notice,) = [e for e in events if isinstance(e, Notice)]
    assert "unknown model 'gpt-9'" in notice.message
    assert notice.message.endswith("(available: sim-balanced, sim-fast, sim-strong)")


async def test_the_step_cap_stops_a_turn_and_keeps_it_valid(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 5 + [{"text": "end"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, max_steps=2)
        finished = await agent.run_turn("loop")
        assert (finished.reason, finished.steps) == ("max_steps", 2)
        assert any(isinstance(e, Notice) and "step cap" in e.message for e in recorder.events)
        assert (await agent.run_turn("continue")).reason in ("answer", "max_steps")
    finally:
        sim.stop()


async def test_events_tell_the_story_of_a_turn_in_order(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Demo\n")
    sim = start_sim()
    try:
        agent, recorder = make_agent(sim, tmp_path)
        await agent.run_turn("Read README.md")
    finally:
        sim.stop()

    kinds = [type(e).__name__ for e in recorder.events]
    assert kinds[0] == "TurnStarted" and kinds[1] == "StepStarted" and kinds[-1] == "TurnFinished"
    assert (
        kinds.index("ToolCallReady")
        < kinds.index("ToolStarted")
        < kinds.index("ToolFinished")
        < kinds.index("StepFinished")
    )
    assert [e.ts for e in recorder.events] == sorted(e.ts for e in recorder.events)
    start = recorder.of(TurnStarted)[0]
    assert "<context>" in start.context and str(tmp_path) in start.context and "<context>" not in start.prompt
    assert [s.step for s in recorder.of(StepStarted)] == [1, 2]
    ready = recorder.of(ToolCallReady)[0]
    assert json.loads(ready.arguments) == {"path": "README.md"}
    step = recorder.of(StepFinished)[0]
    assert step.ttft is not None and step.ttft > 0 and step.usage is not None and step.usage.output
