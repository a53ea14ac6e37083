"""A program, not a module: started once by hotloop (processes.py), it forks each command's subreaper.

    python -I -S subreaper.py

Linux's `prctl(PR_SET_CHILD_SUBREAPER)` makes a process the reaper of its orphaned descendants: a
process whose parent exits is reparented to it, not to init, so every process a command started stays
a descendant of the call's subreaper, whatever it did to its environment or its session. hotloop finds
them so (processes.py), and a call's subreaper is not let go until hotloop has swept them.

This process serves on its stdin, a socket of datagrams from hotloop. Each carries two descriptors, a
socket to the call and the write end of the call's output pipe. A fork of this process made ahead waits
for it and takes it (it hands this process the call's socket on a channel of its own), and this process
forks the next: the call's subreaper was ready before the call, where starting Python for each call cost
~19 ms. The call's subreaper reads the call's request on its socket (its length in 8 bytes, then
NUL-separated: the file-locks LIMIT or `-`, the folder, the number of arguments, the arguments, the
environment's `NAME=value`s), spawns the shell as subprocess does (vfork), and writes lines: `pid PID
STARTED REAPER` once the shell runs (STARTED on the monotonic clock, REAPER its own pid), `exit CODE`
when the shell has exited (negative: killed by that signal), or `error ERRNO MESSAGE` if it could not
start. EOF on the socket is the release, and also what it reads if hotloop dies: whatever is still below
it gets SIGKILL and is reaped, then it exits. Once nothing is below it (the shell reaped, no orphan
adopted), it exits at once, since nothing can come any more. Once it is reaped, this process writes
`gone CODE` (its status) and closes its copy of the socket: the socket's EOF tells hotloop the subreaper
is gone.

This process is a subreaper too: the processes of a call whose subreaper the command killed (`kill -9
$PPID`) come here; hotloop's sweep finds them by their marks, and this process reaps them. EOF on its
stdin (hotloop gone) ends it the same way, SIGKILL to all below it first.

The shell gets exactly the environment in the request, the signal dispositions and mask hotloop's
subprocess gives (SIGPIPE and SIGXFSZ back to their defaults; the handlers here end at exec), and a
session of its own, as when hotloop starts it directly. One thing differs: its hard and soft file-locks
limit is LIMIT, the call's mark (processes.py), set on its subreaper first and inherited; it outlasts
the subreaper. Imports the standard library only: its start is what a command that comes before it has loaded waits
for (a session starts it at its open, processes.py).
"""

from __future__ import annotations

import _socket
import ctypes
import errno
import gc
import os
import resource
import select
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
LOCKS_LIMIT = 10  # RLIMIT_LOCKS: unenforced, so a mark that changes nothing the command can do
REQUESTS = 0  # the socket of requests from hotloop
# Signals the command might send its parent ($PPID) that would end its subreaper: handled, so ignored (a
# handler, unlike SIG_IGN, is not passed on to the shell). SIGKILL can't be: hotloop then finds them by their marks.
SHIELDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_INT = 4  # bytes in a descriptor, as SCM_RIGHTS carries it
SPARES = 1  # subreapers forked ahead: more measured no faster for a step's parallel calls

libc = ctypes.CDLL(None, use_errno=True)


def serve() -> int:
    """Keep a subreaper forked ahead for the next request until hotloop closes the socket; reap whatever comes here."""
    # A collection in a fork would write to every object's header, copying the pages it shares with this process.
    gc.disable()
    gc.freeze()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # best effort: each call's own is the one that must hold
    for number in SHIELDED:
        if signal.getsignal(number) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(number, _ignore)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that the wakeup fd hears of each child's exit
    wake = _wakeup()
    requests = _socket.socket(fileno=REQUESTS)
    calls: dict[int, int] = {}  # a call's subreaper → its socket, held until it is reaped and `gone` told
    spares: dict[int, _socket.socket] = {}  # subreapers waiting for a request → this process's end of their channel
    while True:
        while len(spares) < SPARES and (spare := _fork_spare(requests, wake, calls, spares)) is not None:
            spares[spare[0]] = spare[1]
        poller = select.poll()
        # With a spare, the requests are its to read: this process only hears of hotloop's end (POLLHUP).
        poller.register(REQUESTS, 0 if spares else select.POLLIN)
        poller.register(wake[0], select.POLLIN)
        channels = {channel.fileno(): pid for pid, channel in spares.items()}
        for fd in channels:
            poller.register(fd, select.POLLIN)
        ready = dict(poller.poll())
        if ready.get(REQUESTS, 0) & (select.POLLHUP | select.POLLERR):
            break  # hotloop is gone
        for fd, pid in channels.items():  # before reaping: a spare that took a call and ended is that call's
            if fd in ready:
                taken = _descriptors(spares[pid])
                if taken:
                    calls[pid] = taken[0]
                spares.pop(pid).close()
        if wake[0] in ready:
            os.read(wake[0], 512)
            _reap_calls(calls, spares)
        if REQUESTS in ready:  # no spare could be forked: the request is answered here
            fds = _descriptors(requests)
            if fds:
                _tell(fds[0], f"error {errno.EAGAIN} fork: {os.strerror(errno.EAGAIN)}")
            for fd in fds:
                os.close(fd)
    _kill_all()
    return 0


def _fork_spare(
    requests: _socket.socket, wake: tuple[int, int], calls: dict[int, int], spares: dict[int, _socket.socket]
) -> tuple[int, _socket.socket] | None:
    """A subreaper forked ahead, waiting for a request on `requests`, and this process's end of its channel."""
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()  # this process has no thread but its main one, so forking it is safe
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        code = 1
        try:
            ours.close()
            signal.set_wakeup_fd(-1)
            # Another call's socket held here would keep its EOF from hotloop; another spare's channel, its end.
            for fd in (*wake, *calls.values(), *(channel.fileno() for channel in spares.values())):
                os.close(fd)
            code = _take(requests, theirs)
        finally:
            os._exit(code)
    theirs.close()
    return pid, ours


