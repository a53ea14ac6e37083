"""`hotloop mcp import FILE`: a Claude Code or Claude Desktop config's MCP servers as hotloop's `[mcp.NAME]` tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_mcp(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = commands.add_parser("mcp", help="MCP servers")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    mcp_import = mcp_commands.add_parser(
        "import", help="print a Claude Code or Claude Desktop config's MCP servers as [mcp.NAME] tables"
    )
    mcp_import.add_argument(
        "file", type=Path, metavar="FILE", help=".mcp.json, ~/.claude.json or claude_desktop_config.json"
    )
    mcp_import.add_argument("--write", action="store_true", help="also append them to hotloop's config file")
    mcp.set_defaults(handler=_mcp_import)


def _mcp_import(args: argparse.Namespace) -> int:
    from hotloop.agent.text import inert
    from hotloop.agent.tools.mcp_import import append_to, imported, to_toml
    from hotloop.config import load_config

    config = load_config()
    result = imported(args.file, taken={server.name for server in config.mcp})
    tables = to_toml(result)
    print(tables, end="")
    for note in result.notes:
        print(f"hotloop: {inert(note)}", file=sys.stderr)
    if args.write and result.servers:
        append_to(config.path, tables)
        print(f"hotloop: added {len(result.servers)} MCP server(s) to {config.path}", file=sys.stderr)
    return 0
