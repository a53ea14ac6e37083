"""JSON nested 100,000 levels deep, at every door hotloop parses from outside, is one line, never a RecursionError.

The attack is the input itself: `[[[[…]]]]` from the simulator's `deep_json` fault over real loopback HTTP on
the three protocols (a stream's chunk, an error body), as a tool call's arguments, from an MCP server
(tests/mcp_faults.py: a tool's answer, a tool list), in the config, `mcp import`'s file, a session log, the
bench's files, a server's `/models`, and sent to the simulator by a hostile client.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
import uvicorn
from aiohttp import web
from mcp.server.mcpserver import MCPServer
from rich.console import Console

from hotloop.agent.events import ToolFinished, TurnFinished
from hotloop.cli import main
from hotloop.nesting import LIMIT, TooDeep, decoded
from hotloop.sessions.projection import CallRecord
from hotloop.sessions.store import find_session, read_session
from hotloop.sim.embedded import EmbeddedServer
from hotloop.sim.scenario import ScenarioError, load_scenario, parse_faults
from hotloop.tui.items import ToolCallsItem
from hotloop.tui.render import Palette, RenderContext

from support import sim_with_scenario, start_sim

DEEP = 100_000
FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
MCP_FAULTS = Path(__file__).parent / "mcp_faults.py"
SAID = f"nested deeper than {LIMIT} levels"
SIM_SAID = "nested deeper than the parser can read"  # the simulator takes what json.loads can (sim/json_depth.py)
DEEP_TEXT = "deep, rewritten on the way out"
LOOK = {"name": "list_dir", "arguments": {"path": "."}}
PALETTE = Palette("#ffa62b", "#8d8d8d", "#a0a0a0", "#4ebf71", "#ffa62b", "#b93c5b", "#1e1e1e", "#2b4a6b", dark=True)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture
def home(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(isolated_home)
    return isolated_home


def play(home: Path, steps: list[dict[str, Any]]) -> None:
    """The config: the simulator, instant, answering with these scenario steps."""
    (home / "steps.json").write_text(json.dumps(steps))
    (home / "config.toml").write_text(FAST_SIM + f'scenario = "{home / "steps.json"}"\n')


def lines_with(text: str, words: str) -> list[str]:
    return [line for line in text.splitlines() if words in line]


def log_events(home: Path) -> list[Any]:
    """The session's events; the log reads back whole, with no line skipped."""
    logged = read_session(find_session(home / "data" / "sessions"))
    assert logged.warnings == []
    return logged.events


# ---- the one mechanism ----


@pytest.mark.parametrize("decode", [json.loads, msgspec.json.decode, msgspec.json.Decoder(list[Any]).decode])
@pytest.mark.parametrize("data", [nested(DEEP), nested(DEEP).encode()], ids=["str", "bytes"])
def test_past_the_limit_is_refused_as_every_decoders_own_error(decode: Any, data: str | bytes) -> None:
    """100,000 levels raise `TooDeep`, which the handlers for msgspec's and json's malformed input both catch."""
    with pytest.raises(TooDeep) as refused:
        decoded(decode, data)
    assert isinstance(refused.value, msgspec.DecodeError)
    assert isinstance(refused.value, json.JSONDecodeError)
    assert str(refused.value) == SAID
    assert refused.value.pos == LIMIT  # the bracket that went past


def test_the_limit_is_exact_and_strings_are_text() -> None:
    """200 levels read, 201 don't; brackets inside strings (escaped quotes too) are no nesting."""
    assert decoded(json.loads, nested(LIMIT)) == json.loads(nested(LIMIT))
    with pytest.raises(TooDeep):
        decoded(msgspec.json.decode, nested(LIMIT + 1))
    text = json.dumps({"code": '"[' * 5000 + "{" * 5000})
    assert decoded(msgspec.json.decode, text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "x = " + nested(DEEP),
        "x = " + "{a = " * DEEP + "}" * DEEP,
        ".".join(["a"] * DEEP) + " = 1",
        "[" + ".".join(["a"] * DEEP) + "]",
    ],
    ids=["arrays", "inline tables", "a dotted key", "a table header"],
)
def test_toml_nests_by_brackets_and_by_dotted_keys(text: str) -> None:
    """TOML's arrays, inline tables and dotted keys each nest a level; refused before tomllib (which takes minutes
    over a long dotted key, and recurses per bracket) sees them."""
    with pytest.raises(TooDeep, match=SAID):
        decoded(tomllib.loads, text, "toml")


