"""The embedded simulator speaks Anthropic's Messages API to the real `anthropic` SDK."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import (
    CacheControlEphemeralParam,
    Message,
    MessageParam,
    TextBlock,
    ToolParam,
    ToolUseBlock,
    ToolUseBlockParam,
)

from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig

from support import anthropic_client as client
from support import (
    close_clients,  # noqa: F401 (autouse: closes the SDK clients a test opens)
    start_sim,
)

READ_FILE: ToolParam = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}
# Long enough that the static prefix passes a minimum cacheable length of 1,024 tokens.
SYSTEM = "You answer questions about files in a repository, briefly and precisely. " * 90


def raw_stream(sim: EmbeddedSimulator, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events exactly as sent, `(event name, data)`: the SDK hides `ping`."""
    request = urllib.request.Request(
        sim.url + "/v1/messages",
        json.dumps({**body, "stream": True}).encode(),
        {"content-type": "application/json", "anthropic-version": "2023-06-01"},
    )
    with urllib.request.urlopen(request) as response:
        text = response.read().decode()
    events = []
    for block in text.strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_stream_sends_the_api_event_sequence_with_ping(sim: EmbeddedSimulator) -> None:
    events = raw_stream(
        sim,
        {
            "model": "sim-fast",
            "max_tokens": 512,
            "tools": [READ_FILE],
            "messages": [{"role": "user", "content": "read README.md"}],
        },
    )

    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    # Every block opens, takes deltas, and closes, one at a time, in index order.
    opened = [data["index"] for name, data in events if name == "content_block_start"]
    assert (
        opened == list(range(len(opened))) == [data["index"] for name, data in events if name == "content_block_stop"]
    )
    start = events[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    assert set(start["usage"]) >= {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    tool_start = next(
        d["content_block"] for n, d in events if n == "content_block_start" and d["content_block"]["type"] == "tool_use"
    )
    assert tool_start["input"] == {} and tool_start["id"].startswith("toolu_")
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_sdk_streams_text_and_parallel_tool_use(sim: EmbeddedSimulator) -> None:
    async with client(sim).messages.stream(
        model="sim-balanced",
        max_tokens=1024,
        tools=[READ_FILE],
        messages=[{"role": "user", "content": "Read README.md and pyproject.toml"}],
    ) as stream:
        json_fragments = [event.partial_json async for event in stream if event.type == "input_json"]
        message = await stream.get_final_message()

    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    text, *uses = message.content
    assert isinstance(text, TextBlock) and text.text == "Running 2 tool calls (read_file).\n"
    assert [(b.name, b.input) for b in uses if isinstance(b, ToolUseBlock)] == [
        ("read_file", {"path": "README.md"}),
        ("read_file", {"path": "pyproject.toml"}),
    ]
    assert len({b.id for b in uses if isinstance(b, ToolUseBlock)}) == 2
    assert len([f for f in json_fragments if f]) >= 6  # the input streams in pieces
    assert message.stop_reason == "tool_use"
    usage = message.usage
    # No breakpoints asked for: nothing cached, nothing written.
    assert usage.input_tokens > 0 and usage.cache_read_input_tokens == 0 and usage.cache_creation_input_tokens == 0
    assert usage.output_tokens > 10


async def test_non_streaming_answer_and_models_listing(sim: EmbeddedSimulator) -> None:
    api = client(sim)
    message = await api.messages.create(
        model="sim-fast", max_tokens=2048, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert message.type == "message" and message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and "simulator" in message.content[0].text
    assert message.usage.output_tokens > 10

    assert [model.id async for model in api.models.list()] == ["sim-fast", "sim-balanced", "sim-strong"]


def cached_request(question: str, **control: str) -> dict[str, Any]:
    """A request with breakpoints on the system prompt and the newest message, as hotloop places them."""
    return {
        "model": "sim-fast",
        "max_tokens": 512,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {**EPHEMERAL, **control}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": question, "cache_control": {**EPHEMERAL, **control}}]}
        ],
    }


async def test_cache_reads_at_breakpoints_and_writes_the_rest(sim: EmbeddedSimulator) -> None:
    api = client(sim)
    first = await api.messages.create(**cached_request("What is in README.md?"))
    again = await api.messages.create(**cached_request("What is in README.md?"))
    other = await api.messages.create(**cached_request("And in setup.py?"))

    prompt = first.usage.input_tokens + first.usage.cache_creation_input_tokens
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 1024
    # The same request reads everything up to its last breakpoint; only the generation prompt is new.
    assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert (
        again.usage.cache_creation_input_tokens == 0
        and again.usage.input_tokens == prompt - again.usage.cache_read_input_tokens
    )
    # Another question shares the system prompt: read up to that breakpoint, write the new message.
    assert 1024 < other.usage.cache_read_input_tokens < first.usage.cache_creation_input_tokens
    assert other.usage.cache_creation_input_tokens > 0
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == first.usage.cache_creation_input_tokens

    hour = await api.messages.create(**cached_request("How long is an hour?", ttl="1h"))
    assert hour.usage.cache_creation.ephemeral_1h_input_tokens == hour.usage.cache_creation_input_tokens > 0


async def test_prefix_below_the_minimum_is_not_cached(sim: EmbeddedSimulator) -> None:
    request = cached_request("short")
    request["system"][0]["text"] = "Be brief."
    for _ in range(2):
        message = await client(sim).messages.create(**request)
        assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens == 0


async def test_more_than_four_breakpoints_are_rejected(sim: EmbeddedSimulator) -> None:
    request = cached_request("hi")
    request["tools"] = [{**READ_FILE, "name": f"tool_{n}", "cache_control": EPHEMERAL} for n in range(3)]
    with pytest.raises(anthropic.BadRequestError) as rejected:
        await client(sim).messages.create(**request)
    assert isinstance(rejected.value.body, dict)
    assert rejected.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    }


async def test_tool_results_must_answer_the_previous_message(sim: EmbeddedSimulator) -> None:
    use: ToolUseBlockParam = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}
    ask: MessageParam = {"role": "user", "content": "read a"}
    api = client(sim)

    async def answering(reply: MessageParam, max_tokens: int = 100) -> Message:
        messages: list[MessageParam] = [ask, {"role": "assistant", "content": [use]}, reply]
        return await api.messages.create(model="sim-fast", max_tokens=max_tokens, tools=[READ_FILE], messages=messages)

    with pytest.raises(
        anthropic.BadRequestError,
        match="`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1",
    ):
        await answering({"role": "user", "content": "go on"})
    with pytest.raises(
        anthropic.BadRequestError, match="unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"
    ):
        await answering(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}
        )
    with pytest.raises(anthropic.BadRequestError, match="`tool_result` blocks must come first"):
        await answering(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here"},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"},
                ],
            }
        )
    answered = await answering(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "A", "is_error": True}],
        },
        max_tokens=1000,
    )
    assert answered.stop_reason == "end_turn"


