"""The fault matrix's machinery for imported and saved sessions (faults_doors.py: "imports and resumed workspaces").

The sessions are real recordings (tests/fixtures/imports: Claude Code 2.1.332, Codex 0.171.0) or a log hotloop
wrote, edited into the attack: recorded in `/`, a session id that climbs out of the folder, usage of 10³⁰. A
resumed row asks, through the simulator's scenario, for `/etc/passwd`, a key under `~/.ssh`, a listing of `/`
and one of `.`: the first three must be refused as outside the workspace, the last must list the row's own.
Import rows run `hotloop import` alone (`import_row`), with a FIFO or a link to `/dev/zero` among the sources.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import (
    DONE,
    HERE,
    HOTLOOP,
    LIMIT,
    Custom,
    Row,
    Trial,
    config_text,
    environment,
    execute,
    latest_log,
    log_valid,
    prepared,
    read,
    resumable,
    shown,
    what_matters,
)
from faults_acting import logged

from hotloop.agent.events import ToolFinished, ToolStarted

FIXTURES = HERE.parent / "tests" / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude_code_2.1.332_two_runs.jsonl"
CODEX = FIXTURES / "codex_0.171.0_two_runs.jsonl"
CLAUDE_STEPS = 4  # the assistant messages of CLAUDE: the scenario's steps they take when it is resumed
KEY = str(Path.home() / ".ssh" / "id_rsa")
PASSWD = "root:x:0:0"
LOOKS = ("read_file", "list_dir")  # hotloop's names: the recorded sessions' calls have others
LOOK = {"tool_calls": [read("/etc/passwd"), read(KEY), *({"name": "list_dir", "arguments": {"path": p}} for p in "/.")]}


def edited(source: Path, target: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    records = [json.loads(line) for line in source.read_text().splitlines()]
    for record in records:
        edit(record)
    target.write_text("".join(json.dumps(record) + "\n" for record in records))
    return target


def claude_in_root(root: Path) -> Path:
    return edited(CLAUDE, root / "transcript.jsonl", lambda r: r.update(cwd="/") if "cwd" in r else None)


def imported_in_root(workspace: Path, root: Path) -> None:
    """Setup: the Claude Code transcript, recorded in `/`, imported (its output kept for the check)."""
    code, out, err = execute((*HOTLOOP, "import", str(claude_in_root(root))), workspace, environment(root))
    (root / "import.txt").write_text(f"{code}\n{out}{err}")


def own_log_in_root(workspace: Path, root: Path) -> None:
    """Setup: a session hotloop ran here, its log's header then edited to say it ran in `/`."""
    (root / "setup.json").write_text(json.dumps([DONE]))
    (root / "setup.toml").write_text(config_text(root / "setup.json"))
    env = environment(root) | {"HOTLOOP_CONFIG": str(root / "setup.toml")}
    code, out, err = execute((*HOTLOOP, "run", "hello"), workspace, env)
    (root / "import.txt").write_text(f"{code}\n{out}{err}")
    log = latest_log(root)
    if log is not None:
        header, *events = log.read_bytes().splitlines(keepends=True)
        log.write_bytes(json.dumps({**json.loads(header), "workspace": "/"}).encode() + b"\n" + b"".join(events))


def looked_from_here(trial: Trial) -> list[str]:
    """The resumed turn's reads outside were refused, its listing of `.` was the row's workspace, and a line said so."""
    setup = (trial.root / "import.txt").read_text()
    problems = [] if setup.startswith("0\n") else [f"setup failed: {shown(setup)}"]
    said = f"recorded in /; runs in {trial.workspace}"
    if not any(said in line for line in trial.stderr.splitlines()):
        problems.append(f"no line says {said!r}")
    problems += outside_refused(trial)
    texts = [text for pair in trial.outputs for text in pair] + ([trial.log.read_text()] if trial.log else [])
    if any(PASSWD in text for text in texts):
        problems.append("/etc/passwd was read")
    return problems or [f"note: /etc/passwd, {KEY} and / refused as outside; `.` listed the workspace"]


def outside_refused(trial: Trial) -> list[str]:
    asked = {e.call_id: json.loads(e.arguments).get("path") for e in logged(trial, ToolStarted) if e.name in LOOKS}
    ended = {f"{e.name} {asked.get(e.call_id)}": e for e in logged(trial, ToolFinished)}
    problems = [
        f"{call} was not refused as outside the workspace"
        for call in ("read_file /etc/passwd", f"read_file {KEY}", "list_dir /")
        if call not in ended or "outside the workspace" not in ended[call].result
    ]
    here = ended.get("list_dir .")
    if here is None or "README.md" not in here.result:
        problems.append("list_dir . did not list the row's workspace")
    return problems


def import_row(name: str, source: Callable[[Path], Path], expect: int, check: Callable[[Trial], list[str]]) -> Custom:
    """A row that runs `hotloop import` on what `source` makes in the row's folder, then checks what it left."""

    def make(folder: Path) -> Row:
        root, workspace, env = prepared(folder, name, None)
        (workspace / "README.md").write_text("# demo\n")
        path = source(root)
        code, out, err = execute((*HOTLOOP, "import", str(path)), workspace, env)
        trial = Trial(root, workspace, [(out, err)], out, err, code, latest_log(root))
        row = Row(
            name, what_matters(err), "HUNG" if code is None else str(code), "no session", "no session", False, 0.0
        )
        if code != expect:
            row.problems.append(f"exit {code}, documented {expect}")
        if trial.log is not None:
            row.log, row.resumable = log_valid(trial, env), resumable(trial, env, "")
        for said in check(trial):
            (row.notes if said.startswith("note: ") else row.problems).append(said.removeprefix("note: "))
        row.traceback = any("Traceback" in out + err for out, err in trial.outputs)
        return row

    return Custom(name, make)


