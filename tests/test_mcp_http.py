"""MCP servers over streamable HTTP, their tool hints, and `hotloop mcp import`.

The server is the official SDK's own (`MCPServer`, streamable HTTP) under uvicorn on a loopback
port, behind a guard that answers 401 unless the Authorization header is the expected one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from hotloop.agent.approvals import ApprovalRules, Approvals, Reply, Request
from hotloop.agent.events import ApprovalDecided, Notice, ToolFinished
from hotloop.agent.tools.mcp import McpBridge
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.agent.tools.mcp_import import append_to, imported, to_toml
from hotloop.agent.tools.registry import ToolContext, ToolError, ToolRegistry
from hotloop.cli import main
from hotloop.config import ConfigError, load_config

from support import make_agent, sim_with_scenario

TOKEN = "Bearer s3cret-t0ken-value"


class HttpMcpServer:
    """An SDK MCP server over streamable HTTP in a thread of its own; it counts the calls of each tool."""

    def __init__(self, token: str | None = TOKEN, port: int = 0) -> None:
        self.token = token
        self.calls: Counter[str] = Counter()
        self.authorizations: list[str] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted server takes the same port
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(self._guarded(self._app()), log_level="critical")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def _app(self) -> Any:
        app = MCPServer("web", log_level="WARNING")

        @app.tool(annotations=ToolAnnotations(read_only_hint=True))
        def look(q: str) -> str:
            """Look something up."""
            self.calls["look"] += 1
            return f"saw {q}"

        @app.tool()
        def note(text: str) -> str:
            """Keep a note (no hints: it may act, destructively)."""
            self.calls["note"] += 1
            return "noted"

        @app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
        def append(text: str) -> str:
            """Add a line (additive only)."""
            self.calls["append"] += 1
            return "appended"

        @app.tool(annotations=ToolAnnotations(destructive_hint=True))
        def wipe() -> str:
            """Delete everything."""
            self.calls["wipe"] += 1
            return "wiped"

        return app.streamable_http_app()

    def _guarded(self, app: Any) -> Any:
        async def guard(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and self.token is not None:
                authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
                self.authorizations.append(authorization)
                if authorization != self.token:
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b""})
                    return
            await app(scope, receive, send)

        return guard

    def start(self) -> HttpMcpServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP test server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def web() -> Any:
    server = HttpMcpServer().start()
    yield server
    server.stop()


async def started(servers: list[McpServer]) -> tuple[McpBridge, ToolRegistry, list[Notice]]:
    notices: list[Notice] = []
    registry = ToolRegistry()
    bridge = McpBridge(registry, notices.append, set())
    await bridge.start(servers, timeout=10)
    return bridge, registry, notices


async def call(registry: ToolRegistry, name: str, arguments: dict[str, object] | None = None) -> str:
    tool = registry.get(name)
    assert tool is not None, f"no tool {name}"
    return await tool.handler(arguments or {}, ToolContext("c", Path(".")))


def http(url: str, trust: bool = True, **headers: str) -> McpServer:
    return McpServer("web", url=url, headers_env=headers, trust_hints=trust)


async def test_tools_register_with_their_hints_and_run(web: HttpMcpServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_MCP_AUTH", TOKEN)
    earlier = len(web.authorizations)  # the server is the module's: another test's wrong tokens may be on it
    bridge, registry, notices = await started([http(web.url, Authorization="WEB_MCP_AUTH")])
    try:
        assert notices == [] and bridge.states["web"].status == "running"
        flags = {t.name: (t.read_only, t.prefetch, t.side_effects, t.destructive) for t in registry}
        assert flags == {
            "look": (True, True, False, False),  # readOnlyHint: memo, prefetch, runs unasked
            "note": (False, False, True, True),  # no hints: the spec's defaults, it may act destructively
            "append": (False, False, True, False),  # destructiveHint false: asks, as any tool that acts
            "wipe": (False, False, True, True),  # destructiveHint: asks every time
        }
        assert await call(registry, "look", {"q": "docs"}) == "saw docs"
        ours = web.authorizations[earlier:]
        assert ours and set(ours) == {TOKEN}  # the variable's value, on every request
    finally:
        await bridge.aclose()


async def test_a_servers_read_only_hint_counts_only_when_the_config_trusts_it(
    web: HttpMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool that declares readOnlyHint but writes ran unasked, headless (issue 23, item 9): hints are untrusted."""
    monkeypatch.setenv("WEB_MCP_AUTH", TOKEN)
    bridge, registry, _ = await started([http(web.url, trust=False, Authorization="WEB_MCP_AUTH")])
    try:
        look = registry.get("look")
        assert look is not None and (look.read_only, look.prefetch, look.side_effects) == (False, False, True)
        assert look.destructive  # it claimed read-only, so it never said whether it destroys: asked every time
    finally:
        await bridge.aclose()


