"""Imported and saved sessions as hostile input (issue 34): a file never chooses where the agent works, what isn't a
file is refused before it is read, and usage no request has is never summed.

The attacks are real files: Claude Code's, Codex's and opencode's recorded sessions (tests/fixtures/imports) and a
log hotloop wrote itself, each edited to say it was recorded in `/`, then continued with the real `hotloop run
--resume` (or ACP's `session/load`) against the embedded simulator, whose scenario asks for `/etc/passwd`, a key
under `~/.ssh` and a listing of `/`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from acp import text_block
from acp.schema import ToolCallProgress
from test_acp import WAIT, Editor, agent_process

from hotloop import paths
from hotloop.agent.events import ResponseFinished, StepFinished, ToolFinished, ToolStarted, TurnStarted
from hotloop.cli import main
from hotloop.sessions.imports.model import MAX_SOURCE
from hotloop.sessions.imports.sources import import_files
from hotloop.sessions.store import list_sessions, read_header, read_session
from hotloop.sessions.summary import MAX_STEP_TOKENS, summary_path

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude_code_2.1.332_two_runs.jsonl"
CODEX = FIXTURES / "codex_0.171.0_two_runs.jsonl"
OPENCODE = FIXTURES / "opencode" / "opencode.db"
KEY = Path.home() / ".ssh" / "id_rsa"
PASSWD = "root:x:0:0"  # /etc/passwd's first line, on any Linux
TOOLS = {
    "tool_calls": [
        {"name": "read_file", "arguments": {"path": "/etc/passwd"}},
        {"name": "read_file", "arguments": {"path": str(KEY)}},
        {"name": "list_dir", "arguments": {"path": "/"}},
        {"name": "list_dir", "arguments": {"path": "."}},
    ]
}
DONE = {"text": "Done."}


def configure(home: Path, steps: list[dict[str, Any]]) -> None:
    """The simulator answers at once, following `steps`: one per assistant message a request already holds."""
    (home / "scenario.json").write_text(json.dumps(steps))
    (home / "config.toml").write_text(
        "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
        f'scenario = "{home / "scenario.json"}"\n'
    )


def jsonl(path: Path, edit: Callable[[dict[str, Any]], None], source: Path) -> Path:
    """`source`'s records, each passed through `edit`, written to `path`."""
    records = [json.loads(line) for line in source.read_text().splitlines()]
    for record in records:
        edit(record)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def claude_in_root(folder: Path) -> Path:
    def edit(record: dict[str, Any]) -> None:
        if "cwd" in record:
            record["cwd"] = "/"

    return imported(jsonl(folder / "transcript.jsonl", edit, CLAUDE))


def codex_in_root(folder: Path) -> Path:
    def edit(record: dict[str, Any]) -> None:
        if record["type"] == "session_meta":
            record["payload"]["cwd"] = "/"

    return imported(jsonl(folder / "rollout-in-root.jsonl", edit, CODEX))


def opencode_in_root(folder: Path) -> Path:
    store = Path(shutil.copyfile(OPENCODE, folder / "opencode.db"))
    with sqlite3.connect(store) as db:
        db.execute("UPDATE session SET directory = '/'")
    db.close()
    return imported(store)


def hotloops_own_in_root(folder: Path) -> Path:
    """A session hotloop ran (in `folder`, the test's working directory), its log's header then edited to say `/`."""
    configure(Path(os.environ["HOTLOOP_CONFIG"]).parent, [DONE])
    assert main(["run", "hello"]) == 0
    (log,) = paths.sessions_dir().glob("*.jsonl")
    header, *events = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(json.dumps({**json.loads(header), "workspace": "/"}).encode() + b"\n" + b"".join(events))
    return log


def imported(source: Path) -> Path:
    report = import_files([source], paths.sessions_dir())
    assert report.problems == []
    [(conversation, written)] = report.written
    assert conversation.workspace == "/"  # recorded as history
    return written.path


def answered(log: Path) -> int:
    """The assistant messages a resumed conversation holds: the scenario's steps they take."""
    return sum(isinstance(event, ResponseFinished) for event in read_session(log).events)


