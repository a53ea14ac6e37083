"""The session log: every event of a session, one JSON object per line, append-only.

The first line is a header naming the session, written before `create` returns. The caller's
thread only keeps each event; at every turn start, step end, tool end, turn end, notice and title,
and at least every quarter second while a stream runs, it hands them to the process's writer
thread (`writer.py`), which caps, masks, encodes and appends them (all a log handed over before the
thread took it, in one write), and keeps the summary beside the log, saved at most once a second and
at close. So no encoding, pricing, disk write or rename runs on the caller's thread (an event loop)
but in `flush` and `close`, which wait for the disk.

What SIGKILL loses: the events not yet handed over (less than a quarter second of a stream; never
a finished step, tool or turn, which are handed over as they come) and what the writer thread had
not yet written (typically what the last 20 ms handed over, `writer.GATHER`; more while a disk stalls). A
summary older than its log is caught up from the log by its reader. A process that exits without
closing its logs (SIGTERM handled, a return from main) still writes all it handed over: the
writer thread is drained at exit.

Files are private (0600, in a 0700 folder), and any secret value the log is told about is masked
before it reaches the disk. A log is locked while a process writes it, so two hotloop processes
never append to one session.
"""

from __future__ import annotations

import asyncio
import collections
import errno
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
    SideOf,
    StepFinished,
    ToolFinished,
    TurnFinished,
    TurnStarted,
    encode,
    encode_lines,
)
from hotloop.agent.pricing import StepPricer
from hotloop.sessions.caps import LogCaps
from hotloop.sessions.masking import Masker
from hotloop.sessions.summary import Sidecar, Summary, read_summary, summary_path
from hotloop.sessions.writer import WRITER