async def test_a_missing_variable_a_wrong_token_and_no_server_are_one_line_each(
    web: HttpMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEB_MCP_UNSET", raising=False)
    monkeypatch.setenv("WEB_MCP_WRONG", "Bearer wrong-token-123456")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}/mcp"
    servers = [
        McpServer("unset", url=web.url, headers_env={"Authorization": "WEB_MCP_UNSET"}),
        McpServer("wrong", url=web.url, headers_env={"Authorization": "WEB_MCP_WRONG"}),
        McpServer("anonymous", url=web.url),
        McpServer("nowhere", url=nowhere),
    ]
    bridge, registry, notices = await started(servers)
    await bridge.aclose()
    assert sorted(n.message for n in notices) == [
        "MCP server 'anonymous' failed to start: the server answered HTTP 401 Unauthorized "
        "(it may want a token: give it one with headers_env); continuing without its tools",
        f"MCP server 'nowhere' failed to start: cannot reach {nowhere} (All connection attempts failed); "
        "continuing without its tools",
        "MCP server 'unset' failed to start: environment variable WEB_MCP_UNSET is not set "
        "(headers_env gives Authorization its value); continuing without its tools",
        "MCP server 'wrong' failed to start: the server answered HTTP 401 Unauthorized (check WEB_MCP_WRONG); "
        "continuing without its tools",
    ]
    assert all("\n" not in n.message and "wrong-token" not in n.message for n in notices)
    assert len(registry) == 0 and {s.status for s in bridge.states.values()} == {"failed"}


async def test_a_server_that_goes_away_loses_its_tools_and_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_MCP_AUTH", TOKEN)
    first = HttpMcpServer().start()
    bridge, registry, notices = await started([http(first.url, Authorization="WEB_MCP_AUTH")])
    second = None
    try:
        assert await call(registry, "look", {"q": "a"}) == "saw a"
        first.stop()
        with pytest.raises(ToolError, match="MCP server 'web' stopped answering during the call"):
            await call(registry, "look", {"q": "b"})
        assert [n.message for n in notices] == [
            "MCP server 'web' stopped: the server stopped answering; its tools are gone (append, look, note, wipe)"
        ]
        second = HttpMcpServer(port=first.port).start()
        restarted = await bridge.restart("web", timeout=10)
        assert restarted.status == "running" and sorted(restarted.tools) == ["append", "look", "note", "wipe"]
        assert await call(registry, "look", {"q": "c"}) == "saw c"
    finally:
        await bridge.aclose()
        if second is not None:
            second.stop()


