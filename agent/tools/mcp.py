"""MCP servers as tool sources, through the official `mcp` SDK: stdio commands and streamable HTTP URLs.

Each server runs in a task of its own, because the SDK's contexts must be entered and left
in one task. A stdio server gets the environment run_shell's commands get (`secret_policy`'s allowlist: PATH,
HOME, the locale, toolchain roots), the variables its `pass_env` names (never a provider's API key) and the
`env` its config gives it, as the MCP SDK's own default is an allowlist: a third party's program doesn't see
every credential of the user's environment (`GITHUB_PAT`, `DATABASE_URL`) unless named for it. An HTTP server
gets the headers its `headers_env` names. A server that
won't start, or whose connection dies, is reported in one line and its tools leave the registry;
the run goes on without them, and `restart` starts it again. A tool list listed again (the server said it
changed, or it restarted) that differs only in descriptions is held back by the registry's guard until `/mcp
accept`, so that the cached prefix stays; a real change goes through at once. An error a server answers to one
call (any JSON-RPC error, −32000 included) is that call's error result: the server stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hotloop.agent.events import Notice
from hotloop.agent.tools.mcp_config import INVALID_NAME_CHARS, McpServer
from hotloop.agent.tools.mcp_transport import Trace, describe, opened
from hotloop.agent.tools.registry import HeldTools, Tool, ToolContext, ToolError, ToolRegistry
from hotloop.providers.conversation import ToolSpec
from hotloop.secret_policy import allowed_environment

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client.session import IncomingMessage, MessageHandlerFnT
    from mcp_types import CallToolResult, ToolAnnotations
    from mcp_types import Tool as McpTool

START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
PROBE_TIMEOUT = 2.0  # a connection that can't list its tools in this long is taken for dead

McpStatus = Literal["starting", "running", "failed", "stopped"]


@dataclass
class McpState:
    """One server as the bridge runs it: its state, its tools, and what went wrong, if anything."""

    server: McpServer
    status: McpStatus = "starting"
    tools: list[str] = field(default_factory=list)
    problem: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # the server said its tool list changed
    task: asyncio.Task[None] | None = None

    @property
    def source(self) -> str:
        return f"mcp:{self.server.name}"


class McpBridge:
    """Starts MCP servers, registers their tools, restarts them on request, and stops them at the end."""

    def __init__(self, registry: ToolRegistry, notify: Callable[[Notice], None], hidden_env: set[str]) -> None:
        self.registry = registry
        self.notify = notify
        self.hidden_env = hidden_env
        self.states: dict[str, McpState] = {}
        # The SDK logs parse failures with tracebacks; a broken server is reported in one line instead.
        logging.getLogger("mcp").setLevel(logging.CRITICAL)

    async def start(self, servers: list[McpServer], timeout: float = START_TIMEOUT) -> None:
        """Start every server at once; return when each is ready or has failed."""
        launched = [self._launch(server) for server in servers]
        await asyncio.gather(*(self._until_ready(state, timeout) for state in launched))

    async def restart(self, name: str, timeout: float = START_TIMEOUT) -> McpState:
        """Stop the server `name` if it runs, and start it again; its tools are registered anew."""
        state = self.states[name]
        before = self.registry.sent(state.source)
        await self._stop(state)
        self.registry.remove_source(state.source)
        fresh = self._launch(state.server)
        await self._until_ready(fresh, timeout)
        if fresh.status == "running":
            self._guard(fresh, before)
        return fresh

    def accept(self) -> list[HeldTools]:
        """`/mcp accept`: the held-back descriptions go out with the next request."""
        return self.registry.accept()

    def _guard(self, state: McpState, before: dict[str, ToolSpec]) -> None:
        held = self.registry.guard(state.source, state.server.name, before)
        if held is not None:
            tools = ", ".join(held.names)
            cost = f"accepting re-prefills ≈{held.tokens:,} tokens of tools, and the conversation after them"
            message = f"MCP server {held.server!r} changed only the descriptions of {tools}: held back ({cost}); "
            self.notify(Notice(level="info", message=message + "/mcp accept sends them"))

    async def aclose(self) -> None:
        await asyncio.gather(*(self._stop(state) for state in self.states.values()))

    def _launch(self, server: McpServer) -> McpState:
        state = self.states[server.name] = McpState(server)
        state.task = asyncio.create_task(self._serve(state), name=f"mcp:{server.name}")
        return state

    async def _until_ready(self, state: McpState, timeout: float) -> None:
        try:
            await asyncio.wait_for(state.ready.wait(), timeout)
        except TimeoutError:
            if state.task is not None:
                state.task.cancel()
            self._report(state, f"did not start within {timeout:g} s")

    async def _stop(self, state: McpState) -> None:
        state.stop.set()
        task = state.task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=STOP_TIMEOUT)
            task.cancel()

    def _environment(self, server: McpServer) -> dict[str, str]:
        passed = allowed_environment(os.environ, server.pass_env)
        return {key: value for key, value in passed.items() if key not in self.hidden_env} | server.env

    async def _serve(self, state: McpState) -> None:
        from mcp import Client

        server, trace = state.server, Trace()
        async with contextlib.AsyncExitStack() as stack:
            try:
                transport = await opened(server, self._environment(server), stack, trace)
                # No response cache: the probe must reach the server itself.
                async with Client(transport, cache=None, message_handler=_listener(state)) as client:
                    state.tools = self._register(state, client, await _listed(client))
                    state.status = "running"
                    state.ready.set()
                    # Over HTTP a listen stream is a request held open all session, which a server's graceful
                    # shutdown waits on: followed on stdio only for now; an HTTP server's list is re-read on restart.
                    listening = asyncio.create_task(_listen(state, client) if server.url is None else asyncio.sleep(0))
                    try:
                        while await _changed(state):
                            await self._refresh(state, client)
                    finally:
                        # Ended before the client: an open listen stream would hold its closing up.
                        listening.cancel()
                        await asyncio.wait([listening])
                    state.status = "stopped"
            except Exception as error:  # the SDK raises exception groups of transport errors
                if not state.stop.is_set():
                    started = state.ready.is_set()
                    self._report(
                        state,
                        f"{'stopped' if started else 'failed to start'}: {describe(error, server, trace, started)}",
                    )
            finally:
                state.ready.set()

    async def _refresh(self, state: McpState, client: Client) -> None:
        """The server's tools listed again, swapped in at once (no await between: a request never finds them
        missing), then guarded against a change of descriptions only."""
        listed = await _listed(client)
        before = self.registry.sent(state.source)
        self.registry.remove_source(state.source)
        state.tools = self._register(state, client, listed)
        self._guard(state, before)

    def _register(self, state: McpState, client: Client, tools: list[McpTool]) -> list[str]:
        names: list[str] = []
        for tool in tools:
            registered = self._tool(state, client, tool)
            self.registry.add(registered)
            if registered.name in self.registry:  # a read-only registry turns away a tool that may act
                names.append(registered.name)
        return names

    def _tool(self, state: McpState, client: Client, tool: McpTool) -> Tool:
        server = state.server
        name = INVALID_NAME_CHARS.sub("_", tool.name)[:64]
        if name in self.registry:
            name = f"{server.name}__{name}"[:64]
        remote_name = tool.name

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> str:
            from mcp import MCPError
            from mcp_types import CONNECTION_CLOSED

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                ctx.emit_output(message or (f"{progress:g}/{total:g}" if total else f"{progress:g}"))

            try:
                result = await client.call_tool(remote_name, arguments, progress_callback=progress)
            except MCPError as error:
                # −32000 is also what the SDK says of a dead connection; only a server that can't answer is dead.
                if error.code == CONNECTION_CLOSED and not await _answers(client):
                    gone = "exited" if server.url is None else "stopped answering"
                    self._report(state, f"stopped: the server {gone}")
                    restart = f"/mcp restart {server.name} starts it again"
                    raise ToolError(f"MCP server {server.name!r} {gone} during the call ({restart})") from None
                raise ToolError(f"{remote_name} failed: {error.error.message} (MCP error {error.code})") from None
            text = _content_text(result)
            if result.is_error:
                raise ToolError(text or f"{remote_name} failed")
            return text

        read_only, destructive = _hinted(tool.annotations, state.server.trust_hints)
        return Tool(
            name=name,
            description=tool.description or "",
            parameters=tool.input_schema,
            handler=call,
            read_only=read_only,
            prefetch=read_only,
            side_effects=not read_only,
            destructive=destructive,
            source=state.source,
        )

    def _report(self, state: McpState, problem: str) -> None:
        """Say once what happened to a server, and take its tools out."""
        if state.status in ("failed", "stopped"):
            return
        state.status, state.problem = ("stopped" if state.ready.is_set() else "failed"), problem
        name = state.server.name
        gone = self.registry.remove_source(state.source)
        suffix = f"; its tools are gone ({', '.join(gone)})" if gone else "; continuing without its tools"
        self.notify(Notice(level="warning", message=f"MCP server {name!r} {problem}{suffix}"))


async def _listed(client: Client) -> list[McpTool]:
    """Every tool the server lists, page after page."""
    tools: list[McpTool] = []
    cursor: str | None = None
    while True:
        listing = await client.list_tools(cursor=cursor)
        tools.extend(listing.tools)
        cursor = listing.next_cursor
        if not cursor:
            return tools


def _listener(state: McpState) -> MessageHandlerFnT:
    """The client's message handler: it runs in the SDK's reading loop, which must go on to answer a listing, so it
    only flags the change; the server's task lists the tools again."""
    from mcp_types import ToolListChangedNotification

    async def handle(message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            state.changed.set()
        await asyncio.sleep(0)

    return handle


async def _listen(state: McpState, client: Client) -> None:
    """Flag each change of the tool list a server announces on a `subscriptions/listen` stream (protocol 2026-07-28,
    whose servers send list changes nowhere else); an older server notifies through the message handler instead."""
    with contextlib.suppress(Exception):  # no stream (an older protocol, a server that refuses): nothing to follow
        async with client.listen(tools_list_changed=True) as changes:
            async for _ in changes:
                state.changed.set()


async def _changed(state: McpState) -> bool:
    """Wait until the server says its tools changed (True) or is to stop (False)."""
    waits = {asyncio.ensure_future(state.stop.wait()), asyncio.ensure_future(state.changed.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    if state.stop.is_set():
        return False
    state.changed.clear()
    return True


def _hinted(hints: ToolAnnotations | None, trusted: bool) -> tuple[bool, bool]:
    """Whether a tool is read-only, and whether destructive, with the spec's default for a hint left out.

    A read-only tool can be memoized and prefetched, and runs unasked; any other may act and asks
    first; a destructive one (`destructiveHint` true, or absent: the spec's default) asks every time.
    Only a trusted server's word makes a tool read-only: the spec calls annotations untrusted hints.
    """
    read_only = trusted and bool(hints and hints.read_only_hint)
    return read_only, not read_only and (hints is None or hints.destructive_hint is not False)


async def _answers(client: Client) -> bool:
    """Whether the server still answers a request (MCP's ping is gone from the protocol; listing tools isn't)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(PROBE_TIMEOUT):
            await client.list_tools()
        return True
    return False


def _content_text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        parts.append(block.text if block.type == "text" else f"[{block.type} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
