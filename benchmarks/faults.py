"""The fault matrix: every fault a server, a tool, an MCP server, a hostile model or a user can throw at hotloop.

Each row runs `python -m hotloop run …` as a subprocess, with `HOTLOOP_CONFIG` and
`HOTLOOP_DATA_DIR` in a fresh temporary folder and a small workspace as its cwd. The embedded
simulator follows a scenario that misbehaves on purpose (the fault fields of
sim/scenario.py); MCP faults come from tests/mcp_faults.py. The rows for the tools that
act (approvals, rules, the sandbox, hotloop's own files, secrets, MCP hints, escaping processes,
long outputs) are in faults_acting.py; those that run their own way (the app driven by Pilot in
this process, a Responses server of hand-written SSE, startup) in faults_custom.py. For every row
the table gives:

- verdict: held when every check of the row held and nothing printed a traceback, else FAILED;
- what the user saw: the stderr lines that matter (warnings, errors, tool results), shortened,
  every control character shown as its stand-in (ESC as ␛);
- the exit code of the run (the README documents 0, 1 for a failed run, 2 for bad input, 141
  for a closed stdout; "app" for a row run in the app);
- log valid: `hotloop sessions show ID` exits 0 and every line of the .jsonl after its header
  decodes with `hotloop.agent.events.decode` ("no session" when the fault came before one);
- resumable: `hotloop run -c "go on"` exits 0 once the server behaves (the scenario is taken
  out of the config, so the simulator's own planner answers);
- traceback?: whether "Traceback" appears in any stdout/stderr of the row.

Every row checks its exit code against the documented one, and most check more: what is on disk
(the files a refused command would have made, a hook, hotloop's config), in the log (a tool's
result, secrets masked) or in the output (no raw ESC, one warning naming the event); a failed
check is listed under its row. The script exits 1 if any row failed, so it is a test too. Rows
run one after another, about 3 minutes in all; `--only TEXT` runs the rows whose name holds TEXT.
This module is long because it holds the matrix's machinery (a row's run, log check, resume and
the table) besides its first 28 rows.

    python benchmarks/faults.py [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hotloop.agent.events import decode

HERE = Path(__file__).resolve().parent
MCP_FAULTS = HERE.parent / "tests" / "mcp_faults.py"
PYTHON = sys.executable
HOTLOOP = (PYTHON, "-m", "hotloop")
RUN = (*HOTLOOP, "run", "--max-steps", "4")
RESUME = (*HOTLOOP, "run", "--timeout", "5,5", "--max-steps", "4", "-c", "go on")
LIMIT = 60.0  # seconds any one command may take before it counts as hung
ESC = "\x1b"
HOSTILE = "\u001b[2J\u001b]0;pwned\u0007 [/bold] [red]red?[/red] done"
SECRET = "TOP-SECRET-OUTSIDE-THE-WORKSPACE"
STATS = re.compile(r"^(turn \d+ · )?step \d+ · ")  # the per-step figures line, the same in every row
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
Mode = Literal["run", "pipe", "concurrent"]


@dataclass
class Trial:
    """What one row's commands printed and left behind."""

    root: Path
    workspace: Path
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (stdout, stderr) of every command
    stdout: str = ""  # of the faulty run
    stderr: str = ""
    code: int | None = None
    log: Path | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fault:
    name: str
    steps: list[dict[str, Any]]
    flags: tuple[str, ...] = ()
    prompt: str = "go"
    config: str = ""  # config text before the [sim] table: top-level keys, or tables of its own
    setup: Callable[[Path, Path], None] | None = None  # (workspace, root)
    mode: Mode = "run"
    expect: tuple[int, ...] = (0,)  # the documented exit codes
    stdout_too: bool = False  # the answer is part of what the user saw
    figures: bool = False  # so is the per-step figures line
    timeout: str = "1,1"  # --timeout FIRST,IDLE: short, so that stalls end fast
    check: Callable[[Trial], list[str]] | None = None  # problems; notes start with "note: "
    env: dict[str, str] = field(default_factory=dict)  # added to every command's environment
    cwd: str = "workspace"  # the workspace, in the row's folder: "." is the folder of hotloop's config and data

    def run(self, folder: Path) -> Row:
        return run_fault(self, folder)