async def test_the_memo_serves_only_the_read_only_tool_and_destructive_ones_always_ask(
    web: HttpMcpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEB_MCP_AUTH", TOKEN)
    look = {"name": "look", "arguments": {"q": "a"}}
    steps = [
        {"tool_calls": [look]},
        {"tool_calls": [look]},  # the memo's
        {"tool_calls": [{"name": "append", "arguments": {"text": "x"}}]},  # acts: the memo forgets
        {"tool_calls": [look]},
        {"tool_calls": [{"name": "wipe", "arguments": {}}]},
        {"text": "done"},
    ]
    asked: list[str] = []

    async def ask(request: Request) -> Reply:
        asked.append(request.tool)
        return Reply("once")

    # Both allowed by rule; only the destructive one is asked about anyway.
    approvals = Approvals(ApprovalRules(allow=("append", "wipe")), ask=ask)
    before = web.calls.copy()
    bridge, registry, _ = await started([http(web.url, Authorization="WEB_MCP_AUTH")])
    sim = sim_with_scenario(tmp_path, steps)
    try:
        agent, recorder = make_agent(sim, tmp_path, registry=registry, memo_ttl=60, approvals=approvals)
        await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        await bridge.aclose()
        sim.stop()
    finished = [(e.name, e.reused, e.result) for e in recorder.of(ToolFinished)]
    assert finished == [
        ("look", "", "saw a"),
        ("look", "memo", "saw a"),
        ("append", "", "appended"),
        ("look", "", "saw a"),
        ("wipe", "", "wiped"),
    ]
    assert web.calls - before == Counter({"look": 2, "append": 1, "wipe": 1})
    assert asked == ["wipe"]
    assert [(e.name, e.by) for e in recorder.of(ApprovalDecided)] == [("append", "rule append"), ("wipe", "you, once")]


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("url = 'ftp://example.com'", "mcp.w.url must be an http:// or https:// URL without credentials"),
        ("url = 'https://me:pw@example.com/mcp'", "mcp.w.url must be an http:// or https:// URL without credentials"),
        (
            "url = 'https://example.com/mcp'\nheaders_env = { Authorization = 'Bearer abc' }",
            "mcp.w.headers_env must map header names to environment variable names",
        ),
        (
            "args = ['x']",
            "mcp.w is invalid (needs either command, to run a stdio server, or url, to reach an HTTP one)",
        ),
        ("command = 'x'\nurl = 'https://example.com/mcp'", "mcp.w is invalid (needs either command"),
        (
            "url = 'https://example.com/mcp'\nenv = { A = 'b' }",
            "mcp.w is invalid (args, env and pass_env are for a command",
        ),
        (
            "command = 'x'\npass_env = ['ghp_secretvalue']",
            "mcp.w.pass_env must be a list of environment variable names",
        ),
        ("command = 'x'\nheaders_env = { A = 'B' }", "mcp.w is invalid (headers_env is for a url"),
    ],
)
def test_config_errors_name_the_setting(tmp_path: Path, table: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[mcp.w]\n{table}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert problem in str(error.value) and "\n" not in str(error.value)


def test_an_http_server_in_the_config(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[mcp.gh]\nurl = 'https://api.example.com/mcp/'\nheaders_env = { Authorization = 'GH_MCP_AUTH' }\n")
    assert load_config(path).mcp == (
        McpServer("gh", url="https://api.example.com/mcp/", headers_env={"Authorization": "GH_MCP_AUTH"}),
    )


CLAUDE_CODE = {
    "numStartups": 4,
    "mcpServers": {
        "github": {
            "type": "http",
            "url": "https://api.githubcopilot.com/mcp/",
            "headers": {"Authorization": "Bearer ghp_literalSecret1234"},
        },
        "linear": {
            "type": "http",
            "url": "https://mcp.linear.app/mcp",
            "headers": {"Authorization": "Bearer ${LINEAR_KEY}", "X-Team": "${LINEAR_TEAM}"},
        },
        "sentry": {"type": "sse", "url": "https://mcp.sentry.dev/sse"},
    },
    "projects": {
        "/home/me/app": {
            "mcpServers": {
                "fs": {
                    "type": "stdio",
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                    "env": {"LOG_LEVEL": "warn", "API_KEY": "sk-literal-0000", "HOME_TOKEN": "${HOME_TOKEN}"},
                }
            }
        },
        "/home/me/other": {"mcpServers": {"fs": {"command": "uvx", "args": ["mcp-server-fs"], "cwd": "/tmp"}}},
    },
}


def test_claude_code_servers_become_tables_without_their_secrets(tmp_path: Path) -> None:
    source = tmp_path / ".claude.json"
    source.write_text(json.dumps(CLAUDE_CODE))
    result = imported(source)
    assert to_toml(result) == (
        "[mcp.github]\n"
        'url = "https://api.githubcopilot.com/mcp/"\n'
        'headers_env = { Authorization = "GITHUB_AUTHORIZATION" }\n'
        "\n"
        "[mcp.linear]\n"
        'url = "https://mcp.linear.app/mcp"\n'
        'headers_env = { Authorization = "LINEAR_AUTHORIZATION", X-Team = "LINEAR_TEAM" }\n'
        "\n"
        "[mcp.sentry]\n"
        'url = "https://mcp.sentry.dev/sse"\n'
        "\n"
        '# from project "/home/me/app"\n'
        "[mcp.fs]\n"
        'command = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "."]\n'
        'env = { LOG_LEVEL = "warn" }\n'
        'pass_env = ["API_KEY", "HOME_TOKEN"]\n'
        "\n"
        '# from project "/home/me/other"\n'
        "[mcp.fs2]\n"
        'command = "uvx"\n'
        'args = ["mcp-server-fs"]\n'
    )
    assert result.notes == [
        "[mcp.github] sends Authorization from GITHUB_AUTHORIZATION: export it with the value the file gives it "
        "(not copied: headers hold secrets)",
        "[mcp.linear] sends Authorization from LINEAR_AUTHORIZATION: "
        'export LINEAR_AUTHORIZATION="Bearer ${LINEAR_KEY}"',
        "[mcp.sentry] was an SSE server; hotloop speaks streamable HTTP (its URL often ends in /mcp)",
        "[mcp.fs] needs API_KEY: export it (its value was not copied: it may be a secret)",
        "[mcp.fs2] ignores cwd (no such setting in hotloop)",
    ]
    assert "Secret" not in to_toml(result) + "".join(result.notes)
    assert "sk-literal" not in to_toml(result) + "".join(result.notes)


def test_claude_desktop_servers_and_the_cli_write_them_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mcp.fs]\ncommand = "npx"\n')
    monkeypatch.setenv("HOTLOOP_CONFIG", str(config))
    source = tmp_path / "claude_desktop_config.json"
    desktop = {
        "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]},
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
            "broken": {"command": ""},
        }
    }
    source.write_text(json.dumps(desktop))

    assert main(["mcp", "import", str(source), "--write"]) == 0
    out, err = capsys.readouterr()
    assert out == '[mcp.memory]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-memory"]\n'
    assert err.splitlines() == [
        f"hotloop: skipped 'fs' in {source}: [mcp.fs] is in your config already",
        f"hotloop: skipped 'broken' in {source}: command is required",
        f"hotloop: added 1 MCP server(s) to {config}",
    ]
    assert [server.name for server in load_config(config).mcp] == ["fs", "memory"]

    assert main(["mcp", "import", str(source), "--write"]) == 0  # again: nothing new
    assert [server.name for server in load_config(config).mcp] == ["fs", "memory"]