async def test_thinking_blocks_are_signed_and_must_come_back_intact(sim: EmbeddedSimulator) -> None:
    api = client(sim)
    ask: MessageParam = {"role": "user", "content": "read README.md"}
    options: dict[str, Any] = {
        "model": "sim-fast",
        "max_tokens": 4096,
        "tools": [READ_FILE],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    first = await api.messages.create(**options, messages=[ask])
    thinking, *rest = first.content
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    use = next(block for block in rest if block.type == "tool_use")
    result: MessageParam = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "# readme"}],
    }

    def replayed(blocks: list[Any]) -> list[MessageParam]:
        return [ask, {"role": "assistant", "content": blocks}, result]

    kept = await api.messages.create(
        **options, messages=replayed([b.model_dump(exclude_none=True) for b in first.content])
    )
    assert kept.content[0].type == "thinking" and kept.stop_reason == "end_turn"
    tampered = {**thinking.model_dump(), "thinking": thinking.thinking + " (edited)"}
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        await api.messages.create(**options, messages=replayed([tampered, use.model_dump()]))
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        await api.messages.create(**options, messages=replayed([use.model_dump()]))
    with pytest.raises(anthropic.BadRequestError, match="greater than or equal to 1024"):
        await api.messages.create(**{**options, "thinking": {"type": "enabled", "budget_tokens": 10}}, messages=[ask])


async def test_requests_without_the_version_header_or_max_tokens_are_rejected(sim: EmbeddedSimulator) -> None:
    request = urllib.request.Request(sim.url + "/v1/messages", b"{}", {"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(request)
    body = json.loads(missing.value.read())
    assert missing.value.code == 400 and body["type"] == "error"
    assert body["error"] == {"type": "invalid_request_error", "message": "anthropic-version: header is required"}

    with pytest.raises(anthropic.NotFoundError) as unknown:
        await client(sim).messages.create(model="claude-9", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert isinstance(unknown.value.body, dict)
    assert unknown.value.body["error"]["type"] == "not_found_error"


async def test_scenario_error_breaks_the_stream_after_its_text(tmp_path: Path) -> None:
    from hotloop.sim.scenario import load_scenario

    from support import scenario_file

    sim = start_sim(
        SimConfig(
            scenario=load_scenario(scenario_file(tmp_path, [{"text": "Half an answer", "error": "overloaded_error"}]))
        )
    )
    try:
        events = raw_stream(
            sim, {"model": "sim-fast", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}
        )
    finally:
        sim.stop()
    assert events[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "Half an answer" and "message_delta" not in [n for n, _ in events]
