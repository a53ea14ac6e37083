"""What an MCP server is to hotloop: a command line and an environment, or a URL and its headers.

Kept apart from the bridge that runs servers, so reading the config loads nothing else.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated

from msgspec import Meta, Struct

INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# Upper case only: a token pasted where a variable's name belongs fails here, before any error line could echo it.
ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"
# No user:password@ in the URL: credentials belong in the environment, through headers_env.
HTTP_URL = r"^https?://[^\s/@]+(/\S*)?$"

Url = Annotated[
    str, Meta(pattern=HTTP_URL, extra={"problem": "must be an http:// or https:// URL without credentials"})
]
PassEnv = Annotated[
    tuple[Annotated[str, Meta(pattern=ENV_NAME)], ...],
    Meta(extra={"problem": 'must be a list of environment variable names, e.g. ["GITHUB_TOKEN"]'}),
]
HeadersEnv = Annotated[
    dict[str, Annotated[str, Meta(pattern=ENV_NAME)]],
    Meta(extra={"problem": 'must map header names to environment variable names, e.g. { Authorization = "MCP_AUTH" }'}),
]


class McpServer(Struct, frozen=True, forbid_unknown_fields=True):
    """A server, as `[mcp.NAME]` declares it; each limit's `problem` is how a config error words its breach.

    `command` runs a stdio server, with the environment run_shell's commands get (an allowlist), the
    variables `pass_env` names and the values `env` gives; `url` reaches a streamable HTTP one, whose
    `headers_env` maps each header to the environment variable that holds its value. Either way no
    secret is ever in the file.
    """

    name: str
    command: Annotated[str, Meta(min_length=1, extra={"problem": "is required"})] | None = None
    args: Annotated[tuple[str, ...], Meta(extra={"problem": "must be a list of strings"})] = ()
    env: Annotated[dict[str, str], Meta(extra={"problem": "must be a table of strings"})] = {}
    pass_env: PassEnv = ()  # variables of hotloop's environment it gets besides the allowlist: a token it needs
    url: Url | None = None
    headers_env: HeadersEnv = {}
    # Whether its tools' `readOnlyHint` is believed (they then run unasked and may be prefetched). The MCP spec calls
    # annotations untrusted hints: a server that says read-only and writes would act unasked.
    trust_hints: bool = False

    def __post_init__(self) -> None:
        # msgspec turns a ValueError into a validation error, which the config names and words as its own.
        if (self.command is None) == (self.url is None):
            raise ValueError("needs either command, to run a stdio server, or url, to reach an HTTP one")
        if self.url is not None and (self.args or self.env or self.pass_env):
            raise ValueError("args, env and pass_env are for a command; an HTTP server takes url and headers_env")
        if self.command is not None and self.headers_env:
            raise ValueError("headers_env is for a url; a command takes args and env")


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