def test_a_file_without_servers_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / ".mcp.json"
    source.write_text("{}")
    assert main(["mcp", "import", str(source)]) == 2
    assert capsys.readouterr().err == f"hotloop: {source} configures no MCP servers (no mcpServers in it)\n"
    source.write_text("{not json")
    assert main(["mcp", "import", str(source)]) == 2
    assert f"hotloop: {source} is not JSON" in capsys.readouterr().err


def test_a_server_hotloop_cant_take_is_skipped_in_the_configs_words(tmp_path: Path) -> None:
    source = tmp_path / ".mcp.json"
    servers = {"bare": {"type": "stdio"}, "args": {"command": "x", "args": [1]}, "ftp": {"url": "ftp://example.com"}}
    source.write_text(json.dumps({"mcpServers": servers}))
    assert imported(source).notes == [
        f"skipped 'bare' in {source}: it is invalid "
        "(needs either command, to run a stdio server, or url, to reach an HTTP one)",
        f"skipped 'args' in {source}: args must be a list of strings",
        f"skipped 'ftp' in {source}: url must be an http:// or https:// URL without credentials",
    ]


def test_appending_keeps_the_file_readable(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('default_provider = "sim"')  # no newline at the end
    append_to(config, '[mcp.m]\ncommand = "npx"\n')
    assert config.read_text() == 'default_provider = "sim"\n\n[mcp.m]\ncommand = "npx"\n'
