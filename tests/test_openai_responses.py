"""OpenAI's Responses API: a real recorded stream over loopback HTTP to the real `openai` SDK, and the request bytes."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from sse_servers import streamed
from test_openai_fixtures import sse_file

from hotloop.agent.events import ResponseFinished, StepFinished, ToolFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningItemDone,
    StreamStarted,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.openai_responses import OpenAIResponsesProvider

from support import Recorder, present, serving, sim_with_scenario

CALL = "call_HQHdUC4vy1PBrZTJ85nBHmeQ"
TOOL = ToolSpec(
    "get_capital", "The capital of a country.", {"type": "object", "properties": {"country": {"type": "string"}}}
)


async def stream_fixture(events: list[bytes]) -> list[ModelEvent]:
    def provider(base_url: str) -> OpenAIResponsesProvider:
        return OpenAIResponsesProvider(
            ProviderOptions(name="fixture", model="gpt-4o", base_url=base_url, max_retries=0)
        )

    request = ChatRequest(system="", tools=(TOOL,), messages=(UserMessage("What is the capital of France?"),))
    return await streamed(events, "/v1/responses", provider, request)


async def test_a_recorded_function_call_stream_parses_exactly() -> None:
    events = await stream_fixture(sse_file("openai_responses_tool_call.sse"))

    fragments = ['{"', "country", '":"', "France", '"}']
    assert events == [
        StreamStarted(ts=events[0].ts),
        ToolCallStarted(0, CALL, "get_capital", ts=events[1].ts),
        *[ToolCallArgsDelta(0, CALL, f, ts=e.ts) for f, e in zip(fragments, events[2:7], strict=True)],
        ToolCallReady(0, CALL, "get_capital", '{"country":"France"}', ts=events[7].ts),
        Usage(
            ledger=UsageLedger(prompt_total=39, cache_read=0, uncached=39, output=16, reasoning=0),
            raw={
                "input_tokens": 39,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 16,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 55,
            },
            model="gpt-4o-2024-08-06",  # response.completed's: the snapshot that answered
            ts=events[8].ts,
        ),
        Finished("tool_calls", ts=events[9].ts),
    ]


def test_each_request_is_the_last_one_plus_what_was_added() -> None:
    """Stateless by default, reasoning items asked back encrypted; tools flat; an answer's reasoning item goes
    back byte for byte, before its text and calls; and each body minus its closing `]}` prefixes the next."""
    provider = OpenAIResponsesProvider(
        ProviderOptions(name="p", model="gpt-5", base_url="http://127.0.0.1:9/v1"), prompt_cache_key=True
    )
    item = '{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAA=="}'
    first = (UserMessage("capital of France?"),)
    answer = AssistantMessage(
        tool_calls=(ToolCall(CALL, "get_capital", '{"country":"France"}'),), reasoning_items=(item,)
    )
    second = (*first, answer, ToolResultMessage(CALL, "get_capital", "Paris"))
    body1 = provider.request_body(ChatRequest("Be brief.", (TOOL,), first, max_tokens=100, cache_key="s1"))
    body2 = provider.request_body(ChatRequest("Be brief.", (TOOL,), second, max_tokens=100, cache_key="s1"))

    assert body2.startswith(body1[:-2])
    sent = msgspec.json.decode(body2)
    assert (sent["store"], sent["include"], sent["prompt_cache_key"]) == (False, ["reasoning.encrypted_content"], "s1")
    assert (sent["instructions"], sent["max_output_tokens"]) == ("Be brief.", 100)
    assert sent["tools"] == [
        {"type": "function", "name": TOOL.name, "description": TOOL.description, "parameters": TOOL.parameters}
    ]
    assert item.encode() in body2
    assert [i["type"] for i in sent["input"]] == ["message", "reasoning", "function_call", "function_call_output"]
    assert sent["input"][2] == {
        "type": "function_call",
        "call_id": CALL,
        "name": "get_capital",
        "arguments": '{"country":"France"}',
    }
    assert sent["input"][3] == {"type": "function_call_output", "call_id": CALL, "output": "Paris"}


async def test_a_five_step_loop_reads_each_prompt_from_the_cache_and_sends_reasoning_back_verbatim(
    tmp_path: Path, workspace: Path
) -> None:
    """Over the simulator's Responses API: every step after the first reads the previous prompt from the
    cache (≥ that prompt − 32 tokens), and each reasoning item goes back in the next request as it came."""
    calls = [{"name": "list_dir", "arguments": {"path": "."}}]
    steps = [{"reasoning": f"Step {n}: look again.", "tool_calls": calls} for n in range(1, 5)]
    sim = sim_with_scenario(tmp_path, [*steps, {"reasoning": "Done looking.", "text": "Five steps."}])
    recorder = Recorder()
    provider = OpenAIResponsesProvider(
        ProviderOptions(name="sim-responses", model="sim-balanced", base_url=sim.base_url, max_retries=0)
    )
    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace, cache_key="s5")
    try:
        assert (await agent.run_turn("look five times")).reason == "answer"
    finally:
        await provider.aclose()
        sim.stop()

    finished = recorder.of(StepFinished)
    assert len(finished) == 5 and len(sim.server.requests) == 5  # every request accepted
    for before, after in itertools.pairwise(finished):
        assert before.usage is not None and after.usage is not None
        assert present(after.usage.cache_read) >= present(before.usage.prompt_total) - 32
    items = [event.item for event in recorder.of(ReasoningItemDone)]
    assert len(items) == 5 and all('"encrypted_content":' in item for item in items)
    for n, item in enumerate(items[:-1]):  # the last answer has no request after it
        assert item.encode() in sim.server.requests[n + 1].body
        assert item.encode() not in sim.server.requests[n].body


async def test_with_previous_response_id_a_request_sends_only_what_it_adds(tmp_path: Path, workspace: Path) -> None:
    """The server holds the conversation: each step after the first names the last response and sends only
    the tool results since; a provider that hasn't seen the last response (a resume) sends it whole."""
    calls = [{"name": "list_dir", "arguments": {"path": "."}}]
    sim = sim_with_scenario(tmp_path, [{"tool_calls": calls}, {"tool_calls": calls}, {"text": "done"}] * 2)
    recorder = Recorder()

    def stored() -> OpenAIResponsesProvider:
        return OpenAIResponsesProvider(
            ProviderOptions(name="sim-responses", model="sim-balanced", base_url=sim.base_url, max_retries=0),
            previous_response_id=True,
        )

    agent = Agent(stored(), ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace, cache_key="s")
    try:
        assert (await agent.run_turn("look twice")).reason == "answer"
        await agent.provider.aclose()
        agent.switch(stored())  # as after a resume: this process never saw the last response
        assert (await agent.run_turn("and again")).reason == "answer"
        await agent.provider.aclose()
    finally:
        sim.stop()

    bodies = [msgspec.json.decode(request.body) for request in sim.server.requests]
    assert len(bodies) == 6 and all(body["store"] is True for body in bodies)
    chained = [body.get("previous_response_id") is not None for body in bodies]
    assert chained == [False, True, True, False, True, True]
    for body in (bodies[1], bodies[2], bodies[4], bodies[5]):
        assert [item["type"] for item in body["input"]] == ["function_call_output"]
    whole = ["message", *["function_call", "function_call_output"] * 2, "message", "message"]
    assert [item["type"] for item in bodies[3]["input"]] == whole
    steps = recorder.of(StepFinished)
    first, second = (present(step.usage) for step in steps[:2])
    assert present(second.cache_read) >= present(first.prompt_total) - 32  # the stored conversation is cached