@dataclass
class Row:
    fault: str
    saw: list[str]
    exit: str
    log: str
    resumable: str
    traceback: bool
    seconds: float
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.problems and not self.traceback


@dataclass(frozen=True)
class Custom:
    """A row that runs its own way (the app in this process, a server of its own): `make` gives its Row."""

    name: str
    make: Callable[[Path], Row]  # given the matrix's folder

    def run(self, folder: Path) -> Row:
        started = time.perf_counter()
        try:
            row = self.make(folder)
        except Exception as error:  # the row fails in its line, and the matrix goes on
            traceback.print_exc()
            said = shown(traceback.format_exception_only(error)[-1])
            row = Row(self.name, [said], "raised", "-", "-", True, 0.0, problems=[said])
        row.seconds = time.perf_counter() - started
        return row


def shown(text: str, width: int = 110) -> str:
    """One line as a table shows it: control characters as their stand-ins (ESC as ␛), shortened."""
    text = CONTROL.sub(lambda m: chr(0x2400 + ord(m.group())) if m.group() != "\x7f" else "␡", text.strip())
    return text if len(text) <= width else text[: width - 1] + "…"


def what_matters(stderr: str, limit: int = 4, figures: bool = False) -> list[str]:
    """The stderr lines a user reads for the fault: not a call's start, nor (unless asked) the per-step figures."""
    lines = [line for line in stderr.splitlines() if line.strip() and (figures or not STATS.match(line))]
    lines = [line for line in lines if not line.lstrip().startswith("▸")]
    kept = [shown(line) for line in lines[:limit]]
    return kept + ([f"(+{len(lines) - limit} more lines)"] if len(lines) > limit else [])


def execute(
    command: tuple[str, ...], cwd: Path, env: dict[str, str], timeout: float = LIMIT
) -> tuple[int | None, str, str]:
    """Run a command in its own process group; (exit code or None if it hung, stdout, stderr)."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group is ours: hotloop and any MCP server it started
        out, err = process.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return exit_code(process.returncode), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def reaped(process: subprocess.Popen[bytes]) -> int | None:
    """Its exit code once it ends, or None if it hadn't after LIMIT seconds (then killed, with its group)."""
    try:
        return process.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group is ours: hotloop and any MCP server it started
        process.wait()
        return None


def exit_code(returncode: int) -> int:
    """A shell's view of an exit: death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def config_text(scenario: Path | None, extra: str = "") -> str:
    lines = [extra, "[sim]", "ttft_ms = 0", "prefill_us_per_token = 0", "decode_ms_per_token = 0"]
    if scenario is not None:
        lines.append(f"scenario = {json.dumps(str(scenario))}")
    return "\n".join([*lines, "[routing]", "titles = false", ""])


def environment(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTLOOP_")}
    return env | {"HOTLOOP_CONFIG": str(root / "config.toml"), "HOTLOOP_DATA_DIR": str(root / "data")}


def latest_log(root: Path) -> Path | None:
    logs = sorted((root / "data" / "sessions").glob("*.jsonl"))
    return logs[-1] if logs else None


def log_problems(log: Path) -> list[str]:
    """Lines of the log (its header aside) that don't decode as events."""
    problems = []
    with log.open("rb") as lines:
        next(lines, None)
        for number, line in enumerate(lines, 2):
            try:
                decode(line)
            except Exception as error:  # msgspec's DecodeError or ValidationError
                problems.append(f"line {number}: {shown(str(error), 60)}")
    return problems


def row_folder(folder: Path, name: str) -> Path:
    return folder / re.sub(r"\W+", "-", name).strip("-")


