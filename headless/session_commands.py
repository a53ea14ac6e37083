"""`hotloop sessions list|show|export|delete` and `hotloop replay`.

Every command takes a session id or a unique prefix of one; a problem with a session is one
line on stderr (`SessionError`), shown by the CLI. What a log holds (prompts, answers, titles,
model and tool names) and file names are printed inert (`agent/text.py`); Markdown and HTML
exports are inert already.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hotloop import paths
from hotloop.agent.events import AgentEvent
from hotloop.agent.figures import short_model
from hotloop.agent.text import inert
from hotloop.sessions.store import (
    LoggedSession,
    SessionError,
    delete_session,
    find_session,
    list_sessions,
    read_session,
    session_id_of,
)

if TYPE_CHECKING:
    from hotloop.sessions.waterfall import TurnWaterfall


def run(args: argparse.Namespace) -> int:
    command = args.sessions_command
    if command == "list":
        return list_command(args.limit, args.search)
    path = find_session(paths.sessions_dir(), args.session)
    if command == "show":
        return waterfall(path) if args.waterfall else show(path)
    if command == "export":
        return export(path, args.format, args.output)
    delete_session(path)
    _print(f"deleted session {session_id_of(path)} ({path})")
    return 0


def list_command(limit: int, search: str | None) -> int:
    folder = paths.sessions_dir()
    listing = list_sessions(folder, search)
    for problem in listing.problems:
        _print(f"hotloop: warning: {problem}", file=sys.stderr)
    if not listing.sessions:
        _print(f"no sessions match {search!r}" if search else f"no sessions yet in {folder}")
        return 0
    _print(f"{'id':<9} {'started':<16} {'turns':>5} {'tokens':>9}  {'model':<28} title")
    for s in listing.sessions[:limit]:
        started = datetime.fromtimestamp(s.started).strftime("%Y-%m-%d %H:%M")
        tokens = f"{s.tokens:,}" if s.tokens is not None else "–"
        model = f"{s.provider}/{short_model(s.model)}"
        _print(f"{s.id:<9} {started:<16} {s.turns:>5} {tokens:>9}  {model:<28.28} {s.title}")
    if len(listing.sessions) > limit:
        _print(f"… {len(listing.sessions) - limit} older (--limit N shows more)")
    return 0


def show(path: Path) -> int:
    from rich.console import Console
    from rich.markdown import Markdown

    from hotloop.sessions.export import export as render

    session = read_session(path)
    _warn(session.warnings)
    text = render(session, "md")
    if sys.stdout.isatty():
        Console().print(Markdown(text))
    else:
        sys.stdout.write(text)
    return 0


def waterfall(path: Path) -> int:
    from rich.console import Console

    from hotloop.sessions.waterfall import prefill_cost, render, waterfalls

    session = read_session(path)
    _warn(session.warnings)
    console = Console(highlight=False)
    cost = prefill_cost(session.events)
    for turn in waterfalls(session.events):
        console.print(render(_inert(turn), console.width, cost))
    return 0


def _inert(turn: TurnWaterfall) -> TurnWaterfall:
    """The turn with its prompt and its bars' labels (model and tool names) made inert."""
    return replace(turn, prompt=inert(turn.prompt), bars=[replace(bar, label=inert(bar.label)) for bar in turn.bars])


def export(path: Path, fmt: str, output: Path | None) -> int:
    from hotloop.sessions.export import export as render

    session = read_session(path)
    _warn(session.warnings)
    text = render(session, fmt)
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        # The conversation may hold private text: the file is as private as the log.
        descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as error:
        raise SessionError(f"cannot write {output}: {error.strerror}") from None
    _print(f"wrote session {session.header.id} to {output}", file=sys.stderr)
    return 0


def replay_session(reference: str | None) -> LoggedSession:
    """The session `hotloop replay` redraws (the latest by default), its unreadable lines said on stderr."""
    session = read_session(find_session(paths.sessions_dir(), reference))
    _warn(session.warnings)
    return session


def print_replay(session: LoggedSession, speed: float) -> int:
    """`hotloop replay --headless`: the session printed again, as `hotloop run` printed it."""
    import asyncio

    return asyncio.run(_print_replay(session.events, speed))


async def _print_replay(events: list[AgentEvent], speed: float) -> int:
    from hotloop.headless.printer import Printer
    from hotloop.sessions.replay import paced

    printer = Printer()
    async for event in paced(events, speed):
        printer(event)
    printer.close()
    return 0


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        _print(f"hotloop: warning: {warning}", file=sys.stderr)


def _print(line: str, file: TextIO | None = None) -> None:
    """`print`, inert."""
    print(inert(line), file=file)
