"""`hotloop import` on real Claude Code 2.1.332 and Codex 0.171.0 sessions (tests/fixtures/imports, recorded on the
simulator: PROVENANCE.md): per-step usage equals the source's, re-importing replaces, the saved sessions list,
export and draw as hotloop's own, and the explainer names the miss the second run's tool change caused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hotloop import paths
from hotloop.agent.events import ResponseFinished, StepFinished, ToolFinished, TurnStarted
from hotloop.cli import main
from hotloop.providers.events import UsageLedger
from hotloop.sessions.imports.sources import import_files
from hotloop.sessions.store import list_sessions, read_header, read_session

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude_code_2.1.332_two_runs.jsonl"
CODEX = FIXTURES / "codex_0.171.0_two_runs.jsonl"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def imported(path: Path) -> Path:
    report = import_files([path], paths.sessions_dir())
    assert report.problems == []
    [(_, written)] = report.written
    return written.path


def responses(path: Path) -> list[ResponseFinished]:
    return [event for event in read_session(path).events if isinstance(event, ResponseFinished)]


def test_claude_code_steps_carry_each_responses_usage_once_per_message_id() -> None:
    # The source writes a line per content block, each repeating its response's usage: one step per message id.
    by_id: dict[str, dict[str, Any]] = {}
    for line in lines(CLAUDE):
        if line["type"] == "assistant":
            by_id[line["message"]["id"]] = line["message"]["usage"]
    steps = responses(imported(CLAUDE))
    assert len(steps) == len(by_id) == 4
    for step, usage in zip(steps, by_id.values(), strict=True):
        assert step.usage is not None
        assert (step.usage.cache_read, step.usage.cache_write, step.usage.uncached, step.usage.output) == (
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
            usage["input_tokens"],
            usage["output_tokens"],
        )
        assert step.usage.cache_write_1h == usage["cache_creation"]["ephemeral_1h_input_tokens"]
        assert step.ttft is None and step.decode_tps is None  # not recorded, so not reported


def test_codex_steps_carry_each_requests_last_token_usage() -> None:
    counts = [
        line["payload"]["info"]["last_token_usage"]
        for line in lines(CODEX)
        if line["type"] == "event_msg" and line["payload"]["type"] == "token_count" and line["payload"]["info"]
    ]
    steps = responses(imported(CODEX))
    assert len(steps) == len(counts) == 4
    for step, usage in zip(steps, counts, strict=True):
        assert step.usage is not None
        assert (step.usage.prompt_total, step.usage.cache_read, step.usage.output, step.usage.reasoning) == (
            usage["input_tokens"],
            usage["cached_input_tokens"],
            usage["output_tokens"],
            usage["reasoning_output_tokens"],
        )


def test_an_import_is_a_session_with_the_agents_events_and_its_origin() -> None:
    path = imported(CLAUDE)
    header, _ = read_header(path)
    assert header.origin == "import:claude-code/2.1.332"
    assert header.workspace == "/tmp/w6rec/project"
    events = read_session(path).events
    assert [e.prompt for e in events if isinstance(e, TurnStarted)] == ["read README.md and list the files here"] * 2
    tools = [e for e in events if isinstance(e, ToolFinished)]
    assert [t.name for t in tools] == ["Read", "Bash", "Read", "Glob"]
    assert "A small project." in tools[0].result
    # Durations are what the timestamps say: the call's line to its result's line.
    assert all(0 < t.duration < 5 for t in tools)
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert [f.tool_count for f in finished] == [2, 0, 2, 0]
    assert imported(CODEX).name != path.name


def test_reimporting_replaces_and_a_grown_source_replaces_the_shorter_import(tmp_path: Path) -> None:
    # The first run alone, as the file stood before `claude -p --continue` appended the second.
    raw = CLAUDE.read_bytes().splitlines(keepends=True)
    second = next(n for n, line in enumerate(raw) if n > 2 and b'"type":"queue-operation"' in line)
    source = tmp_path / CLAUDE.name
    source.write_bytes(b"".join(raw[:second]))
    first = imported(source)
    assert len(responses(first)) == 2
    source.write_bytes(CLAUDE.read_bytes())
    again = imported(source)
    assert again == first and len(responses(again)) == 4
    assert imported(source) == first
    assert [s.id for s in list_sessions(paths.sessions_dir()).sessions] == [first.stem.rsplit("_", 1)[-1]]


def test_the_explainer_names_the_tool_change_on_an_imported_session() -> None:
    notes = [step.cache_note for step in responses(imported(CLAUDE))]
    # The second run offered Glob and Grep (`--tools Read,Bash,Glob,Grep`): its first request missed the cache.
    assert notes[2] == "cache miss: tools changed (+Glob, +Grep) (12,190 tokens re-prefilled)"
    assert [notes[0], notes[1], notes[3]] == ["", "", ""]


def test_usage_alone_says_what_an_idle_gap_proves_and_what_it_cant(tmp_path: Path) -> None:
    # An older transcript: no request records, only each response's usage; six minutes between the turns.
    def turn(prompt: str, at: str, answered: str, message_id: str, usage: dict[str, int]) -> list[dict[str, Any]]:
        return [
            {
                "type": "user",
                "sessionId": "s1",
                "version": "1.0.0",
                "timestamp": at,
                "message": {"role": "user", "content": prompt},
            },
            {
                "type": "assistant",
                "sessionId": "s1",
                "timestamp": answered,
                "message": {
                    "id": message_id,
                    "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": "ok"}],
                    "stop_reason": "end_turn",
                    "usage": usage,
                },
            },
        ]

    warm = {
        "input_tokens": 10,
        "cache_read_input_tokens": 48_120,
        "cache_creation_input_tokens": 200,
        "output_tokens": 5,
    }
    cold = {"input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 48_400, "output_tokens": 5}
    source = tmp_path / "s1.jsonl"
    records = [
        *turn("one", "2026-01-01T10:00:00Z", "2026-01-01T10:00:02Z", "m1", warm),
        *turn("two", "2026-01-01T10:06:02Z", "2026-01-01T10:06:04Z", "m2", cold),
    ]
    source.write_text("".join(json.dumps(record) + "\n" for record in records))
    notes = [step.cache_note for step in responses(imported(source))]
    assert notes[1] == (
        "cache read fell from 48,320 to 0 after 6 min idle: consistent with the 5-minute lifetime"
        " (the source keeps no requests, so a changed prefix can't be ruled out)"
    )
    header, _ = read_header(next(paths.sessions_dir().glob("*.jsonl")))
    assert header.base_url == "https://api.anthropic.com"  # so a Claude model's steps are priced


def test_a_damaged_source_imports_what_it_can_and_names_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = CODEX.read_bytes().splitlines(keepends=True)
    damaged = tmp_path / "rollout-damaged.jsonl"
    damaged.write_bytes(
        b"".join(raw[:21])
        + b'{"type":"event_msg","payload":{"type":"agent_message","message":"\xff\xfe \\u001b[31m"}}\n'
        + b'{"type":"from_the_future","payload":{}}\n'
        + b"[1, 2]\n"
        + b"x" * (33 * 1024 * 1024)
        + b"\n"
        + raw[21][: len(raw[21]) // 2]  # the file ends mid-line, as a killed agent leaves it
    )
    assert main(["import", "codex", str(damaged)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert err.splitlines() == [
        "hotloop: warning: rollout-damaged.jsonl line 22: bytes that aren't UTF-8, read as �",
        "hotloop: warning: rollout-damaged.jsonl line 24: not a JSON object, skipped",
        "hotloop: warning: rollout-damaged.jsonl line 25: longer than 32 MB, skipped",
        "hotloop: warning: rollout-damaged.jsonl line 26: not JSON (the file ends mid-line), skipped",
        "hotloop: warning: rollout-damaged.jsonl: 1 line(s) of unknown type 'from_the_future', skipped",
    ]
    assert "imported codex session 01a21b43-3776-7b11-a065-608e6484c296" in out
    assert "1 turn, 1 step" in out


def test_listed_by_origin_exported_and_drawn_as_hotloops_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(FIXTURES)]) == 0
    claude_id, codex_id = (imported(path).stem.rsplit("_", 1)[-1] for path in (CLAUDE, CODEX))
    capsys.readouterr()
    assert main(["sessions", "list", "--from", "claude-code"]) == 0
    listed = capsys.readouterr().out
    assert claude_id in listed and codex_id not in listed
    assert main(["sessions", "list", "--from", "codex"]) == 0
    assert codex_id in capsys.readouterr().out
    assert main(["sessions", "export", codex_id, "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert "exec_command" in json.dumps(exported)
    assert main(["sessions", "show", claude_id, "--waterfall"]) == 0
    drawn = capsys.readouterr().out
    assert "turn 1" in drawn.casefold() and "Glob" in drawn


def test_the_ledger_is_the_providers_own_reading() -> None:
    # Codex's counts go through the Responses reading, so the prompt holds its cached part.
    from hotloop.sessions.imports.codex import ledger

    assert ledger(
        {"input_tokens": 100, "cached_input_tokens": 60, "output_tokens": 7}
    ) == UsageLedger.from_openai_responses(
        {
            "input_tokens": 100,
            "output_tokens": 7,
            "input_tokens_details": {"cached_tokens": 60},
            "output_tokens_details": {"reasoning_tokens": None},
        }
    )


def test_a_sub_agents_sidechain_is_a_side_conversation_of_the_main_one(tmp_path: Path) -> None:
    def line(kind: str, side: bool, message: dict[str, Any], at: str) -> dict[str, Any]:
        extra = {"isSidechain": True, "agentId": "a1"} if side else {"isSidechain": False}
        return {"type": kind, "sessionId": "s2", "timestamp": at, "message": message, **extra}

    usage = {"input_tokens": 3, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 2}
    answer = {"model": "claude-haiku-4-5", "content": [{"type": "text", "text": "done"}], "usage": usage}
    records = [
        line("user", False, {"role": "user", "content": "look around"}, "2026-01-01T10:00:00Z"),
        line("user", True, {"role": "user", "content": "list the files"}, "2026-01-01T10:00:01Z"),
        line("assistant", True, {"id": "m-side", **answer}, "2026-01-01T10:00:02Z"),
        line("assistant", False, {"id": "m-main", **answer}, "2026-01-01T10:00:03Z"),
    ]
    source = tmp_path / "s2.jsonl"
    source.write_text("".join(json.dumps(record) + "\n" for record in records))
    report = import_files([source], paths.sessions_dir())
    [(main_one, main_log), (side, side_log)] = report.written
    assert (main_one.side_key, side.side_key) == ("", "a1")
    assert read_header(side_log.path)[0].side_of == main_log.id
    assert [e.prompt for e in read_session(side_log.path).events if isinstance(e, TurnStarted)] == ["list the files"]


def test_from_matches_imported_and_watched_origins() -> None:
    from hotloop.cli.session_commands import came_from

    assert came_from("import:claude-code/2.1.332", "claude-code")
    assert came_from("watch:claude-cli/2.1.332", "claude-code")
    assert came_from("watch:codex_exec/0.171.0", "codex")
    assert not came_from("import:codex/0.171.0", "claude-code")
    assert not came_from("", "codex")
