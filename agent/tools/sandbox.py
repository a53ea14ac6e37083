"""run_shell's optional sandbox: bubblewrap (`bwrap`), with the workspace the only place it can write.

What it protects: writes outside the workspace (the filesystem is bound read-only, /tmp is a private
tmpfs that vanishes with the command), the network (an empty network namespace unless `network` is
on), and other processes (a PID namespace of its own: when bwrap dies, everything in it dies too).
What it doesn't: reads. Everything the user can read stays readable, ~/.ssh and ~/.aws included;
only the provider keys are kept out, by leaving them out of the environment. Nor does it bound
CPU or memory. Tools that write to caches in the home folder (pip, cargo, npm) fail read-only there.

When the sandbox can't be provided (no bwrap on PATH, or bwrap can't make namespaces here: user
namespaces off, a container that forbids them), `sandbox_problem` says why, and commands run
unsandboxed: the caller says so once, and every run_shell preview says so. The shell stays usable
on a machine without bwrap; whoever must not run unsandboxed keeps run_shell behind approval.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

PROBE_TIMEOUT = 10.0  # seconds the self-test may take
NO_BWRAP = "bwrap (bubblewrap) is not installed, or not on PATH"


def bwrap_argv(bwrap: str, command: list[str], workspace: Path, *, network: bool) -> list[str]:
    """`command` run by `bwrap` with the filesystem read-only but for `workspace` (a real, absolute path)."""
    root = str(workspace)
    return [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",  # a fresh /dev: the null devices, ttys of its own, no disks
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--bind", root, root,  # after /tmp: a workspace under /tmp stays the real one
        "--unshare-pid",
        "--unshare-ipc",
        *([] if network else ["--unshare-net"]),
        "--die-with-parent",
        "--new-session",  # no way to push keystrokes into a terminal (TIOCSTI)
        "--chdir", root,
        "--",
        *command,
    ]  # fmt: skip


def find_bwrap(path: str | None = None) -> str | None:
    """Where bwrap is on `path` (default: PATH), if anywhere."""
    return shutil.which("bwrap", path=path)


def sandbox_problem(path: str | None = None) -> str | None:
    """Why commands can't be sandboxed here, in one line; None if they can."""
    bwrap = find_bwrap(path)
    return NO_BWRAP if bwrap is None else bwrap_problem(bwrap)


@cache
def bwrap_problem(bwrap: str) -> str | None:
    """Why `bwrap` can't make run_shell's sandbox, found by running it once on a command that does nothing."""
    with tempfile.TemporaryDirectory(prefix="hotloop-sandbox-") as folder:
        argv = bwrap_argv(bwrap, ["/bin/sh", "-c", "exit 0"], Path(folder).resolve(), network=False)
        try:
            probe = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bwrap could not be run: {error}"
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap can't make its sandbox here: {said[-1] if said else f'exit {probe.returncode}'}"
    return None
