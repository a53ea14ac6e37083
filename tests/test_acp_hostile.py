"""`hotloop acp` against a hostile client: lines that are no request, stdin that ends, padded commands, a log that
names another provider.

The agent is the real `python -m hotloop acp`, on real pipes. `RawClient` writes bytes as a client would (any
bytes: the attack is the test's input) and reads the agent's replies line by line; the other tests drive it with
the SDK's client side, as tests/test_acp.py does. Every wait is bounded, and the process is ended however a test
ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp.schema import ToolCallStart
from test_acp import WAIT, Editor, agent_process, hotloop_acp, logged_events, prompt

from hotloop.acp_server.stdio import BUFFER_LIMIT
from hotloop.agent.text import visible

from tui_support import FAST_SIM, write_config

pytestmark = pytest.mark.timeout(90)
PARSE, INVALID, NOT_FOUND, PARAMS = -32700, -32600, -32601, -32602
INITIALIZE = {"method": "initialize", "params": {"protocolVersion": 1}}
DEEP = 100_000
PADDED = "echo checking build status" + " " * 300 + "\n" * 60 + "touch HIDDEN"

# (what the line is, the line, the error code it gets or None for no reply, the id that reply names)
HOSTILE: list[tuple[str, bytes, int | None, Any]] = [
    ("a JSON array", b"[1,2,3]", INVALID, None),
    ("an empty array", b"[]", INVALID, None),
    ("malformed JSON", b'{"jsonrpc": "2.0", "id": 1, "method": ', PARSE, None),
    ("not UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "\xff\xfe"}', PARSE, None),
    ("a number", b"5", INVALID, None),
    ("null", b"null", INVALID, None),
    ("a string", b'"initialize"', INVALID, None),
    ("an object id", b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "initialize"}', INVALID, None),
    ("a boolean id", b'{"jsonrpc": "2.0", "id": true, "method": "initialize"}', INVALID, None),
    ("an id out of range", b'{"jsonrpc": "2.0", "id": 1e999, "method": "initialize"}', INVALID, None),
    ("NaN", b'{"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": NaN}}', PARSE, None),
    ("a method that is a number", b'{"jsonrpc": "2.0", "id": 5, "method": 5}', INVALID, 5),
    ("params an array", b'{"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": [1]}', PARAMS, 6),
    ("params a string", b'{"jsonrpc": "2.0", "id": "s", "method": "session/new", "params": "x"}', PARAMS, "s"),
    ("params of wrong types", b'{"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": 5}}',
     PARAMS, 7),
    ("an unknown method", b'{"jsonrpc": "2.0", "id": 8, "method": "no/such/method", "params": {}}', NOT_FOUND, 8),
    ("an unknown notification", b'{"jsonrpc": "2.0", "method": "no/such/notification"}', None, None),
    ("a notification with bad params", b'{"jsonrpc": "2.0", "method": "session/cancel", "params": [1]}', None, None),
    ("neither request nor response", b'{"jsonrpc": "2.0"}', INVALID, None),
    ("a response with an array id", b'{"jsonrpc": "2.0", "id": [1], "result": {}}', INVALID, None),
    ("a response with a malformed error", b'{"jsonrpc": "2.0", "id": 99, "error": 5}', None, None),
    ("params 300 deep", b'{"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": '
     + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}", PARSE, None),
    (f"an array {DEEP:,} deep", b"[" * DEEP + b"]" * DEEP, PARSE, None),
    (f"params {DEEP:,} deep", b'{"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": '
     + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}", PARSE, None),
    ("a line over the size limit", b'{"jsonrpc": "2.0", "id": 10, "x": "' + b"x" * BUFFER_LIMIT + b'"}', INVALID, None),
]  # fmt: skip

# Lines that are messages the SDK can take: it answers them (or, for a notification, logs one line).
PASSED_ON = {
    "params of wrong types",
    "an unknown method",
    "an unknown notification",
    "a response with a malformed error",
}


class RawClient:
    """A client that writes any bytes to `hotloop acp` and reads its replies, one JSON object a line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process, self.stdin, self.stdout = process, process.stdin, process.stdout

    async def send(self, line: bytes) -> None:
        self.stdin.write(line + b"\n")
        await self.stdin.drain()

    async def request(self, request_id: Any, message: dict[str, Any]) -> None:
        await self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, **message}).encode())

    async def replies_until(self, request_id: Any) -> list[dict[str, Any]]:
        """Every message the agent sends until the reply to `request_id`, that reply last."""
        seen: list[dict[str, Any]] = []
        while not seen or "method" in seen[-1] or seen[-1].get("id") != request_id:
            line = await asyncio.wait_for(self.stdout.readline(), WAIT)
            assert line, f"stdout ended before the reply to {request_id!r}"
            seen.append(json.loads(line))
        return seen

    async def ended(self) -> int:
        """Stdin closed; the agent's exit code."""
        self.stdin.close()
        return await asyncio.wait_for(self.process.wait(), WAIT)


