"""run_shell's optional sandbox: bubblewrap (`bwrap`), with the workspace the only place it can write.

What it protects: writes outside the workspace (the filesystem is bound read-only, /tmp is a private
tmpfs that vanishes with the command), the network (an empty network namespace unless `network` is
on), and other processes (a PID namespace of its own: when bwrap dies, everything in it dies too).
Inside the workspace, `.git/hooks` and `.git/config` are read-only, so a command can't plant a hook
the user's next `git commit` runs, and so are hotloop's own folders (config, data) when they sit
there; a missing one is stood in for by an empty read-only folder (left behind, empty, in the
workspace), so it can't be made either.

No network means no Unix socket outside the workspace either: a read-only bind still lets a
process connect() to a socket (Docker's, an ssh or gpg agent's). /tmp, /var/tmp, /run (and
/var/run, where it is a folder of its own) are private tmpfs, /dev is a fresh one, and every other
socket bound on the host's filesystem (listed in /proc/net/unix) has /dev/null bound over it.
Abstract sockets belong to the network namespace, so the empty one has none. What that listing
misses stays reachable: a socket bound by a relative path, or by a process in another network
namespace, outside the tmpfs folders.

What it doesn't protect: reads. Everything the user can read stays readable, ~/.ssh and ~/.aws
included; the environment is an allowlist (`secret_policy.py`), so credentials in variables stay
out. Nor does it bound CPU or memory. Tools that write to caches in the home folder (pip, cargo,
npm) fail read-only there.

When the sandbox can't be provided (no bwrap on PATH, or bwrap can't make namespaces here: user
namespaces off, a container that forbids them), `sandbox_problem` says why, and commands run
unsandboxed: the caller says so once, and every run_shell preview says so. The shell stays usable
on a machine without bwrap; whoever must not run unsandboxed keeps run_shell behind approval.
`bwrap_problem` also checks that a socket outside the workspace is out of reach.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path

PROBE_TIMEOUT = 10.0  # seconds the self-test may take
NO_BWRAP = "bwrap (bubblewrap) is not installed, or not on PATH"
PRIVATE = (Path("/tmp"), Path("/var/tmp"), Path("/run"), Path("/var/run"))  # a tmpfs each, without network
SOCKET_LIST = Path("/proc/net/unix")
# The probe: connect to each socket named; exit 3 naming the first that answers.
_PROBE = """
import socket, sys
for path in sys.argv[1:]:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            continue
    print(path)
    sys.exit(3)
