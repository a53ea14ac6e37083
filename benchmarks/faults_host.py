"""The fault matrix's rows for the environment and the sandbox (issue 34): faults_doors.py lists them.

Data under the locale's name (`LC_DEPLOY`, `LC_TIME=ghp_…`: ssh's usual `AcceptEnv LANG LC_*` carries
such variables) against every door hotloop's environment goes through (a command, a hook, an MCP stdio
server, the log); a daemon that left the group and cleared its environment, then the command
SIGKILLing its own subreaper; and the sandbox with hotloop run from a venv under /tmp, as in a CI
clone, where its self-test used to fail and commands ran unsandboxed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from faults import (
    DONE,
    MCP_FAULTS,
    PYTHON,
    Custom,
    Fault,
    Row,
    Trial,
    config_text,
    environment,
    execute,
    latest_log,
    log_valid,
    resumable,
    what_matters,
)
from faults_acting import bwrap_works, held, results, shell, sleeping

POSING = {"LC_DEPLOY": "deploy-key-faultsMatrix0123456789", "LC_TIME": "ghp_faultsMatrixLocale0123456789abcd"}
DUMPS = ("env-seen.txt", "hook-env.txt", "mcp-env.txt")  # what the command, the hook and the MCP server saw
DUMPING = (
    '[[hooks]]\nevent = "UserPromptSubmit"\ncommand = "env > hook-env.txt"\n'
    f'[mcp.dump]\ncommand = "/bin/sh"\nargs = ["-c", {json.dumps(f"env > mcp-env.txt; exec {PYTHON} {MCP_FAULTS} error-32000")}]'
)


def only_the_locale_seen(trial: Trial) -> list[str]:
    problems = []
    for name in DUMPS:
        text = (trial.workspace / name).read_text() if (trial.workspace / name).exists() else ""
        if "LC_ALL=C.UTF-8" not in text:
            problems.append(f"{name}: never written, or without the locale: the row proves nothing")
        elif passed := [n for n, value in POSING.items() if f"{n}=" in text or value in text]:
            problems.append(f"{name} shows {', '.join(passed)}")
    log = trial.log.read_text() if trial.log is not None else ""
    if unmasked := [name for name, value in POSING.items() if value in log]:
        problems.append(f"in the log unmasked: {', '.join(unmasked)}")
    if "[redacted]" not in log:
        problems.append("nothing was masked in the log: the row proves nothing")
    return held(problems, "the command, the hook and the MCP server saw LC_ALL alone; the answer is [redacted]")


SMUGGLED = Fault(
    "LC_DEPLOY, LC_TIME=ghp_…: command, hook, MCP, log",
    [shell("env | tee env-seen.txt"), {"text": "Found: " + ", ".join(POSING.values())}],
    ("--yes",),
    config=DUMPING,
    env={**POSING, "LC_ALL": "C.UTF-8"},
    check=only_the_locale_seen,
)

# A daemon out of the group with its environment cleared, so neither the group nor the tag finds it; then the
# command SIGKILLs the subreaper that held it, which sends the daemon to init.
DAEMON = str(5_000_000 + os.getpid())
KILLED_REAPER = shell(
    f"setsid -f env -i sleep {DAEMON}; until pgrep -xf 'sleep {DAEMON}' > /dev/null; do sleep 0.01; done; "
    f"echo 'sleep {DAEMON} running'; kill -9 $PPID; sleep 300"
)


def daemon_ended(trial: Trial) -> list[str]:
    said = "\n".join(result.result for result in results(trial, "run_shell"))
    problems = [] if f"sleep {DAEMON} running" in said else ["the daemon never started: the row proves nothing"]
    if left := sleeping(DAEMON):
        problems.append(f"`sleep {DAEMON}` outlived its call (pid {', '.join(map(str, left))})")
        for pid in left:  # ours: the number is this run's
            os.kill(pid, signal.SIGKILL)
    return held(problems, "the daemon ran; once its subreaper was killed, its file-locks mark found it; none is left")


KILLED = Fault("setsid env -i daemon, then kill -9 $PPID", [KILLED_REAPER, DONE], ("--yes",), check=daemon_ended)

# The sandbox from a venv in the workspace, all under /tmp, as a CI clone has it.
VENV_ROW = "sandbox: hotloop from a venv under /tmp"
CONFINED = "echo in > inside.txt; touch /; tail -n +3 /proc/net/dev | wc -l"


def venv_in(folder: Path) -> Path:
    """A venv that imports this hotloop (its site folder read as a site, for the editable install's .pth)."""
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    site = folder / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "hotloop-faults.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return folder / "bin" / "python"


def confined(trial: Trial) -> list[str]:
    found = results(trial, "run_shell")
    said = found[0].result if found else ""
    problems = [] if found else ["no run_shell result in the log"]
    if "sandbox is unavailable" in trial.stderr or "UNSANDBOXED" in said:
        problems.append("the command ran unsandboxed")
    if "Read-only file system" not in said or not said.endswith("\n1\n"):
        problems.append(f"the command wasn't confined: {said.splitlines()[1:]}")
    if not (trial.workspace / "inside.txt").exists():
        problems.append("the workspace wasn't writable")
    return held(problems, "self-test passed; / read-only, its own loopback alone, the workspace writable")


def from_venv_under_tmp(folder: Path) -> Row:
    if not bwrap_works():
        return Row(VENV_ROW, ["skipped: no bwrap"], "-", "-", "-", False, 0.0, notes=["no bwrap: counts as held"])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hotloop-faults-venv-", dir="/tmp") as scratch:
        root = Path(scratch)
        workspace = root / "workspace"
        workspace.mkdir()
        python = venv_in(workspace / ".venv")
        scenario = root / "scenario.json"
        scenario.write_text(json.dumps([shell(CONFINED), DONE]))
        config = '[shell]\nsandbox = "workspace-write"'
        (root / "config.toml").write_text(config_text(scenario, config))
        env = environment(root)
        run = (str(python), "-m", "hotloop", "run", "--max-steps", "4", "--timeout", "1,1", "--yes", "go")
        code, out, err = execute(run, workspace, env)
        trial = Trial(root, workspace, [(out, err)], out, err, code, latest_log(root))
        problems = [] if code == 0 else [f"exit {code}, documented 0"]
        checked = confined(trial)
        logged = log_valid(trial, env) if trial.log is not None else "no session"
        resumed = resumable(trial, env, config) if trial.log is not None else "no session"
    traceback = any("Traceback" in text for pair in trial.outputs for text in pair)
    row = Row(VENV_ROW, what_matters(err), str(code), logged, resumed, traceback, time.perf_counter() - started)
    row.problems = problems + [said for said in checked if not said.startswith("note: ")]
    row.notes = [said.removeprefix("note: ") for said in checked if said.startswith("note: ")]
    return row


ROWS: list[Fault | Custom] = [SMUGGLED, KILLED, Custom(VENV_ROW, from_venv_under_tmp)]