def prepared(folder: Path, name: str, steps: list[dict[str, Any]] | None) -> tuple[Path, Path, dict[str, str]]:
    """A custom row's folder, workspace and environment, its scenario `steps` in its config (None: no scenario)."""
    root = row_folder(folder, name)
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    scenario = None if steps is None else root / "scenario.json"
    if scenario is not None:
        scenario.write_text(json.dumps(steps))
    (root / "config.toml").write_text(config_text(scenario))
    return root, workspace, environment(root)


def run_fault(fault: Fault, folder: Path) -> Row:
    root = row_folder(folder, fault.name)
    workspace = root / fault.cwd
    workspace.mkdir(parents=True)
    (workspace / "README.md").write_text("# demo\n\nA small project.\n")
    (workspace / "notes.txt").write_text("TODO: write the notes\n")
    if fault.setup is not None:
        fault.setup(workspace, root)
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps(fault.steps))
    (root / "config.toml").write_text(config_text(scenario, fault.config))
    env = environment(root) | fault.env
    trial = Trial(root, workspace)
    started = time.perf_counter()
    exit_text = {"run": run_plain, "pipe": run_piped, "concurrent": run_concurrent}[fault.mode](fault, trial, env)

    row = Row(fault.name, [], exit_text, "no session", "no session", False, 0.0, problems=trial.problems)
    row.saw = what_matters(trial.stderr, figures=fault.figures) + (
        [f"stdout: {shown(trial.stdout.splitlines()[0])}"] if fault.stdout_too and trial.stdout.strip() else []
    )
    if trial.code not in fault.expect:
        row.problems.append(f"exit {trial.code}, documented {' or '.join(map(str, fault.expect))}")
    trial.log = latest_log(root)
    if trial.log is not None:
        row.log = log_valid(trial, env)
        row.resumable = resumable(trial, env, fault.config)
    row.seconds = time.perf_counter() - started
    row.traceback = any("Traceback" in out + err for out, err in trial.outputs)
    if fault.check is not None:
        for said in fault.check(trial):
            (row.notes if said.startswith("note: ") else row.problems).append(said.removeprefix("note: "))
    return row


def log_valid(trial: Trial, env: dict[str, str]) -> str:
    """Whether `hotloop sessions show` takes the trial's log, and every event of it decodes."""
    assert trial.log is not None
    session_id = trial.log.stem.rpartition("_")[2]
    code, out, err = execute((*HOTLOOP, "sessions", "show", session_id), trial.workspace, env)
    trial.outputs.append((out, err))
    bad = log_problems(trial.log)
    return "yes" if code == 0 and not bad else f"NO: show exit {code}; " + "; ".join(bad[:2])


def resumable(trial: Trial, env: dict[str, str], config: str) -> str:
    """Whether `hotloop run -c` goes on once the server behaves: the row's config without the scenario.

    That config is a file of its own, so that a check still finds config.toml as the run left it.
    """
    resume = trial.root / "resume.toml"
    resume.write_text(config_text(None, config))
    code, out, err = execute(RESUME, trial.workspace, env | {"HOTLOOP_CONFIG": str(resume)})
    trial.outputs.append((out, err))
    return "yes" if code == 0 else f"NO: exit {code}: " + " ".join(what_matters(err, 1))


def command(fault: Fault, *prompt: str) -> tuple[str, ...]:
    return (*RUN, "--timeout", fault.timeout, *fault.flags, *prompt)


def run_plain(fault: Fault, trial: Trial, env: dict[str, str]) -> str:
    code, trial.stdout, trial.stderr = execute(command(fault, fault.prompt), trial.workspace, env)
    trial.outputs.append((trial.stdout, trial.stderr))
    trial.code = code
    return "HUNG" if code is None else str(code)


