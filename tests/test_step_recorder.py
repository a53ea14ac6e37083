"""One step, one recorder: the loop, the watch and the importer turn the same step into the same events.

The loop runs a turn on the simulator (one step that calls a tool, one that answers) through a real Watch in
front of it; the watch's events for that traffic, and an import of a transcript holding what the loop did, frame
each step as the loop's own events do: `StepStarted`, `ResponseFinished`, the tool phase, `StepFinished`, with
the same usage, stop, tool results and counts. Folded back (`agent/step_fold.py`), they are the same steps.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from hotloop import paths
from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.recorder import StepRecorder
from hotloop.agent.step import StepAccumulator
from hotloop.agent.step_fold import folded
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.events import ServerTimings, UsageLedger
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.protocols import Wire
from hotloop.sessions.imports.model import Call, Imported, Step, Turn
from hotloop.sessions.imports.writer import write_session
from hotloop.sessions.store import read_session
from hotloop.watch import Watch, upstream_at

from support import Recorder, sim_with_scenario, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = [{"tool_calls": [{"name": "echo", "arguments": {"x": 1}}]}, {"text": "all done"}]


async def echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"echo {args.get('x')}"


def provider(wire: Wire, url: str) -> Provider:
    options = ProviderOptions(name="sim", model="sim-fast", base_url=f"{url}/v1", max_retries=0)
    if wire is Wire.ANTHROPIC:
        return AnthropicProvider(ProviderOptions(name="sim", model="sim-fast", base_url=url, max_retries=0))
    if wire is Wire.OPENAI_RESPONSES:
        return OpenAIResponsesProvider(options)
    return OpenAIChatProvider(options)


def frame(events: list[AgentEvent]) -> list[tuple[object, ...]]:
    """The step's frame, by what every producer knows alike: the model's deltas (the watch joins a block's into
    one), fingerprints (the watch's are the wire's) and clock readings aside."""
    framed: list[tuple[object, ...]] = []
    for event in events:
        if isinstance(event, TurnStarted):
            framed.append(("turn", event.turn, event.prompt))
        elif isinstance(event, StepStarted):
            framed.append(("step", event.turn, event.step, event.model))
        elif isinstance(event, ResponseFinished):
            framed.append(("response", event.turn, event.step, event.usage, event.finish_reason))
        elif isinstance(event, ToolStarted):
            framed.append(("tool", event.call_id, event.name, event.arguments))
        elif isinstance(event, ToolFinished):
            framed.append(("tool done", event.call_id, event.status, event.result))
        elif isinstance(event, StepFinished):
            framed.append(("step done", event.turn, event.step, event.usage, event.finish_reason, event.tool_count))
        elif isinstance(event, TurnFinished):
            framed.append(("turn done", event.turn, event.reason, event.steps))
    return framed


async def looped_through_a_watch(wire: Wire, tmp_path: Path) -> tuple[list[AgentEvent], list[AgentEvent]]:
    """The loop's events for a turn of SCENARIO, and the watch's for the same traffic."""
    sim = sim_with_scenario(tmp_path, SCENARIO)
    seen: list[AgentEvent] = []
    watch = Watch(
        upstream_at(sim.url, "sim"),
        lambda _, event: seen.append(event),
        folder=paths.sessions_dir(),
        workspace=tmp_path,
    )
    try:
        url = await watch.start()
        looped = Recorder()
        tools = ToolRegistry([Tool("echo", "Echo.", {"type": "object"}, echo)])
        # Run after the answer, as the wire shows a call: one dispatched early starts before the response ends.
        options = AgentOptions(early_dispatch=False)
        agent = Agent(provider(wire, url), tools, emit=looped, workspace=tmp_path, options=options, context=lambda: "")
        try:
            await agent.run_turn("first")
        finally:
            await agent.provider.aclose()
        await wait_until(lambda: any(isinstance(event, TurnFinished) for event in seen), what="the watch's turn end")
    finally:
        await watch.aclose()
        sim.stop()
    return looped.events, seen


@pytest.mark.parametrize("wire", list(Wire))
async def test_the_loop_and_the_watch_frame_the_same_steps_alike(wire: Wire, tmp_path: Path) -> None:
    """A step the loop ran and the same step as the watch read it off the wire are the same events in the same
    order: the tool phase between the response and the step's end, the usage and tool count carried over."""
    looped, watched = await looped_through_a_watch(wire, tmp_path)
    expected = frame(looped)
    assert [kind for kind, *_ in expected] == [
        "turn",
        *("step", "response", "tool", "tool done", "step done"),
        *("step", "response", "step done"),
        "turn done",
    ]
    assert frame(watched) == expected