def fifo(root: Path) -> Path:
    os.mkfifo(root / "pipe.jsonl")
    return root / "pipe.jsonl"


def dev_zero(root: Path) -> Path:
    (root / "zero.jsonl").symlink_to("/dev/zero")
    return root / "zero.jsonl"


def refused_as(kind: str) -> Callable[[Trial], list[str]]:
    def check(trial: Trial) -> list[str]:
        lines = trial.stderr.splitlines()
        wanted = f"{kind}, not a file; not imported"
        return [] if len(lines) == 1 and lines[0].endswith(wanted) else [f"not one line ending {wanted!r}"]

    return check


def escaping_id(root: Path) -> Path:
    """A transcript whose session id, taken as a path from the sessions folder, is the row's folder's `X`."""
    return edited(CLAUDE, root / "escape.jsonl", lambda r: r.update(sessionId="../../X") if "sessionId" in r else None)


def stayed_in_its_folder(trial: Trial) -> list[str]:
    sessions = trial.root / "data" / "sessions"
    problems = [f"{path.name} written outside the sessions folder" for path in trial.root.glob("X*")]
    if "id ../../X is not a plain id; saved as .._.._X" not in trial.stderr:
        problems.append("no line says what the id was saved as")
    logs = sorted(path.name for path in sessions.glob("*.jsonl"))
    if len(logs) != 1 or not logs[0].split("_")[-1].removesuffix(".jsonl").isalnum():
        problems.append(f"the sessions folder holds {logs}, not one log under a plain id")
    return problems or [f"note: saved as {logs[0]}"]


def huge_codex_usage(root: Path) -> Path:
    """Codex's rollout with its second request's `last_token_usage.input_tokens` set to 10³⁰."""
    counts = []

    def edit(record: dict[str, Any]) -> None:
        payload = record.get("payload", {})
        if payload.get("type") == "token_count" and payload.get("info"):
            counts.append(1)
            if len(counts) == 2:
                payload["info"]["last_token_usage"]["input_tokens"] = 10**30

    return edited(CODEX, root / "rollout-huge.jsonl", edit)


def not_summed(trial: Trial) -> list[str]:
    code, out, err = execute((*HOTLOOP, "sessions", "list"), trial.workspace, environment(trial.root))
    trial.outputs.append((out, err))
    problems = [] if code == 0 else [f"sessions list exited {code}"]
    if "000,000,000" in out:
        problems.append(f"sessions list summed it: {shown(out.splitlines()[-1])}")
    return problems or [f"note: sessions list: {shown(out.splitlines()[-1], 80)}"]


def acp_load_row(name: str) -> Custom:
    """The transcript recorded in `/`, imported, then loaded over ACP by an editor whose folder is the row's."""

    def make(folder: Path) -> Row:
        root, workspace, env = prepared(folder, name, [DONE] * CLAUDE_STEPS + [LOOK, DONE])
        (workspace / "README.md").write_text("# demo\n")
        imported_in_root(workspace, root)
        log = latest_log(root)
        trial = Trial(root, workspace, log=log)
        updates, stop = asyncio.run(asyncio.wait_for(loaded(env, workspace, log), LIMIT)) if log else ([], "-")
        trial.stderr = (root / "acp-stderr.txt").read_text()
        trial.outputs.append((repr(updates), trial.stderr))
        row = Row(name, what_matters(trial.stderr), f"acp: {stop}", "no session", "no session", False, 0.0)
        if log is not None:
            row.log, row.resumable = log_valid(trial, env), resumable(trial, env, "")
        said = looked_from_here(trial)
        (row.notes if said[0].startswith("note: ") else row.problems).extend(s.removeprefix("note: ") for s in said)
        row.traceback = any("Traceback" in out + err for out, err in trial.outputs)
        return row

    return Custom(name, make)


async def loaded(env: dict[str, str], workspace: Path, log: Path) -> tuple[list[Any], str]:
    """`session/load` of the log's session in `workspace`, then one prompt: the updates, and the stop reason."""
    from acp import spawn_agent_process, text_block

    class Editor:
        def __init__(self) -> None:
            self.updates: list[Any] = []

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            self.updates.append(update)

        def on_connect(self, conn: Any) -> None:
            pass

    editor = Editor()
    session_id = log.stem.rsplit("_", 1)[-1]
    with (workspace.parent / "acp-stderr.txt").open("wb") as stderr:
        spawned = spawn_agent_process(
            editor,  # the methods the agent calls here: a permission asked would fail the row
            sys.executable,
            *HOTLOOP[1:],
            "acp",
            env=env,
            cwd=workspace,
            transport_kwargs={"stderr": stderr.fileno()},
        )
        async with spawned as (conn, process):
            try:
                await conn.initialize(protocol_version=1)
                await conn.load_session(cwd=str(workspace), session_id=session_id)
                answer = await conn.prompt(session_id=session_id, prompt=[text_block("look around")])
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    return editor.updates, answer.stop_reason
