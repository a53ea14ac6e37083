"""MCP stdio servers join the tool registry through the official SDK, and fail in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hotloop.agent.events import Notice, ToolFinished
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.mcp import McpBridge
from hotloop.agent.tools.mcp_config import McpServer, server_from_command_line
from hotloop.agent.tools.registry import ToolContext, ToolError, ToolRegistry
from hotloop.providers.conversation import ToolResultMessage

from support import make_agent, sim_with_scenario

SERVER = [str(Path(__file__).parent / "mcp_server.py")]
HIDDEN = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}


def test_servers_from_the_command_line_are_named_after_their_script() -> None:
    assert server_from_command_line("python tests/mcp_server.py --flag", set()).name == "mcp_server"
    assert server_from_command_line("npx -y @modelcontextprotocol/server-filesystem", set()).name == "server-filesystem"
    assert server_from_command_line("python srv.py", {"srv"}).name == "srv2"


async def test_tools_join_sorted_and_run_through_the_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    monkeypatch.setenv("HOTLOOP_VISIBLE", "inherited")
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, HIDDEN)
    await bridge.start([McpServer("t", sys.executable, tuple(SERVER), {"FROM_CONFIG": "configured"})])
    try:
        assert notices == []
        assert [tool.name for tool in registry] == ["add", "crash", "getenv", "grep", "list_dir", "nap", "read_file"]
        assert [spec.name for spec in registry.specs()] == [
            "add",
            "crash",
            "getenv",
            "grep",
            "list_dir",
            "nap",
            "read_file",
        ]
        sim = sim_with_scenario(
            tmp_path,
            [
                {
                    "tool_calls": [
                        {"name": "add", "arguments": {"a": 2, "b": 3}},
                        {"name": "getenv", "arguments": {"name": "OPENAI_API_KEY"}},
                        {"name": "getenv", "arguments": {"name": "HOTLOOP_VISIBLE"}},
                        {"name": "getenv", "arguments": {"name": "FROM_CONFIG"}},
                        {"name": "add", "arguments": {"a": "x"}},
                    ]
                },
                {"text": "done"},
            ],
        )
        try:
            agent, recorder = make_agent(sim, tmp_path, registry=registry)
            await agent.run_turn("use the server")
        finally:
            sim.stop()
    finally:
        await bridge.aclose()

    # Results go back in call order, whatever order the calls finished in.
    results = [(m.is_error, m.content) for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert results[:4] == [(False, "5"), (False, "<unset>"), (False, "inherited"), (False, "configured")]
    assert results[4][0] and "validation error" in results[4][1]
    assert len(recorder.of(ToolFinished)) == 5


async def test_a_server_that_fails_to_start_is_one_line_and_the_run_goes_on() -> None:
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, HIDDEN)
    await bridge.start(
        [
            McpServer("ghost", "/nonexistent/mcp-server"),
            McpServer(
                "quitter",
                sys.executable,
                ("-c", "import sys; print('cannot start: bad flag', file=sys.stderr); sys.exit(2)"),
            ),
        ]
    )
    await bridge.aclose()

    messages = sorted(n.message for n in notices)
    assert messages == [
        "MCP server 'ghost' failed to start: command not found: /nonexistent/mcp-server; continuing without its tools",
        "MCP server 'quitter' failed to start: the server exited (stderr: cannot start: bad flag); "
        "continuing without its tools",
    ]
    assert all("\n" not in m for m in messages)
    assert [tool.name for tool in registry] == ["grep", "list_dir", "read_file"]


async def test_a_server_that_dies_loses_its_tools() -> None:
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, HIDDEN)
    await bridge.start([McpServer("t", sys.executable, tuple(SERVER))])
    try:
        crash = registry.get("crash")
        assert crash is not None
        with pytest.raises(ToolError, match="MCP server 't' exited during the call"):
            await crash.handler({}, ToolContext("c", Path(".")))
    finally:
        await bridge.aclose()
    assert len(notices) == 1 and notices[0].message.startswith("MCP server 't' stopped")
    assert "its tools are gone (add, crash, getenv, nap)" in notices[0].message
    assert [tool.name for tool in registry] == ["grep", "list_dir", "read_file"]
