"""One figure everywhere for a watched session: a tool's time, its title, its cache lines, its agent.

A watched call's time is the gap from the answer that asked for it to the request that carried its
result: `sessions show`, the waterfall, a replay and the OTel span all give that one figure. Driven
through a real `Watch` on the embedded simulator by the official SDK over loopback HTTP.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import msgspec
import pytest
from test_telemetry import Receiver

from hotloop import paths
from hotloop.agent.cache_lifetime import CacheRhythm
from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from hotloop.agent.figures import seconds
from hotloop.cli import main
from hotloop.config import load_config
from hotloop.core.telemetry import Telemetry
from hotloop.headless.watch_run import with_spans
from hotloop.providers.events import UsageLedger
from hotloop.sessions.export_atif import agent_of as atif_agent
from hotloop.sessions.imports.sources import import_files
from hotloop.sessions.projection import project
from hotloop.sessions.replay import Timeline
from hotloop.sessions.store import list_sessions, read_session
from hotloop.sessions.titles import headline, users_words
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.live_panes import LivePane
from hotloop.tui.screens.watch import WatchScreen
from hotloop.watch import ConversationInfo, Watch, upstream_at
from hotloop.watch.wire import PROTOCOLS, agent_of, read_request

from support import wait_until
from tui_support import drawn, watch_app

KEY = "sk-watch-figures-0123456789abcdef"
HELD = 0.3  # seconds a slow consumer holds the loop at the answer's end
TOOLS: Any = [
    {
        "name": "Read",
        "description": "Read a file from the local filesystem",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
    },
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


async def _watched_tool_loop(sim: EmbeddedSimulator, receiver: Receiver) -> tuple[str, list[AgentEvent], float]:
    """Two requests of one conversation through a watch sending spans; the session's id, its logged events, and
    the gap the client itself measured between the answer and its next request."""
    telemetry = Telemetry(f"{receiver.url}/v1/traces", load_config(), lambda _: None)

    def slow(conversation: str, event: AgentEvent) -> None:
        # A consumer that holds the loop at the answer's end, as a summary written on a slow disk did.
        if isinstance(event, ResponseFinished) and event.finish_reason == "tool_calls":
            time.sleep(HELD)

    watch = Watch(upstream_at(sim.url, "sim"), slow, folder=paths.sessions_dir(), workspace=Path.cwd())
    watch.sink = with_spans(slow, telemetry, watch.conversations)
    url = await watch.start()
    api = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    try:
        asked: list[Any] = [{"role": "user", "content": "read README.md and list the files here"}]
        first = await api.messages.create(model="sim-fast", max_tokens=300, messages=asked, tools=TOOLS)
        answered = time.perf_counter()
        calls = [block for block in first.content if block.type == "tool_use"]
        assert {call.name for call in calls} == {"Read", "Bash"}, "the simulator asks for both tools"
        await asyncio.sleep(0.2)  # the agent running its tools
        results = [{"type": "tool_result", "tool_use_id": call.id, "content": "# demo"} for call in calls]
        following = [
            *asked,
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
            {"role": "user", "content": results},
        ]
        gap = time.perf_counter() - answered
        await api.messages.create(model="sim-fast", max_tokens=300, messages=following, tools=TOOLS)
    finally:
        await api.close()
        await watch.aclose()
        await telemetry.close()
    [(conversation, info)] = watch.conversations.items()
    return conversation, read_session(Path(info.path)).events, gap


async def test_a_watched_tools_time_is_one_figure_in_show_waterfall_replay_and_its_span(
    sim: EmbeddedSimulator, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gap from the answer to the next request is each call's time in every view, even when a slow consumer
    held the loop at the answer's end (the start was read after it: the waterfall and the span said ~0)."""
    conversation, events, gap = await _watched_tool_loop(sim, receiver)
    finished = {event.call_id: event for event in events if isinstance(event, ToolFinished)}
    started = {event.call_id: event for event in events if isinstance(event, ToolStarted)}
    assert len(finished) == 2 and started.keys() == finished.keys()
    [duration] = {event.duration for event in finished.values()}
    assert duration >= gap + HELD  # from the answer's end (before the hold) to the request that carried the results
    figure = seconds(duration)

    assert main(["sessions", "show", conversation]) == 0
    shown = capsys.readouterr().out
    ran = {line.split("`")[1]: line.rsplit(" · ", 1)[-1] for line in shown.splitlines() if " · ok · " in line}
    assert ran == {"Read": figure, "Bash": figure}, shown

    assert main(["sessions", "show", "--waterfall", conversation]) == 0
    waterfall = capsys.readouterr().out
    bars = {line.split()[0]: line.split()[-2] for line in waterfall.splitlines() if line.startswith("  ")}
    assert bars == {"Read": f"{duration:.2f}", "Bash": f"{duration:.2f}"}, waterfall
    # Parallel tools saved what the same spans say: their sum less the phase's wall.
    [step] = [event for event in events if isinstance(event, StepFinished) and event.tool_count]
    assert step.tool_wall == pytest.approx(duration) and step.tool_sum == pytest.approx(2 * duration)
    assert f"saved: {seconds(step.tool_sum - step.tool_wall)} by parallel tools" in waterfall, waterfall

    # A replay runs both calls side by side for that long, and its panes say so once they end.
    timeline = Timeline(events)
    due = {(type(event), getattr(event, "call_id", "")): at for event, at in zip(events, timeline.due, strict=True)}
    for call_id in finished:
        assert due[(ToolFinished, call_id)] - due[(ToolStarted, call_id)] == pytest.approx(duration, abs=1e-5)
    assert max(due[(ToolStarted, call_id)] for call_id in finished) < min(
        due[(ToolFinished, call_id)] for call_id in finished
    )
    for record in project(events).turns[0].steps[0].calls.values():
        assert figure in LivePane(record, lambda: 0.0).subtitle()

    spans = receiver.named("execute_tool ")
    assert sorted(span.name for span in spans) == ["execute_tool Bash", "execute_tool Read"]
    for span in spans:
        assert span.attributes["hotloop.tool.duration"] == duration
        assert (span.end - span.start) / 1e9 == pytest.approx(duration, abs=1e-5)