FORMAT_VERSION = 1
FLUSH_INTERVAL = 0.25
SUMMARY_INTERVAL = 1.0  # seconds between two saves of a log's summary
FLUSH_WAIT = 30.0  # seconds `flush` and `close` wait for the disk before saying it didn't take the log
# By type, not `isinstance` (a failing one costs four times as much on a struct class): every event is looked up.
_FLUSH_ON = frozenset({TurnStarted, StepFinished, ToolFinished, TurnFinished, Notice, SessionTitled, SideOf})
_SUMMARY_ON = frozenset({TurnFinished, SessionTitled, SideOf})


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
    """Appends a session's events to `<folder>/<start time>_<id>.jsonl`, keeping its summary beside it.

    The caller's thread only keeps each event; at a boundary it hands them to the process's writer
    thread (`writer.WRITER`), which alone caps, masks, encodes and appends them once the header is
    written, and keeps and saves the summary.
    """

    def __init__(
        self, path: Path, session_id: str, fd: int, summary: Summary, secrets_to_mask: Iterable[str] = ()
    ) -> None:
        self.path = path
        self.id = session_id
        self._masker = Masker(list(secrets_to_mask))
        self._caps = LogCaps()
        self._buffer: list[AgentEvent] = []  # the events not yet handed over
        # Handed over, not yet taken by the writer thread; one job takes all a log was handed meanwhile (a watched
        # request's turn start, step end and turn end, handed over in one turn of the loop, are one write).
        self._ready: collections.deque[list[AgentEvent]] = collections.deque()
        self._queued = False
        self._last_flush = time.monotonic()
        self._closed = False
        # The writer thread's alone once the log is made: the file, how much it holds, the summary of that, and
        # whether a save of it is waiting (one every SUMMARY_INTERVAL seconds at most).
        self._fd: int | None = fd
        self._written = os.fstat(fd).st_size
        self._sidecar = Sidecar(summary)
        self._save_waiting = False
        self._saved_at = -SUMMARY_INTERVAL
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
        summary = Summary(costed=True, own_since=started if forked_from is not None else 0.0)
        summary.learn(provider, base_url, cost_per_hour)
        log = cls(path, session_id, fd, summary, secrets_to_mask)
        line = log._masker.masked(msgspec.json.encode(header)) + b"\n"
        try:
            _write_all(fd, line)  # here, not on the writer thread: a reader finds the session as soon as it exists
        except OSError as error:
            log._stop(error)
        log._written = len(line)
        return log

    @classmethod
    def reopen(cls, path: Path, session_id: str, header_size: int, secrets_to_mask: Iterable[str] = ()) -> SessionLog:
        """Append to an existing session (resume). Raises SessionInUse if another process writes it."""
        fd = _locked(path, os.O_WRONLY | os.O_APPEND)
        if not _ends_a_line(path):
            os.write(fd, b"\n")  # a line torn by a killed process stays alone on its line
        return cls(path, session_id, fd, read_summary(path, header_size), secrets_to_mask)

    def write(self, event: AgentEvent) -> None:
        if self._closed or self.error is not None:
            return  # closed, or stopped by a write error
        self._buffer.append(event)
        if type(event) in _FLUSH_ON or time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self._hand_over()

    def _hand_over(self) -> None:
        """Give the writer thread the events kept: on disk moments later (`flush` waits for them)."""
        self._last_flush = time.monotonic()
        if self._buffer:
            self._ready.append(self._buffer)
            self._buffer = []
            if not self._queued:
                self._queued = True
                WRITER.submit(self._write_ready)

    def flush(self, timeout: float = FLUSH_WAIT) -> bool:
        """Write what is kept and wait, at most `timeout` seconds, until it is on disk; whether it is.

        A failing disk stops the log (see `error`), never the run.
        """
        if self._closed or self.error is not None:
            return False
        self._hand_over()
        return WRITER.done(timeout) and self.error is None

    async def synced(self, timeout: float = FLUSH_WAIT) -> bool:
        """`flush` for a caller on an event loop: the loop goes on while the disk takes what is kept."""
        if self._closed or self.error is not None:
            return False
        self._hand_over()
        try:
            await asyncio.wait_for(WRITER.settled(), timeout)
        except TimeoutError:
            return False
        return self.error is None

    def close(self, timeout: float = FLUSH_WAIT) -> None:
        """Write everything, save the summary and let the session go; waits for the disk at most `timeout` s."""
        if self._closed:
            return
        self._closed = True
        events, self._buffer = self._buffer, []
        WRITER.submit(lambda: self._close_out(events))
        if not WRITER.done(timeout) and self.error is None:
            self.error = TimeoutError(
                errno.ETIMEDOUT, f"the disk had not taken the log's last writes after {timeout:g} s"
            )

    # -- on the writer thread --------------------------------------------------------------

    def _taken(self) -> list[AgentEvent]:
        """All the caller has handed over so far. Cleared first: a hand-over after it queues a job of its own."""
        self._queued = False
        events: list[AgentEvent] = []
        while self._ready:
            events += self._ready.popleft()
        return events

    def _write_ready(self) -> None:
        if events := self._taken():
            self._write_out(events)

    def _write_out(self, events: list[AgentEvent], closing: bool = False) -> None:
        """Append `events` (and, closing, what the masker still holds); a turn's end or a title makes a save due."""
        if self._fd is None:
            return
        caps, masker = self._caps, self._masker
        kept = [capped for event in events if (capped := caps.capped(event)) is not None]
        for event in events:
            self._sidecar.observe(event)
        if masker.secrets:
            lines = [masker.masked(encode(masked)) + b"\n" for event in kept for masked in masker.events(event)]
            lines += [masker.masked(encode(held)) + b"\n" for held in (masker.release() if closing else ())]
            data = b"".join(lines)
        else:
            data = encode_lines(kept)
        try:
            _write_all(self._fd, data)
        except OSError as error:
            self._stop(error)
            return
        self._written += len(data)
        if not self._save_waiting and not _SUMMARY_ON.isdisjoint(map(type, events)):
            self._save_waiting = True
            WRITER.later(self._saved_at + SUMMARY_INTERVAL, self._save_summary)

    def _save_summary(self) -> None:
        """Replace the summary beside the log with one of all it holds; readers never see half of one."""
        self._save_waiting = False
        if self._fd is None:
            return
        self._saved_at = time.monotonic()
        target = summary_path(self.path)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(self._masker.masked(self._sidecar.encoded(self._written)))
            os.replace(temporary, target)
        except OSError as error:
            self._stop(error)

    def _close_out(self, events: list[AgentEvent]) -> None:
        self._write_out(self._taken() + events, closing=True)
        self._save_summary()
        self._let_go()

    def _stop(self, error: OSError) -> None:
        self.error = error
        self._let_go()

    def _let_go(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # and with it the lock
            self._fd = None

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