def run_piped(fault: Fault, trial: Trial, env: dict[str, str]) -> str:
    """`hotloop run … | head -1`: the reader goes away after one line."""
    errors = trial.root / "stderr.txt"
    with errors.open("wb") as stderr:
        hotloop = subprocess.Popen(
            command(fault, fault.prompt),
            cwd=trial.workspace,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        assert hotloop.stdout is not None
        head = subprocess.Popen(("head", "-1"), stdin=hotloop.stdout, stdout=subprocess.PIPE)
        hotloop.stdout.close()  # head alone reads it now
        first, _ = head.communicate(timeout=LIMIT)
        reaped(hotloop)
    trial.stdout, trial.stderr = first.decode("utf-8", "replace"), errors.read_text("utf-8", "replace")
    trial.outputs.append((trial.stdout, trial.stderr))
    trial.code = exit_code(hotloop.returncode)
    return str(trial.code)


def run_concurrent(fault: Fault, trial: Trial, env: dict[str, str]) -> str:
    """A session, then two `hotloop run -c` of it at once: the second starts while the first streams."""
    code, out, err = execute(command(fault, fault.prompt), trial.workspace, env)
    trial.outputs.append((out, err))
    if code != 0:
        trial.stderr, trial.code = err, code
        return f"first run: {code}"
    first_out, first_err = trial.root / "first.out", trial.root / "first.err"
    with first_out.open("wb") as stdout, first_err.open("wb") as stderr:
        first = subprocess.Popen(
            command(fault, "-c", "keep going"),
            cwd=trial.workspace,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        deadline = time.monotonic() + LIMIT
        while first_out.stat().st_size == 0 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # streaming: the first holds the session's lock
        streaming = first.poll() is None
        code, trial.stdout, trial.stderr = execute(command(fault, "-c", "me too"), trial.workspace, env)
        still = first.poll() is None
        reaped(first)
    trial.outputs += [(first_out.read_text(), first_err.read_text()), (trial.stdout, trial.stderr)]
    trial.code = code
    if not (streaming and still):
        trial.problems.append("the first run was not streaming the whole time: the row proves nothing")
    return f"{code} (first: {exit_code(first.returncode)})"


# The checks some rows make beyond the table's columns.


def no_raw_escape(trial: Trial) -> list[str]:
    texts = [text for pair in trial.outputs for text in pair]
    problems = [] if all(ESC not in text for text in texts) else ["a raw ESC reached stdout or stderr"]
    if trial.log is not None and HOSTILE not in logged_text(trial.log):
        problems.append("the log lost the answer's exact text")
    return problems or ["note: no raw ESC in any output; the log keeps the bytes"]


def logged_text(log: Path) -> str:
    """The answer text a log holds, its deltas joined."""
    events = (json.loads(line) for line in log.read_bytes().splitlines()[1:])
    return "".join(event["text"] for event in events if event.get("type") == "text_delta")


def log_size(trial: Trial) -> list[str]:
    if trial.log is None:
        return []
    size = trial.log.stat().st_size
    lines = sum(1 for _ in trial.log.open("rb"))
    return [f"note: log {size / 1e6:.2f} MB, {lines:,} lines"]


def nothing_from_outside(trial: Trial) -> list[str]:
    texts = [text for pair in trial.outputs for text in pair]
    if trial.log is not None:
        texts.append(trial.log.read_text())
    return [f"{SECRET} (from outside the workspace) was read"] if any(SECRET in t for t in texts) else []


def flood_size(trial: Trial) -> list[str]:
    sizes = [len(out) + len(err) for out, err in trial.outputs]
    log = trial.log.stat().st_size if trial.log is not None else 0
    return [f"note: run printed {sizes[0] / 1e3:.0f} kB; log {log / 1e6:.2f} MB"]


def first_line_only(trial: Trial) -> list[str]:
    """One line through `head -1`, and nothing on stderr: a closed pipe is quiet, as SIGPIPE would leave it."""
    said = [f"said on stderr: {shown(trial.stderr.splitlines()[0])}"] if trial.stderr.strip() else []
    return said + ([] if trial.stdout.count("\n") <= 1 else ["head -1 let more than one line through"])


# Workspaces.


def long_line(workspace: Path, root: Path) -> None:
    (workspace / "aaaa.txt").write_text("a" * 100_000 + "\n")


def fifo(workspace: Path, root: Path) -> None:
    os.mkfifo(workspace / "pipe")


def outside_link(workspace: Path, root: Path) -> None:
    (root / "secret.txt").write_text(SECRET + "\n")
    (workspace / "link.txt").symlink_to(root / "secret.txt")


def mcp(mode: str) -> tuple[str, ...]:
    # --yes: a server given by --mcp is not trusted, so its read-only tools ask; these rows are about its faults.
    return ("--yes", "--mcp", f"{PYTHON} {MCP_FAULTS} {mode}")


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


DONE = {"text": "Done."}
WORDS = "word " * 40
ANTHROPIC = ("--provider", "sim-anthropic")
FAULTS = [
    Fault("429, retry-after once", [{"text": "Answer after one 429.", "status": 429, "retry_after": 0.01, "times": 1}]),
    Fault("503 every time", [{"text": "never sent", "status": 503}], expect=(1,)),
    Fault("no headers ever", [{"text": "never sent", "stall": {"before_headers": 20}}], expect=(1,)),
    Fault("stall mid-stream", [{"text": WORDS, "stall": {"after_chunks": 5, "seconds": 20}}], expect=(1,)),
    Fault("connection dropped mid-stream", [{"text": WORDS, "drop_after": 5}], expect=(1,)),
    Fault("invalid UTF-8 (openai)", [{"text": "café au lait", "invalid_utf8": True}], stdout_too=True),
    Fault("invalid UTF-8 (anthropic)", [{"text": "café au lait", "invalid_utf8": True}], ANTHROPIC, stdout_too=True),
    Fault(
        "malformed tool-call JSON",
        [{"tool_calls": [{"name": "read_file", "arguments": '{"path": "README.md"'}]}, DONE],
    ),
    Fault(
        "tool call cut by output limit",  # a step the output limit ended did incomplete work: exit 1
        [{"tool_calls": [read("README.md")], "cut_arguments": 10}, DONE],
        expect=(1,),
    ),
    Fault(
        # Past the answer's default cap (8,192 tokens since issue 25): cut by the output limit, said, exit 1.
        "1 MB tool argument",
        [{"tool_calls": [read("README.md")], "huge_argument": 1_000_000}, DONE],
        check=log_size,
        expect=(1,),
        timeout="10,10",  # the simulator takes over a second to start streaming 1 MB
    ),
    Fault("duplicate call ids", [{"tool_calls": [read("README.md"), read("notes.txt")], "duplicate_ids": True}, DONE]),
    Fault("usage: negative prompt", [{"text": "Hello.", "usage": {"prompt_tokens": -50}}], figures=True),
    Fault("usage: cache read > prompt", [{"text": "Hello.", "usage": {"cached_tokens": 5000}}], figures=True),
    Fault(
        "usage: cache read 50,000 (anthropic)",  # its prompt is input + cache read: never below the read
        [{"text": "Hello.", "usage": {"cache_read_input_tokens": 50_000}}],
        ANTHROPIC,
        figures=True,
    ),
    Fault(
        "usage: input -50, cache read 600 (anthropic)",
        [{"text": "Hello.", "usage": {"input_tokens": -50, "cache_read_input_tokens": 600}}],
        ANTHROPIC,
        figures=True,
    ),
    Fault(
        "overloaded_error mid-stream (anthropic)",
        [{"text": "A partial answer", "error": "overloaded_error"}],
        ANTHROPIC,
        expect=(1,),
    ),
    Fault("api_error mid-stream (openai)", [{"text": "A partial answer", "error": "api_error"}], expect=(1,)),
    Fault("escapes and markup in the answer", [{"text": HOSTILE}], stdout_too=True, check=no_raw_escape),
    Fault(
        "grep (a+)+$ over a 100 KB line",
        [{"tool_calls": [{"name": "grep", "arguments": {"pattern": "(a+)+$"}}]}, DONE],
        setup=long_line,
    ),
    Fault("read_file of a FIFO", [{"tool_calls": [read("pipe")]}, DONE], setup=fifo),
    Fault(
        "read_file of a symlink outside",
        [{"tool_calls": [read("link.txt")]}, DONE],
        setup=outside_link,
        check=nothing_from_outside,
    ),
    Fault(
        "MCP server dies after init",
        [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, DONE],
        mcp("dies-after-init"),
    ),
    Fault(
        "MCP tool error -32000, then echo",
        [
            {"tool_calls": [{"name": "fail", "arguments": {}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"text": "still here"}}]},
            DONE,
        ],
        mcp("error-32000"),
    ),
    Fault(
        "MCP tool hangs (tool_timeout = 1)",
        [{"tool_calls": [{"name": "hang", "arguments": {}}]}, DONE],
        mcp("hangs"),
        config="tool_timeout = 1",
    ),
    Fault(
        "MCP tool floods (5 MB + 5 MB)",
        [{"tool_calls": [{"name": "flood", "arguments": {}}]}, DONE],
        mcp("floods"),
        check=flood_size,
    ),
    Fault(
        "unreachable server (port 9)",
        [DONE],
        ("--provider", "openai", "--base-url", "http://127.0.0.1:9/v1"),
        expect=(1,),
    ),
    Fault(
        "stdout closed early (| head -1)",
        [{"text": "".join(f"line {n} of a long answer\n\n" for n in range(4000))}],
        mode="pipe",
        expect=(141, 0),
        stdout_too=True,
        check=first_line_only,
    ),
    Fault(
        "two run -c of one session at once",
        [DONE, {"text": "slowly " * 80, "decode_ms": 40}],
        mode="concurrent",
        expect=(2,),
    ),
]


def yes(flag: bool) -> str:
    return "YES" if flag else "no"


def table(rows: list[Row]) -> str:
    """The matrix, one line per row; a row's further lines (what it saw, notes, failed checks) go under `saw`."""
    heads = ("fault", "verdict", "what the user saw", "exit", "log valid", "resumable", "traceback?", "time")
    body = [
        (
            r.fault,
            "held" if r.held else "FAILED",
            (r.saw or ["(nothing on stderr)"])[0],
            r.exit,
            r.log,
            r.resumable,
            yes(r.traceback),
            f"{r.seconds:.1f} s",
        )
        for r in rows
    ]
    widths = [max(map(len, column)) for column in zip(heads, *body, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    lines = [line(heads), line(tuple("-" * width for width in widths))]
    indent = " " * (widths[0] + 2)
    for row, cells in zip(rows, body, strict=True):
        lines.append(line(cells))
        lines += [indent + more for more in row.saw[1:]]
        lines += [indent + f"note: {note}" for note in row.notes]
        lines += [indent + f"CHECK FAILED: {problem}" for problem in row.problems]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help="run only the rows whose name contains this text")
    args = parser.parse_args()
    # Here, not above: they build on this module.
    from faults_acting import ACTING
    from faults_custom import CUSTOM
    from faults_doors import DOORS

    faults = [
        f for f in [*FAULTS, *ACTING, *CUSTOM, *DOORS] if args.only is None or args.only.lower() in f.name.lower()
    ]
    rows: list[Row] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hotloop-faults-") as folder:
        for fault in faults:
            rows.append(fault.run(Path(folder)))
            print(f"  {fault.name}: {rows[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    print()
    tracebacks = [r.fault for r in rows if r.traceback]
    failed = [r.fault for r in rows if r.problems]
    print(f"{sum(r.held for r in rows)} of {len(rows)} faults held, in {time.perf_counter() - started:.0f} s")
    print("no traceback anywhere in the matrix" if not tracebacks else f"TRACEBACK in: {', '.join(tracebacks)}")
    print("every check held" if not failed else f"checks failed in: {', '.join(failed)}")
    return 1 if tracebacks or failed else 0


if __name__ == "__main__":
    sys.exit(main())
