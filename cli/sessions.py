"""`hotloop sessions list|show|export|fork|delete` and `hotloop replay`, parsed; `session_commands.py` runs them.

The commands load the session store; this module loads nothing, so `hotloop --version` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hotloop.cli.arguments import LATEST, non_negative, positive_int


def add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = commands.add_parser("replay", help="redraw a saved session as it happened (never calls a provider)")
    replay.add_argument("session", nargs="?", metavar="SESSION", help=f"a session id or its prefix (default: {LATEST})")
    replay.add_argument(
        "--speed", type=non_negative, default=1.0, metavar="N", help="pace × N (default 1; 0 draws it all at once)"
    )
    replay.add_argument("--headless", action="store_true", help="print the replay to stdout, as hotloop run would have")
    replay.set_defaults(handler=_replay)


def add_sessions(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = commands.add_parser("sessions", help="saved sessions")
    session_commands = sessions.add_subparsers(dest="sessions_command", metavar="COMMAND", required=True)
    listing = session_commands.add_parser("list", help="list sessions, newest first")
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N")
    listing.add_argument("--search", metavar="TEXT", help="only sessions whose prompts, id or model contain TEXT")
    listing.add_argument(
        "--from",
        dest="from_agent",
        metavar="AGENT",
        help="only sessions imported or watched from AGENT (claude-code, codex, opencode)",
    )
    show = session_commands.add_parser("show", help="print a session's conversation")
    show.add_argument("session", nargs="?", metavar="ID", help=f"a session id or a unique prefix (default: {LATEST})")
    show.add_argument("--waterfall", action="store_true", help="where each turn's time went: model and tool bars")
    export = session_commands.add_parser("export", help="write a session as Markdown, JSON, HTML or an ATIF trajectory")
    export.add_argument("session", nargs="?", metavar="ID", help=f"a session id or a unique prefix (default: {LATEST})")
    export.add_argument("--format", choices=("md", "json", "html", "atif"), default="md")
    export.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of stdout")
    fork = session_commands.add_parser("fork", help="start a new session holding a session's turns up to one")
    fork.add_argument("session", metavar="ID", help="a session id or a unique prefix")
    fork.add_argument("--turn", type=positive_int, metavar="N", help="the last turn the fork keeps (default: all)")
    delete = session_commands.add_parser("delete", help="delete a session's log (asks first)")
    delete.add_argument("session", metavar="ID", help="a session id or a unique prefix")
    delete.add_argument("-y", "--yes", action="store_true", help="don't ask (needed when stdin is not a terminal)")
    sessions.set_defaults(handler=_sessions)


def _sessions(args: argparse.Namespace) -> int:
    from hotloop import paths
    from hotloop.cli.session_commands import delete, export, fork, list_command, pick_session, show, waterfall
    from hotloop.sessions.store import find_session

    command = args.sessions_command
    if command == "list":
        return list_command(args.limit, args.search, args.from_agent)
    if command == "show":
        pick = pick_session(args.session, "showing")
        return waterfall(pick) if args.waterfall else show(pick)
    if command == "export":
        return export(pick_session(args.session, "exporting"), args.format, args.output)
    if command == "fork":
        return fork(find_session(paths.sessions_dir(), args.session), args.turn)
    return delete(find_session(paths.sessions_dir(), args.session), args.yes)


def _replay(args: argparse.Namespace) -> int:
    from hotloop.cli.session_commands import print_replay, replay_session

    session = replay_session(args.session)
    if args.headless:
        return print_replay(session, args.speed)
    from hotloop.tui.replay_app import ReplayApp

    ReplayApp(session, args.speed).run()
    return 0
