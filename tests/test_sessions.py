"""Saved sessions: resumed byte for byte, replayed at their pace, found by prefix, exported, and hard to break."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hotloop.agent.events import AgentEvent, Notice, StepStarted, TurnFinished, TurnStarted
from hotloop.cli import main
from hotloop.providers.conversation import AssistantMessage, ToolResultMessage, UserMessage
from hotloop.providers.events import TextDelta
from hotloop.sessions.log import SessionInUse, SessionLog
from hotloop.sessions.replay import IDLE_GAP, Replay, Timeline
from hotloop.sessions.store import SessionError, find_session, list_sessions, read_session

from support import killed_mid_answer, logged_agent, resumed_beside, start_sim

FAST_SIM = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


@pytest.mark.parametrize("protocol", ["openai", "openai-responses", "anthropic"])
async def test_a_resumed_conversation_sends_the_same_bytes_as_the_original(
    protocol: str, tmp_path: Path, workspace: Path
) -> None:
    """Turns 1–2 are logged; turn 3 runs once in the original process and once after a resume: same request bytes."""
    sim = start_sim()
    folder = tmp_path / "sessions"
    try:
        log = SessionLog.create(folder, provider="sim", model="sim-fast", workspace=workspace, system="")
        original, _ = logged_agent(sim, protocol, workspace, log)
        for prompt in ("read README.md then grep for TODO", "read notes.txt"):
            assert (await original.run_turn(prompt)).reason == "answer"
        snapshot = tmp_path / "copy" / log.path.name
        expected, resumed, again = await resumed_beside(sim, protocol, original, log, "list the files in .", snapshot)
        assert resumed.session.warnings == [] and resumed.conversation.open_turn is None
        again_log = resumed.log
        assert again.messages == original.messages[: len(again.messages)]
        sent_before = len(sim.server.requests)
        finished = await again.run_turn("list the files in .")
        again_log.close()
        await again.provider.aclose()
    finally:
        sim.stop()
    assert finished.turn == 3 and finished.reason == "answer"
    assert sim.server.requests[sent_before].body == expected
    if protocol == "anthropic":  # signed thinking went back as it came
        assert any(isinstance(m, AssistantMessage) and m.thinking and m.thinking[0].signature for m in again.messages)
    if protocol == "openai-responses":  # so did the encrypted reasoning items, verbatim
        restored = resumed.conversation.messages
        items = [item for m in restored if isinstance(m, AssistantMessage) for item in m.reasoning_items]
        assert items and all(item.encode() in expected for item in items)
    # The resumed turn went on in the same log, which still reads whole.
    assert [e.turn for e in read_session(snapshot).events if isinstance(e, TurnStarted)] == [1, 2, 3]


def test_an_interrupted_step_is_rebuilt_as_the_agent_kept_it() -> None:
    from hotloop.agent.step import CANCELLED_RESULT
    from hotloop.providers.events import ToolCallReady
    from hotloop.sessions.resume import closing_events, rebuild

    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="go", context=" <ctx>"),
        StepStarted(turn=1, step=1, provider="p", model="m"),
        TextDelta("half an "),
        TextDelta("answer"),
        ToolCallReady(0, "c1", "grep", '{"pattern": "x"}'),
    ]
    conversation = rebuild(events)
    user, partial, cancelled = conversation.messages
    assert isinstance(user, UserMessage) and isinstance(partial, AssistantMessage)
    assert user.content == "go <ctx>"
    assert partial == AssistantMessage("half an answer", "", partial.tool_calls, interrupted=True)
    assert cancelled == ToolResultMessage("c1", "grep", CANCELLED_RESULT, is_error=True)
    notice, end = closing_events(conversation, events)
    assert isinstance(notice, Notice) and "partial answer is kept" in notice.message
    assert isinstance(end, TurnFinished) and (end.turn, end.reason, end.steps) == (1, "interrupted", 1)


def write_session(folder: Path, lines: list[bytes], name: str = "20260101T000000_abcdef12.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"".join(lines))
    return path


HEADER = (
    b'{"type":"session","id":"abcdef12","format":1,"started":1800000000.0,"hotloop":"0.1","provider":"sim",'
    b'"model":"sim-fast","workspace":"/w"}\n'
)
TURN = b'{"type":"turn_started","ts":1800000001.0,"turn":1,"prompt":"hello","context":""}\n'
DELTA = b'{"type":"text_delta","ts":1800000002.0,"text":"Hi"}\n'


def test_corrupt_logs_load_what_they_can_and_say_what_they_skipped(tmp_path: Path) -> None:
    torn = write_session(tmp_path, [HEADER, TURN, DELTA, b'{"type":"text_delta","ts":18000'])
    session = read_session(torn)
    assert [type(e).__name__ for e in session.events] == ["TurnStarted", "TextDelta"]
    assert session.warnings == [f"{torn.name} line 4: not a complete event, skipped"]

    garbage = write_session(
        tmp_path, [HEADER, TURN, b"\x00\xffnot json at all\n", DELTA], "20260101T000001_bbbbbbbb.jsonl"
    )
    session = read_session(garbage)
    assert len(session.events) == 2 and session.warnings == [f"{garbage.name} line 3: not a complete event, skipped"]

    empty = write_session(tmp_path, [], "20260101T000002_cccccccc.jsonl")
    with pytest.raises(SessionError, match=r"is empty: not a hotloop session log$"):
        read_session(empty)
    newer = write_session(
        tmp_path, [HEADER.replace(b'"format":1', b'"format":7,"extra":true'), TURN], "20260101T000003_dddddddd.jsonl"
    )
    with pytest.raises(
        SessionError, match=r"was written by a newer hotloop \(log format 7; this one reads format 1\): upgrade"
    ):
        read_session(newer)
    listing = list_sessions(tmp_path)
    assert sorted(s.path.name for s in listing.sessions) == sorted([torn.name, garbage.name])
    assert len(listing.problems) == 2 and any("newer hotloop" in problem for problem in listing.problems)


def test_session_ids_resolve_by_unique_prefix(tmp_path: Path) -> None:
    for name in ("20260101T000000_abcdef12", "20260102T000000_abd00000", "20260103T000000_ff000000"):
        write_session(tmp_path, [HEADER], f"{name}.jsonl")
    assert find_session(tmp_path, "abc").name.endswith("abcdef12.jsonl")
    assert find_session(tmp_path, None).name.endswith("ff000000.jsonl")  # the latest
    with pytest.raises(SessionError, match=r"'ab' matches 2 sessions \(abcdef12, abd00000\); give more of the id"):
        find_session(tmp_path, "ab")
    with pytest.raises(SessionError, match="no session id starts with 'zz'"):
        find_session(tmp_path, "zz")


def test_two_processes_never_write_one_session(tmp_path: Path) -> None:
    with SessionLog.create(tmp_path, provider="p", model="m", workspace=tmp_path) as log:
        header_size = len(log.path.read_bytes())
        with pytest.raises(SessionInUse, match=f"session {log.id} is open in another hotloop process"):
            SessionLog.reopen(log.path, log.id, header_size)
    SessionLog.reopen(log.path, log.id, header_size).close()  # free again once the first is closed


def test_the_timeline_keeps_the_pace_but_cuts_idle_time() -> None:
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="a", ts=100.0),
        StepStarted(turn=1, step=1, provider="p", model="m", ts=100.5),
        TextDelta("x", ts=101.5),
        TurnStarted(turn=2, prompt="b", ts=400.0),
        StepStarted(turn=2, step=1, provider="p", model="m", ts=400.2),
    ]
    timeline = Timeline(events)
    assert timeline.due == pytest.approx([0.0, 0.5, 1.5, 1.5 + IDLE_GAP, 1.7 + IDLE_GAP])
    assert timeline.step_starts == [1, 4]
    assert (timeline.next_step(2), timeline.previous_step(5), timeline.previous_step(2)) == (4, 1, 0)


async def test_the_player_pauses_changes_speed_and_jumps() -> None:
    clock = [0.0]
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="a", ts=10.0),
        StepStarted(turn=1, step=1, provider="p", model="m", ts=10.0),
        TextDelta("x", ts=12.0),
        StepStarted(turn=1, step=2, provider="p", model="m", ts=14.0),
    ]
    replay = Replay(events, speed=2.0, now=lambda: clock[0])
    clock[0] = 0.5
    assert replay.elapsed() == 1.0 and replay.recorded_time() == 11.0
    replay.toggle_pause()
    clock[0] = 5.0
    assert replay.elapsed() == 1.0  # paused: the recording's time stands still
    replay.toggle_pause()
    replay.set_speed(4.0)
    clock[0] = 5.25
    assert replay.elapsed() == 2.0
    forward = replay.jump(3)
    assert not forward.restart and forward.events == events[:3] and replay.elapsed() == 4.0
    back = replay.jump(1)
    assert back.restart and back.events == events[:1]


def run_cli(
    home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "HOTLOOP_CONFIG": str(home / "config.toml"),
        "HOTLOOP_DATA_DIR": str(home / "data"),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "hotloop", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        cwd=home,
    )


def test_kill_9_mid_answer_leaves_a_log_that_resumes(isolated_home: Path) -> None:
    path = killed_mid_answer(isolated_home)

    session = read_session(path)
    partial = "".join(e.text for e in session.events if isinstance(e, TextDelta))
    assert 20 <= partial.count("word") < 400 and not any(isinstance(e, TurnFinished) for e in session.events)

    resumed = run_cli(isolated_home, "run", "-c", "go on")
    assert resumed.returncode == 0, resumed.stderr
    assert "the last turn stopped when hotloop did; its partial answer is kept, marked interrupted" in resumed.stderr
    assert "Picked up again." in resumed.stdout
    after = read_session(path).events
    ends = [(e.turn, e.reason) for e in after if isinstance(e, TurnFinished)]
    assert ends == [(1, "interrupted"), (2, "answer")]


def test_sessions_commands_list_search_show_export_and_delete(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    (isolated_home / "ws").mkdir()
    os.chdir(isolated_home / "ws")
    (isolated_home / "ws" / "README.md").write_text("# Demo <script>alert(1)</script>\n")
    assert main(["run", "read README.md"]) == 0
    assert main(["run", "say <b>hello</b> to the cache"]) == 0
    capsys.readouterr()
    sessions = list_sessions(isolated_home / "data" / "sessions").sessions
    hello, readme = sessions

    assert main(["sessions", "list", "--search", "HELLO"]) == 0
    out = capsys.readouterr().out
    assert hello.id in out and readme.id not in out and "Say <b>hello</b> to the cache" in out  # its title
    assert main(["sessions", "list", "--limit", "1"]) == 0
    assert "… 1 older session (--limit N shows more)" in capsys.readouterr().out

    assert main(["sessions", "show", readme.id[:5]]) == 0
    shown = capsys.readouterr().out
    assert "## Turn 1" in shown and '`read_file` `{"path": "README.md"}` · ok' in shown

    assert main(["sessions", "export", readme.id, "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["id"] == readme.id and exported["turns"][0]["prompt"] == "read README.md"
    step = exported["turns"][0]["steps"][0]
    assert step["tool_calls"][0]["name"] == "read_file" and step["usage"]["prompt_total"] > 0
    assert not {"system", "workspace", "config", "base_url"} & set(exported)

    target = isolated_home / "out.html"
    assert main(["sessions", "export", readme.id, "--format", "html", "-o", str(target)]) == 0
    page = target.read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert oct(target.stat().st_mode & 0o777) == "0o600"

    with SessionLog.reopen(hello.path, hello.id, read_session(hello.path).header_size):
        assert main(["sessions", "delete", hello.id]) == 2
        assert "is open in another hotloop process" in capsys.readouterr().err
    assert main(["sessions", "delete", "--yes", hello.id]) == 0
    assert not hello.path.exists() and [s.id for s in list_sessions(hello.path.parent).sessions] == [readme.id]


def test_headless_replay_prints_what_run_printed(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    (isolated_home / "ws").mkdir()
    os.chdir(isolated_home / "ws")
    (isolated_home / "ws" / "README.md").write_text("# Demo\n")
    assert main(["run", "read README.md"]) == 0
    ran = capsys.readouterr()
    assert main(["replay", "--headless", "--speed", "0"]) == 0
    replayed = capsys.readouterr()
    assert replayed.out == ran.out
    assert [line for line in replayed.err.splitlines() if line.startswith("turn ")] == [
        line for line in ran.err.splitlines() if line.startswith("turn ")
    ]


def test_keys_never_reach_any_session_file(isolated_home: Path) -> None:
    key = "sk-ant-live-DEADBEEF0123456789"
    (isolated_home / "config.toml").write_text(FAST_SIM)
    (isolated_home / "README.md").write_text(f"the key is {key}\n")
    result = run_cli(isolated_home, "run", f"remember {key} and read README.md", env={"ANTHROPIC_API_KEY": key})
    assert result.returncode == 0, result.stderr
    [path] = (isolated_home / "data" / "sessions").glob("*.jsonl")
    exported = run_cli(
        isolated_home,
        "sessions",
        "export",
        path.stem.rsplit("_", 1)[1],
        "--format",
        "json",
        "-o",
        str(isolated_home / "data" / "export.json"),
        env={"ANTHROPIC_API_KEY": key},
    )
    assert exported.returncode == 0, exported.stderr
    files = [p for p in (isolated_home / "data").rglob("*") if p.is_file()]
    assert {p.suffix for p in files} >= {".jsonl", ".json"} and len(files) >= 3  # log, summary, export
    for file in files:
        assert key.encode() not in file.read_bytes(), file
        assert file.stat().st_mode & 0o077 == 0, file
    assert b"[redacted]" in path.read_bytes()


def test_starting_a_session_is_refused_while_another_process_writes_it(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    with SessionLog.create(
        isolated_home / "data" / "sessions", provider="sim", model="sim-fast", workspace=isolated_home
    ) as log:
        assert main(["run", "-c", "hello"]) == 2
        assert capsys.readouterr().err == f"hotloop: session {log.id} is open in another hotloop process\n"
        assert main(["--resume", log.id[:4]]) == 2
        assert capsys.readouterr().err == f"hotloop: session {log.id} is open in another hotloop process\n"
    assert main(["run", "--resume", "nope", "hello"]) == 2
    assert "no session id starts with 'nope'" in capsys.readouterr().err
