"""`hotloop import opencode` on a real opencode 1.18.33 store (tests/fixtures/imports/opencode, recorded on the
simulator: PROVENANCE.md): per-step usage equals each `step-finish`'s tokens, tool calls keep their results and
`time.start`/`time.end`, re-importing replaces, `sessions list --from opencode` lists it, and a damaged store
imports what it can with a line per problem."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hotloop import paths
from hotloop.agent.events import ResponseFinished, StepFinished, ToolFinished, TurnStarted
from hotloop.cli import main
from hotloop.sessions.imports.sources import agent_of, default_files, import_files
from hotloop.sessions.store import list_sessions, read_header, read_session

STORE = Path(__file__).parent / "fixtures" / "imports" / "opencode" / "opencode.db"


def store_copy(tmp_path: Path) -> Path:
    """The fixture copied, so that nothing (not even SQLite's side files) touches the recorded one."""
    folder = tmp_path / "share" / "opencode"
    folder.mkdir(parents=True)
    return Path(shutil.copyfile(STORE, folder / "opencode.db"))


def rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def imported(path: Path) -> Path:
    report = import_files([path], paths.sessions_dir())
    assert report.problems == []
    [(_, written)] = report.written
    return written.path


def test_each_step_carries_its_step_finish_tokens(tmp_path: Path) -> None:
    store = store_copy(tmp_path)
    finishes = [
        json.loads(data)["tokens"]
        for (data,) in rows(store, "SELECT data FROM part ORDER BY id")
        if json.loads(data)["type"] == "step-finish"
    ]
    steps = [e for e in read_session(imported(store)).events if isinstance(e, ResponseFinished)]
    assert len(steps) == len(finishes) == 4
    for step, tokens in zip(steps, finishes, strict=True):
        assert step.usage is not None
        assert (
            step.usage.uncached,
            step.usage.cache_read,
            step.usage.cache_write,
            step.usage.output,
            step.usage.reasoning,
        ) == (tokens["input"], tokens["cache"]["read"], tokens["cache"]["write"], tokens["output"], tokens["reasoning"])
        # opencode's `cost` is its own price-table estimate, not the server's: not taken as the provider's figure.
        assert step.usage.reported_cost is None
        assert step.ttft is None and step.decode_tps is None


def test_turns_tools_and_origin_are_the_stores(tmp_path: Path) -> None:
    path = imported(store_copy(tmp_path))
    header, _ = read_header(path)
    assert header.origin == "import:opencode/1.18.33"
    assert (header.provider, header.model, header.workspace) == ("anthropic", "claude-sonnet-4-5", "/tmp/w9oc/project")
    events = read_session(path).events
    assert [e.prompt for e in events if isinstance(e, TurnStarted)] == [
        "read README.md and list the files here",
        "now read app.py",
    ]
    tools = [e for e in events if isinstance(e, ToolFinished)]
    assert [(t.name, t.status) for t in tools] == [("read", "ok"), ("glob", "error"), ("read", "ok")]
    assert "A small project." in tools[0].result and tools[1].result == "ripgrep execution failed"
    # time.end - time.start of the read of README.md, in the store's milliseconds.
    assert tools[0].duration == pytest.approx((1795755459499 - 1795755459197) / 1000)
    assert [f.tool_count for f in events if isinstance(f, StepFinished)] == [2, 0, 1, 0]


def test_reimporting_replaces_and_sessions_list_from_opencode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_copy(tmp_path)
    first = imported(store)
    assert imported(store) == first
    assert [s.id for s in list_sessions(paths.sessions_dir()).sessions] == [first.stem.rsplit("_", 1)[-1]]
    assert main(["sessions", "list", "--from", "opencode"]) == 0
    assert "read README.md and list the files here" in capsys.readouterr().out
    assert main(["sessions", "list", "--from", "codex"]) == 0
    assert "no sessions from 'codex'" in capsys.readouterr().out


def test_the_store_is_found_where_opencode_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_copy(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    assert default_files("opencode", tmp_path / "nohome") == [store]
    assert agent_of(store) == "opencode"
    renamed = Path(shutil.copyfile(store, tmp_path / "store.bin"))
    assert agent_of(renamed) == "opencode"  # by its SQLite header


def test_a_damaged_store_imports_what_it_can_with_a_line_per_problem(tmp_path: Path) -> None:
    store = store_copy(tmp_path)
    with sqlite3.connect(store) as db:
        [(read_part, data)] = db.execute(
            "SELECT id, data FROM part WHERE data LIKE '%\"tool\":\"read\"%' AND data LIKE '%app.py%'"
        ).fetchall()
        db.execute("UPDATE part SET data = ? WHERE id = ?", (data[: len(data) // 2], read_part))  # torn JSON
        [(text_part,)] = db.execute(
            'SELECT id FROM part WHERE data = \'{"type":"text","text":"now read app.py"}\''
        ).fetchall()
        db.execute(
            "UPDATE part SET data = CAST(? AS TEXT) WHERE id = ?",
            (b'{"type":"text","text":"now read app.py \xff\xfe"}', text_part),
        )
    report = import_files([store], paths.sessions_dir())
    assert report.problems == [
        f"opencode.db: part {text_part}: bytes that aren't UTF-8, read as �",
        f"opencode.db: part {read_part}: its data is not JSON (torn?), skipped",
    ]
    [(_, written)] = report.written
    events = read_session(written.path).events
    assert [e.prompt for e in events if isinstance(e, TurnStarted)][1] == "now read app.py ��"
    assert [t.name for t in events if isinstance(t, ToolFinished)] == ["read", "glob"]  # the torn call is gone
    assert len([e for e in events if isinstance(e, ResponseFinished)]) == 4  # every request's usage kept


def test_a_truncated_or_foreign_file_is_one_line_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = tmp_path / "opencode.db"
    torn.write_bytes(STORE.read_bytes()[:10_000])
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    report = import_files([torn, text], paths.sessions_dir(), "opencode")
    assert report.written == []
    assert len(report.problems) == 4  # each file: what's wrong with it, and that nothing came of it
    assert all(problem.startswith(("opencode.db: ", "notes.txt: ")) for problem in report.problems)
    assert main(["import", "opencode", str(torn)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "hotloop: warning: opencode.db:" in err
