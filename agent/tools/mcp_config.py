"""What an MCP server is to hotloop: a command line and an environment.

Kept apart from the bridge that runs servers, so reading the config loads nothing else.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def server_from_command_line(command_line: str, taken: set[str]) -> McpServer:
    """A server for `--mcp "CMD ARGS"`, named after its script or package."""
    parts = shlex.split(command_line)
    if not parts:
        raise ValueError("--mcp needs a command")
    words = [Path(p).stem for p in parts[1:] if not p.startswith("-")] or [Path(parts[0]).stem]
    base = INVALID_NAME_CHARS.sub("_", words[-1].split("@")[-1].split("/")[-1]) or "mcp"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return McpServer(name, parts[0], tuple(parts[1:]))