def _take(requests: _socket.socket, channel: _socket.socket) -> int:
    """The spare: take the next request, hand its socket to the program (for `gone`), and serve the call."""
    fds = _descriptors(requests)
    if len(fds) != 2:
        return 0  # hotloop is gone (or sent no call): nothing to serve
    control, output = fds
    channel.sendmsg([b"t"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, control.to_bytes(_INT, sys.byteorder))])
    channel.close()
    requests.detach()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, REQUESTS)  # not closed: descriptors 0 to 2 stay taken, so none of the call's lands there
    os.close(null)
    return call(control, output)


def _descriptors(channel: _socket.socket) -> list[int]:
    """The descriptors the next datagram on `channel` carries (none at its end, or for one that carries none)."""
    try:
        _, ancillary, _, _ = channel.recvmsg(1, _socket.CMSG_SPACE(2 * _INT), _socket.MSG_CMSG_CLOEXEC)
    except OSError:
        return []
    return [
        int.from_bytes(payload[at : at + _INT], sys.byteorder, signed=True)
        for level, kind, payload in ancillary
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
        for at in range(0, len(payload) - len(payload) % _INT, _INT)
    ]


def _reap_calls(calls: dict[int, int], spares: dict[int, _socket.socket]) -> None:
    """Reap every child that has exited; for a call's subreaper, tell its status and let go of its socket."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control = calls.pop(pid, None)
        if control is not None:
            _tell(control, f"gone {os.waitstatus_to_exitcode(status)}")
            os.close(control)
        elif pid in spares:
            spares.pop(pid).close()


def call(control: int, output: int) -> int:
    """A call's subreaper: run its shell, tell hotloop, reap what it adopts until released, then kill what is left."""
    request = _request(control)
    if request is None:
        return 0  # hotloop went before asking
    limit, folder, argv, env = request
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # not inherited through fork: each call sets its own
        _tell(control, f"error {ctypes.get_errno()} prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
        return 1
    wake, _ = _wakeup()
    if limit is not None:  # this process's own, which the shell inherits; below hotloop's, so lowering it can't fail
        resource.setrlimit(LOCKS_LIMIT, (limit, limit))
    null = os.open(os.devnull, os.O_RDWR)
    started = time.monotonic()
    try:
        # subprocess's spawn, as hotloop's own would be: vfork (a fork and an exec of this process cost ~5 ms here),
        # SIGPIPE and SIGXFSZ back to their defaults. posix_spawn would leave glibc's internal signals (32, 33) ignored.
        # Kept, never waited on: collected, it would reap the shell itself, before its status is told.
        process = subprocess.Popen(
            argv, stdin=null, stdout=output, stderr=output, cwd=folder, env=env, start_new_session=True
        )
    except OSError as error:
        _tell(control, f"error {error.errno or 0} {error.strerror or error}")
        return 1
    os.close(output)  # the output pipe is the command's alone: it closes when the command's processes are gone
    shell = process.pid
    _tell(control, f"pid {shell} {started!r} {os.getpid()}")
    while True:
        told, alone = _reap(control, shell)
        if told:
            shell = 0  # reported; the pid may be another process's from now on
        if alone:
            return 0  # nothing is below it, and nothing can come: what it holds for hotloop to sweep is gone
        ready, _, _ = select.select([control, wake], [], [])
        if wake in ready:
            os.read(wake, 512)
        if control in ready and not os.read(control, 512):
            break  # released (or hotloop is gone)
    _kill_all()
    return 0


def _request(control: int) -> tuple[int | None, bytes, list[bytes], dict[bytes, bytes]] | None:
    """The call's request: its file-locks limit, folder, argv and environment; None at EOF."""
    head = _read(control, 8)
    body = _read(control, int.from_bytes(head, "big")) if head is not None else None
    if body is None:
        return None
    limit, folder, count, *rest = body.split(b"\0")
    argv, entries = rest[: int(count)], rest[int(count) :]
    env = dict(entry.split(b"=", 1) for entry in entries)
    return None if limit == b"-" else int(limit), folder, argv, env


def _read(fd: int, size: int) -> bytes | None:
    """Exactly `size` bytes from `fd`; None at EOF before them."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _wakeup() -> tuple[int, int]:
    """A pipe the signal handlers write to, for select: its read end and its write end."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    return wake_read, wake_write


def _reap(control: int, shell: int) -> tuple[bool, bool]:
    """Reap every child that has exited; whether the shell was one of them (its status is then told), and whether
    no child is left (an orphan comes here only from a descendant, so none can come then)."""
    told = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return told, True
        if pid == 0:
            return told, False
        if pid == shell:
            _tell(control, f"exit {os.waitstatus_to_exitcode(status)}")
            told = True


def _kill_all() -> None:
    """SIGKILL every process still below this one, and reap them, until none is left."""
    me = os.getpid()
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0]:
                continue
        except ChildProcessError:
            return
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as stat:
                        parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
                    if parent == me:
                        os.kill(int(name), signal.SIGKILL)  # a child not reaped yet keeps its pid: never another's
                except (OSError, ValueError, IndexError):
                    continue
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _tell(control: int, line: str) -> None:
    try:
        os.write(control, f"{line}\n".encode())
    except OSError:
        return  # hotloop is gone: its EOF comes next


def _ignore(number: int, frame: object) -> None:
    pass


if __name__ == "__main__":
    code = serve()
    os._exit(code)  # nothing to flush or finalize: a faster end
