"""Forking a session: a new log holding a saved session's first turns, and forks listed under their parents.

The fork's log starts with the parent's events of turns 1..N, so it resumes, replays and lists
like any session; its header names the parent and keeps the parent's system prompt and cache
key, so the fork's first request is the parent's prefix byte for byte and reads its cache. The
parent is only read, never locked nor written: a session open in another process can be forked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hotloop.agent.events import Notice, TurnStarted
from hotloop.sessions.log import SessionLog
from hotloop.sessions.resume import closing_events, rebuild
from hotloop.sessions.store import SessionError, SessionSummary, read_session


@dataclass(frozen=True)
class Forked:
    path: Path
    id: str
    parent: str
    turn: int
    warnings: list[str]  # lines of the parent's log that could not be read


def fork_session(parent: Path, turn: int | None = None) -> Forked:
    """A new session beside `parent` holding its turns up to `turn` (all of them if None), or a SessionError."""
    session = read_session(parent)
    header, events = session.header, session.events
    turns = max((event.turn for event in events if isinstance(event, TurnStarted)), default=0)
    if turns == 0:
        raise SessionError(f"session {header.id} has no turn to fork")
    upto = turns if turn is None else turn
    if not 1 <= upto <= turns:
        raise SessionError(f"session {header.id} has no turn {upto} (its turns are 1 to {turns})")
    end = next((n for n, e in enumerate(events) if isinstance(e, TurnStarted) and e.turn > upto), len(events))
    kept = events[:end]
    # A turn the parent never finished (killed, or still running elsewhere) is ended here, as a resume would.
    kept += closing_events(rebuild(kept), kept)
    try:
        with SessionLog.create(
            parent.parent,
            provider=header.provider,
            model=header.model,
            workspace=Path(header.workspace),
            system=header.system,
            base_url=header.base_url,
            cost_per_hour=header.cost_per_hour,
            forked_from=header,
            forked_at_turn=upto,
        ) as log:
            for event in kept:
                log.write(event)
            # Stamped with the last event's time: a replay would otherwise wait out the time until the fork.
            log.write(Notice(level="info", message=f"forked from session {header.id} at turn {upto}", ts=kept[-1].ts))
    except OSError as error:
        raise SessionError(f"cannot write a fork in {parent.parent}: {error.strerror}") from None
    return Forked(log.path, log.id, header.id, upto, session.warnings)


def under_parents(sessions: list[SessionSummary]) -> list[tuple[SessionSummary, int]]:
    """`sessions` in their order, each fork (and watched side request) moved right after its parent; with each, how
    deep it is shown.

    A fork whose parent isn't among `sessions` (deleted, or filtered out) stays where it was, at depth 0.
    """
    ids = {session.id for session in sessions}
    forks: dict[str, list[SessionSummary]] = {}
    for session in sessions:
        if _above(session) in ids:
            forks.setdefault(_above(session), []).append(session)
    placed: list[tuple[SessionSummary, int]] = []
    seen: set[str] = set()

    def place(top: SessionSummary) -> None:
        # A stack, not recursion: watched traffic can chain side requests as deep as a client likes.
        stack = [(top, 0)]
        while stack:
            session, depth = stack.pop()
            if session.id in seen:
                continue
            seen.add(session.id)
            placed.append((session, depth))
            stack += [(fork, depth + 1) for fork in reversed(forks.get(session.id, []))]

    for session in sessions:
        if _above(session) not in ids:
            place(session)
    for session in sessions:  # headers edited into a loop of parents: listed anyway
        place(session)
    return placed


def _above(session: SessionSummary) -> str:
    """The session it is listed under: a fork's parent, or the watched conversation it is a side request of."""
    return session.parent or session.side_of
