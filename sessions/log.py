"""The session log: every event of a session, one JSON object per line, append-only.

The first line is a header naming the session. Events are buffered and written at step,
tool and turn boundaries, and at least every quarter second while a stream runs, so a
killed process loses at most that much. Files are private (0600, in a 0700 folder), and
any secret value the log is told about is masked before it reaches the disk. A log is
locked while a process writes it, so two hotloop processes never append to one session.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import msgspec

from hotloop import InputError, __version__
from hotloop.agent.events import (
    AgentEvent,
    Notice,
    SessionTitled,
    StepFinished,
    ToolFinished,
    TurnFinished,
    TurnStarted,
    encode,
)
from hotloop.agent.pricing import StepPricer
from hotloop.sessions.caps import LogCaps
from hotloop.sessions.masking import Masker
from hotloop.sessions.summary import Summary, read_summary, summary_bytes, summary_path

FORMAT_VERSION = 1
FLUSH_INTERVAL = 0.25
_FLUSH_ON = (TurnStarted, StepFinished, ToolFinished, TurnFinished, Notice, SessionTitled)
_SUMMARY_ON = (TurnFinished, SessionTitled)


class SessionHeader(msgspec.Struct, frozen=True, tag="session", tag_field="type", omit_defaults=True):
    """`system` is the system prompt the session ran with, so a resumed session sends the same bytes.

    A fork names its `parent` and the turn it was forked at, and keeps the parent's `cache_key`;
    fields at their default are left out, so a log that isn't a fork doesn't mention forks. A session
    `hotloop watch` recorded from another agent's traffic names its `origin` (`watch:claude-cli/2.1.332`)
    and, for a side request's conversation (a title, a sub-agent), the conversation it branched from
    (`side_of`).
    """

    id: str
    format: int
    started: float
    hotloop: str
    provider: str
    model: str
    workspace: str
    system: str = ""
    base_url: str = ""  # the provider's server, so a resumed session goes back to it
    parent: str = ""  # the session this one was forked from
    forked_at_turn: int = 0
    cache_key: str = ""  # the key its requests are routed to a cache by, when it isn't the id (a fork's)
    cost_per_hour: float | None = None  # the config's price of the provider's server, when it has one
    origin: str = ""  # who made the requests, when not hotloop's own agent: `watch:<the client's user-agent>`
    side_of: str = ""  # a watched side request's conversation: the session it branched from

    def pricer(self) -> StepPricer:
        """Prices the session's steps by the log alone: its provider's server here, a switch's as it comes."""
        return StepPricer(
            servers={self.provider: self.base_url} if self.base_url else {},
            hourly={self.provider: self.cost_per_hour} if self.cost_per_hour is not None else {},
        )

    @property
    def routing_key(self) -> str:
        """The `prompt_cache_key` the session's requests carry: a fork's is its parent's, so it reads its cache."""
        return self.cache_key or self.id


class SessionInUse(InputError):
    """Another hotloop process is writing this session; `str(error)` says which."""


def new_session_id() -> str:
    return os.urandom(4).hex()


class SessionLog:
    """Appends a session's events to `<folder>/<start time>_<id>.jsonl`, keeping its summary beside it."""

    def __init__(
        self, path: Path, session_id: str, fd: int, summary: Summary, secrets_to_mask: Iterable[str] = ()
    ) -> None:
        self.path = path
        self.id = session_id
        self._masker = Masker(list(secrets_to_mask))
        self._caps = LogCaps()
        self._buffer: list[bytes] = []
        self._last_flush = time.monotonic()
        self._fd: int | None = fd
        self._summary = summary
        self.error: OSError | None = None

    @classmethod
    def create(
        cls,
        folder: Path,
        *,
        provider: str,
        model: str,
        workspace: Path,
        system: str = "",
        base_url: str = "",
        cost_per_hour: float | None = None,
        secrets_to_mask: Iterable[str] = (),
        forked_from: SessionHeader | None = None,
        forked_at_turn: int = 0,
        origin: str = "",
        side_of: str = "",
        session_id: str | None = None,
    ) -> SessionLog:
        """A new log; `forked_from` (a parent's header) makes it a fork of that session at `forked_at_turn`;
        `origin` and `side_of` mark a watched session (`SessionHeader`); `session_id` is one the session was
        already known by (its requests' routing key before the log existed), else a new one."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        session_id = session_id or new_session_id()
        started = time.time()
        stamp = datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
        path = folder / f"{stamp}_{session_id}.jsonl"
        fd = _locked(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        own_since = started if forked_from is not None else 0.0
        summary = Summary(costed=True, own_since=own_since)
        summary.learn(provider, base_url, cost_per_hour)
        log = cls(path, session_id, fd, summary, secrets_to_mask)
        header = SessionHeader(
            session_id,
            FORMAT_VERSION,
            started,
            __version__,
            provider,
            model,
            str(workspace),
            system,
            base_url,
            cost_per_hour=cost_per_hour,
            origin=origin,
            side_of=side_of,
        )
        if forked_from is not None:
            header = msgspec.structs.replace(
                header, parent=forked_from.id, forked_at_turn=forked_at_turn, cache_key=forked_from.routing_key
            )
        log._write_line(msgspec.json.encode(header))
        log.flush()
        log._summary.size = log._written()
        return log

    @classmethod
    def reopen(cls, path: Path, session_id: str, header_size: int, secrets_to_mask: Iterable[str] = ()) -> SessionLog:
        """Append to an existing session (resume). Raises SessionInUse if another process writes it."""
        fd = _locked(path, os.O_WRONLY | os.O_APPEND)
        if not _ends_a_line(path):
            os.write(fd, b"\n")  # a line torn by a killed process stays alone on its line
        return cls(path, session_id, fd, read_summary(path, header_size), secrets_to_mask)

    def write(self, event: AgentEvent) -> None:
        if self._fd is None:
            return  # closed, or stopped by a write error
        kept = self._caps.capped(event)
        for masked in self._masker.events(kept) if kept is not None else ():
            self._write_line(encode(masked))
        self._summary.observe(event)
        if isinstance(event, _FLUSH_ON) or time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()
        if isinstance(event, _SUMMARY_ON):
            self._save_summary()

    def _write_line(self, line: bytes) -> None:
        self._buffer.append(self._masked(line) + b"\n")

    def _masked(self, data: bytes) -> bytes:
        return self._masker.masked(data)

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
                self._stop(error)
        self._last_flush = time.monotonic()

    def _written(self) -> int:
        return os.fstat(self._fd).st_size if self._fd is not None else self._summary.size

    def _save_summary(self) -> None:
        """Replace the summary beside the log; readers never see half of one."""
        if self._fd is None:
            return
        self._summary.size = self._written()
        target = summary_path(self.path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(self._masked(summary_bytes(self._summary)))
            os.replace(temporary, target)
        except OSError as error:
            self._stop(error)

    def _stop(self, error: OSError) -> None:
        self.error = error
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            for held in self._masker.release():
                self._write_line(encode(held))
            self.flush()
            self._save_summary()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _locked(path: Path, flags: int) -> int:
    """Open `path` and take its write lock, or raise SessionInUse."""
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SessionInUse(f"session {path.stem.rsplit('_', 1)[-1]} is open in another hotloop process") from None
    return fd


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as file:
        if file.seek(0, os.SEEK_END) == 0:
            return True
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


def is_in_use(path: Path) -> bool:
    """Whether another process holds the session's write lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put in the folder can't hold the look
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
