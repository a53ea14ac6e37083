"""A command's processes, found and stopped when its call ends: its process group and what left the group.

On Linux a command's shell runs under a subreaper (subreaper.py): a small process, its parent, that
Linux makes the reaper of its orphaned descendants, so that whatever the command started stays its
descendant even once its own parent has exited. It stays until the sweep is done, then kills and reaps
whatever is still below it before it exits (and does the same if hotloop dies). It is a fork of one
program hotloop starts when a session opens, in a thread (`StartAhead`; else at the first command), and
keeps (`Subreapers`), made ahead and waiting for the call: a few milliseconds a call, where a Python
started per call cost ~19 (benchmarks/shell_reaper.py). Each call's processes also carry two marks of
its own (`Marks`; never the model's call id: nothing the model sees names them, so no command can forge
them): a random tag in their environment (`RUN_ID`) and, under the subreaper, a random hard limit on
file locks (RLIMIT_LOCKS, which Linux has not enforced since 2.4.25). The limit is inherited through
fork, exec, `setsid` and `env -i`, and only CAP_SYS_RESOURCE can raise it back: it is what finds a
call's processes once the command has SIGKILLed its subreaper (`kill -9 $PPID`, the one signal the
subreaper can't ignore) and orphaned a daemon that cleared its environment and left the group. When the
call ends (an exit, a timeout, a cancel), SIGTERM goes to the call's process group, to every process
that carries either mark, and to every descendant of those, of the subreaper (while it lives) or of the
shell (while it runs). SIGKILL follows KILL_GRACE later, to whatever is found then, again until a look
finds nothing (a process forked while /proc was read). /proc is read in a thread, off the event loop.

Measured on Linux against `setsid -f env -i sleep` then `kill -9 $PPID`: the process group and the
tag miss the daemon, the subreaper's tree loses it with the subreaper, and the limit finds it; a
user without CAP_SYS_RESOURCE who tries to raise it back is refused. The alternatives need what a
user may not have (a delegated cgroup; user namespaces for a PID namespace, which is the sandbox),
or would make hotloop itself the subreaper, the parent of every orphan of its MCP servers and hooks
too, which it could neither tell from its own children nor reap, and with no one left to end a call's
processes if hotloop died. The program is a process of its own for that: hotloop adopts nothing, and
the orphans of MCP servers and hooks go to init as before, never to a subreaper of hotloop's.

What escapes: a process the command had started by another, not as its descendant (a daemon that
already runs: `systemd-run --user`, `docker run`, a tmux or screen server, `at`), unless it
inherited a mark; and, once the command has killed its subreaper, a process outside the group and
the tag that lowered its own hard file-locks limit (`ulimit -Hx`, `prlimit`) or that root raised.
Without a subreaper (not Linux, or prctl refused) there is no limit mark, and also a process that
clears its environment (`env -i`) and leaves the group escapes once its parent has gone before the
sweep (a double fork, or any child of a shell that has exited normally), as does one that
overwrites its environment in memory. The sandbox has no such hole: its PID namespace dies with
bwrap, so a sandboxed command runs under no subreaper.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from hotloop.secret_policy import allowed_environment

RUN_ID = "HOTLOOP_RUN_ID"
KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
_POLL = 0.02  # seconds between looks at whether the signalled processes are gone
_ROUNDS = 5  # SIGKILL sweeps at most: each finds what forked while the one before read /proc
SUBREAPER = Path(__file__).with_name("subreaper.py")  # run as a program: see its docstring
_PR_GET_CHILD_SUBREAPER = 37
LOCKS_LIMIT = 10  # RLIMIT_LOCKS, Linux's number: Python's resource module doesn't name it
_LOCKS_LINE = b"Max file locks "  # its line in /proc/PID/limits


@dataclass(frozen=True)
class Marks:
    """What a call's processes carry wherever they go: `tag` in their environment, `limit` as their hard file-locks
    limit (None when no subreaper sets it). `since` is when the call began, in clock ticks since boot: a process
    started earlier is none of the call's, so its marks aren't read."""

    tag: str
    limit: int | None
    since: int

    @classmethod
    def new(cls) -> Marks:
        """A call's own marks, drawn at random; the limit below hotloop's own, so that it may be set."""
        # The earlier of the two clocks: /proc counts a start on one or the other, by the kernel's version.
        clocks = (time.CLOCK_MONOTONIC, getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))
        now = min(map(time.clock_gettime, clocks))
        return cls(secrets.token_hex(16), _new_limit(), int(now * os.sysconf("SC_CLK_TCK")) - 1)


def _new_limit() -> int | None:
    """A hard limit in the upper half of what hotloop may set; None if its own leaves no room, or not on Linux."""
    if not sys.platform.startswith("linux"):
        return None
    hard = resource.getrlimit(LOCKS_LIMIT)[1]
    ceiling = 2**63 if hard == resource.RLIM_INFINITY else min(hard, 2**63)
    return ceiling // 2 + secrets.randbelow(ceiling // 2) if ceiling >= 2**20 else None


class Subreapers:
    """The subreaper program (subreaper.py), started ahead for the sessions that hold it (`hold`), else at the first
    command, and kept: it forks each call's subreaper."""

    def __init__(self) -> None:
        # A command may start it from any event loop's thread, a session from a thread of its own.
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: socket.socket | None = None
        self._holds = 0  # open sessions that started it ahead
        atexit.register(self.close)

    @property
    def pid(self) -> int | None:
        """The program's pid once started (it may have died since); None before."""
        process = self._process
        return None if process is None else process.pid

    @property
    def started(self) -> bool:
        """Whether the program has been started (a start under way is not yet)."""
        return self._requests is not None

    def start(self) -> None:
        """Start the program if it doesn't run; one start under way is waited for, never repeated. An OSError if it
        can't be started. Blocking (a fork and an exec): for a thread, not an event loop."""
        self._running()

    def hold(self) -> int | None:
        """A session's: the program started now (blocking, as `start`) and kept until the session `release`s it; its
        pid. None, and no hold, if it can't be started: the first command tries again and says why."""
        with self._lock:
            try:
                self._start()
            except OSError:
                return None
            self._holds += 1
            return self.pid

    def release(self) -> None:
        """The session's hold let go: with no session left holding it, the program goes as at exit (blocking)."""
        with self._lock:
            self._holds -= 1
            process = self._detach() if self._holds == 0 else None
        _let_go(process, KILL_GRACE)

    def ask(self, control: socket.socket, output: int) -> None:
        """Ask for a call's subreaper, handing it the call's socket and the output pipe's write end (kept open here).

        An OSError if the program can't be started or asked, even once started again.
        """
        for attempt in (1, 2):
            requests = self._running()
            try:
                socket.send_fds(requests, [b"c"], [control.fileno(), output])
                return
            except OSError:  # it died (killed from outside), or hangs: a new one
                with self._lock:
                    _let_go(self._detach(), 0)
                if attempt == 2:
                    raise

    def _running(self) -> socket.socket:
        with self._lock:
            return self._start()

    def _start(self) -> socket.socket:
        if self._process is None or self._process.poll() is not None or self._requests is None:
            _let_go(self._detach(), 0)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                self._process = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(SUBREAPER)],
                    stdin=theirs.fileno(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd="/",
                    # What a command may see anyway: a secret of hotloop's would be readable in its /proc.
                    env=allowed_environment(os.environ),
                    start_new_session=True,  # the terminal's Ctrl-C is hotloop's to handle, not its
                )
            ours.setblocking(False)
            self._requests = ours
        return self._requests

    def close(self) -> None:
        """Let the program go, at exit: it kills whatever is still below it and exits, reaped here if it does soon."""
        with self._lock:
            process = self._detach()
        _let_go(process, KILL_GRACE)

    def _detach(self) -> subprocess.Popen[bytes] | None:
        """The program, its socket closed (its EOF is what ends it), no longer this object's."""
        if self._requests is not None:
            self._requests.close()
            self._requests = None
        process, self._process = self._process, None
        return process


