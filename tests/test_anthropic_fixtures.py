"""Real recorded Anthropic streams, served over loopback HTTP to the real `anthropic` SDK."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from sse_servers import streamed

from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ServerToolUsed,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)

from support import FIXTURES

REQUEST = ChatRequest(system="s", tools=(), messages=(UserMessage("hi"),))


async def stream_fixture(events: list[bytes], cache_min_tokens: int | None = None) -> list[ModelEvent]:
    def provider(base_url: str) -> AnthropicProvider:
        where = ProviderOptions("fixture", "m", base_url.removesuffix("/v1"), max_retries=0)
        return AnthropicProvider(replace(where, cache_min_tokens=cache_min_tokens))

    return await streamed(events, "/v1/messages", provider, REQUEST)


def sse_bytes(name: str) -> list[bytes]:
    """An SSE recording split into its events, byte for byte (the last one as the file ends it)."""
    *events, last = (FIXTURES / name).read_bytes().split(b"\n\n")
    return [event + b"\n\n" for event in events] + ([last] if last else [])


def jsonl_as_sse(name: str) -> list[bytes]:
    """Unframed event objects, framed as the API sends them: an `event:` line, then `data:`."""
    lines = (FIXTURES / name).read_bytes().splitlines()
    return [b"event: " + json.loads(line)["type"].encode() + b"\ndata: " + line + b"\n\n" for line in lines if line]


async def test_tool_use_stream_parses_exactly() -> None:
    """The recording ends without a blank line, so its `message_stop` is not framed; the answer is complete anyway."""
    events = await stream_fixture(sse_bytes("anthropic_tool_use.sse"))

    assert (
        "".join(e.text for e in events if isinstance(e, TextDelta))
        == "I'll check the current weather in Paris for you."
    )
    assert [(e.index, e.call_id, e.name) for e in events if isinstance(e, ToolCallStarted)] == [
        (0, "toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather")
    ]
    ready = [e for e in events if isinstance(e, ToolCallReady)]
    assert [(e.call_id, e.name, e.arguments) for e in ready] == [
        ("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", '{"location": "Paris"}')
    ]
    fragments = [e.fragment for e in events if isinstance(e, ToolCallArgsDelta)]
    assert fragments == ['{"locati', 'on": "P', "ar", 'is"}']
    # message_delta carries only output_tokens here: the prompt figures come from message_start.
    assert [e.ledger for e in events if isinstance(e, Usage)] == [
        UsageLedger(prompt_total=377, cache_read=0, cache_write=0, uncached=377, output=65)
    ]
    assert [e.model for e in events if isinstance(e, Usage)] == ["claude-sonnet-4-20250514"]  # message_start's
    assert isinstance(events[-1], Finished) and events[-1].reason == "tool_calls"


async def test_prompt_cache_stream_takes_cumulative_delta_usage() -> None:
    events = await stream_fixture(jsonl_as_sse("anthropic_prompt_cache.chunks.jsonl"))

    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "The sum of the squares of the numbers 1 through 12 is **650**."
    # Server tools ran on Anthropic's side: shown, never offered to hotloop's tool runner.
    assert not [e for e in events if isinstance(e, ToolCallStarted | ToolCallReady)]
    server = [e for e in events if isinstance(e, ServerToolUsed)]
    assert [(e.call_id, e.name) for e in server] == [
        ("srvtoolu_011fxGj786xCAh2kPk9GMxQw", "bash_code_execution"),
        ("srvtoolu_013eUksWZnfcjFk1iarJsYgM", "bash_code_execution"),
    ]
    assert json.loads(server[1].arguments) == {
        "command": 'sum=0; for n in $(seq 1 12); do sum=$((sum + n*n)); done; echo "Sum: $sum"'
    }
    usage = [e for e in events if isinstance(e, Usage)]
    assert [u.ledger for u in usage] == [
        UsageLedger(
            prompt_total=6 + 6289 + 3337,
            cache_read=6289,
            cache_write=3337,
            uncached=6,
            output=198,
            reasoning=0,
            cache_write_1h=0,  # message_start splits the writes by lifetime: none kept for an hour
        )
    ]
    assert usage[0].raw["message_start"]["cache_creation_input_tokens"] == 3068
    assert isinstance(events[-1], Finished) and events[-1].reason == "stop"


def event(payload: dict[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


START = event(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "usage": {
                "input_tokens": 900,
                "output_tokens": 1,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
        },
    }
)


async def test_overloaded_error_mid_stream_is_one_clear_line() -> None:
    text = [
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an"}}),
    ]
    error = event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})

    with pytest.raises(StreamInterrupted, match=r"^fixture \(.*\) is overloaded and stopped mid-answer \(Overloaded\)"):
        await stream_fixture([START, *text, error])


async def test_a_prompt_below_the_minimum_is_not_a_miss() -> None:
    stop = [
        event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        event({"type": "message_stop"}),
    ]

    events = await stream_fixture([START, *stop], cache_min_tokens=1024)
    [usage] = [e.ledger for e in events if isinstance(e, Usage)]
    assert usage.below_cache_min == 1024 and usage.cache_read == 0 and usage.prompt_total == 900

    events = await stream_fixture([START, *stop], cache_min_tokens=512)
    [usage] = [e.ledger for e in events if isinstance(e, Usage)]
    assert usage.below_cache_min is None


async def test_server_side_iterations_are_all_in_the_ledger() -> None:
    """A compaction iteration read 55,096 tokens from the cache before the message's own iteration.

    `message_delta`'s top-level figures describe only the last iteration: the ledger sums every one
    (the recording's own numbers), shows the split, and the session totals count them all.
    """
    from hotloop.agent.events import StepFinished
    from hotloop.agent.figures import SessionTotals, prompt_breakdown

    events = await stream_fixture(sse_bytes("anthropic_compaction.sse"))
    [usage] = [e for e in events if isinstance(e, Usage)]
    ledger = usage.ledger
    assert (ledger.uncached, ledger.cache_read, ledger.cache_write, ledger.output) == (100 + 181, 55096, 0, 83 + 8)
    assert ledger.prompt_total == 100 + 181 + 55096
    assert [part.kind for part in ledger.parts] == ["compaction", "message"]
    assert prompt_breakdown(ledger) == (
        "prompt 55,377 (cache read 55,096 · write 0 · uncached 281) · compaction: read 55,096 · uncached 100 · out 83"
    )
    totals = SessionTotals()
    step = StepFinished(
        turn=1,
        step=1,
        usage=ledger,
        ttft=0.1,
        decode_tps=None,
        model_time=1.0,
        wall=1.0,
        tool_count=0,
        tool_sum=0.0,
        tool_wall=0.0,
        finish_reason="stop",
    )
    totals.add(step)
    assert (totals.prompt, totals.output) == (55_377, 91)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello! \U0001f44b"