"""


def bwrap_argv(
    bwrap: str,
    command: list[str],
    workspace: Path,
    *,
    network: bool,
    read_only: Sequence[Path] = (),
    shown: Sequence[Path] = (),
) -> list[str]:
    """`command` run by `bwrap` with the filesystem read-only but for `workspace` (a real, absolute path).

    `read_only`: real, absolute paths in the workspace it must not change (hotloop's own folders);
    `shown`: real, absolute folders under a private one (/tmp) that it must see all the same, read-only.
    """
    root = str(workspace)
    return [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",  # a fresh /dev: the null devices, ttys of its own, no disks, an empty /dev/shm
        "--proc", "/proc",
        *_unreachable_sockets(workspace, network),
        *(part for folder in shown for part in ("--ro-bind", str(folder), str(folder))),
        "--bind", root, root,  # after the tmpfs: a workspace under /tmp is the real one
        *_kept(workspace, read_only),
        "--setenv", "TMPDIR", "/tmp",  # the private one: the host's TMPDIR may be masked here
        "--unshare-pid",
        "--unshare-ipc",
        *([] if network else ["--unshare-net"]),
        "--die-with-parent",
        "--new-session",  # no way to push keystrokes into a terminal (TIOCSTI)
        "--chdir", root,
        "--",
        *command,
    ]  # fmt: skip


def _unreachable_sockets(workspace: Path, network: bool) -> list[str]:
    """A private /tmp, and without network the other socket folders private and every host socket masked."""
    if network:
        return ["--tmpfs", "/tmp"]
    private = [folder for folder in PRIVATE if folder.is_dir() and not folder.is_symlink()]
    masked = [
        path
        for path in _host_sockets()
        if not any(path.is_relative_to(folder) for folder in (*private, Path("/dev"), workspace))
    ]
    return [
        *(part for folder in private for part in ("--tmpfs", str(folder))),
        *(part for path in masked for part in ("--ro-bind", "/dev/null", str(path))),
    ]


def _host_sockets() -> list[Path]:
    """The real paths of the Unix sockets bound on the filesystem, as this network namespace lists them."""
    try:
        lines = SOCKET_LIST.read_text(errors="replace").splitlines()[1:]
    except OSError:
        return []
    found = set()
    for line in lines:
        fields = line.split(maxsplit=7)
        if len(fields) == 8 and fields[7].startswith("/"):  # abstract ones start with @, unnamed have none
            path = Path(os.path.realpath(fields[7]))
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.add(path)
            except OSError:
                continue  # gone since, or somewhere the user can't reach anyway
    return sorted(found)


def _kept(workspace: Path, read_only: Sequence[Path]) -> list[str]:
    """Re-binds, read-only, of what in the workspace a command must not change; a missing one is taken for a folder."""
    git = workspace / ".git"
    kept = [*read_only, *([git / "hooks", git / "config"] if git.is_dir() else [])]
    argv: list[str] = []
    for path in dict.fromkeys(kept):
        if path == workspace or not path.is_relative_to(workspace):
            continue  # outside, it is read-only already; the workspace itself can't be
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
        elif path != git / "config" and _nearest(path).is_dir():  # git takes a folder there for a broken repo
            argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    return argv


def _nearest(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def find_bwrap(path: str | None = None) -> str | None:
    """Where bwrap is on `path` (default: PATH), if anywhere."""
    return shutil.which("bwrap", path=path)


def sandbox_problem(path: str | None = None) -> str | None:
    """Why commands can't be sandboxed here, in one line; None if they can."""
    bwrap = find_bwrap(path)
    return NO_BWRAP if bwrap is None else bwrap_problem(bwrap)


@cache
def bwrap_problem(bwrap: str) -> str | None:
    """Why `bwrap` can't make run_shell's sandbox, found by running it once: a probe that must reach no socket.

    The probe tries sockets listening outside its workspace: one in a folder made private (/var/tmp)
    and one in the home folder, which only the masking of each listed socket keeps out of reach.
    """
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hotloop-sandbox-"))).resolve()
        sockets = [stack.enter_context(_listening(place)) for place in (Path("/var/tmp"), Path.home())]
        python, hidden = _probe_python()
        probe = [str(python), "-I", "-S", "-c", _PROBE, *(str(path) for path in sockets if path)]
        argv = bwrap_argv(bwrap, probe, folder, network=False, shown=hidden)
        try:
            ran = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bwrap could not be run: {error}"
    if ran.returncode == 3:
        return f"bwrap's sandbox leaves a host socket reachable: {ran.stdout.decode(errors='replace').strip()}"
    if ran.returncode != 0:
        said = ran.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap can't make its sandbox here: {said[-1] if said else f'exit {ran.returncode}'}"
    return None


def _probe_python() -> tuple[Path, list[Path]]:
    """The Python the probe runs, and the folders it needs that the sandbox would hide (under /tmp, as in a CI clone).

    The interpreter itself, not a venv's link to it: the probe needs no package, and the venv's folder
    may be under /tmp, where the sandbox mounts a private one (so the self-test failed from such a venv).
    """
    python = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    needed = sorted({python.parent, Path(sys.base_prefix).resolve()})
    return python, [path for path in needed if any(path.is_relative_to(private) for private in PRIVATE)]


@contextmanager
def _listening(place: Path) -> Iterator[Path | None]:
    """A Unix socket listening in a new folder under `place` while the context lasts; None if none can be made."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=".hotloop-probe-", dir=place)).resolve()
    except OSError:
        yield None
        return
    path = folder / "s"
    try:
        with socket.socket(socket.AF_UNIX) as server:
            try:
                server.bind(str(path))
                server.listen()
            except OSError:
                yield None
                return
            yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
