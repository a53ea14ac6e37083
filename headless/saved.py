"""The line at exit, after `hotloop run` and after the app, that names the session saved and how to come back to it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hotloop.agent.text import inert
from hotloop.sessions.store import SessionError, last_written, session_id_of

if TYPE_CHECKING:
    from hotloop.sessions.log import SessionLog


def say_saved(log: SessionLog | None, workspace: Path) -> None:
    """On stderr, at exit: which session was saved and how to come back to it (nothing for a log not kept)."""
    line = saved_line(log.path, workspace) if log is not None else None
    if line is not None:
        print(line, file=sys.stderr)


def saved_line(path: Path, workspace: Path) -> str | None:
    """`session 3f2a91c0 saved · hotloop -c`, naming the session by id when `-c` here would pick another.

    None when the log is gone (a session whose only prompt no provider answered is not kept).
    """
    if not path.exists():
        return None
    session_id = session_id_of(path)
    try:
        latest: Path | None = last_written(path.parent, workspace).path
    except SessionError:
        latest = None
    again = "hotloop -c" if latest == path else f"hotloop --resume {session_id}"
    return inert(f"session {session_id} saved · {again}")
