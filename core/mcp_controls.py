"""`McpControls`: what a frontend asks of a session's MCP servers: their state, a restart, the held-back tools.

A part a `Session` holds (`session.mcp`): the MCP commands (`/mcp`, `/mcp restart NAME`, `/mcp accept`) in one
place, apart from the session's life, handed the bridge as it is now and the session's event stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hotloop import InputError
from hotloop.agent.events import AgentEvent, Notice

if TYPE_CHECKING:
    from hotloop.agent.tools.mcp import McpBridge, McpState
    from hotloop.agent.tools.registry import HeldTools


class McpControls:
    def __init__(self, bridge: Callable[[], McpBridge | None], emit: Callable[[AgentEvent], None]) -> None:
        """`bridge`: the session's MCP servers once they start (None before, or with no server configured)."""
        self._bridge = bridge
        self._emit = emit

    def servers(self) -> list[McpState]:
        """Every MCP server of the session: its state, its tools, what went wrong."""
        bridge = self._bridge()
        return list(bridge.states.values()) if bridge is not None else []

    async def restart(self, name: str) -> McpState:
        """Start the MCP server `name` again (its tools change the tool list: the next request re-reads them)."""
        bridge = self._bridge()
        if bridge is None or name not in bridge.states:
            known = ", ".join(state.server.name for state in self.servers()) or "none"
            raise InputError(f"no MCP server named {name!r} (servers: {known})")
        state = await bridge.restart(name)
        if state.status == "running":
            self._emit(
                Notice(level="info", message=f"MCP server {name!r} restarted: {', '.join(state.tools) or 'no tools'}")
            )
        return state

    def accept(self) -> list[HeldTools]:
        """`/mcp accept`: the tool descriptions held back to keep the cache go out with the next request."""
        bridge = self._bridge()
        return bridge.accept() if bridge is not None else []
