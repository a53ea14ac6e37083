"""An MCP tool list that changes mid-session: descriptions only are held back until `/mcp accept`, a real change
goes through, and the cache explainer names either, against a real stdio server and the embedded simulator."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import msgspec

from hotloop.agent.events import Notice, ResponseFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.mcp import McpBridge
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.agent.tools.registry import ToolContext, ToolRegistry
from hotloop.core.slash import Slash, parse

from support import Recorder, make_agent, sim_with_scenario, wait_until

# A server whose tools come from a file it reads at start: the test rewrites the file and restarts it, as a server
# would redefine its tools (a date moved in a description, a tool added) and re-list them.
SERVER = """
import json, os, sys
from mcp.server.mcpserver import Context, MCPServer

spec = json.load(open(os.environ["TOOLS_SPEC"]))
app = MCPServer("changing")


def add(a: int, b: int) -> int:
    return a + b


def mul(a: int, b: int) -> int:
    return a * b


# Moves the date in add's description, and says the tool list changed (tools/list_changed).
async def redate(day: str, ctx: Context) -> str:
    app.remove_tool("add")
    app.add_tool(add, description=f"Add two integers. Today is {day}.")
    await ctx.notify_tools_changed()
    return "redated"


app.add_tool(add, description=spec["add"])
app.add_tool(redate)
if "mul" in spec:
    app.add_tool(mul, description=spec["mul"])
app.run()
"""


def tools_bytes(registry: ToolRegistry) -> bytes:
    return msgspec.json.encode(registry.specs())


async def turn(agent: Agent, recorder: Recorder, prompt: str) -> ResponseFinished:
    await agent.run_turn(prompt)
    return recorder.of(ResponseFinished)[-1]


async def test_descriptions_are_held_back_until_accepted_and_a_real_change_goes_through(tmp_path: Path) -> None:
    script, spec = tmp_path / "changing_server.py", tmp_path / "tools.json"
    script.write_text(SERVER)
    spec.write_text(json.dumps({"add": "Add two integers. Today is Monday."}))
    notices: list[Notice] = []
    registry = ToolRegistry(builtin_tools())
    bridge = McpBridge(registry, notices.append, set())
    server = McpServer("dated", sys.executable, (str(script),), {"TOOLS_SPEC": str(spec)})
    sim = sim_with_scenario(tmp_path, [{"text": f"answer {n}"} for n in range(1, 5)])
    await bridge.start([server])
    try:
        agent, recorder = make_agent(sim, tmp_path, registry=registry)
        first = await turn(agent, recorder, "hello")
        assert first.cache_note == ""
        sent = tools_bytes(registry)

        # Only the date in a description moved: the old list stays in requests, and one notice says what it costs.
        spec.write_text(json.dumps({"add": "Add two integers. Today is Tuesday."}))
        await bridge.restart("dated")
        [held] = [notice.message for notice in notices]
        assert "MCP server 'dated' changed only the descriptions of add: held back" in held
        assert "accepting re-prefills ≈" in held and "/mcp accept sends them" in held
        assert tools_bytes(registry) == sent and registry.get("add") is not None
        assert "Tuesday" in registry.get("add").description  # type: ignore[union-attr]  # the tool itself is new
        second = await turn(agent, recorder, "and again")
        assert second.usage is not None and first.usage is not None and first.usage.prompt_total is not None
        # The simulator read the whole previous prompt from its cache, up to a block: nothing was re-prefilled.
        assert (second.usage.cache_read or 0) >= first.usage.prompt_total // 16 * 16
        note = second.cache_note
        assert "cache miss" not in note
        assert "tool descriptions changed on server dated (add): held back (≈" in note
        assert "tokens kept cached); /mcp accept to send them" in note

        # `/mcp accept` (as the TUI takes it): the new descriptions go out, and the miss they cause is named so.
        assert parse("/mcp accept") == Slash("/mcp", ("accept",))
        [accepted] = bridge.accept()
        assert accepted.names == ("add",) and accepted.server == "dated"
        assert b"Tuesday" in tools_bytes(registry)
        third = await turn(agent, recorder, "once more")
        assert third.cache_note.startswith('cache miss: tool schema "add" changed: the held-back tool descriptions')
        assert "sent by /mcp accept" in third.cache_note and "tokens re-prefilled" in third.cache_note
        assert bridge.accept() == []  # nothing is held any more

        # A tool added is a real change: it goes through at once, and the explainer names it.
        notices.clear()
        spec.write_text(json.dumps({"add": "Add two integers. Today is Tuesday.", "mul": "Multiply two integers."}))
        await bridge.restart("dated")
        assert notices == [] and b'"mul"' in tools_bytes(registry)
        fourth = await turn(agent, recorder, "and the last")
        assert fourth.cache_note.startswith("cache miss: tools changed (+mul)")
        assert "held back" not in fourth.cache_note
        await agent.provider.aclose()
    finally:
        await bridge.aclose()
        sim.stop()


async def test_a_description_change_the_server_announces_is_held_back_too(tmp_path: Path) -> None:
    """tools/list_changed: the bridge lists the tools again by itself, and the guard holds the reworded one."""
    script, spec = tmp_path / "changing_server.py", tmp_path / "tools.json"
    script.write_text(SERVER)
    spec.write_text(json.dumps({"add": "Add two integers. Today is Monday."}))
    notices: list[Notice] = []
    registry = ToolRegistry()
    bridge = McpBridge(registry, notices.append, set())
    await bridge.start([McpServer("dated", sys.executable, (str(script),), {"TOOLS_SPEC": str(spec)})])
    try:
        sent = tools_bytes(registry)
        redate = registry.get("redate")
        assert redate is not None
        assert await redate.handler({"day": "Wednesday"}, ToolContext("c", tmp_path)) == "redated"
        await wait_until(lambda: notices, what="the held-back notice")
        assert "changed only the descriptions of add: held back" in notices[0].message
        assert tools_bytes(registry) == sent and bridge.states["dated"].status == "running"
        assert [held.names for held in bridge.accept()] == [("add",)] and b"Wednesday" in tools_bytes(registry)
    finally:
        await bridge.aclose()


def test_a_schema_change_with_a_new_description_goes_through() -> None:
    """Same names, yet a changed schema: not held, whatever else changed with it."""
    registry = ToolRegistry(builtin_tools())
    before = registry.sent("builtin")
    registry.remove_source("builtin")
    for tool in builtin_tools():
        if tool.name == "grep":
            tool = replace(tool, description="reworded", parameters={**tool.parameters, "required": []})
        registry.add(tool)
    assert registry.guard("builtin", "builtin", before) is None and registry.held() == []
    assert registry.sent("builtin")["grep"].description == "reworded"
