"""Faults a session survives and says: one writer per session, resume on the session's own server,
keys out of error lines, usage that can't be true, bytes that aren't UTF-8, repeated call ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from hotloop.agent.events import TurnStarted
from hotloop.agent.figures import prompt_breakdown
from hotloop.agent.tools.registry import ToolContext, ToolError
from hotloop.cli import main
from hotloop.config import Choice, load_config
from hotloop.core.resumption import Resumption
from hotloop.providers.base import ProviderOptions
from hotloop.providers.chat_chunks import Chunk, ChunkParser
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import Usage, UsageLedger
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sessions.log import SessionInUse
from hotloop.sessions.store import find_session, read_session

from support import serving, start_sim

FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


@pytest.fixture
def home(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    monkeypatch.chdir(isolated_home)
    return isolated_home


def test_the_lock_is_taken_before_the_log_is_read(home: Path) -> None:
    """Two resumes a moment apart: the second is refused while the first holds the session, and
    once it is free, reads what the first appended (no fork, no repeated turn numbers)."""
    assert main(["run", "hello"]) == 0
    path = find_session(home / "data" / "sessions")
    first = Resumption.load(path, [])
    with pytest.raises(SessionInUse, match="open in another hotloop process"):
        Resumption.load(path, [])
    first.log.write(TurnStarted(turn=2, prompt="written by the first"))
    first.log.close()
    second = Resumption.load(path, [])
    second.log.close()
    assert second.conversation.turns == 2


def test_continue_goes_back_to_the_server_the_session_used(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`hotloop run -c` without --base-url continues on the server the session was started on."""
    server = start_sim()
    try:
        assert main(["run", "--provider", "openai", "--base-url", server.base_url, "hello"]) == 0
        sent = len(server.server.requests)
        capsys.readouterr()
        assert main(["run", "-c", "and again"]) == 0
        err = capsys.readouterr().err
        assert len(server.server.requests) > sent  # not the embedded simulator
        assert f"continuing on openai at {server.base_url}, the server this session used" in err
        assert "missing API key" not in err
    finally:
        server.stop()