FIXTURES = Path(__file__).parent / "fixtures"
TASK = "read README.md and list the files here"  # what the user typed in every recorded run
WATCHED = "b78f11d3"  # a real Claude Code session as the watch saved it


def _sessions(*imported: str) -> dict[str, str]:
    """The saved sessions: the watched Claude Code one, and the recorded transcripts `imported`; id → origin."""
    folder = paths.sessions_dir()
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "watched" / "claude_code_2.1.332_watched.jsonl", folder / f"20261127T041517_{WATCHED}.jsonl")
    report = import_files([FIXTURES / "imports" / name for name in imported], folder)
    assert not report.problems, report.problems
    return {summary.id: summary.origin for summary in list_sessions(folder).sessions}


def test_a_conversation_is_titled_by_the_users_words_wherever_it_is_listed(capsys: pytest.CaptureFixture[str]) -> None:
    """Claude Code's watched session was titled `<system-reminder>` in `list`, `show` and the waterfall, while the
    import of its transcript and the watch's own table used the prompt: the agents' real requests, a real watched
    log and real transcripts, one title."""
    origins = _sessions("claude_code_2.1.332_two_runs.jsonl", "codex_0.171.0_two_runs.jsonl")
    assert len(origins) == 3
    assert {summary.title for summary in list_sessions(paths.sessions_dir()).sessions} == {TASK}
    assert main(["sessions", "list"]) == 0
    assert "<" not in capsys.readouterr().out
    assert main(["sessions", "show", WATCHED]) == 0
    assert capsys.readouterr().out.startswith(f"# {TASK}\n")
    assert main(["sessions", "show", "--waterfall", WATCHED]) == 0
    assert capsys.readouterr().out.startswith(f"turn 1 · {TASK} · ")
    # The watch's table titles a conversation by its first request, as each agent sent it.
    for name in ("claude_code_2.1.332_requests.jsonl", "codex_0.171.0_requests.jsonl"):
        for line in (FIXTURES / "agents" / name).read_text().splitlines():
            recorded = json.loads(line)
            if recorded["index"] == 0:
                headers = {key.lower(): value for key, value in recorded["headers"].items()}
                body = msgspec.json.encode(recorded["body"])
                request = read_request(PROTOCOLS[recorded["path"]], body, headers)
                assert headline(request.prompt or "") == TASK, name


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        ("<system-reminder>\nAttribution…\n</system-reminder>\n\nfix the parser\nthen test it", "fix the parser"),
        ("<environment_context>\n  <cwd>/x</cwd>\n</environment_context>", ""),
        ("# AGENTS.md instructions for /x\n\n<INSTRUCTIONS>\nbe terse\n</INSTRUCTIONS>", ""),
        ('<user_instructions a="1">be terse</user_instructions><turn_aborted>x</turn_aborted> go on', "go on"),
        ("<b>bold</b> words stay the user's", "<b>bold</b> words stay the user's"),
        ("<system-reminder>never closed: what was sent", "<system-reminder>never closed: what was sent"),
        ('"read README.md then run \\"ls -la\\""', 'read README.md then run "ls -la"'),
        ('"a" and "b"', '"a" and "b"'),
    ],
    ids=[
        "claude-code",
        "codex-context-alone",
        "agents-md",
        "several-blocks",
        "html-of-the-user",
        "unclosed",
        "opencode-json-string",
        "quoted-words",
    ],
)
def test_an_agents_wrapper_is_skipped_and_the_users_own_tags_are_kept(prompt: str, title: str) -> None:
    """One rule for the title and for what an importer takes for context alone (Codex's own user messages)."""
    assert headline(prompt) == title
    assert (users_words(prompt) == "") == (title == "")


