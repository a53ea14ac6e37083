"""The fault matrix's rows for switching and totals (faults_doors.py: "switching, and totals after a cancel").

A switch between `hotloop run`'s prompts to the provider in use (nothing switched, nothing logged) and to another
protocol (the next turn's request goes there), and Ctrl-C while the second turn streams: the step the server never
counted is said to be unknown, and the session's tokens read `≥` in `sessions list` and `sessions show`.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from faults import (
    DONE,
    HOTLOOP,
    LIMIT,
    RUN,
    Custom,
    Fault,
    Row,
    Trial,
    execute,
    exit_code,
    latest_log,
    log_valid,
    prepared,
    reaped,
    resumable,
    what_matters,
)

from hotloop.agent.events import AgentEvent, ProviderSwitched, StepStarted, TurnFinished, decode

# A short first answer, then one that streams for about 12 s in paragraphs (so the printer shows it as it comes).
LONG = [DONE, {"text": "word word word.\n\n" * 60, "decode_ms": 40}]


def events(trial: Trial) -> list[AgentEvent]:
    return [decode(line) for line in trial.log.read_bytes().splitlines()[1:]] if trial.log is not None else []


# The checks run after the matrix's own `-c "go on"` appended a turn: they read the row's first two.


def nothing_switched(trial: Trial) -> list[str]:
    logged = events(trial)
    problems = [f"logged a switch to {e.provider}" for e in logged if isinstance(e, ProviderSwitched)]
    answered = [e.reason for e in logged if isinstance(e, TurnFinished)][:2]
    return problems + ([] if answered == ["answer", "answer"] else [f"turns ended {answered}"])


def second_turn_on_anthropic(trial: Trial) -> list[str]:
    logged = events(trial)
    switched = [(e.provider, e.model) for e in logged if isinstance(e, ProviderSwitched)]
    used = [e.provider for e in logged if isinstance(e, StepStarted)][:2]
    problems = [] if switched == [("sim-anthropic", "sim-balanced")] else [f"switches logged: {switched}"]
    return problems + ([] if used == ["sim", "sim-anthropic"] else [f"steps on {used}"])


def ctrl_c_mid_stream(name: str) -> Custom:
    """`hotloop run first "talk at length"`, Ctrl-C once the second answer shows on stdout."""

    def make(folder: Path) -> Row:
        root, workspace, env = prepared(folder, name, LONG)
        env |= {"PYTHONUNBUFFERED": "1"}
        trial = Trial(root, workspace)
        out, err = root / "stdout.txt", root / "stderr.txt"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            run = subprocess.Popen(
                (*RUN, "first", "talk at length"),
                cwd=workspace,
                env=env,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
            deadline = time.monotonic() + LIMIT
            while b"word" not in out.read_bytes() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # until the second answer streams
            streaming = run.poll() is None
            run.send_signal(signal.SIGINT)
            reaped(run)
        trial.stdout, trial.stderr = out.read_text("utf-8", "replace"), err.read_text("utf-8", "replace")
        trial.outputs.append((trial.stdout, trial.stderr))
        trial.code = exit_code(run.returncode)
        trial.log = latest_log(root)
        problems = [] if streaming else ["the second answer ended before Ctrl-C came"]
        if trial.code != 130:
            problems.append(f"exit {trial.code}, documented 130")
        if not any(line.startswith("turn 2 · step 1 · ") and "cancelled" in line for line in trial.stderr.splitlines()):
            problems.append("no step line for the cancelled step")
        listed = execute((*HOTLOOP, "sessions", "list"), workspace, env)
        header = execute((*HOTLOOP, "sessions", "show"), workspace, env)
        trial.outputs += [(listed[1], listed[2]), (header[1], header[2])]
        row = listed[1].splitlines()[1:2]
        said = header[1].splitlines()[2:3]
        if not row or " ≥" not in row[0]:
            problems.append(f"sessions list: {row}")
        if not said or " tokens · " not in said[0] or " · ≥" not in said[0]:
            problems.append(f"sessions show: {said}")
        saw = [*what_matters(trial.stderr, figures=True)[1:3], f"list: {' '.join(row[0].split()[3:5])}" if row else ""]
        return Row(
            name,
            saw,
            str(trial.code),
            log_valid(trial, env) if trial.log is not None else "no session",
            resumable(trial, env, "") if trial.log is not None else "no session",
            any("Traceback" in o + e for o, e in trial.outputs),
            0.0,
            problems=problems,
        )

    return Custom(name, make)


ROWS: list[Fault | Custom] = [
    Fault(
        "switch: /provider sim between prompts, on sim",
        [DONE, DONE],
        ("first", "/provider sim"),
        prompt="second",
        check=nothing_switched,
    ),
    Fault(
        "switch: /provider sim-anthropic between prompts",
        [DONE, DONE],
        ("first", "/provider sim-anthropic"),
        prompt="second",
        check=second_turn_on_anthropic,
    ),
    ctrl_c_mid_stream("Ctrl-C mid-stream: totals marked ≥ in sessions list and show"),
]
