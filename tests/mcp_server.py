"""A small MCP stdio server for the tests, built on the official SDK."""

import asyncio
import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

# Read-only, so that they run unasked; a tool with no hints may act, destructively, and is asked about.
READ_ONLY = ToolAnnotations(read_only_hint=True)

app = MCPServer("testserver")


@app.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool(annotations=READ_ONLY)
def getenv(name: str) -> str:
    """Read an environment variable of the server process."""
    return os.environ.get(name, "<unset>")


@app.tool(annotations=READ_ONLY)
async def nap(seconds: float) -> str:
    """Sleep, then answer."""
    # Real time: the tests call it for longer than hotloop's tool timeout, and it is that timeout which ends it.
    await asyncio.sleep(seconds)
    return f"napped {seconds} s"


@app.tool(annotations=READ_ONLY)
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


if __name__ == "__main__":
    app.run()