def test_toml_strings_comments_and_numbers_are_no_nesting() -> None:
    """Brackets and dots in TOML's strings and comments, and a float's point, nest nothing: the file reads."""
    text = (
        '# [[[[ a.b.c\nurl = \'http://a.b.c/[[\'\npi = 3.14\nbig = """\n' + "[{" * 300 + '"""\n[t.u]\nv = [[1], [2]]\n'
    )
    assert decoded(tomllib.loads, text, "toml")["t"] == {"u": {"v": [[1], [2]]}}


# ---- the providers: hotloop run over loopback HTTP, three protocols ----

PROTOCOLS = [("sim", "chunk"), ("sim-responses", "event"), ("sim-anthropic", "event")]


@pytest.mark.parametrize(("provider", "what"), PROTOCOLS)
def test_a_stream_nested_100000_deep_is_one_line_and_exit_1(
    home: Path, capsys: pytest.CaptureFixture[str], provider: str, what: str
) -> None:
    """The second step's first chunk carries arrays 100,000 deep: the run fails in one line naming the server and
    what it sent (exit 1, a failed run), and the log (the first step answered) reads back whole, the turn ended as
    an error."""
    play(home, [{"tool_calls": [LOOK]}, {"text": "Hello there.", "deep_json": DEEP}])
    assert main(["run", "--provider", provider, "hello"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = lines_with(err, SAID)
    assert line.startswith(f"error: {provider} (the embedded simulator) sent a malformed {what} ({SAID}): ")
    assert len(line) < 300  # the start of what was sent, not 200,000 brackets
    assert [event.reason for event in log_events(home) if isinstance(event, TurnFinished)] == ["error"]


@pytest.mark.parametrize("provider", ["sim", "sim-responses", "sim-anthropic"])
def test_an_error_body_nested_100000_deep_is_named_not_quoted(
    home: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    """A 400 whose body no parser can read: the SDKs keep it as text (Anthropic's put all of it in the message);
    the line says what it is instead."""
    play(home, [{"text": "never sent", "status": 400, "deep_json": DEEP}])
    assert main(["run", "--provider", provider, "hello"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert lines_with(err, "answered 400") == [
        f"error: {provider} (the embedded simulator) answered 400: an error body {SAID}"
    ]


@pytest.mark.parametrize("provider", ["sim", "sim-responses", "sim-anthropic"])
def test_tool_call_arguments_nested_too_deep_are_an_error_the_model_reads(
    home: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    """Arguments 3,000 levels deep (past the stack, under the size cap): the call isn't run, its result says why,
    and the turn goes on to the model's answer."""
    arguments = nested(3000)
    play(home, [{"tool_calls": [{"name": "read_file", "arguments": arguments}]}, {"text": "Done."}])
    assert main(["run", "--provider", provider, "read it"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.out.strip() == "Done."
    [finished] = [event for event in log_events(home) if isinstance(event, ToolFinished)]
    assert finished.status == "error"
    assert finished.result.startswith(f"error: the arguments for read_file are not valid JSON ({SAID} at character")


class DeepModels:
    """A server whose `/v1/models` is arrays 100,000 deep, and whose chat answers "Hi." as vLLM streams it."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.Response(text='{"object":"list","data":' + nested(DEEP) + "}", content_type="application/json")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for delta, finish in (({"role": "assistant", "content": "Hi."}, None), ({}, "stop")):
            chunk = {
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


def test_a_models_list_nested_100000_deep_is_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Discovery passes over a `/v1/models` it can't read, and the answer comes (a model was named); with no model
    named, the listing is needed, and the run ends in one line."""
    with EmbeddedServer(DeepModels()) as server:
        provider = f'[providers.deep]\nkind = "openai-chat"\nbase_url = "{server.base_url}"\n'
        (home / "config.toml").write_text(provider + "[routing]\ntitles = false\n")
        assert main(["run", "--provider", "deep", "--model", "m", "hello"]) == 0
        assert capsys.readouterr().out.strip() == "Hi."
        assert main(["run", "--provider", "deep", "hello"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert lines_with(err, SAID) == [f"hotloop: deep ({server.base_url}) answered /models with JSON {SAID}"]


def test_a_call_whose_arguments_nest_too_deep_opens_in_the_transcript_as_written() -> None:
    """Expanding such a call in the app shows its arguments as text, where parsing them to indent them crashed."""
    call = CallRecord("c1", "read_file", nested(3000), status="error", result="error: …")
    context = RenderContext(Console(width=80, color_system=None), 80, PALETTE)
    lines = [line.text for line in ToolCallsItem([call], 0.0, 0.0, expanded={"c1"}).render(context).lines]
    assert any(line.strip().startswith("[[[[") for line in lines[1:])


# ---- MCP ----


def test_an_mcp_answer_nested_100000_deep_fails_its_call_and_the_server_stays(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK drops a line it can't parse, which left the call waiting for its 120-s timeout: now the call fails
    at once with one line, and the same server answers the next call."""
    play(
        home,
        [
            {"tool_calls": [{"name": "deep", "arguments": {}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"text": "still here"}}]},
            {"text": "Done."},
        ],
    )
    assert main(["run", "--yes", "--mcp", f"{sys.executable} {MCP_FAULTS} deep-json", "go"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    results = {event.name: event for event in log_events(home) if isinstance(event, ToolFinished)}
    assert results["deep"].status == "error"
    assert results["deep"].result == f"error: deep failed: the server's answer is JSON {SAID} (MCP error -32700)"
    assert (results["echo"].status, results["echo"].result) == ("ok", "still here")


def test_an_mcp_tool_list_nested_100000_deep_is_one_warning(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tool list can't be read: the server fails to start in one line (at once, not after the 30-s start
    limit), and the run goes on without its tools."""
    play(home, [{"text": "Done."}])
    assert main(["run", "--yes", "--mcp", f"{sys.executable} {MCP_FAULTS} deep-tool-list", "go"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert lines_with(err, "MCP server") == [
        f"warning: MCP server 'deep-tool-list' failed to start: the server's answer is JSON {SAID}; "
        "continuing without its tools"
    ]


def deepened(app: Any) -> Any:
    """The ASGI app, with the JSON answer to any call of `deep` (its `DEEP` text) rewritten 100,000 levels deep."""

    async def rewriting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        held: list[dict[str, Any]] = []

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                held.append(message)  # until its body, whose length may change
                return
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and DEEP_TEXT.encode() in body:
                answer = '"result":{"content":[],"structuredContent":{"n":' + nested(DEEP) + "}}"
                body = f'{{"jsonrpc":"2.0","id":{json.loads(body)["id"]},{answer}}}'.encode()
                message = {**message, "body": body}
                start = held.pop()
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                held.append({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            if held:
                await send(held.pop())
            await send(message)

        await app(scope, receive, sending)

    return rewriting


def test_an_mcp_answer_over_http_nested_100000_deep_is_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Over streamable HTTP the SDK answers the call itself, with pydantic's lines and the input quoted: the tool
    error is the same one line as over stdio."""
    server = MCPServer("web", log_level="WARNING")

    @server.tool()
    def deep() -> str:
        """Answer JSON nested too deep (rewritten on the way out)."""
        return DEEP_TEXT

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in its backlog until uvicorn takes it: no start to wait for
    http = uvicorn.Server(uvicorn.Config(deepened(server.streamable_http_app()), log_level="critical"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        play(home, [{"tool_calls": [{"name": "deep", "arguments": {}}]}, {"text": "Done."}])
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        with (home / "config.toml").open("a") as config:
            config.write(f'[mcp.web]\nurl = "{url}"\n')
        assert main(["run", "--yes", "go"]) == 0
    finally:
        http.should_exit = True
        thread.join(10)
        sock.close()
    assert "Traceback" not in capsys.readouterr().err
    [finished] = [event for event in log_events(home) if isinstance(event, ToolFinished)]
    assert finished.result == f"error: deep failed: the server's answer is JSON {SAID} (MCP error -32700)"


def test_mcp_import_of_a_file_nested_100000_deep(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One line naming the file, exit 2, and no config written."""
    (home / "claude.json").write_text('{"mcpServers": ' + nested(DEEP) + "}")
    assert main(["mcp", "import", str(home / "claude.json")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"hotloop: {home / 'claude.json'} is not JSON: {SAID}"
    assert not (home / "config.toml").exists()


# ---- hotloop's own files ----


@pytest.mark.parametrize(
    "text", ["x = " + nested(DEEP), ".".join(["a"] * DEEP) + " = 1"], ids=["arrays", "a dotted key"]
)
def test_a_config_nested_100000_deep_is_one_line_and_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Arrays or a dotted key 100,000 deep: one line naming the file, exit 2, before any session starts."""
    (home / "config.toml").write_text(text + "\n")
    assert main(["run", "hello"]) == 2
    assert capsys.readouterr().err.strip() == f"hotloop: invalid TOML in {home / 'config.toml'}: {SAID}"
    assert not (home / "data" / "sessions").exists()


def test_a_session_log_line_nested_100000_deep_is_skipped_and_named(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line appended to a log (one the summary reads, too): listed, shown, exported and continued, with one
    warning naming the line."""
    play(home, [{"text": "Hi."}, {"text": "Again."}])
    assert main(["run", "hello"]) == 0
    log = find_session(home / "data" / "sessions")
    with log.open("a") as file:
        file.write('{"type":"turn_started","turn":9,"prompt":"x","ts":1.0,"extra":' + nested(DEEP) + "}\n")
    lines = len(log.read_text().splitlines())
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    assert main(["sessions", "show", log.stem.rpartition("_")[2]]) == 0
    assert main(["sessions", "export", "--format", "html", "-o", str(home / "out.html")]) == 0
    assert main(["run", "-c", "go on"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert f"{log.name} line {lines}: {SAID}, skipped" in captured.err
    assert captured.out.strip().endswith("Again.")


def test_bench_files_nested_100000_deep(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bench's scenario and a saved result to compare: one line each, exit 2."""
    (home / "deep.json").write_text(nested(DEEP))
    assert main(["bench", "--scenario", str(home / "deep.json"), "--agents", "1"]) == 2
    assert main(["bench", "compare", str(home / "deep.json"), str(home / "deep.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"hotloop: bench scenario {home / 'deep.json'}: {SAID}",
        f"hotloop: cannot read bench result {home / 'deep.json'}: {SAID}",
    ]


def test_a_scenario_file_nested_100000_deep(tmp_path: Path) -> None:
    """The simulator's own file door (`[sim] scenario`, `sim serve --scenario`): a ScenarioError, one line."""
    (tmp_path / "deep.json").write_text(nested(DEEP))
    with pytest.raises(ScenarioError, match=f"is not valid JSON: {SIM_SAID}"):
        load_scenario(tmp_path / "deep.json")


async def test_deep_json_is_a_scenario_fault_and_a_sim_serve_flag(tmp_path: Path) -> None:
    """The fault puts its arrays first in a whole answer too (hotloop streams; other clients may not)."""
    assert parse_faults(["deep-json:7"]).deep_json == 7
    (tmp_path / "zero.json").write_text(json.dumps([{"text": "x", "deep_json": 0}]))
    with pytest.raises(ScenarioError, match="deep_json must be a whole number, 1 or more"):
        load_scenario(tmp_path / "zero.json")
    sim = sim_with_scenario(tmp_path, [{"text": "Hi.", "deep_json": 3}])
    try:
        hello = {"model": "sim-balanced", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as client, client.post(sim.base_url + "/chat/completions", json=hello) as r:
            assert (await r.text()).startswith('{"nested":[[[]]],"id":')
    finally:
        sim.stop()


# ---- the simulator, as a hostile client meets it ----


async def test_the_simulator_answers_a_body_nested_100000_deep_with_a_400() -> None:
    """Every protocol's door answers 400 in its own error shape (the real APIs refuse such a body; a 500 would
    say the server broke), as do tool-call arguments nested too deep in a conversation; then it answers on."""
    deep = nested(DEEP)
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    sends = [
        ("/v1/chat/completions", '{"model":"sim-balanced","messages":' + deep + "}", "request body is"),
        ("/v1/responses", '{"model":"sim-balanced","input":' + deep + "}", "request body is"),
        ("/v1/messages", '{"model":"sim-balanced","max_tokens":9,"messages":' + deep + "}", "request body is"),
        ("/v1/chat/completions", json.dumps({"model": "sim-balanced", "messages": history}), "arguments are"),
    ]
    sim = start_sim()
    try:
        async with aiohttp.ClientSession(headers={"anthropic-version": "2023-06-01"}) as client:
            for path, body, said in sends:
                async with client.post(sim.url + path, data=body) as response:
                    assert response.status == 400, path
                    error = (await response.json())["error"]
                    assert error["message"].endswith(f"{said} {SIM_SAID}"), path
                    assert error["type"] in ("BadRequestError", "invalid_request_error")
            hello = {"model": "sim-balanced", "messages": [{"role": "user", "content": "hi"}]}
            async with client.post(sim.url + "/v1/chat/completions", json=hello) as response:
                assert response.status == 200
    finally:
        sim.stop()
