"""A command's processes, found and stopped when its call ends: its process group and what left the group.

On Linux a command's shell runs under a subreaper (subreaper.py): a small process, its parent, that
Linux makes the reaper of its orphaned descendants, so that whatever the command started stays its
descendant even once its own parent has exited. It stays until the sweep is done, then kills and
reaps whatever is still below it before it exits (and does the same if hotloop dies). Each call's
processes also carry a random tag in their environment (`RUN_ID`; never the model's call id:
nothing the model sees names it, so no command can forge it). When the call ends (an exit, a
timeout, a cancel), SIGTERM goes to the call's process group, to every process whose environment
holds the tag, and to every descendant of those, of the subreaper, or of the shell (while it
runs): `setsid` children and double forks leave the group, not the tag nor the subreaper's tree.
SIGKILL follows KILL_GRACE later, to whatever is found then. /proc is read in a thread, off the
event loop.

What escapes: a process the command had started by another, not as its descendant (a daemon that
already runs: `systemd-run --user`, `docker run`, a tmux or screen server, `at`), unless it
inherited the tag; and, if the command SIGKILLs the subreaper (`kill -9 $PPID`; other signals it
ignores), what the group and the tag don't find from then on. Without a subreaper (not Linux, or
prctl refused), also a process that clears its environment (`env -i`) and leaves the group, once
its parent has gone before the sweep (a double fork, or any child of a shell that has exited
normally), and one that overwrites its environment in memory. The sandbox has no such hole: its
PID namespace dies with bwrap, so a sandboxed command runs under no subreaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

RUN_ID = "HOTLOOP_RUN_ID"
KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
_POLL = 0.02  # seconds between looks at whether the signalled processes are gone
SUBREAPER = Path(__file__).with_name("subreaper.py")  # run as a program: see its docstring
_PR_GET_CHILD_SUBREAPER = 37


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
    tag: str,
    exited: asyncio.Future[None],
    closed: asyncio.Future[None],
    reaper: int | None = None,
) -> None:
    """Stop everything of a call: SIGTERM, then SIGKILL after KILL_GRACE, or at once if this wait is cancelled.

    `group` is the shell's pid and process group (None if it never started); `exited` and `closed` say it
    has exited and its pipe closed; `reaper`, the subreaper's pid, if the shell runs under one.
    """
    try:
        found = await asyncio.to_thread(sweep, tag, group, not exited.done(), signal.SIGTERM, reaper)
        if found:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_GRACE):
                    # The shell gone and the pipe closed: what could still clean up has had its chance.
                    await asyncio.wait([exited, closed])
                    while any(map(alive, found)):
                        await asyncio.sleep(_POLL)
    finally:
        # In the thread, the kill happens even if this await is cancelled in turn.
        await asyncio.to_thread(sweep, tag, group, not exited.done(), signal.SIGKILL, reaper)


def sweep(tag: str, group: int | None, running: bool, number: signal.Signals, reaper: int | None = None) -> set[int]:
    """Send `number` to the call's processes (see `members`), then to its group; returns the ones found."""
    found = members(tag, group, running, reaper)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)
    if group is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, number)  # one forked while /proc was read
    return found


def members(tag: str, group: int | None, running: bool, reaper: int | None = None) -> set[int]:
    """The live processes in `group`, tagged with `tag`, or descended from a tagged one, the shell or `reaper`.

    The shell is `group`'s leader; its descendants are looked for only while it runs (`running`), since
    once it has exited, its pid may be another process's. `reaper`, the subreaper, is alive until released
    after the sweep: every descendant of its is one, never itself.
    """
    entry = f"{RUN_ID}={tag}".encode()
    parents: dict[int, int] = {}
    roots = [pid for pid in (group if running else None, reaper) if pid is not None]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            state, parent, pgid = _stat(pid)
            if state in "ZX":
                continue
            parents[pid] = parent
            if group is not None and pgid == group:
                roots.append(pid)
                continue
            with open(f"/proc/{name}/environ", "rb") as environ:
                if entry in environ.read().split(b"\0"):
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


def _stat(pid: int) -> tuple[str, int, int]:
    """A process's state letter, its parent's pid and its process group."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        state, parent, pgid = stat.read().rsplit(b")", 1)[1].split()[:3]  # the name, in parentheses, may hold anything
    return state.decode(), int(parent), int(pgid)
