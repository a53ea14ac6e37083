"""`hotloop watch --upstream sim --run` drives a real Claude Code and a real Codex (issue 26): each CLI does a task
with two tool calls, then resumes the same session with another tool list. Every request it made is a step of one
watched conversation, with the ledger the CLI itself recorded for it, a TTFT, the calls and their results; a request
the simulator refused would be named instead (none is). The resumed run's first request continues the conversation,
and the explainer's verdict on it names the tools that changed. A real opencode (issue 36) does its task the same
way, and its title request, sent first, is a side request of that one conversation.

The runs need the CLIs (tests/agents_cli.py) and skip where they aren't, saying what to install. The unit tests
below them pin the grouping bugs those runs found, and run everywhere.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    StepFinished,
    ToolFinished,
    TurnStarted,
)
from hotloop.providers.events import ToolCallReady
from hotloop.providers.protocols import Wire
from hotloop.sessions.log import SessionHeader, SessionLog
from hotloop.sessions.store import LoggedSession, list_sessions, read_session
from hotloop.watch.conversation import Conversation, ConversationInfo
from hotloop.watch.lineage import Lineage, Placement
from hotloop.watch.reading import ResponseReader
from hotloop.watch.wire import read_request

from agents_cli import claude_env, cli, codex_env, opencode_env
from support import communicated
from tui_support import FAST_SIM

TASK = "read README.md and list the files here"
# Two runs of a CLI, each a second or two on the simulator; the bound only keeps a stuck one from holding the suite.
RUN_SECONDS = 300
FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class Watched:
    """One `hotloop watch --run`: its output, the conversation it saved, and that one's side requests."""

    out: str
    header: SessionHeader
    events: list[AgentEvent]
    sides: list[LoggedSession]

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]

    def refusals(self) -> int:
        """Requests the simulator refused: the table names each (`sim answered 400 to …`), and none is a step."""
        return len(re.findall(r" answered \d{3} to /", self.out))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# Demo\n\nA small project.\n")
    (folder / "app.py").write_text('print("hi")\n')
    return folder


def watch_run(home: Path, workdir: Path, env: dict[str, str], script: str, *args: str, port: int = 0) -> Watched:
    """`hotloop watch --upstream sim --run sh -ec SCRIPT sh ARGS` in `workdir`, killed with everything it started if it
    outlasts RUN_SECONDS; the one conversation it saved, every other session a side request of it."""
    (home / "config.toml").write_text(FAST_SIM)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "HOTLOOP_CONFIG": str(home / "config.toml"),
        "HOTLOOP_DATA_DIR": str(home / "data"),
        **env,
    }
    command = [sys.executable, "-m", "hotloop", "watch", "--upstream", "sim", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--run", "sh", "-ec", script, "sh", *args],
        cwd=workdir,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so a timeout ends the CLIs too
    )
    out, err = communicated(process, RUN_SECONDS)
    assert process.returncode == 0, out + err
    listing = list_sessions(home / "data" / "sessions")
    assert not listing.problems
    sessions = [read_session(summary.path) for summary in listing.sessions]
    assert not [session.warnings for session in sessions if session.warnings]
    # Both runs, each request and its retry: one conversation; a title request is a side request of it.
    [session] = [session for session in sessions if not session.header.side_of]
    sides = [side for side in sessions if side is not session]
    assert [side.header.side_of for side in sides] == [session.header.id] * len(sides), out
    return Watched(out, session.header, session.events, sides)


