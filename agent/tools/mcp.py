"""MCP stdio servers as tool sources, through the official `mcp` SDK.

Each server runs in a task of its own, because the SDK's contexts must be entered and left
in one task. A server inherits hotloop's environment minus the provider API keys, plus the
`env` its config gives it. A server that won't start, or dies later, is reported in one line
and its tools leave the registry; the run goes on without them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from hotloop.agent.events import Notice
from hotloop.agent.tools.mcp_config import INVALID_NAME_CHARS, McpServer
from hotloop.agent.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpTool

START_TIMEOUT = 30.0


class McpBridge:
    """Starts MCP servers, registers their tools, and stops them at the end."""

    def __init__(self, registry: ToolRegistry, notify: Callable[[Notice], None], hidden_env: set[str]) -> None:
        self.registry = registry
        self.notify = notify
        self.hidden_env = hidden_env
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._reported: set[str] = set()
        # The SDK logs parse failures with tracebacks; a broken server is reported in one line instead.
        logging.getLogger("mcp").setLevel(logging.CRITICAL)

    async def start(self, servers: list[McpServer], timeout: float = START_TIMEOUT) -> None:
        """Start every server at once; return when each is ready or has failed."""
        pending = []
        for server in servers:
            ready = asyncio.Event()
            task = asyncio.create_task(self._serve(server, ready), name=f"mcp:{server.name}")
            self._tasks.append(task)
            pending.append((server, task, ready))
        for server, task, ready in pending:
            try:
                await asyncio.wait_for(ready.wait(), timeout)
            except TimeoutError:
                task.cancel()
                self._report(server, f"did not start within {timeout:g} s")

    async def aclose(self) -> None:
        self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for task in self._tasks:
            task.cancel()

    def _environment(self, server: McpServer) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in self.hidden_env}
        return env | server.env

    async def _serve(self, server: McpServer, ready: asyncio.Event) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=server.command, args=list(server.args), env=self._environment(server))
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                async with Client(stdio_client(params, errlog=errlog)) as client:
                    await self._register(server, client)
                    ready.set()
                    await self._stop.wait()
            except Exception as error:  # the SDK raises exception groups of transport errors
                if not self._stop.is_set():
                    phase = "stopped" if ready.is_set() else "failed to start"
                    self._report(server, f"{phase}: {_describe(error, server, errlog)}")
            finally:
                ready.set()

    async def _register(self, server: McpServer, client: Client) -> None:
        cursor: str | None = None
        while True:
            listing = await client.list_tools(cursor=cursor)
            for tool in listing.tools:
                self.registry.add(self._tool(server, client, tool))
            cursor = listing.next_cursor
            if not cursor:
                return

    def _tool(self, server: McpServer, client: Client, tool: McpTool) -> Tool:
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
                if error.code == CONNECTION_CLOSED:
                    self._report(server, "stopped: the server exited")
                    raise ToolError(f"MCP server {server.name!r} exited during the call") from None
                raise ToolError(f"{remote_name} failed: {error.error.message}") from None
            text = _content_text(result)
            if result.is_error:
                raise ToolError(text or f"{remote_name} failed")
            return text

        hints = tool.annotations
        return Tool(
            name=name,
            description=tool.description or "",
            parameters=tool.input_schema,
            handler=call,
            read_only=bool(hints and hints.read_only_hint),
            source=f"mcp:{server.name}",
        )

    def _report(self, server: McpServer, problem: str) -> None:
        if server.name in self._reported:
            return
        self._reported.add(server.name)
        gone = self.registry.remove_source(f"mcp:{server.name}")
        suffix = f"; its tools are gone ({', '.join(gone)})" if gone else "; continuing without its tools"
        self.notify(Notice(level="warning", message=f"MCP server {server.name!r} {problem}{suffix}"))


def _content_text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        parts.append(block.text if block.type == "text" else f"[{block.type} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _describe(error: BaseException, server: McpServer, errlog: IO[str]) -> str:
    leaf = _leaf(error)
    if isinstance(leaf, FileNotFoundError):
        return f"command not found: {server.command}"
    if isinstance(leaf, PermissionError):
        return f"command not executable: {server.command}"
    errlog.flush()
    errlog.seek(0)
    stderr = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    reason = str(leaf) or type(leaf).__name__
    if "Connection closed" in reason:
        reason = "the server exited"
    return f"{reason} (stderr: {stderr[-1][:200]})" if stderr else reason


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