def sse(*events: dict[str, Any]) -> list[bytes]:
    return [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events]


def call_item(name: str, arguments: str = "") -> dict[str, Any]:
    return {"id": "fc_1", "type": "function_call", "arguments": arguments, "call_id": "call_1", "name": name}


def ended(status: str, **fields: Any) -> dict[str, Any]:
    usage = {"input_tokens": 40, "output_tokens": 12}
    return {"type": f"response.{status}", "response": {"id": "resp_1", "status": status, "usage": usage, **fields}}


ADDED = {"type": "response.output_item.added", "output_index": 0, "item": call_item("get_capital")}
DELTA = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"country":"France"}'}
ARGUMENTS_DONE = {
    "type": "response.function_call_arguments.done",
    "item_id": "fc_1",
    "arguments": '{"country":"France"}',
}
ITEM_DONE = {"type": "response.output_item.done", "output_index": 0, "item": call_item("get_capital", DELTA["delta"])}


@pytest.mark.parametrize(
    "closing",
    [[ITEM_DONE], [ARGUMENTS_DONE, ITEM_DONE], [ITEM_DONE, ARGUMENTS_DONE]],
    ids=["output_item.done alone (llama.cpp)", "arguments.done first", "output_item.done first"],
)
async def test_a_call_is_ready_once_at_whichever_closing_event_comes_first(closing: list[dict[str, Any]]) -> None:
    events = await stream_fixture(sse(ADDED, DELTA, *closing, ended("completed")))

    ready = [event for event in events if isinstance(event, ToolCallReady)]
    assert [(r.call_id, r.name, r.arguments) for r in ready] == [("call_1", "get_capital", '{"country":"France"}')]
    assert events.index(ready[0]) < [type(event) for event in events].index(Finished)  # early dispatch can start it


@asynccontextmanager
async def serve_streams(streams: list[list[bytes]], bodies: list[bytes]) -> AsyncIterator[str]:
    """A Responses endpoint that answers each request with the next of `streams`, keeping each request's body."""

    async def handler(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.read())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"".join(streams[len(bodies) - 1]))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/responses", handler)
    async with serving(app) as url:
        yield url


@pytest.mark.parametrize(
    ("ending", "finish_reason", "said"),
    [
        (
            ended("incomplete", incomplete_details={"reason": "max_output_tokens"}),
            "length",
            "cut off by the output limit",
        ),
        (ended("completed"), "tool_calls", "are not valid JSON"),
    ],
    ids=["incomplete", "completed"],
)
async def test_a_call_whose_arguments_never_complete_is_reported_not_dropped(
    workspace: Path, ending: dict[str, Any], finish_reason: str, said: str
) -> None:
    """Announced, half written, never closed: the call is not run, its result says why (as on Chat Completions and
    Anthropic), and it goes back with `{}` as its arguments, its result beside it."""
    half = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"path": "READ'}
    answer = {"type": "response.output_text.delta", "delta": "Understood."}
    streams = [sse({**ADDED, "item": call_item("read_file")}, half, ending), sse(answer, ended("completed"))]
    bodies: list[bytes] = []
    recorder = Recorder()
    async with serve_streams(streams, bodies) as base_url:
        provider = OpenAIResponsesProvider(ProviderOptions(name="fixture", model="m", base_url=base_url, max_retries=0))
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
        try:
            assert (await agent.run_turn("read the readme")).reason == "answer"
        finally:
            await provider.aclose()

    assert recorder.of(ResponseFinished)[0].finish_reason == finish_reason
    [result] = recorder.of(ToolFinished)
    assert result.status == "error" and said in result.result and '{"path": "READ' in result.result
    sent = msgspec.json.decode(bodies[1])["input"]
    assert sent[-2] == {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"}
    assert sent[-1]["type"] == "function_call_output" and said in sent[-1]["output"]