async def test_an_import_frames_the_steps_as_the_loop_did(tmp_path: Path) -> None:
    """A transcript holding what the loop did, imported, is the loop's own frame of its steps."""
    looped, _ = await looped_through_a_watch(Wire.OPENAI_CHAT, tmp_path)
    responses = [event for event in looped if isinstance(event, ResponseFinished)]
    results = [event for event in looped if isinstance(event, ToolFinished)]
    ready = [(event.call_id, event.name, event.arguments) for event in looped if isinstance(event, ToolStarted)]
    steps = [
        Step("sim-fast", 1.0, 2.0, responses[0].usage, calls=[Call(*ready[0], 2.5, results[0].result, False, 3.0)]),
        Step("sim-fast", 4.0, 5.0, responses[1].usage, text=["all done"]),
    ]
    for step, response in zip(steps, responses, strict=True):
        step.finish_reason = response.finish_reason
    transcript = Imported(
        "codex", "one", "1", "sim", "", "sim-fast", str(tmp_path), 1.0, Wire.OPENAI_CHAT, [Turn("first", 0.5, steps)]
    )
    written = write_session(transcript, tmp_path / "imported")
    imported = read_session(written.path).events
    assert frame(imported) == frame(looped)
    [first, _] = [event for event in imported if isinstance(event, StepFinished)]
    assert (first.model_time, first.wall, first.tool_sum) == (1.0, 2.0, 0.5)  # its times are the transcript's


def test_a_steps_end_carries_every_figure_of_its_response() -> None:
    """Whatever the response says that the step's end also holds, the end says alike: a field added to both is
    carried by the recorder, not copied by each producer."""
    said: list[AgentEvent] = []
    recorder = StepRecorder(said.append, Wire.OPENAI_CHAT, 3, 2)
    stream = StepAccumulator(started=10.0, first_byte=10.5, first_token=10.6, last_token=11.6, streamed=11)
    stream.usage = UsageLedger(prompt_total=100, output=12)
    stream.timings = ServerTimings(source="llama.cpp", prefill=0.25, decode_tps=None)
    stream.finish_reason = "stop"
    response = recorder.respond(stream, 12.0, "cache miss: x", route="auto: simple → fast", connect=0.125)
    recorder.tool_finished("c1", "echo", "ok", "done", (12.0, 12.5))
    recorder.phase.count = 1
    finished = recorder.finish(13.0)
    assert said == [response, said[1], finished]
    shared = set(StepFinished.__struct_fields__) & set(ResponseFinished.__struct_fields__) - {"ts"}
    assert {name: getattr(finished, name) for name in shared} == {name: getattr(response, name) for name in shared}
    assert (response.ttft, response.decode_tps, response.model_time) == (0.5, 10.0, 2.0)
    assert (finished.wall, finished.tool_count, finished.tool_sum, finished.tool_wall) == (3.0, 1, 0.5, 0.5)


def test_the_watch_imports_nothing_of_the_loop_or_its_tool_runner() -> None:
    """The watch records through `StepRecorder`; the loop and the tool runner run an agent, which it never does."""
    imported = {
        node.module
        for path in (ROOT / "watch").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "hotloop.agent.recorder" in imported
    assert imported.isdisjoint({"hotloop.agent.loop", "hotloop.agent.tool_runner"})


async def test_folded_the_loops_and_the_watchs_events_give_back_the_same_steps(tmp_path: Path) -> None:
    """The fold pairs what the recorder wrote: each step its start, response, tool results and end, alike from the
    loop and the watch."""
    looped, watched = await looped_through_a_watch(Wire.OPENAI_CHAT, tmp_path)
    for events in (looped, watched):
        steps = list(folded(events))
        assert [(step.turn, step.step, [tool.result for tool in step.tools]) for step in steps] == [
            (1, 1, ["echo 1"]),
            (1, 2, []),
        ]
        for step in steps:
            assert step.started is not None and step.response is not None and step.finished is not None
            assert step.usage == step.response.usage == step.finished.usage
            assert step.answered == step.response.ts


def test_a_step_a_log_leaves_open_is_folded_with_what_it_got() -> None:
    """A step cancelled mid-stream (no response logged) is answered at its end less its tools; one killed after its
    response ends at the next step's start, another at the log's end; a step whose start was lost is one still."""
    said: list[AgentEvent] = []
    stream = StepAccumulator(started=0.0, usage=UsageLedger(prompt_total=10, output=2), finish_reason="stop")
    cancelled = StepRecorder(said.append, Wire.OPENAI_CHAT, 1, 1)
    cancelled.start("sim", "sim-fast", None, ts=1.0)
    cancelled.respond(stream, 1.5, "", ts=1.5, said=False)
    cancelled.tool_finished("c1", "echo", "cancelled", "", (1.5, 1.75), ts=1.75)
    cancelled.finish(1.75, cut="cancelled", ts=1.75)
    for number in (1, 2):  # killed after the response: no end
        killed = StepRecorder(said.append, Wire.OPENAI_CHAT, 2, number)
        killed.start("sim", "sim-fast", None, ts=2.0 + number)
        killed.respond(stream, 2.5, "", ts=2.5 + number)
    lost = StepRecorder(said.append, Wire.OPENAI_CHAT, 3, 1)  # its StepStarted line lost
    lost.respond(stream, 5.0, "", ts=5.0)
    lost.finish(5.0, ts=5.0)
    steps = list(folded([event for event in said if not isinstance(event, StepStarted) or event.turn != 3]))
    assert [(step.turn, step.step) for step in steps] == [(1, 1), (2, 1), (2, 2), (3, 1)]
    first, *killed_steps, last = steps
    assert first.response is None and first.answered == 1.75 - 0.25 and first.usage == stream.usage
    assert [(step.answered, step.finished) for step in killed_steps] == [(3.5, None), (4.5, None)]
    assert last.started is None and last.answered == 5.0
