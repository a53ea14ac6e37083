"""The embedded simulator speaks vLLM's OpenAI-compatible API to the real `openai` SDK."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import cast

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hotloop.sim.embedded import EmbeddedSimulator

from support import (
    READ_FILE,
    close_clients,  # noqa: F401 (autouse: closes the SDK clients a test opens)
    present,
    sim_with_scenario,
    start_sim,
)
from support import openai_client as client


def get(sim: EmbeddedSimulator, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(sim.base_url.removesuffix("/v1") + path) as response:
        return response.status, response.read()


async def test_stream_has_vllm_shape_and_fragmented_tool_arguments(sim: EmbeddedSimulator) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Read README.md and pyproject.toml"}]
    stream = await client(sim).chat.completions.create(
        model="sim-fast", messages=messages, tools=[READ_FILE], stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]

    assert chunks[0].choices[0].delta.role == "assistant"
    starts = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or [] if tc.id]
    assert [present(s.function).name for s in starts] == ["read_file", "read_file"]
    assert all(present(s.id).startswith("chatcmpl-tool-") and present(s.function).arguments is None for s in starts)
    fragments = [
        present(present(tc.function).arguments)
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []
        if not tc.id
    ]
    assert len(fragments) >= 6  # arguments arrive in several pieces, as from a real server
    assert "".join(fragments) == '{"path": "README.md"}{"path": "pyproject.toml"}'
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    # A cold cache: vLLM leaves prompt_tokens_details out instead of reporting 0.
    assert chunks[-1].usage.prompt_tokens_details is None
    assert "prompt_tokens_details" not in chunks[-1].usage.model_fields_set


async def test_identical_prompt_hits_all_but_the_last_block(sim: EmbeddedSimulator) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello " * 60},
    ]
    first = await client(sim).chat.completions.create(model="sim-fast", messages=messages)
    second = await client(sim).chat.completions.create(model="sim-fast", messages=messages)

    assert first.usage is not None and second.usage is not None and second.usage.prompt_tokens_details is not None
    prompt = second.usage.prompt_tokens
    assert first.usage.prompt_tokens == prompt and first.usage.prompt_tokens_details is None
    assert second.usage.prompt_tokens_details.cached_tokens == (prompt - 1) // 16 * 16


async def test_generated_tokens_are_cached_for_the_next_turn(sim: EmbeddedSimulator) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something about caching."}]
    first = await client(sim).chat.completions.create(model="sim-fast", messages=messages)
    follow_up: list[ChatCompletionMessageParam] = [
        *messages,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And again."},
    ]
    second = await client(sim).chat.completions.create(model="sim-fast", messages=follow_up)

    assert first.usage is not None and second.usage is not None and second.usage.prompt_tokens_details is not None
    covered = first.usage.prompt_tokens + first.usage.completion_tokens
    assert present(second.usage.prompt_tokens_details.cached_tokens) >= covered - 16


async def test_max_tokens_cuts_with_length(sim: EmbeddedSimulator) -> None:
    response = await client(sim).chat.completions.create(
        model="sim-fast", messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 5


async def test_errors_use_vllm_shapes(sim: EmbeddedSimulator) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as missing:
        await client(sim).chat.completions.create(model="gpt-9", messages=messages)
    assert missing.value.body == {
        "message": "The model `gpt-9` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }

    orphan: list[ChatCompletionMessageParam] = [*messages, {"role": "tool", "tool_call_id": "nope", "content": "x"}]
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceding message"):
        await client(sim).chat.completions.create(model="sim-fast", messages=orphan)

    unanswered: list[ChatCompletionMessageParam] = [
        *messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
        },
        {"role": "user", "content": "next"},
    ]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: c1"):
        await client(sim).chat.completions.create(model="sim-fast", messages=unanswered)


def test_models_health_and_metrics_endpoints(sim: EmbeddedSimulator) -> None:
    status, body = get(sim, "/v1/models")
    listing = json.loads(body)
    assert status == 200 and listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["sim-fast", "sim-balanced", "sim-strong"]
    assert all(m["owned_by"] == "vllm" and m["max_model_len"] > 0 for m in listing["data"])
    assert get(sim, "/health") == (200, b"")

    _, metrics = get(sim, "/metrics")
    text = metrics.decode()
    for name in (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ):
        assert f'{name}{{engine="0",model_name="sim-balanced"}}' in text


async def test_metrics_count_queries_and_hits_in_tokens(sim: EmbeddedSimulator) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "tell me about prefix caches " * 10}]
    responses = [await client(sim).chat.completions.create(model="sim-strong", messages=messages) for _ in range(2)]
    first, second = (response.usage for response in responses)
    assert first is not None and second is not None and second.prompt_tokens_details is not None
    samples = {
        (s.name, s.labels.get("model_name")): s.value
        for family in text_string_to_metric_families(get(sim, "/metrics")[1].decode())
        for s in family.samples
    }
    assert samples[("vllm:prefix_cache_queries_total", "sim-strong")] == 2 * first.prompt_tokens
    assert samples[("vllm:prefix_cache_hits_total", "sim-strong")] == second.prompt_tokens_details.cached_tokens
    assert samples[("vllm:generation_tokens_total", "sim-strong")] == first.completion_tokens + second.completion_tokens
    assert samples[("vllm:num_requests_running", "sim-strong")] == 0


@pytest.mark.wall_clock
async def test_latency_model_prefill_and_decode_and_concurrency() -> None:
    """TTFT grows with uncached tokens, decode follows its pace, and requests overlap."""
    sim = start_sim(ttft=0.05, prefill_per_token=0.001, decode_per_token=0.004)
    try:
        long_prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": "word " * 600}]
        api = client(sim)

        async def timed() -> tuple[float, float, int]:
            start = time.perf_counter()
            stream = await api.chat.completions.create(
                model="sim-fast", messages=long_prompt, stream=True, stream_options={"include_usage": True}
            )
            first = None
            async for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - start
                usage = chunk.usage or None
            return first or 0.0, time.perf_counter() - start, usage.completion_tokens if usage else 0

        cold_ttft, _, _ = await timed()
        warm_ttft, warm_total, output = await timed()
        # ~600 uncached tokens × 1 ms = 0.6 s of prefill that the warm request skips: large enough that
        # scheduling noise on a busy machine cannot hide it.
        assert cold_ttft > warm_ttft * 1.5
        assert warm_total - warm_ttft >= 0.004 * (output - 2) * 0.9

        start = time.perf_counter()
        together = await asyncio.gather(timed(), timed(), timed())
        overlapped = time.perf_counter() - start
        assert overlapped < sum(total for _, total, _ in together) * 0.6
    finally:
        sim.stop()


async def test_scenario_steps_are_followed_in_order(tmp_path: Path) -> None:
    sim = sim_with_scenario(
        tmp_path,
        [
            {"reasoning": "plan", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"text": "done"},
        ],
    )
    try:
        api = client(sim)
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "anything"}]
        first = await api.chat.completions.create(model="sim-fast", messages=messages, tools=[READ_FILE])
        answer = first.choices[0].message
        assert answer.tool_calls is not None and answer.model_extra is not None
        call = answer.tool_calls[0]
        assert call.type == "function"
        assert (call.function.name, call.function.arguments) == ("read_file", '{"path": "a.txt"}')
        assert answer.model_extra["reasoning"] == "plan"
        messages += [
            cast(
                ChatCompletionMessageParam,
                answer.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
            ),
            {"role": "tool", "tool_call_id": call.id, "content": "A"},
        ]
        second = await api.chat.completions.create(model="sim-fast", messages=messages, tools=[READ_FILE])
        assert second.choices[0].message.content == "done"
    finally:
        sim.stop()
