"""Real recorded provider streams, served over loopback HTTP to the real `openai` SDK."""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec
import pytest
from aiohttp import web
from sse_servers import streamed

from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    StreamStarted,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.openai_chat import OpenAIChatProvider

from support import FIXTURES, serving

REQUEST = ChatRequest(system="s", tools=(), messages=(UserMessage("hi"),))


async def stream_fixture(events: list[bytes]) -> list[ModelEvent]:
    def provider(base_url: str) -> OpenAIChatProvider:
        return OpenAIChatProvider(ProviderOptions(name="fixture", model="m", base_url=base_url, max_retries=0))

    return await streamed(events, "/v1/chat/completions", provider, REQUEST)


def sse_file(name: str) -> list[bytes]:
    """An SSE recording split into its events, byte for byte."""
    data = (FIXTURES / name).read_bytes()
    return [part + b"\n\n" for part in data.split(b"\n\n") if part]


def jsonl_as_sse(name: str) -> list[bytes]:
    """Unframed JSON chunks, framed as the server sent them (no [DONE]: the file has none)."""
    return [b"data: " + line + b"\n\n" for line in (FIXTURES / name).read_bytes().splitlines() if line]


def calls_of(events: list[ModelEvent]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.call_id, e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCallReady)]


async def test_openai_parallel_tool_calls_parse_exactly() -> None:
    events = await stream_fixture(sse_file("openai_chat_parallel_tools.sse"))

    assert calls_of(events) == [
        ("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
        ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]
    raw = [e.arguments for e in events if isinstance(e, ToolCallReady)]
    assert raw == ['{"city": "Edinburgh", "country": "GB", "units": "c"}', '{"ticker": "AAPL", "exchange": "NASDAQ"}']
    started = [(e.index, e.name) for e in events if isinstance(e, ToolCallStarted)]
    assert started == [(0, "GetWeatherArgs"), (1, "get_stock_price")]
    fragments = [e for e in events if isinstance(e, ToolCallArgsDelta)]
    assert len(fragments) > 4 and "".join(f.fragment for f in fragments if f.index == 0) == raw[0]
    assert not [e for e in events if isinstance(e, TextDelta | ReasoningDelta)]
    # No prompt_tokens_details in the recording: the cache split is "not reported", not 0.
    usage = [e for e in events if isinstance(e, Usage)]
    assert [u.ledger for u in usage] == [UsageLedger(prompt_total=149, output=60, reasoning=0)]
    assert usage[0].ledger.cache_read is None and usage[0].ledger.uncached is None
    assert usage[0].model == "gpt-4o-2024-08-06"  # the snapshot that answered, not the alias asked for
    # The finish comes with its chunk, before the call it makes ready (the first was ready when the second
    # began): a call cut off by the output limit is known as such before anything could start it.
    assert [type(e).__name__ for e in events][-3:] == ["Finished", "ToolCallReady", "Usage"]
    assert [e.reason for e in events if isinstance(e, Finished)] == ["tool_calls"]


async def test_a_gzip_encoded_stream_reads_as_the_plain_one() -> None:
    """A server (or a gateway before it) that compresses its event stream, cut mid-block: read through the decoder,
    it gives the plain stream's events, one for one (a plain stream's blocks skip the decoding layer)."""
    events = sse_file("openai_chat_parallel_tools.sse")
    body = gzip.compress(b"".join(events))

    async def compressed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        await response.prepare(request)
        for start in range(0, len(body), 97):
            await response.write(body[start : start + 97])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", compressed)
    async with serving(app) as base_url:
        provider = OpenAIChatProvider(ProviderOptions(name="fixture", model="m", base_url=base_url, max_retries=0))
        try:
            read = [event async for event in provider.stream(REQUEST)]
        finally:
            await provider.aclose()
    plain = await stream_fixture(events)
    assert [type(e) for e in read] == [type(e) for e in plain] and isinstance(read[0], StreamStarted)
    untimed = [[msgspec.structs.replace(e, ts=0.0) for e in events] for events in (read, plain)]
    assert untimed[0] == untimed[1]  # the same events, but for when each came
    assert len(calls_of(read)) == 2


async def test_deepseek_reasoning_and_null_usage_parse_exactly() -> None:
    events = await stream_fixture(jsonl_as_sse("deepseek_tool_call.chunks.jsonl"))

    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == "The user asks about the weather in San Francisco. I should use the weather tool."
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert calls_of(events) == [("call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", {"location": "San Francisco"})]
    usage = [e.ledger for e in events if isinstance(e, Usage)]
    assert usage == [UsageLedger(prompt_total=374, cache_read=256, uncached=118, output=61, reasoning=17)]
    # DeepSeek sends its usage with the finish chunk: finish, the call it makes ready, then the usage.
    assert [type(e).__name__ for e in events][-3:] == ["Finished", "ToolCallReady", "Usage"]
    assert [e.reason for e in events if isinstance(e, Finished)] == ["tool_calls"]


def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    """A Chat Completions chunk; `delta=None` makes the usage-only chunk with `choices: []`."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def test_whole_call_in_one_chunk_and_missing_usage_key() -> None:
    """xAI and Ollama send a call's arguments in the same chunk as its name; some servers send no usage."""
    call = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "grep", "arguments": '{"pattern": "x"}'},
    }
    events = await stream_fixture(
        [chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls"), b"data: [DONE]\n\n"]
    )

    assert calls_of(events) == [("call_a", "grep", {"pattern": "x"})]
    assert not [e for e in events if isinstance(e, Usage)]


async def test_new_id_on_a_used_index_starts_a_new_call() -> None:
    """Ollama reuses index 0 for a whole parallel batch, telling calls apart only by id."""
    first = {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
    second = {"index": 0, "id": "call_2", "function": {"name": "read_file", "arguments": '{"path": "b"}'}}
    events = await stream_fixture(
        [chunk({"tool_calls": [first]}), chunk({"tool_calls": [second]}), chunk({}, "tool_calls")]
    )

    assert calls_of(events) == [("call_1", "read_file", {"path": "a"}), ("call_2", "read_file", {"path": "b"})]


async def test_vllm_reasoning_field_and_cache_write() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 20},
    }
    events = await stream_fixture(
        [chunk({"reasoning": "think"}), chunk({"content": "hello"}, "stop"), chunk(None, usage=usage)]
    )

    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "think"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello"
    assert [e.ledger for e in events if isinstance(e, Usage)] == [
        UsageLedger(prompt_total=100, cache_read=64, cache_write=20, uncached=16, output=5)
    ]


async def test_a_stream_cut_before_the_finish_is_an_interruption() -> None:
    from hotloop.providers.errors import StreamInterrupted

    with pytest.raises(StreamInterrupted):
        await stream_fixture([chunk({"content": "partial"})])


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
async def test_every_line_ending_the_spec_allows_reads_the_same(ending: bytes) -> None:
    """SSE lines end in LF, CRLF or CR; a stream cut into blocks anywhere, even between a CR and its LF, reads alike."""
    recorded = b"".join(sse_file("openai_chat_parallel_tools.sse"))
    stream = recorded.replace(b"\n", ending)
    expected = await stream_fixture([recorded])
    cut = [stream[n : n + 7] for n in range(0, len(stream), 7)]  # 7 bytes a write: many cuts fall inside a CRLF
    assert list(map(untimed, await stream_fixture(cut))) == list(map(untimed, expected))


def untimed(event: ModelEvent) -> ModelEvent:
    return msgspec.structs.replace(event, ts=0.0)