@asynccontextmanager
async def agent_on(home: Path, stdin: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """`hotloop acp` with `stdin` as its stdin, its stdout a pipe; killed however the test ends."""
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    with (home / "stderr.log").open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hotloop",
            "acp",
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=environment,
            cwd=home,
            limit=1 << 20,
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@asynccontextmanager
async def raw_agent(home: Path) -> AsyncIterator[RawClient]:
    async with agent_on(home, asyncio.subprocess.PIPE) as process:
        yield RawClient(process)


@pytest.fixture
def home(isolated_home: Path) -> Path:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    return isolated_home


def stderr_of(home: Path) -> str:
    return (home / "stderr.log").read_text(errors="replace")


async def test_every_hostile_line_gets_its_error_and_the_next_request_is_answered(home: Path) -> None:
    """Each line that is no request gets the spec's error (with the id when it could be read, none for a
    notification), one line in the agent's log and no traceback; the request after it is answered."""
    async with raw_agent(home) as client:
        for number, (what, line, code, request_id) in enumerate(HOSTILE):
            await client.send(line)
            await client.request(f"next {number}", INITIALIZE)
            replies = await client.replies_until(f"next {number}")
            *before, answer = replies
            assert answer["result"]["agentInfo"]["name"] == "hotloop", what
            errors = [(r["error"]["code"], r["id"]) for r in before if "error" in r]
            assert errors == ([] if code is None else [(code, request_id)]), what
        assert await client.ended() == 0
    said = stderr_of(home)
    assert "Traceback" not in said
    refused = [line for line in said.splitlines() if line.startswith("hotloop: refused a message from the client")]
    assert len(refused) == len([what for what, *_ in HOSTILE if what not in PASSED_ON])


async def test_a_prompt_with_half_an_emoji_is_answered(home: Path) -> None:
    """A lone surrogate (`\\ud83d`, half an emoji a JavaScript client cut) in a prompt reads as U+FFFD: the turn is
    answered and logged, not failed by text no file or request can hold."""
    async with raw_agent(home) as client:
        workspace = home / "project"
        workspace.mkdir()
        await client.request(1, INITIALIZE)
        await client.request(2, {"method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}})
        *_, opened = await client.replies_until(2)
        session_id = opened["result"]["sessionId"].encode()
        await client.send(b'{"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": "'
                          + session_id + b'", "prompt": [{"type": "text", "text": "say \\ud83d hi"}]}}')  # fmt: skip
        *_, answer = await client.replies_until(3)
        assert await client.ended() == 0
    assert answer["result"]["stopReason"] == "end_turn"
    assert [e["prompt"] for e in logged_events(home) if e["type"] == "turn_started"] == ["say \ufffd hi"]


async def test_stdin_that_is_dev_null_ends_the_agent_cleanly(home: Path) -> None:
    """`hotloop acp < /dev/null` (a file the event loop can't poll) exits 0, without a traceback."""
    with open(os.devnull, "rb") as empty:
        async with agent_on(home, empty.fileno()) as process:
            assert await asyncio.wait_for(process.wait(), WAIT) == 0
            assert process.stdout is not None and await process.stdout.read() == b""
    assert "Traceback" not in stderr_of(home)


async def test_piped_lines_are_all_answered_before_the_agent_ends(home: Path) -> None:
    """Requests written at once, stdin closed right after: every one is answered, then the agent exits 0."""
    async with raw_agent(home) as client:
        workspace = home / "project"
        workspace.mkdir()
        await client.send(b"[1,2,3]")
        await client.request(1, INITIALIZE)
        await client.request(2, {"method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}})
        await client.request(3, {"method": "session/list", "params": {}})
        client.stdin.close()
        replies = [json.loads(line) for line in (await asyncio.wait_for(client.stdout.read(), WAIT)).splitlines()]
        assert await asyncio.wait_for(client.process.wait(), WAIT) == 0
    answered = {r["id"]: "result" in r for r in replies if "id" in r}
    assert answered == {None: False, 1: True, 2: True, 3: True}
    assert "Traceback" not in stderr_of(home)


async def test_stdin_closed_with_a_prompt_in_flight_cancels_it_and_exits(home: Path) -> None:
    """The client goes away mid-answer: the turn is cancelled (its step logged `cut`), the prompt answered
    `cancelled`, and the agent exits 0 without a traceback."""
    write_config(home, decode_ms=5)
    async with raw_agent(home) as client:
        workspace = home / "project"
        workspace.mkdir()
        await client.request(1, INITIALIZE)
        await client.replies_until(1)
        await client.request(2, {"method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}})
        (opened,) = await client.replies_until(2)
        session_id = opened["result"]["sessionId"]

        def prompt(text: str) -> dict[str, Any]:
            return {
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
            }

        await client.request(3, prompt("hello"))  # a turn answered, for the log to be kept
        *_, answered = await client.replies_until(3)
        await client.request(4, prompt("write 2000 words"))
        while json.loads(await asyncio.wait_for(client.stdout.readline(), WAIT)).get("method") != "session/update":
            pass  # the second answer has started
        client.stdin.close()
        *_, answer = await client.replies_until(4)
        assert await asyncio.wait_for(client.process.wait(), WAIT) == 0
    assert (answered["result"]["stopReason"], answer["result"]["stopReason"]) == ("end_turn", "cancelled")
    steps = [e for e in logged_events(home) if e["type"] == "step_finished"]
    assert steps and steps[-1]["cut"] == "cancelled"
    assert "Traceback" not in stderr_of(home)


async def test_a_padded_command_is_asked_about_spelled_out(home: Path) -> None:
    """A command padded with spaces and newlines to push its end out of view is put to the editor whole, on one
    line, its padding counted and the programs it runs named first; rejected, it runs nothing."""
    write_config(home, [{"tool_calls": [{"name": "run_shell", "arguments": {"command": PADDED}}]}, {"text": "Done."}])
    editor = Editor()
    editor.answers = ["reject_once"]
    async with hotloop_acp(home, editor) as (conn, session_id, workspace):
        response = await prompt(conn, session_id, "check the build")
    assert response.stop_reason == "end_turn"
    ((asked, _),) = editor.asked
    title = asked.title or ""
    assert title == f"run_shell wants to run 2 commands (echo, touch): {visible(PADDED)}"
    assert "\n" not in title and "␠×300↵" in title and "⋮ 59 empty lines" in title and title.endswith("touch HIDDEN")
    always = next(option.name for option in editor.options[0] if option.kind == "allow_always")
    assert always.startswith("Allow for this session: run_shell:echo") and always.endswith("touch HIDDEN")
    (announced,) = [u for u in editor.updates if isinstance(u, ToolCallStart)]
    assert announced.title == f"run_shell: {visible(PADDED)}"
    assert not (workspace / "HIDDEN").exists()


@pytest.mark.parametrize(
    "answer",
    [{"result": {"outcome": 5}}, {"error": "no"}, {"error": {"code": -32000, "message": "gone"}}],
    ids=["an outcome that is a number", "an error that is a string", "an error"],
)
async def test_a_malformed_answer_to_a_question_denies_the_call(home: Path, answer: dict[str, Any]) -> None:
    """A permission answer that can't be read is a denial: the command doesn't run, the turn ends normally, one line
    in the agent's log says why, and the session goes on."""
    write_config(home, [{"tool_calls": [{"name": "run_shell", "arguments": {"command": "touch X"}}]}, {"text": "Ok."}])
    async with raw_agent(home) as client:
        workspace = home / "project"
        workspace.mkdir()
        await client.request(1, INITIALIZE)
        await client.request(2, {"method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}})
        *_, opened = await client.replies_until(2)
        said = [{"type": "text", "text": "make X"}]
        await client.request(3, {"method": "session/prompt",
                                 "params": {"sessionId": opened["result"]["sessionId"], "prompt": said}})  # fmt: skip
        question: dict[str, Any] = {}
        while question.get("method") != "session/request_permission":
            question = json.loads(await asyncio.wait_for(client.stdout.readline(), WAIT))
        await client.send(json.dumps({"jsonrpc": "2.0", "id": question["id"], **answer}).encode())
        *_, replied = await client.replies_until(3)
        assert await client.ended() == 0
    assert replied["result"]["stopReason"] == "end_turn"
    assert not (workspace / "X").exists()
    (result,) = [e for e in logged_events(home) if e["type"] == "tool_finished"]
    assert result["status"] != "ok"
    said_lines = [line for line in stderr_of(home).splitlines() if "answer to a question couldn't be read" in line]
    assert len(said_lines) == 1 and "Traceback" not in stderr_of(home)


def recorded_elsewhere(home: Path, server: str) -> None:
    """The saved session's log rewritten as if it had run on Anthropic's API, at `server`."""
    (log,) = (home / "data" / "sessions").glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    lines[0]["base_url"] = server
    for line in lines:
        if line.get("type") == "step_started":
            line.update(provider="anthropic", model="claude-sonnet-4-5")
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_a_loaded_session_goes_on_with_the_configured_provider(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose log names Anthropic at some server, loaded with an Anthropic key in the environment,
    goes on with the configured provider (the simulator): nothing ever connects to the server the log names,
    and a line says which provider it ran on and which it goes on with."""
    connections: list[str] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(str(writer.get_extra_info("peername")))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with hotloop_acp(home, Editor()) as (conn, session_id, workspace):
        first = await prompt(conn, session_id, "hello")
    assert first.field_meta is not None
    saved = first.field_meta["hotloop"]["session"]
    recorded_elsewhere(home, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    try:
        async with agent_process(home, Editor()) as conn:
            await asyncio.wait_for(conn.load_session(cwd=str(workspace), session_id=saved), WAIT)
            again = await prompt(conn, saved, "hello again")
    finally:
        server.close()
    assert again.stop_reason == "end_turn"
    assert connections == []
    models = [(e["provider"], e["model"]) for e in logged_events(home) if e["type"] == "step_started"]
    assert models[-1] == ("sim", "sim-balanced")
    assert "this session ran on anthropic · claude-sonnet-4-5; it goes on with sim · sim-balanced" in stderr_of(home)
