"""The session log: every event of a session, one JSON object per line, append-only.

The first line is a header naming the session. Events are buffered and written at step,
tool and turn boundaries, and at least every quarter second while a stream runs, so a
killed process loses at most that much. Files are private (0600, in a 0700 folder), and
any secret value the log is told about is masked before it reaches the disk.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import msgspec

from hotloop import __version__
from hotloop.agent.events import AgentEvent, Notice, StepFinished, ToolFinished, TurnFinished, TurnStarted, encode

FORMAT_VERSION = 1
FLUSH_INTERVAL = 0.25
_FLUSH_ON = (TurnStarted, StepFinished, ToolFinished, TurnFinished, Notice)
_MASK = b"[redacted]"


class SessionHeader(msgspec.Struct, frozen=True, tag="session", tag_field="type"):
    id: str
    format: int
    started: float
    hotloop: str
    provider: str
    model: str
    workspace: str


def new_session_id() -> str:
    return secrets.token_hex(4)


class SessionLog:
    """Appends a session's events to `<folder>/<start time>_<id>.jsonl`."""

    def __init__(self, path: Path, session_id: str, secrets_to_mask: Iterable[str] = ()) -> None:
        self.path = path
        self.id = session_id
        self._secrets = [s.encode() for s in secrets_to_mask if len(s) >= 4]
        self._buffer: list[bytes] = []
        self._last_flush = time.monotonic()
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self.error: OSError | None = None

    @classmethod
    def create(
        cls, folder: Path, *, provider: str, model: str, workspace: Path, secrets_to_mask: Iterable[str] = ()
    ) -> SessionLog:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        session_id = new_session_id()
        started = time.time()
        stamp = datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
        log = cls(folder / f"{stamp}_{session_id}.jsonl", session_id, secrets_to_mask)
        header = SessionHeader(session_id, FORMAT_VERSION, started, __version__, provider, model, str(workspace))
        log._write_line(msgspec.json.encode(header))
        log.flush()
        return log

    def write(self, event: AgentEvent) -> None:
        if self._fd is None:
            return  # closed, or stopped by a write error
        self._write_line(encode(event))
        if isinstance(event, _FLUSH_ON) or time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def _write_line(self, line: bytes) -> None:
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, _MASK)
        self._buffer.append(line + b"\n")

    def flush(self) -> None:
        """Write what is buffered. A failing disk stops the log (see `error`), never the run."""
        if self._buffer and self._fd is not None:
            data = b"".join(self._buffer)
            self._buffer.clear()
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as error:
                self.error = error
                os.close(self._fd)
                self._fd = None
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
