"""A command's processes, found and stopped when its call ends: its process group and what left the group.

Each call's processes carry a random tag in their environment (`RUN_ID`; never the model's call id:
nothing the model sees names it, so no command can forge it). When the call ends (an exit, a
timeout, a cancel), SIGTERM goes to the call's process group, to every process whose environment
holds the tag, and to every descendant of those or of the shell (while it runs): `setsid` children
and double forks leave the group, not the tag. SIGKILL follows KILL_GRACE later, to whatever is
found then. /proc is read in a thread, off the event loop.

What escapes: a process that clears its environment (`env -i`) and leaves the group, once its parent
has gone before the sweep (a double fork, or any child of a shell that has exited normally); and
one that overwrites its environment in memory. The sandbox has no such hole: its PID namespace
dies with bwrap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import defaultdict

RUN_ID = "HOTLOOP_RUN_ID"
KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
_POLL = 0.02  # seconds between looks at whether the signalled processes are gone


async def stop(group: int, tag: str, exited: asyncio.Future[None], closed: asyncio.Future[None]) -> None:
    """Stop everything of a call: SIGTERM, then SIGKILL after KILL_GRACE, or at once if this wait is cancelled.

    `group` is the shell's pid and process group; `exited` and `closed` say it has exited and its pipe closed.
    """
    try:
        found = await asyncio.to_thread(sweep, tag, group, not exited.done(), signal.SIGTERM)
        if found:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_GRACE):
                    # The shell gone and the pipe closed: what could still clean up has had its chance.
                    await asyncio.wait([exited, closed])
                    while any(map(alive, found)):
                        await asyncio.sleep(_POLL)
    finally:
        # In the thread, the kill happens even if this await is cancelled in turn.
        await asyncio.to_thread(sweep, tag, group, not exited.done(), signal.SIGKILL)


def sweep(tag: str, group: int, running: bool, number: signal.Signals) -> set[int]:
    """Send `number` to the call's processes (see `members`), then to its group; returns the ones found."""
    found = members(tag, group, running)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, number)  # one forked while /proc was read
    return found


def members(tag: str, group: int, running: bool) -> set[int]:
    """The live processes in `group`, tagged with `tag`, or descended from a tagged one or from the shell.

    The shell is `group`'s leader; its descendants are looked for only while it runs (`running`), since
    once it has exited, its pid may be another process's.
    """
    entry = f"{RUN_ID}={tag}".encode()
    parents: dict[int, int] = {}
    roots = [group] if running else []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            state, parent, pgid = _stat(pid)
            if state in "ZX":
                continue
            parents[pid] = parent
            if pgid == group:
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