def tools_of_last_turn(log: Path) -> dict[str, ToolFinished]:
    """The last turn's calls by name and path (`read_file /etc/passwd`), each with how it ended."""
    events = read_session(log).events
    last = max(n for n, event in enumerate(events) if isinstance(event, TurnStarted))
    paths_of = {e.call_id: json.loads(e.arguments)["path"] for e in events[last:] if isinstance(e, ToolStarted)}
    return {f"{e.name} {paths_of[e.call_id]}": e for e in events[last:] if isinstance(e, ToolFinished)}


@pytest.mark.parametrize(
    "recorded", [claude_in_root, codex_in_root, opencode_in_root, hotloops_own_in_root], ids=lambda f: f.__name__
)
def test_a_session_recorded_in_root_runs_its_tools_where_it_is_resumed(
    recorded: Callable[[Path], Path],
    tmp_path: Path,
    isolated_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hotloop run --resume` of a session that says it ran in `/` works in the folder it is run from: the model's
    reads of /etc/passwd and ~/.ssh/id_rsa and its listing of / are refused as outside the workspace, its listing of
    `.` is the user's folder, and one line says where the session was recorded and where it runs."""
    there = tmp_path / "there"
    there.mkdir()
    monkeypatch.chdir(there)
    log = recorded(there)
    here = tmp_path / "here"
    here.mkdir()
    (here / "mine.txt").write_text("the user's own file\n")
    monkeypatch.chdir(here)
    configure(isolated_home, [DONE] * answered(log) + [TOOLS, DONE])
    capsys.readouterr()
    assert main(["run", "--resume", log.stem.rsplit("_", 1)[-1], "look around"]) == 0
    out, err = capsys.readouterr()
    assert f"warning: recorded in /; runs in {here}" in err.splitlines()
    tools = tools_of_last_turn(log)
    for refused in ("read_file /etc/passwd", f"read_file {KEY}", "list_dir /"):
        assert tools[refused].status == "error" and "outside the workspace" in tools[refused].result, refused
    listed = tools["list_dir ."]
    assert listed.status == "ok" and "mine.txt" in listed.result
    assert PASSWD not in out + err + log.read_text()
    assert read_header(log)[0].workspace == "/"  # the history stays as recorded


async def test_acp_session_load_runs_in_the_editors_folder_not_the_recorded_one(
    tmp_path: Path, isolated_home: Path
) -> None:
    """ACP's `session/load` of an imported transcript recorded in `/` runs in the `cwd` the editor names: the
    model's reads outside it fail, nothing of /etc/passwd reaches the editor, and the agent's log says where the
    session was recorded."""
    log = claude_in_root(tmp_path)
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "mine.txt").write_text("the editor's own file\n")
    configure(isolated_home, [DONE] * answered(log) + [TOOLS, DONE])
    editor = Editor()
    session_id = log.stem.rsplit("_", 1)[-1]
    async with agent_process(isolated_home, editor) as conn:
        await asyncio.wait_for(conn.load_session(cwd=str(workspace), session_id=session_id), WAIT)
        replayed = len(editor.updates)
        answer = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block("look around")]), WAIT)
    assert answer.stop_reason == "end_turn"
    tools = tools_of_last_turn(log)
    for refused in ("read_file /etc/passwd", f"read_file {KEY}", "list_dir /"):
        assert tools[refused].status == "error" and "outside the workspace" in tools[refused].result, refused
    assert tools["list_dir ."].status == "ok" and "mine.txt" in tools["list_dir ."].result
    ended = [u for u in editor.updates[replayed:] if isinstance(u, ToolCallProgress) and u.status]
    assert [u.status for u in ended].count("failed") == 3
    assert PASSWD not in repr(editor.updates)
    said = (isolated_home / "stderr.log").read_text()
    assert f"hotloop: warning: recorded in /; runs in {workspace}" in said.splitlines()


def test_a_session_id_that_is_a_path_is_saved_as_a_plain_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A transcript whose `sessionId` climbs out of the folder (`../../…/escaped`) is saved in the sessions folder
    under a plain id, and the import says what it made of the id."""
    escape = "../../../escaped"  # from the sessions folder (home/data/sessions), to tmp_path
    assert (paths.sessions_dir() / escape).resolve() == tmp_path / "escaped"

    def edit(record: dict[str, Any]) -> None:
        if "sessionId" in record:
            record["sessionId"] = escape

    source = jsonl(tmp_path / "transcript.jsonl", edit, CLAUDE)
    assert main(["import", str(source)]) == 0
    out, err = capsys.readouterr()
    plain = escape.replace("/", "_")
    assert err.splitlines() == [f"hotloop: warning: transcript.jsonl: id {escape} is not a plain id; saved as {plain}"]
    assert f"imported claude-code session {plain} as " in out
    assert not list(tmp_path.glob("escaped*"))
    (log,) = paths.sessions_dir().glob("*.jsonl")
    assert log.parent == paths.sessions_dir() and read_header(log)[0].id == log.stem.rsplit("_", 1)[-1]


def fifo(folder: Path) -> Path:
    os.mkfifo(folder / "pipe.jsonl")
    return folder / "pipe.jsonl"


def dev_zero(folder: Path) -> Path:
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    return folder / "zero.jsonl"


def link_to_fifo(folder: Path) -> Path:
    os.mkfifo(folder / "pipe")
    (folder / "rollout-link.jsonl").symlink_to(folder / "pipe")
    return folder / "rollout-link.jsonl"


@pytest.mark.parametrize(
    ("special", "agent", "kind"),
    [
        (fifo, [], "a FIFO"),
        (dev_zero, ["claude-code"], "a character device"),
        (link_to_fifo, ["codex"], "a FIFO"),
        (fifo, ["opencode"], "a FIFO"),
    ],
    ids=["fifo", "link-to-dev-zero", "link-to-fifo", "fifo-as-opencode"],
)
def test_what_isnt_a_file_is_refused_before_it_is_read(
    special: Callable[[Path], Path],
    agent: list[str],
    kind: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A FIFO (which would hold the reader forever) or a link to /dev/zero (which would feed it without end), given
    as a file or found in a folder, is refused by its type in one line, and the import exits 1."""
    path = special(tmp_path)
    assert main(["import", *agent, str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"hotloop: warning: {path}: {kind}, not a file; not imported"]
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copyfile(CODEX, folder / CODEX.name)
    inside = special(folder)
    assert main(["import", str(folder)]) == 0  # the real rollout beside it is imported
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"hotloop: warning: {inside}: {kind}, not a file; not imported"]
    assert "imported codex session" in out


def test_a_file_past_the_size_limit_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A transcript larger than an import reads (a sparse file: nothing is written to disk) is refused in one line."""
    big = tmp_path / "big.jsonl"
    with big.open("wb") as file:
        file.truncate(MAX_SOURCE + 1)
    assert main(["import", str(big)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"hotloop: warning: {big}: 1.0 GB, past the 1 GB limit; not imported"
    ]


def test_codex_usage_of_ten_to_the_thirty_is_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rollout claiming 10³⁰ input tokens for one request imports with that step's usage unknown, said once: the
    session's tokens in `sessions list` are the other steps' alone."""
    counts = 0

    def edit(record: dict[str, Any]) -> None:
        nonlocal counts
        payload = record.get("payload", {})
        if payload.get("type") == "token_count" and payload.get("info"):
            counts += 1
            if counts == 2:
                payload["info"]["last_token_usage"]["input_tokens"] = 10**30

    assert main(["import", str(jsonl(tmp_path / "rollout-huge.jsonl", edit, CODEX))]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"hotloop: warning: rollout-huge.jsonl: usage no request has (prompt {10**30:,} in one request) in 1 step(s):"
        " counted as unknown"
    ]
    (log,) = paths.sessions_dir().glob("*.jsonl")
    steps = [event for event in read_session(log).events if isinstance(event, StepFinished)]
    distrusted = [step for step in steps if step.usage is not None and step.usage.distrust]
    assert len(distrusted) == 1 and distrusted[0].usage is not None and distrusted[0].usage.prompt_total is None
    honest = sum((s.usage.prompt_total or 0) + (s.usage.output or 0) for s in steps if s.usage is not None)
    [listed] = list_sessions(paths.sessions_dir()).sessions
    assert listed.tokens == honest < MAX_STEP_TOKENS
    assert main(["sessions", "list"]) == 0
    assert f"{honest:,}" in capsys.readouterr().out


def test_a_negative_claude_code_count_is_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Claude Code usage with a negative output count is unknown for that step, never subtracted from the totals."""

    def edit(record: dict[str, Any]) -> None:
        if record["type"] == "assistant":
            record["message"]["usage"]["output_tokens"] = -5

    assert main(["import", str(jsonl(tmp_path / "negative.jsonl", edit, CLAUDE))]) == 0
    assert "usage no request has (output -5 in one request) in 4 step(s)" in capsys.readouterr().err
    [listed] = list_sessions(paths.sessions_dir()).sessions
    assert listed.tokens is None and listed.costs is not None and listed.costs.priced == 0


def hand_edited_log(isolated_home: Path) -> Path:
    """A session hotloop ran, its one step's usage then edited to claim 10³⁰ prompt tokens."""
    configure(isolated_home, [DONE])
    assert main(["run", "hello"]) == 0
    (log,) = paths.sessions_dir().glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        if line["type"] in ("step_finished", "response_finished"):
            line["usage"]["prompt_total"] = 10**30
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary_path(log).unlink()  # a log without its summary is scanned whole
    return log


def test_a_saved_log_with_impossible_usage_reads_it_as_unknown(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log claiming 10³⁰ prompt tokens in a step: `sessions list` doesn't sum it, `sessions show` and `replay` show
    it only as a claim not trusted, with one warning, and resuming goes on."""
    monkeypatch.chdir(tmp_path)
    log = hand_edited_log(isolated_home)
    session_id = log.stem.rsplit("_", 1)[-1]
    capsys.readouterr()
    [listed] = list_sessions(paths.sessions_dir()).sessions
    assert listed.tokens is None
    assert main(["sessions", "show", session_id]) == 0
    out, err = capsys.readouterr()
    said = [line for line in (out + err).splitlines() if f"{10**30:,}" in line]
    assert len(said) == 2 and "usage not trustworthy (server said prompt" in said[0]  # not as a figure
    assert f"{log.name}: usage no request has (prompt {10**30:,} in one request), read as unknown" in err
    assert main(["replay", session_id, "--headless", "--speed", "0"]) == 0
    out, err = capsys.readouterr()
    said = [line for line in (out + err).splitlines() if f"{10**30:,}" in line]
    assert said and all("not trustworthy" in line or "usage no request has" in line for line in said)
    configure(isolated_home, [DONE, DONE])
    assert main(["run", "--resume", session_id, "go on"]) == 0
    assert "usage no request has" in capsys.readouterr().err


def test_a_summary_its_steps_cant_add_up_to_is_set_aside(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary file claiming 10³⁰ tokens, or dollars that aren't a number, is scanned again from its log."""
    monkeypatch.chdir(tmp_path)
    configure(isolated_home, [DONE])
    assert main(["run", "hello"]) == 0
    [honest] = list_sessions(paths.sessions_dir()).sessions
    sidecar = summary_path(honest.path)
    for lie in ({"tokens": 10**30}, {"cost": "a lot"}, {"cost": "1e30"}, {"size": -5}):
        sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), **lie}))
        [listed] = list_sessions(paths.sessions_dir()).sessions
        assert (listed.tokens, listed.costs) == (honest.tokens, honest.costs), lie
    assert main(["sessions", "list"]) == 0


def test_a_header_whose_id_is_a_path_is_not_a_session(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log whose header names the session `../../tmp/X` is refused in one line wherever it is read back."""
    monkeypatch.chdir(tmp_path)
    configure(isolated_home, [DONE])
    assert main(["run", "hello"]) == 0
    (log,) = paths.sessions_dir().glob("*.jsonl")
    header, *events = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(json.dumps({**json.loads(header), "id": "../../tmp/X"}).encode() + b"\n" + b"".join(events))
    session_id = log.stem.rsplit("_", 1)[-1]
    capsys.readouterr()
    refused = f"hotloop: {log} is not a hotloop session log (its header's id is not a session id)"
    for command in (["sessions", "show", session_id], ["run", "--resume", session_id, "go on"]):
        assert main(command) == 2
        assert capsys.readouterr().err.splitlines() == [refused]
