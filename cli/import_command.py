"""`hotloop import [claude-code|codex|opencode] [PATH…]`: other agents' sessions saved as hotloop sessions.

Without paths, the agent's default folders (all agents' without a name); with paths, those files and the
`.jsonl` files and opencode databases (`opencode*.db`) under those folders. A line per session imported; what a
file held that couldn't be read is a warning line each, and the rest is imported all the same. What isn't a file
(a FIFO, a device) is refused unread, a line each; the folder a session was recorded in is kept as history only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_import(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "import", help="save Claude Code's, Codex's or opencode's sessions as hotloop sessions (re-importing replaces)"
    )
    command.add_argument(
        "sources",
        nargs="*",
        metavar="[claude-code|codex|opencode] [PATH]",
        help="which agent (default: all, or told per file), then files or folders (default: where it keeps them)",
    )
    command.set_defaults(handler=_import)


def _import(args: argparse.Namespace) -> int:
    from hotloop import InputError, paths
    from hotloop.agent.text import inert
    from hotloop.config import load_config
    from hotloop.sessions.imports.sources import AGENTS, default_files, expand, import_files

    sources: list[str] = list(args.sources)
    agent = sources.pop(0) if sources and sources[0] in AGENTS else None
    if sources:
        files = expand(Path(source).expanduser() for source in sources)
        missing = [str(path) for path in files if not path.exists()]
        if missing:
            raise InputError(f"no such file: {missing[0]}")
    else:
        files = [file for name in ([agent] if agent else AGENTS) for file in default_files(name, Path.home())]
    if not files:
        raise InputError(
            f"no {agent or 'Claude Code, Codex or opencode'} sessions found"
            + (" under the given paths" if sources else " in their default folders")
        )
    report = import_files(files, paths.sessions_dir(), agent, load_config().secrets())
    for problem in report.problems:
        print(f"hotloop: warning: {inert(problem)}", file=sys.stderr)
    for imported, written in report.written:
        turns = len(imported.turns)
        side = f" (sub-agent {inert(imported.side_key)})" if imported.side_key else ""
        verb = "re-imported" if written.replaced else "imported"
        print(
            f"{verb} {imported.agent} session {inert(imported.source_id)}{side} as {written.id}:"
            f" {turns} turn{'s' * (turns != 1)}, {written.steps} step{'s' * (written.steps != 1)}"
        )
    return 0 if report.written or not report.problems else 1
