"""What an MCP server is to hotloop: a command line and an environment.

Kept apart from the bridge that runs servers, so reading the config loads nothing else.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated

from msgspec import Meta, Struct

INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


class McpServer(Struct, frozen=True, forbid_unknown_fields=True):
    """A server, as `[mcp.NAME]` declares it; each limit's `problem` is how a config error words its breach."""

    name: str
    command: Annotated[str, Meta(min_length=1, extra={"problem": "is required"})]
    args: Annotated[tuple[str, ...], Meta(extra={"problem": "must be a list of strings"})] = ()
    env: Annotated[dict[str, str], Meta(extra={"problem": "must be a table of strings"})] = {}


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
