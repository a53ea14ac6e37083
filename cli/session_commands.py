"""What `hotloop sessions list|show|export|fork|delete` and `hotloop replay` do (`sessions.py` parses them).

Every command takes a session id or a unique prefix of one; `show`, `export` and `replay`
default to the session written to last in this workspace (the latest anywhere if none ran
here, said on stderr). A problem with a session is one line on stderr (`SessionError`),
shown by the CLI. What a log holds (prompts, answers, titles,
model and tool names) and file names are printed inert (`agent/text.py`); Markdown and HTML
exports are inert already.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hotloop import paths
from hotloop.agent.figures import counted, short_model
from hotloop.agent.pricing import CostTotals
from hotloop.agent.text import inert
from hotloop.sessions.fork import under_parents
from hotloop.sessions.store import (
    LoggedSession,
    SessionError,
    check_not_in_use,
    delete_session,
    find_session,
    last_written,
    list_sessions,
    read_session,
    session_id_of,
    summarize,
)
from hotloop.sessions.summary import tokens_total

if TYPE_CHECKING:
    from hotloop.sessions.waterfall import TurnWaterfall


@dataclass(frozen=True)
class Pick:
    path: Path
    note: str | None  # said on stderr once the session is read: it is not from this folder


def pick_session(reference: str | None, doing: str) -> Pick:
    """The session `reference` names; without one, the one written to last here, else anywhere.

    `doing` names what happens to it (`continuing`), for the note about a session from elsewhere.
    """
    folder = paths.sessions_dir()
    if reference is not None:
        return Pick(find_session(folder, reference), None)
    workspace = Path.cwd()
    latest = last_written(folder, workspace)
    if latest.here:
        return Pick(latest.path, None)
    return Pick(
        latest.path,
        f"hotloop: no session has run in {workspace} yet; {doing} {session_id_of(latest.path)},"
        f" the latest anywhere (it ran in {latest.workspace})",
    )


def say_note(pick: Pick) -> None:
    if pick.note is not None:
        _print(pick.note, file=sys.stderr)


def fork(path: Path, turn: int | None) -> int:
    """A new session holding the session's turns up to `turn`; its id goes to stdout, how to go on to stderr."""
    from hotloop.sessions.fork import fork_session

    forked = fork_session(path, turn)
    _warn(forked.warnings)
    _print(forked.id)
    _print(f"forked session {forked.parent} at turn {forked.turn} · hotloop --resume {forked.id}", file=sys.stderr)
    return 0


def delete(path: Path, yes: bool) -> int:
    """Delete a session, asking first on a terminal; without one, only with `--yes`."""
    session_id = session_id_of(path)
    check_not_in_use(path)
    if not yes:
        if not sys.stdin.isatty():
            raise SessionError(f"not deleting session {session_id} unasked: stdin is not a terminal (add --yes)")
        if not _confirmed(path):
            _print(f"kept session {session_id}", file=sys.stderr)
            return 1
    delete_session(path)
    _print(f"deleted session {session_id} ({path})")
    return 0