def _let_go(process: subprocess.Popen[bytes] | None, wait: float) -> None:
    """Reap the program if it exits within `wait` seconds; one that hangs is left to subprocess's own reaping."""
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)


subreapers = Subreapers()


class StartAhead:
    """A session's start of the program: in a thread at its open, so that neither the open nor the event loop waits
    for it and the first command finds it running; let go at the session's close."""

    def __init__(self) -> None:
        self._task: asyncio.Task[int | None] | None = None

    def start(self, wanted: Callable[[], bool]) -> None:
        """Hold the program if `wanted()` (asked in the thread: it may probe the sandbox) says commands need it."""
        if self._task is None:
            self._task = asyncio.create_task(asyncio.to_thread(_hold_if, wanted))

    async def started(self) -> int | None:
        """Once the start has been made: the pid of the program held (it loads meanwhile); None if none is."""
        return None if self._task is None else await asyncio.shield(self._task)

    async def close(self) -> None:
        """Let go of the hold, once a start still under way has been made: its program goes with the session too."""
        if await self.started() is not None:
            self._task = None
            await asyncio.to_thread(subreapers.release)


def _hold_if(wanted: Callable[[], bool]) -> int | None:
    return subreapers.hold() if wanted() else None


def request(argv: Sequence[str], env: Mapping[str, str], folder: Path, limit: int | None) -> bytes:
    """A call's request as its subreaper reads it (see subreaper.py); a ValueError for a NUL, as subprocess's."""
    fields = [
        "-" if limit is None else str(limit),
        str(folder),
        str(len(argv)),
        *argv,
        *(f"{name}={value}" for name, value in env.items()),
    ]
    body = b"\0".join(map(os.fsencode, fields))
    if body.count(b"\0") != len(fields) - 1:
        raise ValueError("embedded null byte")
    return len(body).to_bytes(8, "big") + body