def free_port() -> int:
    """A port nothing listens on now, for Codex's config file, which must name the pass-through's address before it
    starts (`--port`)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def assert_each_step_measured(watched: Watched, recorded: Sequence[tuple[int, int, int, int]]) -> None:
    """One step per request answered, in order, whose ledger is what the CLI recorded for it: (prompt, cache read,
    cache write, output); each with a TTFT."""
    finished = watched.of(ResponseFinished)
    assert len(watched.of(StepFinished)) == len(finished)
    ledgers = []
    for response in finished:
        usage = response.usage
        assert usage is not None and response.ttft is not None and response.ttft > 0
        ledgers.append((usage.prompt_total, usage.cache_read, usage.cache_write or 0, usage.output))
    assert ledgers == list(recorded)


def assert_two_calls_a_run_each_with_its_result(watched: Watched) -> None:
    """Each run (a turn) made at least two calls, and the next request brought every one's result back."""
    turns = [event.turn for event in watched.of(TurnStarted)]
    assert turns == [1, 2]
    finished = {event.call_id: event.status for event in watched.of(ToolFinished)}
    for turn in turns:
        calls = [
            event.call_id
            for n, event in enumerate(watched.events)
            if isinstance(event, ToolCallReady) and _turn_at(watched.events, n) == turn
        ]
        assert len(calls) >= 2, turn
        assert all(finished.get(call) == "ok" for call in calls), (turn, finished)


def _turn_at(events: Sequence[AgentEvent], index: int) -> int:
    return max((event.turn for event in events[:index] if isinstance(event, TurnStarted)), default=0)


def resumed_verdict(watched: Watched) -> str:
    """The explainer's verdict on the second run's first answered request (turn 2's first step)."""
    [first] = [event for event in watched.of(ResponseFinished) if event.turn == 2 and event.step == 1]
    return str(first.cache_note)