def _confirmed(path: Path) -> bool:
    """`delete session 3f2a91c0 (12 turns, “title”)? [y/N]`, answered on stdin."""
    try:
        summary = summarize(path)
        title = f", “{summary.title}”" if summary.title else ""
        about = f" ({counted(summary.turns, 'turn')}{title})"
    except SessionError:
        about = ""  # not a readable session: it can still be deleted
    sys.stderr.write(inert(f"delete session {session_id_of(path)}{about}? [y/N] "))
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def list_command(limit: int, search: str | None, from_agent: str | None = None) -> int:
    folder = paths.sessions_dir()
    listing = list_sessions(folder, search)
    if from_agent is not None:
        listing = replace(listing, sessions=[s for s in listing.sessions if came_from(s.origin, from_agent)])
    for problem in listing.problems:
        _print(f"hotloop: warning: {problem}", file=sys.stderr)
    if not listing.sessions:
        wanted = " ".join(f"{how} {what!r}" for how, what in (("match", search), ("from", from_agent)) if what)
        _print(f"no sessions {wanted}" if wanted else f"no sessions yet in {folder}")
        return 0
    _print(f"{'id':<11} {'started':<16} {'turns':>5} {'tokens':>9} {'cost':>13}  {'model':<28} title")
    for s, depth in under_parents(listing.sessions)[:limit]:
        started = datetime.fromtimestamp(s.started).strftime("%Y-%m-%d %H:%M")
        tokens = tokens_total(s.tokens, s.unmeasured)
        model = f"{s.provider}/{short_model(s.model)}"
        # A fork or a side request sits under its parent; one whose parent isn't listed says whose it is.
        ident = f"{'  ' * (depth - 1)}↳ {s.id}" if depth else s.id
        title = f"(fork of {s.parent}) {s.title}" if s.parent and not depth else s.title
        title = f"(side request of {s.side_of}) {title}" if s.side_of and not depth else title
        _print(f"{ident:<11} {started:<16} {s.turns:>5} {tokens:>9} {_cost(s.costs):>13}  {model:<28.28} {title}")
    if len(listing.sessions) > limit:
        _print(f"… {counted(len(listing.sessions) - limit, 'older session')} (--limit N shows more)")
    return 0


# The names an agent goes by in origins: imports use hotloop's name, a watch the client's user-agent.
_ALIASES = {"claude-code": ("claude-code", "claude-cli"), "codex": ("codex",)}


def came_from(origin: str, agent: str) -> bool:
    """Whether a session's origin (`import:claude-code/2.1.332`, `watch:claude-cli/2.1.332`) is `agent`'s."""
    _, _, client = origin.partition(":")
    return bool(origin) and client.casefold().startswith(_ALIASES.get(agent.casefold(), (agent.casefold(),)))


def _cost(costs: CostTotals | None) -> str:
    """A session's dollars in a column: `$0.4210`; `≥$0.4210` when some steps had no price; `–` before costs."""
    if costs is None or not (costs.priced or costs.unknown):
        return "–"
    return costs.short()


def show(pick: Pick) -> int:
    from rich.console import Console
    from rich.markdown import Markdown

    from hotloop.sessions.export import export as render

    session = read_session(pick.path)
    say_note(pick)
    _warn(session.warnings)
    text = render(session, "md")
    if sys.stdout.isatty():
        Console().print(Markdown(text))
    else:
        sys.stdout.write(text)
    return 0


def waterfall(pick: Pick) -> int:
    from rich.console import Console

    from hotloop.sessions.waterfall import lifetime_line, prefill_cost, render, waterfalls

    session = read_session(pick.path)
    say_note(pick)
    _warn(session.warnings)
    console = Console(highlight=False)
    cost = prefill_cost(session.events)
    pricer = session.header.pricer()
    for turn in waterfalls(session.events, pricer):
        console.print(render(_inert(turn), console.width, cost))
    if (lifetime := lifetime_line(session.events, pricer)) is not None:
        console.print(lifetime, markup=False)
    return 0


def _inert(turn: TurnWaterfall) -> TurnWaterfall:
    """The turn with its prompt and its bars' labels (model and tool names) made inert."""
    return replace(turn, prompt=inert(turn.prompt), bars=[replace(bar, label=inert(bar.label)) for bar in turn.bars])


def export(pick: Pick, fmt: str, output: Path | None) -> int:
    from hotloop.sessions.export import export as render

    session = read_session(pick.path)
    say_note(pick)
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
    pick = pick_session(reference, "replaying")
    session = read_session(pick.path)
    say_note(pick)
    _warn(session.warnings)
    return session


def print_replay(session: LoggedSession, speed: float) -> int:
    """`hotloop replay --headless`: the session printed again, as `hotloop run` printed it."""
    import asyncio

    return asyncio.run(_print_replay(session, speed))


async def _print_replay(session: LoggedSession, speed: float) -> int:
    from hotloop.headless.printer import Printer
    from hotloop.sessions.replay import paced

    events, printer = session.events, Printer(pricer=session.header.pricer())
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