@cache
def subreaper_problem() -> str | None:
    """Why commands can't run under a subreaper here, in one line; None if they can."""
    if not sys.platform.startswith("linux"):
        return "a subreaper (prctl PR_SET_CHILD_SUBREAPER) is Linux's alone"
    if not sys.executable:
        return "no Python executable to run the subreaper with"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int()
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return f"prctl(PR_GET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as error:
        return f"prctl can't be called: {error}"
    return None


async def stop(
    group: int | None,
    marks: Marks,
    exited: asyncio.Future[None],
    closed: asyncio.Future[None],
    reaper: int | None = None,
) -> None:
    """Stop everything of a call: SIGTERM, then SIGKILL after KILL_GRACE, or at once if this wait is cancelled.

    `group` is the shell's pid and process group (None if it never started); `exited` and `closed` say it
    has exited and its pipe closed; `reaper`, the subreaper's pid, if the shell runs under one that lives.
    """
    try:
        found = await asyncio.to_thread(sweep, marks, group, not exited.done(), signal.SIGTERM, reaper)
        if found:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_GRACE):
                    # The shell gone and the pipe closed: what could still clean up has had its chance.
                    await asyncio.wait([exited, closed])
                    while any(map(alive, found)):
                        await asyncio.sleep(_POLL)
    finally:
        # In the thread, the kill happens even if this await is cancelled in turn.
        await asyncio.to_thread(_kill, marks, group, not exited.done(), reaper)


def _kill(marks: Marks, group: int | None, running: bool, reaper: int | None) -> None:
    """SIGKILL the call's processes until a sweep finds none, or _ROUNDS have."""
    for _ in range(_ROUNDS):
        if not sweep(marks, group, running, signal.SIGKILL, reaper):
            return


def sweep(
    marks: Marks, group: int | None, running: bool, number: signal.Signals, reaper: int | None = None
) -> set[int]:
    """Send `number` to the call's processes (see `members`), then to its group; returns the ones found."""
    found = members(marks, group, running, reaper)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)
    if group is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, number)  # one forked while /proc was read
    return found


def members(marks: Marks, group: int | None, running: bool, reaper: int | None = None) -> set[int]:
    """The live processes in `group`, carrying one of `marks`, or descended from one, the shell or `reaper`.

    The shell is `group`'s leader; its descendants are looked for only while it runs (`running`), since
    once it has exited, its pid may be another process's. `reaper`, the subreaper, is alive until released
    after the sweep: every descendant of its is one, never itself.
    """
    parents: dict[int, int] = {}
    roots = [pid for pid in (group if running else None, reaper) if pid is not None]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            state, parent, pgid, started = _stat(pid)
            if state in "ZX":
                continue
            parents[pid] = parent
            if (group is not None and pgid == group) or (started >= marks.since and _marked(pid, marks)):
                roots.append(pid)
        except (OSError, ValueError):  # gone meanwhile, or another user's
            continue
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    found: set[int] = set()
    while roots:
        pid = roots.pop()
        if pid in parents and pid not in found:
            found.add(pid)
            roots += children[pid]
    found.discard(os.getpid())
    if reaper is not None:
        found.discard(reaper)
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie has ended, whether or not anyone reaps it."""
    try:
        return _stat(pid)[0] not in "ZX"
    except (OSError, ValueError):
        return False


def _stat(pid: int) -> tuple[str, int, int, int]:
    """A process's state letter, its parent's pid, its process group and when it started (clock ticks since boot)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold anything
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def _marked(pid: int, marks: Marks) -> bool:
    """Whether a process carries the call's limit, or its tag in its environment."""
    if marks.limit is not None:
        with open(f"/proc/{pid}/limits", "rb") as limits:
            for line in limits:
                if line.startswith(_LOCKS_LINE):
                    if line.split()[4] == str(marks.limit).encode():  # Max file locks SOFT HARD locks
                        return True
                    break
    with open(f"/proc/{pid}/environ", "rb") as environ:
        return f"{RUN_ID}={marks.tag}".encode() in environ.read().split(b"\0")
