"""MCP stdio servers join the tool registry through the official SDK, and fail in one line."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    monkeypatch.setenv("GITHUB_PAT", "github-pat-must-not-leak")  # a credential by a name no denylist knew
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, HIDDEN)
    # pass_env hands a server a variable besides the allowlist, never a provider's key even when named.
    passing = ("HOTLOOP_VISIBLE", "OPENAI_API_KEY")
    server = McpServer("t", sys.executable, tuple(SERVER), {"FROM_CONFIG": "configured"}, passing, trust_hints=True)
    await bridge.start([server])
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
                        {"name": "getenv", "arguments": {"name": "GITHUB_PAT"}},
                        {"name": "getenv", "arguments": {"name": "HOME"}},
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
    assert results[:5] == [
        (False, "5"),
        (False, "<unset>"),
        (False, "inherited"),
        (False, "configured"),
        (False, "<unset>"),  # not on the allowlist, not named: a third party's program doesn't see it
    ]
    assert results[5] == (False, os.environ["HOME"])  # the allowlist: what run_shell's commands get
    assert results[6][0] and "validation error" in results[6][1]
    assert len(recorder.of(ToolFinished)) == 7


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
        "MCP server 'quitter' failed to start: the server exited (stderr: cannot start: bad flag); it sees only "
        "PATH, HOME and the like of your environment: name what it needs in pass_env; "
        "continuing without its tools",
    ]
    assert all("\n" not in m for m in messages)
    assert [tool.name for tool in registry] == ["grep", "list_dir", "read_file"]


async def test_a_server_that_dies_loses_its_tools() -> None:
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, HIDDEN)
    await bridge.start([McpServer("t", sys.executable, tuple(SERVER), trust_hints=True)])
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


FAULTS = str(Path(__file__).parent / "mcp_faults.py")


async def started(mode: str, notices: list[Notice]) -> tuple[McpBridge, ToolRegistry]:
    registry = ToolRegistry()
    bridge = McpBridge(registry, notices.append, HIDDEN)
    await bridge.start([McpServer("f", sys.executable, (FAULTS, mode), trust_hints=True)])
    return bridge, registry


async def call(registry: ToolRegistry, name: str, arguments: dict[str, object] | None = None) -> str:
    tool = registry.get(name)
    assert tool is not None, f"no tool {name}"
    return await tool.handler(arguments or {}, ToolContext("c", Path(".")))


async def test_an_error_with_code_32000_is_the_calls_error_and_the_server_stays() -> None:
    """−32000 is also the SDK's code for a closed connection: a server that still answers keeps its tools."""
    notices: list[Notice] = []
    bridge, registry = await started("error-32000", notices)
    try:
        with pytest.raises(ToolError, match=r"fail failed: the backend is unavailable \(MCP error -32000\)"):
            await call(registry, "fail")
        assert await call(registry, "echo", {"text": "still here"}) == "still here"
        assert bridge.states["f"].status == "running"
    finally:
        await bridge.aclose()
    assert notices == []


async def test_a_server_that_dies_after_starting_is_said_once_and_restarts() -> None:
    notices: list[Notice] = []
    bridge, registry = await started("dies-after-init", notices)
    try:
        with pytest.raises(ToolError, match="exited during the call"):
            await call(registry, "echo", {"text": "anyone?"})
        assert [n.message for n in notices] == ["MCP server 'f' stopped: the server exited; its tools are gone (echo)"]
        assert bridge.states["f"].status == "stopped" and "echo" not in registry
        restarted = await bridge.restart("f")
        assert restarted.status == "running" and "echo" in registry  # it dies again only when used
    finally:
        await bridge.aclose()


async def run_through_agent(
    tmp_path: Path, mode: str, calls: Sequence[object], **options: Any
) -> dict[str, ToolFinished]:
    """One step of `calls` to the faulty server `mode`, through the agent on the simulator: results by tool."""
    sim = sim_with_scenario(tmp_path, [{"tool_calls": calls}, {"text": "Done."}])
    notices: list[Notice] = []
    bridge, registry = await started(mode, notices)
    try:
        agent, recorder = make_agent(sim, tmp_path, registry=registry, **options)
        finished = await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        await bridge.aclose()
        sim.stop()
    assert finished.reason == "answer" and notices == []
    return {event.name: event for event in recorder.of(ToolFinished)}


async def test_a_hanging_tool_is_cut_by_the_tool_timeout_and_the_others_go_on(tmp_path: Path) -> None:
    calls = [{"name": "hang", "arguments": {}}, {"name": "echo", "arguments": {"text": "beside it"}}]
    results = await run_through_agent(tmp_path, "hangs", calls, tool_timeout=0.3)
    assert results["hang"].result == "error: hang timed out after 0.3 s"
    assert results["echo"].result == "beside it"


async def test_a_flooding_tool_is_capped_and_its_server_stays(tmp_path: Path) -> None:
    from hotloop.agent.tools.registry import OUTPUT_LIMIT

    calls = [{"name": "flood", "arguments": {}}, {"name": "echo", "arguments": {"text": "after the flood"}}]
    results = await run_through_agent(tmp_path, "floods", calls)
    assert results["flood"].status == "ok" and len(results["flood"].result) <= OUTPUT_LIMIT + 100
    assert "\n[output truncated: " in results["flood"].result
    assert results["echo"].result == "after the flood"