@pytest.mark.timeout(RUN_SECONDS + 30)
def test_claude_code_twice_through_watch_is_one_measured_conversation_and_the_tool_change_is_named(
    isolated_home: Path, workdir: Path, tmp_path: Path
) -> None:
    claude, agent_home = cli("claude"), tmp_path / "agent"
    # The second run continues the session with Glob and Grep offered, and most of the default tools gone.
    script = (
        '"$@" --allowedTools Read,Bash >first.json\n'
        '"$@" --continue --tools Read,Bash,Glob,Grep --allowedTools Read,Bash,Glob,Grep >second.json'
    )
    args = (claude, "-p", TASK, "--model", "sim-fast", "--output-format", "json")
    watched = watch_run(isolated_home, workdir, claude_env(agent_home), script, *args)

    runs = [json.loads((workdir / name).read_text()) for name in ("first.json", "second.json")]
    assert [run["is_error"] for run in runs] == [False, False]
    assert runs[0]["session_id"] == runs[1]["session_id"]
    assert watched.header.origin == "watch:claude-cli/2.1.332" and not watched.sides
    # Claude Code's own records: each request it sent (`api-request`, refused ones too) and each answer's usage.
    records = [
        json.loads(line)
        for path in sorted((agent_home / ".claude" / "projects").glob("*/*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    usages = {
        record["message"]["id"]: record["message"]["usage"]
        for record in records
        if record["type"] == "assistant" and not record.get("isSidechain")
    }
    recorded = [
        (
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"],
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
            usage["output_tokens"],
        )
        for usage in usages.values()
    ]
    sent = sum(record["type"] == "api-request" for record in records)
    # The simulator takes all Claude Code sends, its mid-conversation tool changes included: no request refused.
    assert watched.refusals() == 0 and sent == len(recorded), watched.out
    assert_each_step_measured(watched, recorded)
    assert_two_calls_a_run_each_with_its_result(watched)
    verdict = resumed_verdict(watched)
    assert verdict.startswith("cache miss: tools changed (+Glob, +Grep"), verdict
    assert "re-prefilled" in verdict


@pytest.mark.timeout(RUN_SECONDS + 30)
def test_codex_twice_through_watch_is_one_measured_conversation_and_the_tool_change_is_named(
    isolated_home: Path, workdir: Path, tmp_path: Path
) -> None:
    codex, agent_home, port = cli("codex"), tmp_path / "agent", free_port()
    env = codex_env(agent_home, f"http://127.0.0.1:{port}/v1")
    # Its sandbox helper is missing under a fresh HOME (interop.md). The second run resumes the session without the
    # multi-agent and goal tools.
    script = (
        'task=$1; shift\n"$@" "$task" >first.txt\n'
        '"$@" --disable multi_agent --disable goals resume --last "$task" >second.txt'
    )
    args = (TASK, codex, "exec", "--skip-git-repo-check", "-s", "danger-full-access")
    watched = watch_run(isolated_home, workdir, env, script, *args, port=port)

    for name in ("first.txt", "second.txt"):
        assert f"## Results for: {TASK}" in (workdir / name).read_text()
    assert watched.header.origin == "watch:codex_exec/0.171.0" and not watched.sides
    # Codex's own rollout: a token count for each request answered (resume appends to the same file).
    counts = [
        record["payload"]["info"]["last_token_usage"]
        for path in sorted((agent_home / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))
        for line in path.read_text().splitlines()
        if (record := json.loads(line))["type"] == "event_msg"
        and record["payload"]["type"] == "token_count"
        and record["payload"].get("info")
    ]
    recorded = [
        (
            count["input_tokens"],
            count["cached_input_tokens"],
            count.get("cache_write_input_tokens", 0),
            count["output_tokens"],
        )
        for count in counts
    ]
    assert watched.refusals() == 0, watched.out
    assert_each_step_measured(watched, recorded)
    assert_two_calls_a_run_each_with_its_result(watched)
    verdict = resumed_verdict(watched)
    assert verdict.startswith("cache miss: tools changed (−create_goal, −get_goal, −update_goal"), verdict


@pytest.mark.timeout(RUN_SECONDS + 30)
def test_opencode_through_watch_is_one_conversation_with_its_title_request_under_it(
    isolated_home: Path, workdir: Path, tmp_path: Path
) -> None:
    """opencode sends its title request (no tools) first, then its task: the task and its results are the one
    conversation, each request a measured step whose calls got their results; the title request is a side request
    of it, and each step's ledger is what opencode stored for that request. opencode takes the watch's address from
    its config (the AI SDK's form, `/v1` at its end)."""
    opencode, agent_home, port = cli("opencode"), tmp_path / "agent", free_port()
    env = opencode_env(agent_home, f"http://127.0.0.1:{port}/v1")
    watched = watch_run(isolated_home, workdir, env, '"$@" >answer.md', opencode, "run", TASK, port=port)

    assert f"## Results for: {TASK}" in (workdir / "answer.md").read_text()
    assert watched.header.origin.startswith("watch:opencode/1.18.33") and watched.refusals() == 0, watched.out
    calls = watched.of(ToolCallReady)
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [
        ("read", {"filePath": str(workdir / "README.md")}),
        ("read", {"filePath": str(workdir)}),
    ]
    finished = {event.call_id: event.status for event in watched.of(ToolFinished)}
    assert [finished.get(call.call_id) for call in calls] == ["ok", "ok"]
    # opencode's own store: a `step-finish` part, with the usage, for each request of the task.
    with closing(sqlite3.connect(agent_home / ".local" / "share" / "opencode" / "opencode.db")) as store:
        parts = [json.loads(data) for (data,) in store.execute("SELECT data FROM part ORDER BY time_created, id")]
    tokens = [part["tokens"] for part in parts if part["type"] == "step-finish"]
    recorded = [
        (
            used["input"] + used["cache"]["read"] + used["cache"]["write"],
            used["cache"]["read"],
            used["cache"]["write"],
            used["output"],
        )
        for used in tokens
    ]
    assert len(recorded) == 2  # the task, then its results
    assert_each_step_measured(watched, recorded)
    [title] = watched.sides
    assert title.header.origin == watched.header.origin
    [titled] = [event for event in title.events if isinstance(event, ResponseFinished)]
    assert titled.usage is not None and not [event for event in title.events if isinstance(event, ToolCallReady)]


# The grouping bugs the runs above found, pinned where no CLI is needed.


def _claude_recorded() -> list[dict[str, Any]]:
    lines = (FIXTURES / "agents" / "claude_code_2.1.332_requests.jsonl").read_text().splitlines()
    return [recorded for line in lines if (recorded := json.loads(line))["run"] == "claude-1-read-bash"]


def test_a_text_block_and_the_same_text_as_a_string_are_one_message() -> None:
    """Claude Code sends its mid-conversation system message as a text block marked for the cache, then as a
    string: the same tokens, so the second request extends the first by prefix alone (no session key to fall back
    on)."""
    lineage = Lineage()
    placements = []
    for recorded in _claude_recorded():
        body = {key: value for key, value in recorded["body"].items() if key != "metadata"}
        request = read_request(Wire.ANTHROPIC, msgspec.json.encode(body), {})
        assert request.session_key == ""
        segments = request.segments
        placements.append(lineage.place("", segments.system, segments.messages, segments.roles))
        lineage.record("run", "", segments.system, segments.messages)
    assert placements == [Placement(), Placement(continues="run")]


def test_a_rewritten_history_after_a_new_system_prompt_continues_the_conversation() -> None:
    """A keyed request that extends nothing is compared with the conversation's latest system prompt, not its
    first: after the tool list (and with it Claude Code's system prompt) changed, it is the same conversation."""
    lineage = Lineage()
    lineage.record("main", "key", "tools A", [b"prompt"])
    assert lineage.place("key", "tools B", [b"prompt", b"answer", b"next"], ["user", "assistant", "user"]) == (
        Placement(continues="main")
    )
    lineage.record("main", "key", "tools B", [b"prompt", b"answer", b"next"])
    assert lineage.place("key", "tools B", [b"summary"], ["user"]) == Placement(continues="main")
    assert lineage.place("key", "tools A", [b"summary"], ["user"]) == Placement(side_of="main")


def test_a_client_that_hangs_up_after_the_whole_answer_leaves_its_calls_to_run(tmp_path: Path) -> None:
    """Codex drops the connection once it has `response.completed`, before the stream's own end: the step is not
    cut, and the next request's results end its calls."""
    events: list[AgentEvent] = []
    log = SessionLog.create(tmp_path, provider="sim", model="gpt-4o", workspace=tmp_path, origin="watch:test")
    info = ConversationInfo(
        id=log.id,
        agent="test",
        origin="watch:test",
        parent="",
        title="",
        provider="sim",
        model="gpt-4o",
        base_url="",
        cost_per_hour=None,
        path=str(log.path),
    )
    conversation = Conversation(info, log, lambda _, event: events.append(event))
    asked = {"model": "gpt-4o", "stream": True, "input": "what is the capital of France?"}
    started = time.perf_counter()
    conversation.begin(read_request(Wire.OPENAI_RESPONSES, msgspec.json.encode(asked), {}), started, time.time())
    reader = ResponseReader(Wire.OPENAI_RESPONSES, "gpt-4o", "sim", started, streamed=True)
    conversation.model_events(reader.feed((FIXTURES / "openai_responses_tool_call.sse").read_bytes(), started))
    conversation.finish(reader, cut="cancelled")
    assert not [event for event in events if isinstance(event, StepFinished)]

    [call] = [event for event in events if isinstance(event, ToolCallReady)]
    results = {
        **asked,
        "input": [
            {"role": "user", "content": "what is the capital of France?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "Paris"},
        ],
    }
    later = time.perf_counter()
    conversation.begin(read_request(Wire.OPENAI_RESPONSES, msgspec.json.encode(results), {}), later, time.time())
    conversation.close()
    [finished] = [event for event in events if isinstance(event, ToolFinished)]
    assert (finished.call_id, finished.status, finished.result) == (call.call_id, "ok", "Paris")
    [step] = [event for event in events if isinstance(event, StepFinished)]
    assert step.cut == ""
    assert [event.turn for event in events if isinstance(event, TurnStarted)] == [1]