def test_continue_never_follows_a_log_to_a_server_off_this_machine(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log edited to name another host for its provider: `-c` stays on the config's URL, which gets the key,
    and says where the log pointed; the same log naming a loopback server is followed as above."""
    server = start_sim()
    try:
        assert main(["run", "--provider", "openai", "--base-url", server.base_url, "hello"]) == 0
    finally:
        server.stop()
    path = find_session(home / "data" / "sessions")
    header, *events = path.read_bytes().splitlines(keepends=True)
    fields = json.loads(header)
    fields["base_url"] = "https://collector.example/v1"
    path.write_bytes(json.dumps(fields).encode() + b"\n" + b"".join(events))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own")
    config = load_config(home / "config.toml")
    resumed = Resumption.load(path, [])
    try:
        moved, target, notes = resumed.target(config, Choice())
    finally:
        resumed.log.close()
    assert target.settings.name == "openai"
    assert moved.providers["openai"].base_url == config.providers["openai"].base_url
    assert "collector.example" not in str(moved.providers["openai"].base_url)
    assert notes == [
        "this session used openai at https://collector.example/v1, which the config doesn't name: continuing at "
        f"{(config.providers['openai'].base_url or 'its default URL').rstrip('/')} (--base-url goes back there)"
    ]


async def echoing_server(status: int) -> AsyncIterator[str]:
    """A server that answers every request with an error quoting its Authorization header."""

    async def handler(request: web.Request) -> web.Response:
        body = {"error": {"message": f"bad request from {request.headers.get('Authorization')}", "type": "x"}}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with serving(app) as url:
        yield url


async def test_an_error_line_never_holds_the_key() -> None:
    key = "sk-test-echoed-0123456789"
    async for url in echoing_server(400):
        provider = OpenAIChatProvider(
            ProviderOptions(name="gateway", model="m", base_url=url, api_key=key, max_retries=0)
        )
        try:
            with pytest.raises(ProviderError) as failed:
                async for _ in provider.stream(ChatRequest(system="", tools=(), messages=(UserMessage("hi"),))):
                    pass
        finally:
            await provider.aclose()
        assert key not in str(failed.value)
        assert "bad request from Bearer [redacted]" in str(failed.value)


@pytest.mark.parametrize(
    ("usage", "said"),
    [
        ({"prompt_tokens": -50, "completion_tokens": 3}, "prompt -50"),
        (
            {"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 5000}},
            "cache read and write 5,000 of a 100-token prompt",
        ),
        ({"prompt_tokens": 100, "completion_tokens": 999_999}, "output 999,999 for 5 characters streamed"),
    ],
)
def test_usage_that_cannot_be_true_is_kept_raw_and_counted_nowhere(usage: dict[str, object], said: str) -> None:
    parser = ChunkParser()
    parser.feed(_chunk({"choices": [{"index": 0, "delta": {"content": "hello"}}]}))
    events = parser.feed(_chunk({"choices": [], "usage": usage}))
    [reported] = [event for event in events if isinstance(event, Usage)]
    ledger = reported.ledger
    assert ledger.distrust == said
    assert (ledger.prompt_total, ledger.cache_read, ledger.output) == (None, None, None)
    assert reported.raw == usage
    assert prompt_breakdown(ledger) == f"usage not trustworthy (server said {said})"


def test_sound_usage_is_left_alone() -> None:
    ledger = UsageLedger.from_openai({"prompt_tokens": 100, "completion_tokens": 3})
    assert ledger.checked(streamed_chars=5) == ledger


def _chunk(data: dict[str, object]) -> Chunk:
    import msgspec

    return msgspec.convert(data, Chunk)


def test_a_session_with_a_bad_byte_in_its_log_still_loads(home: Path) -> None:
    """One invalid UTF-8 byte in a saved log costs a replacement character and a warning, nothing else."""
    assert main(["run", "hello"]) == 0
    path = find_session(home / "data" / "sessions")
    data = path.read_bytes()
    at = data.index(b'"prompt":"hello') + len(b'"prompt":"hel')
    path.write_bytes(data[:at] + b"\xff" + data[at + 1 :])
    session = read_session(path)
    prompts = [event.prompt for event in session.events if isinstance(event, TurnStarted)]
    assert prompts == ["hel\ufffdo"]
    assert any("not UTF-8" in warning for warning in session.warnings)


def test_json_output_is_masked_like_the_log(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key that reaches a prompt (and so the model's echo of it) never reaches `--json`'s stdout."""
    key = "sk-json-must-not-leak-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert main(["run", "--json", f"Read {key}.txt"]) == 0
    out = capsys.readouterr().out
    assert key not in out and "[redacted]" in out
    assert all(json.loads(line) for line in out.splitlines())


def test_a_closed_stdout_ends_the_run_quietly(home: Path) -> None:
    """`hotloop run … | head -1`: exit 141, as SIGPIPE would, and no traceback."""
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    for args in (["run", "write 2000 words about caching"], ["sessions", "list"]):
        process = subprocess.Popen(
            [sys.executable, "-m", "hotloop", *args],
            cwd=home,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        process.stdout.readline()
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=30) in (0, 141)
        assert "Traceback" not in err and "BrokenPipe" not in err


async def test_mcp_lists_the_servers_and_restarts_one_in_the_app(home: Path) -> None:
    from hotloop.core.session import SessionOptions
    from hotloop.tui.items import NoticeItem

    from tui_support import idle, running_app, send, wait_until

    faults = f"{sys.executable} {Path(__file__).parent / 'mcp_faults.py'} dies-after-init"
    async with running_app(options=SessionOptions(mcp=(faults,))) as (app, pilot):

        def said() -> list[str]:
            return [item.message for item in app.main.transcript.history.items if isinstance(item, NoticeItem)]

        await send(app, pilot, "/mcp")
        await wait_until(lambda: any("MCP servers" in m for m in said()), what="the /mcp listing")
        assert "dies-after-init · running · echo" in said()[-1]
        assert app.session.runtime is not None
        tool = app.session.runtime.tools.get("echo")
        assert tool is not None
        with pytest.raises(ToolError, match="exited during the call"):
            await tool.handler({"text": "x"}, ToolContext("c", home))
        await send(app, pilot, "/mcp")
        await wait_until(lambda: "stopped" in said()[-1], what="the listing of a stopped server")
        assert said()[-1].endswith("/mcp restart dies-after-init")
        await send(app, pilot, "/mcp restart dies-after-init")
        await wait_until(lambda: "restarted" in " ".join(said()), what="the restart")
        assert "MCP server 'dies-after-init' restarted: echo" in said()
        await idle(app, pilot)


def test_hotloop_run_fails_when_a_step_was_cut_off(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A call cut off mid-arguments: the turn goes on and answers, but the work was incomplete: exit 1."""
    scenario = home / "cut.json"
    cut = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}], "cut_arguments": 5}
    scenario.write_text(json.dumps([cut, {"text": "I could not read it."}]))
    (home / "config.toml").write_text(FAST_SIM + f'scenario = "{scenario}"\n')
    assert main(["run", "read README.md"]) == 1
    err = capsys.readouterr().err
    assert "step 1 · " in err and "cut off by the output limit" in err