def test_the_lifetime_line_is_said_only_of_a_cache_billed_by_lifetime(capsys: pytest.CaptureFixture[str]) -> None:
    """A Codex session (Responses, no cache writes) ended with "1-hour writes would have cost ≈ 8,172 input tokens'
    worth more": Anthropic's lifetimes priced for a server that has none. A watched Claude Code session keeps it."""
    drawn = {}
    for session, origin in _sessions("codex_0.171.0_two_runs.jsonl").items():
        assert main(["sessions", "show", "--waterfall", session]) == 0
        drawn[origin] = capsys.readouterr().out
    assert "cache lifetime: written 5-minute · 1-hour writes would have cost" in drawn["watch:claude-cli/2.1.332"]
    codex = drawn["import:codex/0.171.0"]
    assert "cache lifetime" not in codex and "1-hour" not in codex, codex
    # Anthropic's own usage, but nothing written to the cache (a prompt under its minimum): no cost to claim.
    rhythm = CacheRhythm()
    nothing = {"input_tokens": 900, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 5}
    split = {"cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}}
    for turn in (1, 2):
        rhythm.observe(StepStarted(turn=turn, step=1, provider="anthropic", model="claude-sonnet-4-5"))
        usage = UsageLedger.from_anthropic(nothing | split, None)
        rhythm.observe(
            ResponseFinished(
                turn=turn, step=1, usage=usage, ttft=0.1, decode_tps=None, model_time=0.2, finish_reason="end_turn"
            )
        )
    assert rhythm.uses and rhythm.choice() is None


def test_the_atif_export_names_the_agent_and_version_that_made_the_session(capsys: pytest.CaptureFixture[str]) -> None:
    """A watched Claude Code session was exported as `agent.version: "unknown"`: the user-agent says 2.1.332, and an
    imported transcript says its own version; both name the agent as Harbor does."""
    sessions = _sessions("claude_code_2.1.332_two_runs.jsonl", "codex_0.171.0_two_runs.jsonl", "opencode/opencode.db")
    agents = {}
    for session in sessions:
        assert main(["sessions", "export", "--format", "atif", session]) == 0
        agent = json.loads(capsys.readouterr().out)["agent"]
        agents[agent["extra"]["origin"]] = (agent["name"], agent["version"])
    assert agents == {
        "watch:claude-cli/2.1.332": ("claude-code", "2.1.332"),
        "import:claude-code/2.1.332": ("claude-code", "2.1.332"),
        "import:codex/0.171.0": ("codex", "0.171.0"),
        "import:opencode/1.18.33": ("opencode", "1.18.33"),
    }
    # Watched as the pass-through names a client, from each agent's recorded user-agent.
    for name, expected in [
        ("claude_code_2.1.332_requests.jsonl", ("claude-code", "2.1.332")),
        ("codex_0.171.0_requests.jsonl", ("codex", "0.171.0")),
        ("opencode_1.18.33_requests.jsonl", ("opencode", "1.18.33")),
    ]:
        recorded = json.loads((FIXTURES / "agents" / name).read_text().splitlines()[0])
        origin = f"watch:{agent_of(recorded['headers']['User-Agent'])}"
        assert tuple(atif_agent(origin, "0.1.0").values()) == expected, origin
    assert atif_agent("watch:OpenAI/Python 1.99.0", "0.1.0") == {"name": "OpenAI", "version": "unknown"}
    assert atif_agent("", "0.1.0") == {"name": "hotloop", "version": "0.1.0"}


async def test_the_watch_app_times_a_requests_wait_on_the_events_clock(sim: EmbeddedSimulator, tmp_path: Path) -> None:
    """The watch app ticked its waits on `perf_counter` against the events' wall-clock `ts`: a request that had
    waited 3 s for its first token read `0.00 s`."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        info = ConversationInfo(
            id="c0ffee00",
            agent="claude-cli/2.1.332",
            origin="watch:claude-cli/2.1.332",
            parent="",
            title=TASK,
            provider="sim",
            model="sim-fast",
            base_url=sim.url,
            cost_per_hour=None,
            path=str(tmp_path / "c0ffee00.jsonl"),
        )
        began = time.time() - 3
        screen.deliver(info, TurnStarted(turn=1, prompt=TASK, ts=began))
        screen.deliver(info, StepStarted(turn=1, step=1, provider="sim", model="sim-fast", ts=began))
        await wait_until(lambda: "waiting for the first token" in drawn(app), what="the live strip")
        waited = re.search(r"waiting for the first token · (\d+\.\d+) s", drawn(app))
        assert waited is not None and float(waited[1]) >= 3.0, drawn(app)
