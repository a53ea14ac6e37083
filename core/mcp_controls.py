"""`McpControls`: what a frontend asks of a session's MCP servers: their state, a restart, the held-back tools.

A base of `Session`: the MCP commands (`/mcp`, `/mcp restart NAME`, `/mcp accept`) in one place, apart from
the session's life.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hotloop import InputError
from hotloop.agent.events import AgentEvent, Notice

if TYPE_CHECKING:
    from hotloop.agent.tools.mcp import McpBridge, McpState
    from hotloop.agent.tools.registry import HeldTools
    from hotloop.core.runtime import Runtime


class McpControls:
    runtime: Runtime | None

    def emit(self, event: AgentEvent) -> None:
        raise NotImplementedError

    @property
    def _bridge(self) -> McpBridge | None:
        return self.runtime.mcp if self.runtime is not None else None

    def mcp_servers(self) -> list[McpState]:
        """Every MCP server of the session: its state, its tools, what went wrong."""
        return list(self._bridge.states.values()) if self._bridge is not None else []

    async def restart_mcp(self, name: str) -> McpState:
        """Start the MCP server `name` again (its tools change the tool list: the next request re-reads them)."""
        bridge = self._bridge
        if bridge is None or name not in bridge.states:
            known = ", ".join(state.server.name for state in self.mcp_servers()) or "none"
            raise InputError(f"no MCP server named {name!r} (servers: {known})")
        state = await bridge.restart(name)
        if state.status == "running":
            self.emit(
                Notice(level="info", message=f"MCP server {name!r} restarted: {', '.join(state.tools) or 'no tools'}")
            )
        return state

    def accept_tools(self) -> list[HeldTools]:
        """`/mcp accept`: the tool descriptions held back to keep the cache go out with the next request."""
        return self._bridge.accept() if self._bridge is not None else []
