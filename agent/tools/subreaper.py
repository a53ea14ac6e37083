"""A program, not a module: runs a command's shell as a child subreaper, and stays until hotloop has swept.

    python -I -S subreaper.py LIMIT SHELL ARG...

Linux's `prctl(PR_SET_CHILD_SUBREAPER)` makes this process the reaper of its orphaned descendants:
a process whose parent exits is reparented here, not to init, so every process the command started
stays a descendant of this one, whatever it did to its environment or its session. hotloop finds
them so (processes.py), and this process is not let go until hotloop has swept them.

It talks to hotloop on its stdin, a socket; the shell gets /dev/null there, and the output pipe on
stdout and stderr (which this process then lets go of, so the pipe closes when the command's
processes have). Lines it writes: `pid PID STARTED` once the shell runs (STARTED on the monotonic
clock), `exit CODE` when it has exited (negative: killed by that signal), or `error ERRNO MESSAGE`
if it could not start. EOF on the socket is the release, and also what it reads if hotloop dies:
whatever is still below it gets SIGKILL and is reaped, then it exits.

The shell gets exactly the environment this process was started with (read from /proc/self/environ:
Python's start may add LC_CTYPE to os.environ), the signal dispositions and mask hotloop's subprocess
gives (SIGPIPE and SIGXFSZ back to their defaults; the handlers here end at exec), and a session of its
own, as when hotloop starts it directly. One thing differs: its hard and soft file-locks limit is
LIMIT (`-` for none), the call's mark (processes.py), which outlasts this process. Imports the
standard library only, and fast: it runs before every command.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import sys
import time

TYPE_CHECKING = False  # not typing's: importing typing would double this program's start
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal  # `signal` without its enums: it imports enum, a third of this program's start

PR_SET_CHILD_SUBREAPER = 36
LOCKS_LIMIT = 10  # RLIMIT_LOCKS: unenforced, so a mark that changes nothing the command can do
CONTROL = 0  # the socket to hotloop
# Signals the command might send its parent ($PPID) that would end this process: handled, so ignored (a
# handler, unlike SIG_IGN, is not passed on to the shell). SIGKILL can't be: hotloop then finds them by their marks.
SHIELDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main(args: list[str]) -> int:
    limit, argv = None if args[0] == "-" else int(args[0]), args[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _tell(f"error {ctypes.get_errno()} prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
        return 1
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that the wakeup fd hears of each child's exit
    for number in SHIELDED:
        if signal.getsignal(number) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(number, _ignore)
    with open("/proc/self/environ", "rb") as environ:
        env = dict(entry.split(b"=", 1) for entry in environ.read().split(b"\0") if b"=" in entry[1:])
    null = os.open(os.devnull, os.O_RDWR)
    why_read, why_write = os.pipe()  # closed by the shell's exec, or carries why it failed
    started = time.monotonic()
    # fork and exec, as subprocess does: posix_spawn would leave glibc's internal signals (32, 33) ignored.
    # This process has no thread but its main one, so forking it is safe.
    shell = os.fork()
    if shell == 0:
        try:
            os.setsid()
            os.dup2(null, 0)
            for number in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python's start; restored, as subprocess does
                signal.signal(number, signal.SIG_DFL)
            if limit is not None:  # drawn below hotloop's own limit, which is this process's: lowering it can't fail
                resource.setrlimit(LOCKS_LIMIT, (limit, limit))
            os.execve(argv[0], argv, env)
        except OSError as error:
            os.write(why_write, f"{error.errno or 0} {error.strerror or error}".encode())
        finally:
            os._exit(127)
    os.close(why_write)
    why = b"".join(iter(lambda: os.read(why_read, 512), b""))
    os.close(why_read)
    if why:
        os.waitpid(shell, 0)
        _tell(f"error {why.decode(errors='replace')}")
        return 1
    os.dup2(null, 1)  # the output pipe is the command's alone: it closes when the command's processes are gone
    os.dup2(null, 2)
    _tell(f"pid {shell} {started!r}")
    while True:
        if _reap(shell):
            shell = 0  # reported; the pid may be another process's from now on
        ready, _, _ = select.select([CONTROL, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 512)
        if CONTROL in ready and not os.read(CONTROL, 512):
            break  # released (or hotloop is gone)
    _kill_all()
    return 0


def _reap(shell: int) -> bool:
    """Reap every child that has exited; True if the shell was one of them (its status is then told)."""
    told = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return told
        if pid == 0:
            return told
        if pid == shell:
            _tell(f"exit {os.waitstatus_to_exitcode(status)}")
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


def _tell(line: str) -> None:
    try:
        os.write(CONTROL, f"{line}\n".encode())
    except OSError:
        return  # hotloop is gone: its EOF comes next


def _ignore(number: int, frame: object) -> None:
    pass


if __name__ == "__main__":
    code = main(sys.argv[1:])
    os._exit(code)  # nothing to flush or finalize: a faster end
