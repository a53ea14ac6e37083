"""`hotloop whatif [SESSION…] [--since 7d] [--as-model MODEL] [--json]`: saved sessions (hotloop's own, watched,
imported) priced under every cache policy; see `sessions/whatif/`."""

from __future__ import annotations

import argparse
import re
import time

from hotloop import InputError

_SPAN = re.compile(r"(\d+)([mhdw])")
_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}


def add_whatif(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser("whatif", help="saved sessions priced under every cache policy (1h, keep-alive, …)")
    command.add_argument("sessions", nargs="*", metavar="SESSION", help="session ids or prefixes (default: all)")
    command.add_argument(
        "--since", type=_since, metavar="SPAN", help="only sessions written within SPAN (30m, 12h, 7d)"
    )
    command.add_argument("--as-model", metavar="MODEL", help="price the traffic as MODEL (e.g. claude-sonnet-4-5)")
    command.add_argument("--json", action="store_true", help="the policies as JSON")
    command.set_defaults(handler=_whatif)


def _since(text: str) -> float:
    match = _SPAN.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a span like 30m, 12h, 7d or 2w")
    return int(match[1]) * _SECONDS[match[2]]


def _whatif(args: argparse.Namespace) -> int:
    from hotloop import paths
    from hotloop.headless.whatif_view import show
    from hotloop.sessions.store import SessionError, find_session
    from hotloop.sessions.whatif.trace import read_conversation

    folder = paths.sessions_dir()
    if args.sessions:
        files = [find_session(folder, reference) for reference in args.sessions]
    else:
        files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if args.since is not None:
        cutoff = time.time() - args.since
        files = [file for file in files if file.stat().st_mtime >= cutoff]
    conversations, problems = [], []
    for file in files:
        try:
            conversations.append(read_conversation(file))
        except SessionError as error:
            problems.append(str(error))
    if not any(conversation.requests for conversation in conversations):
        raise InputError("no saved session with a request to price" + (f" ({problems[0]})" if problems else ""))
    return show(conversations, args.as_model, args.json, problems)
