"""A small MCP stdio server for the tests, built on the official SDK."""

import asyncio
import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("testserver")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def getenv(name: str) -> str:
    """Read an environment variable of the server process."""
    return os.environ.get(name, "<unset>")


@app.tool()
async def nap(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"napped {seconds} s"


@app.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


if __name__ == "__main__":
    app.run()
