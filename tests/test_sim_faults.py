"""The simulator misbehaves on purpose, like a broken server, and a client over loopback sees exactly that.

Each fault of a scenario step (and of `hotloop sim serve --fault`) is observed with the
official SDKs or raw aiohttp: the status, headers and bytes a client really gets. Then the
misbehaving MCP server (tests/mcp_faults.py), through the official MCP client.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent
from openai.types.chat import ChatCompletionMessageParam

from hotloop.cli import main
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import NO_LATENCY, SimConfig
from hotloop.sim.scenario import Faults, Refusal, ScenarioError, Stall, load_scenario, parse_faults

from support import READ_FILE, scenario_file, sim_served, sim_with_scenario

MCP_FAULTS = str(Path(__file__).parent / "mcp_faults.py")
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]
ASK_ANTHROPIC: list[MessageParam] = [{"role": "user", "content": "go"}]  # the same, in the Anthropic SDK's types
PROTOCOLS = ("openai", "anthropic")
Simulate = Callable[..., EmbeddedSimulator]


@pytest.fixture
def simulate(tmp_path: Path) -> Iterator[Simulate]:
    """Starts simulators on scenario steps (or with `--fault` flags), stopped at the end of the test."""
    started: list[EmbeddedSimulator] = []

    def start(steps: list[dict[str, Any]] | None = None, flags: tuple[str, ...] = ()) -> EmbeddedSimulator:
        if steps is not None:
            sim = sim_with_scenario(tmp_path, steps)
        else:
            config = SimConfig(faults=parse_faults(flags)).with_latency(**vars(NO_LATENCY))
            sim = EmbeddedSimulator(config).start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def openai_client(sim: EmbeddedSimulator, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url, api_key="unused", max_retries=retries)


def anthropic_client(sim: EmbeddedSimulator, retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sim.url, api_key="unused", max_retries=retries)


def request(sim: EmbeddedSimulator, protocol: str, stream: bool = True, **body: Any) -> dict[str, Any]:
    """`session.post` arguments for one request in `protocol`."""
    if protocol == "openai":
        payload = {"model": "sim-fast", "messages": ASK, "stream": stream, **body}
        return {"url": f"{sim.base_url}/chat/completions", "json": payload}
    payload = {"model": "sim-fast", "max_tokens": 4096, "messages": ASK, "stream": stream, **body}
    return {"url": f"{sim.url}/v1/messages", "json": payload, "headers": {"anthropic-version": "2023-06-01"}}


def events(raw: bytes) -> list[bytes]:
    """The SSE events of a stream, each as sent."""
    return [event + b"\n\n" for event in raw.split(b"\n\n") if event]


def payloads(raw: bytes) -> list[Any]:
    """The JSON data of each event, [DONE] left out."""
    found = []
    for event in events(raw):
        data = event.split(b"data: ", 1)[1].strip()
        if data != b"[DONE]":
            found.append(json.loads(data))
    return found


def arguments_in(raw: bytes, protocol: str) -> str:
    """The tool-call argument fragments of a stream, joined."""
    if protocol == "openai":
        return "".join(
            call["function"].get("arguments") or ""
            for chunk in payloads(raw)
            for choice in chunk["choices"]
            for call in choice["delta"].get("tool_calls") or []
        )
    return "".join(
        event["delta"]["partial_json"]
        for event in payloads(raw)
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta"
    )


# -- drop_after -----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_drop_after_closes_the_connection_after_n_chunks(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    sim = simulate([{"text": "one two three four five six seven eight", "drop_after": 3}])
    received = b""
    async with http.post(**request(sim, protocol)) as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError, match="not completed"):
            async for data in response.content.iter_any():
                received += data

    assert len(events(received)) == 3 and received.endswith(b"\n\n")
    assert b"[DONE]" not in received and b"message_stop" not in received


async def test_a_stream_shorter_than_drop_after_ends_normally(simulate: Simulate, http: aiohttp.ClientSession) -> None:
    sim = simulate([{"text": "hi", "drop_after": 100}])
    async with http.post(**request(sim, "openai")) as response:
        raw = await response.read()
    assert raw.endswith(b"data: [DONE]\n\n")


# -- status ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "status", "kind"),
    [
        ("openai", 429, "TooManyRequestsError"),
        ("openai", 500, "InternalServerError"),
        ("openai", 503, "ServiceUnavailableError"),
        ("anthropic", 429, "rate_limit_error"),
        ("anthropic", 500, "api_error"),
        ("anthropic", 529, "overloaded_error"),
    ],
)
async def test_status_answers_the_protocols_error_with_retry_after(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str, status: int, kind: str
) -> None:
    sim = simulate([{"text": "ok", "status": status, "retry_after": 2}])
    async with http.post(**request(sim, protocol)) as response:
        body = await response.json()
    assert response.status == status and response.headers["retry-after"] == "2"
    assert response.content_type == "application/json"
    if protocol == "openai":
        assert body["error"]["type"] == kind and body["error"]["code"] == status
    else:
        assert body["type"] == "error" and body["error"]["type"] == kind and body["request_id"].startswith("req_")


async def test_status_without_retry_after_sends_no_header(simulate: Simulate, http: aiohttp.ClientSession) -> None:
    sim = simulate([{"text": "ok", "status": 500}])
    async with http.post(**request(sim, "openai", stream=False)) as response:
        assert response.status == 500 and "retry-after" not in response.headers


async def test_status_times_refuses_the_same_request_then_it_answers(simulate: Simulate) -> None:
    sim = simulate([{"text": "first", "status": 429, "retry_after": 0.01, "times": 2}, {"text": "second"}])
    client = openai_client(sim)
    try:
        for _ in range(2):
            with pytest.raises(openai.RateLimitError) as refused:
                await client.chat.completions.create(model="sim-fast", messages=ASK)
            assert refused.value.response.headers["retry-after"] == "0.01"
        answer = await client.chat.completions.create(model="sim-fast", messages=ASK)
    finally:
        await client.close()
    assert answer.choices[0].message.content == "first"
    assert answer.usage is not None
    assert [(r.status, r.prompt_tokens) for r in sim.server.requests] == [
        (429, 0),
        (429, 0),
        (200, answer.usage.prompt_tokens),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_sdk_that_retries_gets_through(simulate: Simulate, protocol: str) -> None:
    sim = simulate(
        [{"text": "made it", "status": 529 if protocol == "anthropic" else 503, "retry_after": 0.01, "times": 2}]
    )
    if protocol == "openai":
        async with openai_client(sim, retries=2) as client:
            answer = await client.chat.completions.create(model="sim-fast", messages=ASK)
        assert answer.choices[0].message.content == "made it"
    else:
        async with anthropic_client(sim, retries=2) as client:
            message = await client.messages.create(model="sim-fast", max_tokens=1024, messages=ASK_ANTHROPIC)
        assert message.content[0].type == "text" and message.content[0].text == "made it"
    assert [r.status for r in sim.server.requests] == [529 if protocol == "anthropic" else 503] * 2 + [200]


async def test_fault_flag_status_times_counts_per_distinct_request(
    simulate: Simulate, http: aiohttp.ClientSession
) -> None:
    sim = simulate(flags=("status:503:times=1",))
    statuses = []
    for prompt in ("a", "a", "b", "b"):
        async with http.post(
            **request(sim, "openai", stream=False, messages=[{"role": "user", "content": prompt}])
        ) as r:
            statuses.append(r.status)
    assert statuses == [503, 200, 503, 200]


# -- stall ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stall_before_headers_sends_nothing_then_answers(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    sim = simulate([{"text": "late", "stall": {"before_headers": 30}}])
    # A client that gives up first never even sees headers.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(http.post(**request(sim, protocol)), 0.05)
    quick = simulate([{"text": "late", "stall": {"before_headers": 0.02}}])
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.post(**request(quick, protocol, stream=False)) as response:
        assert response.status == 200 and loop.time() - started >= 0.02


async def test_stall_before_headers_delays_a_status_too(simulate: Simulate, http: aiohttp.ClientSession) -> None:
    sim = simulate([{"text": "x", "status": 503, "stall": {"before_headers": 30}}])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(http.post(**request(sim, "openai")), 0.05)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stall_after_chunks_goes_silent_mid_stream(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    sim = simulate([{"text": "one two three four five", "stall": {"after_chunks": 2, "seconds": 30}}])
    async with http.post(**request(sim, protocol)) as response:
        first = [await response.content.readuntil(b"\n\n") for _ in range(2)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(response.content.readuntil(b"\n\n"), 0.05)
    assert len(first) == 2 and response.status == 200


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_short_stall_mid_stream_then_the_rest(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    sim = simulate([{"text": "one two three", "stall": {"after_chunks": 2, "seconds": 0.01}}])
    async with http.post(**request(sim, protocol)) as response:
        raw = await response.read()
    text = "".join(
        (event["choices"][0]["delta"].get("content") or "") if protocol == "openai" else event["delta"].get("text", "")
        for event in payloads(raw)
        if (event.get("choices") if protocol == "openai" else event["type"] == "content_block_delta")
    )
    assert text == "one two three"
    assert raw.endswith(b"data: [DONE]\n\n" if protocol == "openai" else b'{"type":"message_stop"}\n\n')


# -- malformed tool JSON, and llama.cpp's check of what comes back ---------------------------


async def test_malformed_arguments_are_still_sent_verbatim(simulate: Simulate) -> None:
    sim = simulate([{"tool_calls": [{"name": "read_file", "arguments": '{"path": '}]}])
    async with openai_client(sim) as client:
        stream = await client.chat.completions.create(model="sim-fast", messages=ASK, tools=[READ_FILE], stream=True)
        chunks = [chunk async for chunk in stream]
    fragments = []
    for chunk in chunks:
        calls = chunk.choices[0].delta.tool_calls if chunk.choices else None
        for call in calls or []:
            assert call.function is not None
            fragments.append(call.function.arguments or "")
    assert "".join(fragments) == '{"path": '


async def test_past_arguments_that_are_not_json_get_llama_cpps_500(sim: EmbeddedSimulator) -> None:
    messages: list[ChatCompletionMessageParam] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": '}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "error"},
    ]
    async with openai_client(sim) as client:
        with pytest.raises(openai.InternalServerError) as rejected:
            await client.chat.completions.create(model="sim-fast", messages=messages, tools=[READ_FILE])
    assert rejected.value.status_code == 500
    assert isinstance(rejected.value.body, dict)
    assert rejected.value.body["message"].startswith("Failed to parse tool call arguments as JSON: Expecting value")


async def test_anthropic_still_requires_tool_input_to_be_an_object(sim: EmbeddedSimulator) -> None:
    messages: list[Any] = [  # a tool_use input that is not an object, which the SDK's types don't allow
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": '{"a"'}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
    ]
    async with anthropic_client(sim) as client:
        with pytest.raises(anthropic.BadRequestError, match="input: Input should be a valid dictionary"):
            await client.messages.create(model="sim-fast", max_tokens=1024, messages=messages)


# -- invalid_utf8 ---------------------------------------------------------------------------


@pytest.mark.parametrize(("protocol", "key"), [("openai", b'"content":"'), ("anthropic", b'"text":"')])
async def test_invalid_utf8_puts_one_bad_byte_inside_a_json_string(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str, key: bytes
) -> None:
    sim = simulate([{"text": "hello hello", "invalid_utf8": True}])
    async with http.post(**request(sim, protocol)) as response:
        raw = await response.read()

    broken = [event for event in events(raw) if b"\xff" in event]
    assert len(broken) == 1 and raw.count(b"\xff") == 1
    assert key + b"\xffhello" in broken[0]
    with pytest.raises(UnicodeDecodeError):
        broken[0].decode()
    # Otherwise well formed: with the byte replaced, the JSON parses and the text is all there.
    data = json.loads(broken[0].decode(errors="replace").split("data: ", 1)[1])
    assert "\ufffdhello" in json.dumps(data, ensure_ascii=False)


async def test_invalid_utf8_goes_into_the_arguments_when_there_is_no_text(
    simulate: Simulate, http: aiohttp.ClientSession
) -> None:
    sim = simulate([{"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}], "invalid_utf8": True}])
    async with http.post(**request(sim, "openai", tools=[READ_FILE])) as response:
        raw = await response.read()
    assert raw.count(b'"arguments":"\xff') == 1


# -- huge_argument, duplicate_ids, cut_arguments ---------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_huge_argument_pads_the_first_call(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    calls = [{"name": "read_file", "arguments": {"path": "a"}}, {"name": "read_file", "arguments": {"path": "b"}}]
    sim = simulate([{"tool_calls": calls, "huge_argument": 200_000}])
    async with http.post(**request(sim, protocol, max_tokens=100_000)) as response:
        raw = await response.read()
    first, second = arguments_in(raw, protocol).split("}", 1)
    assert len(first) + 1 == 200_000 and json.loads(first + "}") == {"path": "a", "padding": "x" * (200_000 - 28)}
    assert second == '{"path": "b"}'


async def test_huge_argument_in_a_whole_response(simulate: Simulate) -> None:
    sim = simulate([{"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}], "huge_argument": 100_000}])
    async with openai_client(sim) as client:
        answer = await client.chat.completions.create(model="sim-fast", messages=ASK, tools=[READ_FILE])
    assert answer.choices[0].message.tool_calls is not None
    (call,) = answer.choices[0].message.tool_calls
    assert call.type == "function"
    assert len(call.function.arguments) == 100_000 and json.loads(call.function.arguments)["path"] == "a"


async def test_duplicate_ids_give_every_call_one_id(simulate: Simulate) -> None:
    calls = [{"name": "read_file", "arguments": {"path": p}} for p in ("a", "b", "c")]
    sim = simulate([{"tool_calls": calls, "duplicate_ids": True}])
    async with openai_client(sim) as client:
        stream = await client.chat.completions.create(model="sim-fast", messages=ASK, tools=[READ_FILE], stream=True)
        ids = [
            call.id
            for c in [chunk async for chunk in stream]
            if c.choices
            for call in c.choices[0].delta.tool_calls or []
            if call.id
        ]
    async with anthropic_client(sim) as client:
        message = await client.messages.create(model="sim-fast", max_tokens=1024, messages=ASK_ANTHROPIC)
    assert len(ids) == 3 and len(set(ids)) == 1 and ids[0].startswith("chatcmpl-tool-")
    blocks = [block for block in message.content if block.type == "tool_use"]
    assert len(blocks) == 3 and len({block.id for block in blocks}) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_arguments_ends_the_message_as_the_output_limit_does(
    simulate: Simulate, http: aiohttp.ClientSession, protocol: str
) -> None:
    calls = [
        {"name": "read_file", "arguments": {"path": "README.md"}},
        {"name": "read_file", "arguments": {"path": "b"}},
    ]
    sim = simulate([{"tool_calls": calls, "cut_arguments": 12}])
    async with http.post(**request(sim, protocol, tools=[READ_FILE] if protocol == "openai" else [])) as response:
        raw = await response.read()
    assert arguments_in(raw, protocol) == '{"path": "RE'
    if protocol == "openai":
        finishes = [
            c["choices"][0]["finish_reason"] for c in payloads(raw) if c["choices"] and c["choices"][0]["finish_reason"]
        ]
        assert finishes == ["length"] and raw.count(b'"id":"chatcmpl-tool-') == 1
    else:
        (delta,) = [e for e in payloads(raw) if e["type"] == "message_delta"]
        assert delta["delta"]["stop_reason"] == "max_tokens" and raw.count(b'"type":"tool_use"') == 1


async def test_cut_arguments_with_the_anthropic_sdk(simulate: Simulate) -> None:
    sim = simulate([{"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}], "cut_arguments": 0}])
    async with anthropic_client(sim) as client:
        message = await client.messages.create(model="sim-fast", max_tokens=1024, messages=ASK_ANTHROPIC)
    assert message.stop_reason == "max_tokens" and message.content[0].type == "tool_use"


# -- usage ----------------------------------------------------------------------------------


async def test_usage_overrides_in_openai_usage(simulate: Simulate) -> None:
    nonsense = {"prompt_tokens": -50, "cached_tokens": 5000, "completion_tokens": 999999, "input_tokens": 7}
    sim = simulate([{"text": "ok", "usage": nonsense}])
    async with openai_client(sim) as client:
        stream = await client.chat.completions.create(
            model="sim-fast", messages=ASK, stream=True, stream_options={"include_usage": True}
        )
        usage = [chunk async for chunk in stream][-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (-50, 999999)
    assert usage.prompt_tokens_details.cached_tokens == 5000
    assert "input_tokens" not in usage.model_dump()  # the other protocol's field is ignored


async def test_usage_overrides_in_anthropic_usage(simulate: Simulate, http: aiohttp.ClientSession) -> None:
    sim = simulate(
        [{"text": "ok", "usage": {"input_tokens": -50, "cache_read_input_tokens": 5000, "prompt_tokens": 1}}]
    )
    async with anthropic_client(sim) as client:
        message = await client.messages.create(model="sim-fast", max_tokens=1024, messages=ASK_ANTHROPIC)
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (-50, 5000)
    async with http.post(**request(sim, "anthropic")) as response:
        raw = await response.read()
    (delta,) = [e for e in payloads(raw) if e["type"] == "message_delta"]
    assert delta["usage"]["input_tokens"] == -50 and delta["usage"]["cache_read_input_tokens"] == 5000
    assert b"prompt_tokens" not in raw


# -- no fault, no change --------------------------------------------------------------------


async def test_faults_touch_nothing_else_the_stream_sends(simulate: Simulate, http: aiohttp.ClientSession) -> None:
    plain = simulate([{"text": "same words", "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]}])
    faulty = simulate(
        [{"text": "same words", "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}], "drop_after": 1000}]
    )
    bodies = []
    for sim in (plain, faulty):
        async with http.post(**request(sim, "anthropic")) as response:
            bodies.append([{k: v for k, v in e.items() if k != "message"} for e in payloads(await response.read())])
    assert bodies[0] == bodies[1]


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "problem"),
    [
        (
            {"text": "x", "drop": 3},
            "unknown field 'drop' (known: text, reasoning, tool_calls, error, decode_ms, drop_after,",
        ),
        ({"drop_after": "3"}, "drop_after must be a whole number, 0 or more (got '3')"),
        ({"drop_after": True}, "drop_after must be a whole number, 0 or more (got True)"),
        ({"status": 200}, "status must be a whole number, 400 or more (got 200)"),
        ({"status": 499}, "status must be a known HTTP error status, e.g. 429, 500, 503 or 529 (got 499)"),
        ({"retry_after": 2}, "retry_after and times need a status"),
        ({"status": 429, "retry_after": -1}, "retry_after must be a number, 0 or more (got -1)"),
        ({"status": 429, "times": 0}, "times must be a whole number, 1 or more (got 0)"),
        ({"stall": 2}, 'stall must be {"before_headers": S} or {"after_chunks": N, "seconds": S}'),
        ({"stall": {"before": 1}}, "stall: unknown field 'before' (known: before_headers, after_chunks, seconds)"),
        ({"stall": {"after_chunks": 2}}, "stall.after_chunks and stall.seconds go together"),
        ({"stall": {"after_chunks": 2, "seconds": "1"}}, "stall.seconds must be a number, 0 or more (got '1')"),
        ({"text": "x", "invalid_utf8": 1}, "invalid_utf8 must be true or false (got 1)"),
        ({"invalid_utf8": True}, "invalid_utf8 needs text, reasoning or tool_calls to put the byte in"),
        ({"text": "x", "huge_argument": 100}, "huge_argument and cut_arguments need tool_calls"),
        ({"tool_calls": [{"name": "a", "arguments": "[1]"}], "huge_argument": 9}, "which must be an object"),
        (
            {"tool_calls": [{"name": "a"}], "huge_argument": 0},
            "huge_argument must be a whole number, 1 or more (got 0)",
        ),
        ({"tool_calls": [{"name": "a"}], "duplicate_ids": True}, "duplicate_ids needs at least two tool_calls"),
        ({"tool_calls": [{"name": "a"}], "cut_arguments": -1}, "cut_arguments must be a whole number, 0 or more"),
        ({"usage": [1]}, 'usage must be an object of token counts, e.g. {"prompt_tokens": -50}'),
        ({"usage": {"prompt": 1}}, "usage: unknown field 'prompt' (known: prompt_tokens, completion_tokens,"),
        ({"usage": {"prompt_tokens": 1.5}}, "usage.prompt_tokens must be a whole number (got 1.5)"),
        ({"tool_calls": {"name": "a"}}, "tool_calls must be a list of {name, arguments} objects"),
        ({"tool_calls": [{"name": "a", "id": "x"}]}, "tool call 1: unknown field 'id' (known: name, arguments)"),
        ({"decode_ms": -1}, "decode_ms must be a number, 0 or more (got -1)"),
        ("text", "a step must be an object (got str)"),
    ],
)
def test_scenario_steps_are_checked_in_one_line(tmp_path: Path, step: object, problem: str) -> None:
    path = scenario_file(tmp_path, [{"text": "fine"}, step])
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    message = str(error.value)
    assert message.startswith(f"scenario {path} step 2: ") and problem in message and "\n" not in message


def test_a_scenario_step_reads_into_its_faults(tmp_path: Path) -> None:
    step = {
        "tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}],
        "drop_after": 3,
        "status": 429,
        "retry_after": 2,
        "times": 1,
        "stall": {"before_headers": 1, "after_chunks": 4, "seconds": 0.5},
        "invalid_utf8": True,
        "huge_argument": 1000,
        "duplicate_ids": True,
        "usage": {"prompt_tokens": -50},
        "cut_arguments": 5,
    }
    (reply,) = load_scenario(scenario_file(tmp_path, [step]))
    assert reply.faults == Faults(
        drop_after=3,
        refusal=Refusal(429, 2.0, 1),
        stall=Stall(1.0, 4, 0.5),
        invalid_utf8=True,
        huge_argument=1000,
        duplicate_ids=True,
        usage=(("prompt_tokens", -50),),
        cut_arguments=5,
    )


# -- hotloop sim serve --fault ---------------------------------------------------------------


def test_fault_flags_read_as_scenario_fields() -> None:
    flags = [
        "drop:3",
        "status:429:retry-after=2:times=1",
        "stall:0.5",
        "invalid-utf8",
        "huge-argument:100000",
        "duplicate-ids",
        "usage:prompt_tokens=-50:cached_tokens=5000",
        "cut-arguments:7",
    ]
    assert parse_faults(flags) == Faults(
        drop_after=3,
        refusal=Refusal(429, 2.0, 1),
        stall=Stall(before_headers=0.5),
        invalid_utf8=True,
        huge_argument=100_000,
        duplicate_ids=True,
        usage=(("prompt_tokens", -50), ("cached_tokens", 5000)),
        cut_arguments=7,
    )
    assert parse_faults(["stall:2:after=3"]).stall == Stall(after_chunks=3, seconds=2.0)
    assert parse_faults(["drop:3", "drop:5"]).drop_after == 5  # the later flag wins
    assert parse_faults([]) == Faults()


@pytest.mark.parametrize(
    ("flag", "problem"),
    [
        ("drop:x", "--fault drop:x: drop_after must be a whole number, 0 or more (got 'x')"),
        ("drop", "--fault drop: expected one of drop:N, status:CODE[:retry-after=S][:times=N], stall:S[:after=N],"),
        ("status:429:wait=2", "--fault status:429:wait=2: expected one of"),
        ("status:200", "--fault status:200: status must be a whole number, 400 or more (got 200)"),
        ("usage:prompt=1", "--fault usage:prompt=1: usage: unknown field 'prompt'"),
        ("invalid-utf8:1", "--fault invalid-utf8:1: expected one of"),
        ("explode", "--fault explode: expected one of"),
    ],
)
def test_a_bad_fault_flag_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], flag: str, problem: str) -> None:
    assert main(["sim", "serve", "--port", "0", "--fault", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hotloop: {problem}") and err.count("\n") == 1


async def test_sim_serve_applies_fault_flags_to_every_request(http: aiohttp.ClientSession) -> None:
    faults = ["--fault", "status:503:retry-after=1:times=1", "--fault", "usage:prompt_tokens=-50"]
    with sim_served(*faults) as (line, base):
        assert "faults: status:503:retry-after=1:times=1, usage:prompt_tokens=-50" in line
        body = {"model": "sim-fast", "messages": ASK}
        async with http.post(f"{base}/chat/completions", json=body) as refused:
            assert (refused.status, refused.headers["retry-after"]) == (503, "1")
            assert (await refused.json())["error"]["type"] == "ServiceUnavailableError"
        async with http.post(f"{base}/chat/completions", json=body) as answered:
            assert answered.status == 200 and (await answered.json())["usage"]["prompt_tokens"] == -50


# -- the misbehaving MCP server --------------------------------------------------------------


def mcp_server(mode: str, errlog: Any) -> Client:
    params = StdioServerParameters(command=sys.executable, args=[MCP_FAULTS, mode])
    return Client(stdio_client(params, errlog=errlog))


async def test_mcp_server_that_dies_after_init() -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with mcp_server("dies-after-init", errlog) as client:
                assert [tool.name for tool in (await client.list_tools()).tools] == ["echo"]
                with pytest.raises(MCPError, match="Connection closed"):
                    await client.call_tool("echo", {"text": "hi"})
        except* MCPError:
            pass  # the SDK may say "Connection closed" again as its context exits, depending on timing


async def test_mcp_tool_that_hangs_while_the_server_stays_healthy() -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        async with mcp_server("hangs", errlog) as client:
            assert [tool.name for tool in (await client.list_tools()).tools] == ["echo", "hang"]
            with pytest.raises(MCPError, match="timed out"):
                await client.call_tool("hang", {}, read_timeout_seconds=0.05)
            echoed = (await client.call_tool("echo", {"text": "still here"})).content[0]
            assert isinstance(echoed, TextContent) and echoed.text == "still here"


async def test_mcp_tool_that_answers_a_32000_error() -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        async with mcp_server("error-32000", errlog) as client:
            with pytest.raises(MCPError) as failed:
                await client.call_tool("fail", {})
            assert (failed.value.code, failed.value.message) == (-32000, "the backend is unavailable")
            echoed = (await client.call_tool("echo", {"text": "fine"})).content[0]
            assert isinstance(echoed, TextContent) and echoed.text == "fine"


async def test_mcp_tool_that_floods_stderr_and_its_result() -> None:
    with tempfile.TemporaryFile("w+") as errlog:
        async with mcp_server("floods", errlog) as client:
            result = await client.call_tool("flood", {})
            flood = result.content[0]
            assert not result.is_error and isinstance(flood, TextContent) and len(flood.text) > 5_000_000
        errlog.seek(0, 2)
        assert errlog.tell() > 5_000_000


def test_mcp_faults_needs_a_known_mode() -> None:
    done = subprocess.run([sys.executable, MCP_FAULTS, "explode"], capture_output=True, text=True, timeout=30)
    assert (
        done.returncode == 1
        and "usage: mcp_faults.py {dies-after-init,hangs,error-32000,floods,lies-read-only,deep-json,deep-tool-list}"
        in done.stderr
    )
