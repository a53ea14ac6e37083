"""`hotloop watch` under hostile input (issue 34): JSON nested 100,000 deep, a key echoed back, huge requests and an
upstream that drops mid-stream, over real loopback HTTP.

The upstream is `watch_upstream.py`, a small real aiohttp server that misbehaves on purpose, in this process or as a
subprocess; the agent is the official OpenAI SDK (raw bytes where a body no parser reads is the attack). Each test
sends the attack and checks what the agent got against what the upstream sent it directly, the one line the watch
said, and what it wrote.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from test_telemetry import Receiver
from watch_upstream import application, deep

from hotloop import paths
from hotloop.agent.events import AgentEvent, Notice, StepFinished, ToolFinished, TurnFinished, TurnStarted
from hotloop.providers.events import TextDelta
from hotloop.sessions.export import export
from hotloop.sessions.masking import Masker
from hotloop.sessions.store import read_session
from hotloop.watch import Watch, upstream_at
from hotloop.watch.proxy import MAX_READ
from hotloop.watch.wire import KEPT_TEXT

from support import Seen, serving, wait_until

KEY = "sk-planted-0123456789abcdef0123"
OTHER_KEY = "sk-another-fedcba9876543210fedc"  # a second client's, sent to a conversation the first opened
UPSTREAM = Path(__file__).parent / "watch_upstream.py"
BLOCK = 1 << 20


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Watch, Seen, str, str]]:
    """The watch in front of the misbehaving upstream: (watch, its events, its /v1 URL, the upstream's /v1 URL)."""
    async with serving(application()) as upstream:
        seen = Seen()
        watch = Watch(upstream_at(upstream, "hostile"), seen, folder=paths.sessions_dir(), workspace=tmp_path)
        url = await watch.start()
        try:
            yield watch, seen, f"{url}/v1", upstream
        finally:
            await watch.aclose()


def client(base_url: str, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)


async def raw(base_url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """POST `body` (bytes, or an async iterator of them) as it is, through the SDK; the status, body and headers."""
    api = client(base_url)
    try:
        content = await api.post(
            "/chat/completions",
            cast_to=openai.HttpxBinaryResponseContent,
            content=body,
            options={"headers": {"Content-Type": "application/json", **(headers or {})}},
        )
        return content.response.status_code, content.content, dict(content.response.headers)
    finally:
        await api.close()


async def streamed(base_url: str, model: str, stream: bool = True, prompt: str = "hi") -> bytes:
    """The answer's bytes as the SDK received them, unparsed."""
    api = client(base_url)
    try:
        async with api.chat.completions.with_streaming_response.create(
            model=model, messages=[{"role": "user", "content": prompt}], stream=stream
        ) as response:
            assert response.status_code == 200
            return b"".join([block async for block in response.iter_bytes()])
    finally:
        await api.close()


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What aiohttp logged as an error: a handler's traceback ("Error handling request")."""
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


def notices(seen: Seen) -> list[str]:
    return [event.message for _, event in seen.of(Notice)]


def deep_request(depth: int) -> bytes:
    return b'{"model":"fine","stream":true,"messages":[{"role":"user","content":' + deep(depth) + b"}]}"


@pytest.mark.parametrize("where", ["request", "request 600 deep", "answer", "event"])
async def test_json_nested_100000_deep_goes_through_byte_for_byte_and_is_one_line(
    watched: tuple[Watch, Seen, str, str], caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A request body, a whole answer or one SSE event nested 100,000 levels: the agent gets the upstream's 200 and
    its exact bytes (a RecursionError made it a 500, or cut the stream), the watch says so in one line, and a read
    answer's step ends in its log, as an error, instead of staying open. A request 600 deep decodes, and is too deep
    for the reading after the decoder (the cache markers' removal): the same line."""
    watch, seen, url, upstream = watched
    if where.startswith("request"):
        body = deep_request(600 if "600" in where else 100_000)
        direct, through = await raw(upstream, body), await raw(url, body)
        assert (through[0], through[1]) == (direct[0], direct[1]) == (200, direct[1])
    else:
        stream = where == "event"
        direct_body, through_body = await streamed(upstream, "deep", stream), await streamed(url, "deep", stream)
        assert through_body == direct_body and deep() in through_body
    assert b"Fine." in await streamed(url, "fine", prompt="still there?")  # and the pass-through goes on
    [said] = notices(seen)
    assert re.search(r"nested (too deep|deeper than)", said), said
    assert len(said) < 400 and "Traceback" not in said
    assert server_errors(caplog) == []
    if where.startswith("request"):
        assert said.startswith("POST /v1/chat/completions: ") and "forwarded unread" in said
        assert len(watch.conversations) == 1  # the request after it, not it
    else:
        info = next(info for info in watch.conversations.values() if info.title == "hi")
        await watch.aclose()
        logged = read_session(Path(info.path)).events
        assert [event.reason for event in logged if isinstance(event, TurnFinished)] == ["error"]
        assert len([event for event in logged if isinstance(event, StepFinished)]) == 1
        assert any(isinstance(event, Notice) and event.message == said for event in logged)


async def test_a_call_with_arguments_nested_40000_deep_is_logged_and_exports_in_every_format(
    watched: tuple[Watch, Seen, str, str],
) -> None:
    """A watched answer calls a tool with arguments nested 40,000 deep (a string in a good answer): the log keeps
    them, and every export of the session works: ATIF keeps them as text (`unparsed_arguments`), where parsing
    them for its `arguments` object was a RecursionError."""
    watch, _, url, _ = watched
    api = client(url)
    try:
        answer = await api.chat.completions.create(model="deep-call", messages=[{"role": "user", "content": "go"}])
    finally:
        await api.close()
    [call] = answer.choices[0].message.model_dump()["tool_calls"]
    [info] = watch.conversations.values()
    await watch.aclose()
    session = read_session(Path(info.path))
    exported = {fmt: export(session, fmt) for fmt in ("md", "json", "html", "atif")}
    [step] = [step for step in json.loads(exported["atif"])["steps"] if step["source"] == "agent"]
    assert step["tool_calls"][0]["arguments"] == {}
    assert step["extra"]["unparsed_arguments"] == {call["id"]: call["function"]["arguments"]}
    assert all(exported.values())


async def test_an_upstream_that_drops_mid_stream_is_one_line_and_the_agent_sees_the_same_drop(
    watched: tuple[Watch, Seen, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream closes the connection after two chunks: the agent's connection is closed the same way (the same
    bytes, the same error from the SDK as without the watch), the watch says which upstream and why in one line (no
    aiohttp traceback, no `400, message:`), and the step is ended in the log."""
    watch, seen, url, upstream = watched
    errors: list[BaseException] = []
    received: list[bytes] = []
    for base in (upstream, url):
        api, got = client(base), b""
        try:
            async with api.chat.completions.with_streaming_response.create(
                model="drop", messages=[{"role": "user", "content": "hi"}], stream=True
            ) as response:
                async for block in response.iter_bytes():
                    got += block
        except Exception as error:
            errors.append(error)
        finally:
            await api.close()
        received.append(got)
    direct_error, through_error = errors
    assert type(through_error) is type(direct_error) and str(through_error) == str(direct_error)
    assert received[1] == received[0] and b"an answer" in received[0]
    [said] = notices(seen)
    assert said.startswith(f"hostile ({upstream.removesuffix('/v1')}) broke off mid-stream: ")
    assert "closed the connection before the answer's end" in said and "message:" not in said
    assert server_errors(caplog) == []
    [info] = watch.conversations.values()
    await watch.aclose()
    logged = read_session(Path(info.path)).events
    assert [type(event).__name__ for event in logged[-3:]] == ["ResponseFinished", "StepFinished", "TurnFinished"]
    assert [event.reason for event in logged if isinstance(event, TurnFinished)] == ["error"]


async def test_a_drop_in_an_answer_to_an_unread_request_is_one_line_too(
    watched: tuple[Watch, Seen, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A request nested 100,000 deep (passed on unread) whose answer the upstream drops mid-stream: the agent sees
    the same drop as without the watch, and the watch says so in a line of its own after the request's."""
    watch, seen, url, upstream = watched
    body = b'{"model":"drop","stream":true,"messages":[{"role":"user","content":' + deep() + b"}]}"
    errors = []
    for base in (upstream, url):
        with pytest.raises(openai.APIConnectionError) as raised:
            await raw(base, body)
        errors.append(raised.value.__cause__)
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])
    root = upstream.removesuffix("/v1")
    assert notices(seen) == [
        "POST /v1/chat/completions: the request body is JSON nested too deep to read; forwarded unread",
        f"hostile ({root}) broke off its answer to /v1/chat/completions: it closed the connection before the answer's"
        " end",
    ]
    assert server_errors(caplog) == [] and watch.conversations == {}


HEAD, TAIL = b'{"model":"fine","stream":true,"messages":[{"role":"user","content":"', b'"}]}'


def parts(megabytes: int) -> list[bytes]:
    """A chat request whose prompt is `megabytes` MB of `x`: the same block again, so the test holds 1 MB of it."""
    return [HEAD, *[b"x" * BLOCK] * megabytes, TAIL]


async def test_an_answer_before_the_request_body_has_arrived_leaves_it_unread(
    watched: tuple[Watch, Seen, str, str],
) -> None:
    """The upstream answers once it has read the model, while the agent's chunked body is still arriving: the watch
    can't read a request it doesn't have whole, says so in one line, and the agent sends the rest and gets the
    answer."""
    watch, seen, url, _ = watched

    async def body() -> AsyncIterator[bytes]:
        yield b'{"model":"early","stream":true,'
        await wait_until(lambda: notices(seen), what="the watch's line on the early answer")
        yield b'"messages":[{"role":"user","content":"hi"}]}'

    status, content, _ = await raw(url, body())
    assert status == 200 and b"Fine." in content
    assert notices(seen) == ["POST /v1/chat/completions: answered before its body had all arrived; forwarded unread"]
    assert watch.conversations == {}


async def test_a_request_without_a_body_goes_on_without_one(watched: tuple[Watch, Seen, str, str]) -> None:
    """A GET (the SDK's model list) reaches the upstream framed as it was sent: no Content-Length, no chunked body
    (a request of unknown length streams through, but one with no body has nothing to stream)."""
    _, seen, url, upstream = watched
    framing = []
    for base in (upstream, url):
        api = client(base)
        try:
            listed = await api.models.with_raw_response.list()
        finally:
            await api.close()
        framing.append(listed.headers["x-received-framing"])
    assert framing == ["None None", "None None"]
    assert notices(seen) == []


async def blocks(megabytes: int) -> AsyncIterator[bytes]:
    for part in parts(megabytes):
        yield part


def sent(megabytes: int) -> tuple[int, str]:
    """The length and SHA-256 of the request `blocks(megabytes)` sends."""
    digest = hashlib.sha256()
    for part in parts(megabytes):
        digest.update(part)
    return len(HEAD) + megabytes * BLOCK + len(TAIL), digest.hexdigest()


@pytest.mark.parametrize("framed", [True, False], ids=["content-length", "chunked"])
async def test_a_request_too_big_to_read_is_forwarded_byte_for_byte_and_costs_the_watch_no_copy(
    watched: tuple[Watch, Seen, str, str], framed: bool
) -> None:
    """A 100 MB request (declared, or chunked with no length) past `MAX_READ`: the upstream gets every byte (its own
    length and digest say so), the watch says once that it forwarded it unread, and the process's Python memory peaks
    far below the body (before, the watch read it whole, then copied it: 379 MB at the watch's own process)."""
    watch, seen, url, _ = watched
    length, digest = sent(100)
    tracemalloc.start()
    try:
        headers = {"Content-Length": str(length)} if framed else {}
        status, _, answer = await raw(url, blocks(100), headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 200
    assert (answer["x-received-bytes"], answer["x-received-sha256"]) == (str(length), digest)
    # What the watch keeps of it: nothing of a body declared too big; of one of unknown length, up to MAX_READ.
    assert peak < (0 if framed else MAX_READ) + 16 * BLOCK, f"{peak / BLOCK:.0f} MB"
    [said] = notices(seen)
    assert said == (
        f"POST /v1/chat/completions: the request body is {length:,} bytes, more than the {MAX_READ:,} hotloop reads; "
        "forwarded unread"
    )
    assert watch.conversations == {}


@pytest.mark.parametrize("framed", [True, False], ids=["content-length", "chunked"])
async def test_a_huge_prompt_within_the_read_limit_is_logged_bounded(
    watched: tuple[Watch, Seen, str, str], framed: bool
) -> None:
    """A 20 MB prompt (declared, or chunked: kept as it streams through) is read, being within `MAX_READ`, forwarded
    whole, and logged as its first `KEPT_TEXT` characters with its size: no 20 MB log line, nor a 20 MB summary
    (before: a 100 MB request, a 100 MB summary)."""
    watch, seen, url, _ = watched
    _, digest = sent(20)
    status, _, answer = await raw(url, b"".join(parts(20)) if framed else blocks(20))
    assert status == 200 and answer["x-received-sha256"] == digest
    [(_, turn)] = seen.of(TurnStarted)
    assert turn.prompt == "x" * KEPT_TEXT + f"… [{20 * BLOCK:,} characters in all; the rest is not logged]"
    await watch.aclose()
    for written in paths.sessions_dir().iterdir():
        assert written.stat().st_size < 4 * KEPT_TEXT, written


def test_a_secret_the_events_json_holds_as_a_number_leaves_the_event_out() -> None:
    """The watch masks an event's JSON, every field of it: where a secret is also a number the event holds (16
    digits), the masked line is no event any more, so one line says what was left out, and the secret goes nowhere.
    A secret with a quote in it is masked as JSON escapes it."""
    masker = Masker(["1234567890123456", 'pass"word-with-a-quote'])
    timed = ToolFinished(call_id="c1", name="login", status="ok", duration=1234567890123456.0, result="done")
    quoted = ToolFinished(call_id="c1", name="login", status="ok", duration=1.0, result='pass"word-with-a-quote')
    left_out = masker.whole(timed)
    assert isinstance(left_out, Notice) and left_out.message == "a ToolFinished that held a secret was left out"
    masked = masker.whole(quoted)
    assert isinstance(masked, ToolFinished) and masked.result == "[redacted]"


def test_a_burst_is_masked_as_its_events_are_one_by_one() -> None:
    """A burst of events (a step's start, a block, a step's end) is checked for secrets in one encoding: one holding
    none comes back as it was; in one holding a secret, each event is masked as it is alone (`whole`, and a delta by
    the stream masking), a key split across two deltas of the answer too."""
    plain: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="hi"),
        TextDelta(text="hello", ts=1.0),
        TurnFinished(turn=1, reason="answer", steps=1, wall=0.5),
    ]
    masker = Masker([KEY])
    assert masker.burst(plain) == plain
    burst: list[AgentEvent] = [
        TurnStarted(turn=2, prompt=f"log in with {KEY}", ts=1.0),
        TextDelta(text=f"your key is {KEY[:10]}", ts=1.0),
        TextDelta(text=f"{KEY[10:]}.", ts=1.0),
        Notice(level="warning", message=f"{KEY} refused", ts=1.0),
    ]
    masked = masker.burst(burst)
    assert masked == [
        TurnStarted(turn=2, prompt="log in with [redacted]", ts=1.0),
        TextDelta(text="your key is ", ts=1.0),
        TextDelta(text="[redacted].", ts=1.0),
        Notice(level="warning", message="[redacted] refused", ts=1.0),
    ]
    one_by_one = Masker([KEY])
    alone = [one_by_one.whole(shown) for event in burst for shown in one_by_one.events(event)]
    assert [type(event) for event in alone] == [type(event) for event in masked]
    assert "".join(event.text for event in alone if isinstance(event, TextDelta)) == "your key is [redacted]."


SCRIPT = """
import sys
import openai

KEY, OTHER = sys.argv[1], sys.argv[2]
api = openai.OpenAI(api_key=KEY)  # OPENAI_BASE_URL comes from hotloop watch
asked = [{"role": "user", "content": f"log in with {KEY}"}]
said = "".join(
    chunk.choices[0].delta.content or ""
    for chunk in api.chat.completions.create(model="echo", messages=asked, stream=True)
    if chunk.choices
)
whole = api.chat.completions.create(model="echo", messages=asked)
message = whole.choices[0].message
[call] = message.tool_calls
other = openai.OpenAI(api_key=OTHER)
result = {"role": "tool", "tool_call_id": call.id, "content": f"logged in as {OTHER}"}
other.chat.completions.create(model="fine", messages=[*asked, message.model_dump(exclude_none=True), result])
try:
    api.chat.completions.create(model="refuse", messages=asked)
except openai.AuthenticationError as error:
    refused = KEY in str(error)
# The watch masks what it writes, never what it forwards: the agent got its key back whole.
sys.exit(0 if KEY in said and KEY in (message.content or "") and KEY in call.function.arguments and refused else 5)
"""


class Keeper(Receiver):
    """The OTLP receiver, keeping each export as its protobuf bytes too: every name, attribute and status of it."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[bytes] = []

    def take(self, request: Any) -> None:
        self.exports.append(request.SerializeToString())
        super().take(request)


@pytest.fixture
def upstream_process() -> Iterator[str]:
    """`watch_upstream.py` as a process of its own (the CLI runs its own event loop): its root URL."""
    process = subprocess.Popen([sys.executable, str(UPSTREAM)], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    try:
        yield process.stdout.readline().decode().strip()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()


@pytest.mark.parametrize("capture", [True, False], ids=["content-captured", "content-not-captured"])
def test_a_planted_key_is_masked_in_everything_the_watch_writes(
    isolated_home: Path, tmp_path: Path, upstream_process: str, capfd: pytest.CaptureFixture[str], capture: bool
) -> None:
    """Two keys in the agents' headers, echoed back by the upstream in a stream (split across deltas), a whole
    answer, a tool call, a refusal, and put in a prompt and a tool result: none reaches `--json`, the table, stderr,
    any file of the data folder (logs, summaries), any span received over OTLP, or any export of the sessions. The
    agent still got its key back whole: the watch masks what it writes, not what it forwards."""
    from hotloop.cli import main

    receiver = Keeper()
    try:
        (isolated_home / "config.toml").write_text(
            "[routing]\ntitles = false\n"
            f'[telemetry]\notlp_endpoint = "{receiver.url}"\ncapture_content = {str(capture).lower()}\n'
        )
        script = tmp_path / "agent.py"
        script.write_text(SCRIPT)
        run = ["--run", sys.executable, str(script), KEY, OTHER_KEY]
        assert main(["watch", "--upstream", upstream_process, "--json", *run]) == 0
        json_out, json_err = capfd.readouterr()
        assert main(["watch", "--upstream", upstream_process, *run]) == 0
        table_out, table_err = capfd.readouterr()
    finally:
        receiver.close()
    logs = sorted((isolated_home / "data" / "sessions").glob("*.jsonl"))
    exports = []
    for log in logs:
        for fmt in ("md", "json", "html", "atif"):
            assert main(["sessions", "export", log.stem.rpartition("_")[2], "--format", fmt]) == 0
            exports.append(capfd.readouterr().out)
    written = {str(path): path.read_bytes() for path in (isolated_home / "data").rglob("*") if path.is_file()}
    outputs = {"--json": json_out, "stderr": json_err + table_err, "table": table_out, "exports": "".join(exports)}
    outputs |= {path: data.decode(errors="replace") for path, data in written.items()}
    outputs["spans"] = b"".join(receiver.exports).decode(errors="replace")
    for key in (KEY, OTHER_KEY):
        assert [where for where, text in outputs.items() if key in text] == []
    # Masked, not missing: the echoes were there, and say so.
    assert "Your key is [redacted]" in json_out and "logged in as [redacted]" in json_out
    assert "answered 401 to /v1/chat/completions: Incorrect API key provided: [redacted]." in table_out
    assert len(logs) >= 2 and receiver.named("chat ")
    if capture:
        assert "[redacted]" in outputs["spans"]
