"""The latency engine: tool calls that start while the model still writes, and misses that explain themselves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.cache_explainer import CacheExplainer, WireSegments
from hotloop.agent.events import StepFinished, StepStarted, ToolFinished, ToolStarted
from hotloop.agent.figures import step_summary
from hotloop.agent.memo import Memo
from hotloop.agent.prefetch import Prefetcher
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.providers.events import Finished as ModelFinished
from hotloop.sessions.waterfall import render, waterfalls
from hotloop.sim.engine import LatencyProfile

from support import make_agent, present, sim_with_scenario, start_sim, wait_until

# Slow decode: the first call is written in ~0.4 s and runs longest; the two after it have long arguments, which
# take ~0.7 s each to write, and run briefly.
QUERY = "prefix caching block hashing eviction policy " * 6
SECONDS = {"first": 1.8, "second": 0.2, "third": 0.2}
SLOW_CALLS = [
    {"name": "search", "arguments": {"query": "prefix caching" if which == "first" else QUERY, "which": which}}
    for which in SECONDS
]
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}, "which": {"type": "string"}}}


async def search(args: dict[str, Any], ctx: ToolContext) -> str:
    # Real time: the tests below compare how long steps take with calls started early and not.
    await asyncio.sleep(SECONDS[args["which"]])
    return f"results for {args['which']}"


async def slow_step(tmp_path: Path, early_dispatch: bool) -> tuple[list[Any], float]:
    """The events of a step with three slowly written calls, and the time from step start to its last tool's end."""
    tmp_path.mkdir()
    steps = [{"tool_calls": SLOW_CALLS, "decode_ms": 10}, {"text": "done"}]
    sim = sim_with_scenario(tmp_path, steps, LatencyProfile(ttft=0.05, prefill_per_token=0, decode_per_token=0.001))
    try:
        agent, recorder = make_agent(
            sim, tmp_path, [Tool("search", "Search.", SCHEMA, search, read_only=True)], early_dispatch=early_dispatch
        )
        await agent.run_turn("search three ways")
        await agent.provider.aclose()
    finally:
        sim.stop()
    first_step = next(e for e in recorder.events if isinstance(e, StepFinished))
    return recorder.events, first_step.wall


@pytest.fixture(scope="module")
def early_step(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], float]:
    """`slow_step` with early dispatch, run once for the module's tests, which only read its events.

    Not side by side with another run: two simulators streaming in one process slow each other's chunks.
    """
    return asyncio.run(slow_step(tmp_path_factory.mktemp("slow") / "early", early_dispatch=True))


@pytest.mark.wall_clock
async def test_a_call_starts_as_soon_as_its_arguments_are_complete(
    tmp_path: Path, early_step: tuple[list[Any], float]
) -> None:
    events, early_wall = early_step
    _, late_wall = await slow_step(tmp_path / "late", early_dispatch=False)

    message_end = next(e.ts for e in events if isinstance(e, ModelFinished))
    starts = [e.ts for e in events if isinstance(e, ToolStarted)]
    assert len(starts) == 3 and starts[0] < message_end and starts[1] < message_end  # before the message ended
    assert next(e.result for e in events if isinstance(e, ToolFinished)) == "results for second"  # the slow one ran on
    # The first (slowest) call overlapped the writing of the other two: the step ends at least 25% sooner.
    assert early_wall <= 0.75 * late_wall


async def test_a_call_whose_arguments_do_not_parse_is_not_started_early(tmp_path: Path) -> None:
    ran: list[str] = []

    async def record(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(args["which"])
        return "ran"

    calls = [{"name": "record", "arguments": '{"which": "broken"'}, {"name": "record", "arguments": {"which": "fine"}}]
    sim = sim_with_scenario(tmp_path, [{"tool_calls": calls}, {"text": "ok"}])
    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("record", "Records.", {"type": "object"}, record)])
        await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        sim.stop()
    assert ran == ["fine"]
    broken = next(e for e in recorder.of(ToolFinished) if e.status == "error")
    assert "are not valid JSON" in broken.result


async def test_a_timestamp_planted_in_the_system_prompt_is_named_as_the_miss(tmp_path: Path) -> None:
    listing = {"tool_calls": [{"name": "plant", "arguments": {}}]}
    sim = sim_with_scenario(tmp_path, [listing, listing, listing, listing, {"text": "done"}])
    agent_box: list[Any] = []

    async def plant(args: dict[str, Any], ctx: ToolContext) -> str:
        agent_box.append("called")
        if len(agent_box) == 3:  # the tool of step 2: step 3 is the next request
            agent_box[0].system = agent_box[0].system.replace("\n", "\nThe time is 12:34:56.\n", 1)
        return "ok"

    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("plant", "Plant.", {"type": "object"}, plant)])
        agent_box.append(agent)
        await agent.run_turn("five steps")
        await agent.provider.aclose()
        requests = list(sim.server.requests)
    finally:
        sim.stop()
    notes = [step.cache_note for step in recorder.of(StepFinished)]
    expected = requests[1].prompt_tokens // 16 * 16 - requests[2].cached_tokens
    assert expected > 500  # the whole prompt after the system prompt's first line was prefilled again
    assert notes == ["", "", f"cache miss: system prompt changed at line 2 ({expected:,} tokens re-prefilled)", "", ""]
    assert notes[2] in step_summary(recorder.of(StepFinished)[2])  # the headless printer's step line
    fingerprints = [event.fingerprint for event in recorder.of(StepStarted)]
    before, changed, after = (present(fingerprint) for fingerprint in fingerprints[1:4])
    assert before.system != changed.system and changed.system == after.system
    assert after.messages == changed.messages + 2


async def test_a_changed_tool_schema_and_an_eviction_get_their_own_names(tmp_path: Path) -> None:
    step = {"tool_calls": [{"name": "touch", "arguments": {}}]}
    sim = sim_with_scenario(tmp_path, [step, step, step, {"text": "done"}])
    registry_box: list[Any] = []

    async def touch(args: dict[str, Any], ctx: ToolContext) -> str:
        registry = registry_box[0]
        calls = len(registry_box)
        registry_box.append(calls)
        if calls == 1:  # after step 1: a tool's description changes
            old = registry.get("grep")
            registry.replace(
                Tool("grep", old.description + " Now faster.", old.parameters, old.handler, read_only=True)
            )
        elif calls == 2:  # after step 2 has left the server: the server loses every cached block
            await wait_until(lambda: not sim.server.admission.running)
            sim.server.engine.cache.clear()
        return "ok"

    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("touch", "Touch.", {"type": "object"}, touch)])
        registry_box.append(agent.tools)
        await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        sim.stop()
    notes = [step.cache_note for step in recorder.of(StepFinished)]
    assert notes[0] == "" and notes[1].startswith('cache miss: tool schema "grep" changed (')
    assert notes[2].startswith("cache miss: evicted: nothing changed, yet the server no longer had the prefix (")
    assert notes[3] == ""


async def test_identical_read_only_calls_reuse_the_earlier_result_until_something_writes(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Demo\n")
    read = {"name": "read_file", "arguments": {"path": "README.md"}}
    clock = {"name": "now", "arguments": {}}
    steps = [
        {"tool_calls": [read, clock]},
        {"tool_calls": [read, clock]},
        {"tool_calls": [{"name": "write", "arguments": {}}]},
        {"tool_calls": [read]},
        {"text": "done"},
    ]
    sim = sim_with_scenario(tmp_path, steps)
    ticks: list[int] = []

    async def now(args: dict[str, Any], ctx: ToolContext) -> str:
        ticks.append(len(ticks))
        return f"tick {len(ticks)}"

    async def write(args: dict[str, Any], ctx: ToolContext) -> str:
        (tmp_path / "README.md").write_text("# Changed\n")
        return "written"

    tools = [
        Tool("now", "Now.", {"type": "object"}, now, read_only=True, volatile=True),
        Tool("write", "Write.", {"type": "object"}, write),
    ]
    try:
        agent, recorder = make_agent(sim, tmp_path, tools, memo_ttl=60)
        await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        sim.stop()
    reads = [(e.reused, e.result) for e in recorder.of(ToolFinished) if e.name == "read_file"]
    assert reads == [("", "# Demo\n"), ("memo", "# Demo\n"), ("", "# Changed\n")]  # the write made it read again
    assert ticks == [0, 1]  # a volatile tool always runs
    assert agent.runner.memo.hits == 1


def test_the_memo_forgets_after_its_ttl() -> None:
    now = [0.0]
    memo = Memo(ttl=30, clock=lambda: now[0])
    tool = Tool("read_file", "Read.", {"type": "object"}, search, read_only=True)
    memo.put(tool, '{"path": "a", "n": 1}', "A")
    assert memo.get(tool, '{"n": 1, "path": "a"}') == "A"  # the same arguments in another key order
    now[0] = 31
    assert memo.get(tool, '{"path": "a", "n": 1}') is None


def test_the_waterfall_shows_tools_overlapping_the_message_and_what_that_saved(
    early_step: tuple[list[Any], float],
) -> None:
    events, _ = early_step
    (turn,) = waterfalls(events)
    labels = [bar.label.strip() for bar in turn.bars]
    assert labels == ["step 1 · sim-balanced", "search", "search", "search", "step 2 · sim-balanced"]
    model, first, *_ = turn.bars
    assert first.start < model.end and model.first_token is not None and model.start < model.first_token < model.end
    critical = [bar.label.strip() for bar in turn.bars if bar.critical]
    assert critical == ["step 1 · sim-balanced", "search", "step 2 · sim-balanced"]  # the slow search, not the others
    assert turn.saved_early > 0.5 and turn.saved_parallel > 0.3
    text = render(turn, 100, None).plain
    assert text.startswith("turn 1 · search three ways · ") and "by early dispatch" in text and "▒" in text


def test_sessions_show_waterfall_draws_every_turn(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hotloop.cli import main
    from hotloop.sessions.store import list_sessions

    monkeypatch.chdir(workspace)
    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 2\n"
    )
    assert main(["run", "Read README.md and notes.txt", "grep for TODO"]) == 0
    (session,) = list_sessions(isolated_home / "data" / "sessions").sessions
    capsys.readouterr()
    assert main(["sessions", "show", session.id[:4], "--waterfall"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nturn ") + out.startswith("turn ") == 2 and out.count("saved: ") == 2
    assert "  read_file" in out and "  grep" in out and "░" in out and "█" in out


@pytest.mark.wall_clock
async def test_a_repeated_workload_is_served_from_prefetch(tmp_path: Path) -> None:
    for name in ("README.md", "notes.txt", "pyproject.toml"):
        (tmp_path / name).write_text(f"{name}: TODO check\n")
    # Each call takes as long as the model's time to first token, which is what a prefetch can hide: the 4 tool
    # steps of the 7 requests, 0.72 s of 1.98 s. The 20% asked for leaves ~0.3 s for a busy machine's noise.
    sim = start_sim(ttft=0.18, prefill_per_token=0, decode_per_token=0)
    registry = ToolRegistry()
    for tool in builtin_tools():
        registry.add(slowed(tool, 0.18))
    workload = ["Read README.md and notes.txt", "grep for TODO", "list the files, then read pyproject.toml"]
    try:
        # No memo: prefetch serves.
        agent, recorder = make_agent(sim, tmp_path, registry=registry, prefetch=True, memo_ttl=0)
        walls, served = [], []
        for _ in range(3):
            mark = len(recorder.events)
            finished = [await agent.run_turn(task) for task in workload]
            walls.append(sum(f.wall for f in finished))
            served.append([(e.name, e.reused, e.result) for e in recorder.events[mark:] if isinstance(e, ToolFinished)])
        await agent.provider.aclose()
    finally:
        sim.stop()
    assert all(reused == "" for _, reused, _ in served[0])  # nothing to go on the first time
    assert all(reused == "prefetch" for _, reused, _ in served[1] + served[2]) and len(served[1]) == 5
    # The same results, served early (prefetched calls finish in either order).
    assert sorted((n, r) for n, _, r in served[1]) == sorted((n, r) for n, _, r in served[0])
    assert walls[1] < 0.8 * walls[0] and walls[2] < 0.8 * walls[0]
    assert agent.runner.prefetcher is not None
    assert agent.runner.prefetcher.stats.misses == 0 and agent.runner.prefetcher.stats.hits == 10


async def test_a_wrong_guess_is_cancelled_and_never_used() -> None:
    started: list[str] = []
    running = asyncio.Event()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        started.append(args["path"])
        running.set()
        await asyncio.Event().wait()  # runs until cancelled
        return "never"

    registry = ToolRegistry(
        [
            Tool("read_file", "Read.", {"type": "object"}, slow, read_only=True, prefetch=True),
            Tool("write", "Write.", {"type": "object"}, slow),
        ]
    )

    async def run(tool: Tool, key: Any) -> str:
        return await tool.handler(json.loads(key[1]), ToolContext("prefetch", Path(".")))

    prefetcher = Prefetcher(registry, run)
    prefetcher.predictor.learn("ctx", [("read_file", '{"path": "a"}'), ("write", "{}")])
    prefetcher.start("ctx")
    await asyncio.wait_for(running.wait(), 10)
    await asyncio.sleep(0)  # any other guess started in the same batch has run its first step too
    assert started == ["a"]  # the write, not read-only, is never run ahead
    assert prefetcher.take(("read_file", '{"path": "b"}')) is None  # a call it did not guess
    assert prefetcher.discard() == 1 and prefetcher.stats.misses == 1 and prefetcher.stats.hits == 0


def slowed(tool: Tool, seconds: float) -> Tool:
    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(seconds)  # real time: the tool's own latency, which a prefetch hides
        return await tool.handler(args, ctx)

    return Tool(tool.name, tool.description, tool.parameters, handler, read_only=True, prefetch=True)


def test_prefetch_learns_from_past_sessions_in_the_same_workspace(
    workspace: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hotloop.cli import main
    from hotloop.sessions.store import list_sessions, read_session

    monkeypatch.chdir(workspace)
    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n[latency]\nprefetch = true\nmemo_ttl = 0\n"
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    )
    workload = ["Read README.md and notes.txt", "grep for TODO"]
    assert main(["run", *workload]) == 0
    assert main(["run", *workload]) == 0  # a new session: nothing learned in it yet, but the last one taught it
    first, second = reversed(list_sessions(isolated_home / "data" / "sessions").sessions)
    reused = {
        path: [e.reused for e in read_session(path).events if isinstance(e, ToolFinished)]
        for path in (first.path, second.path)
    }
    assert reused[first.path] == ["", "", ""] and reused[second.path] == ["prefetch"] * 3


async def test_a_request_sent_before_the_connection_was_warm_shows_its_connect_time(tmp_path: Path) -> None:
    from hotloop.agent.events import ResponseFinished

    # The first answer takes ~0.4 s to write (27 tokens at 15 ms): the warm-up, sent at the same moment, is back
    # long before, even on a busy machine. Every other request is answered at once.
    sim = sim_with_scenario(
        tmp_path,
        [{"tool_calls": [{"name": "list_dir", "arguments": {}}], "decode_ms": 15}, {"text": "done"}],
    )
    try:
        agent, recorder = make_agent(sim, tmp_path)
        warming = asyncio.create_task(agent.provider.fetch(sim.url + "/health"))  # as the runtime does at startup
        await agent.run_turn("go")  # its first request goes out before the warm-up has come back
        await warming
        await agent.run_turn("again")
        await agent.provider.aclose()
    finally:
        sim.stop()
    connects = [event.connect for event in recorder.of(ResponseFinished)]
    assert connects[0] > 0 and connects[1:] == [0.0] * (len(connects) - 1)
    first, *_ = waterfalls(recorder.events)
    assert f"(connect {connects[0]:.2f} s)" in render(first, 100, None).plain


def test_a_waterfall_drawn_mid_turn_says_what_is_still_running(early_step: tuple[list[Any], float]) -> None:
    events, _ = early_step
    midway = next(n for n, event in enumerate(events) if isinstance(event, StepStarted) and event.step == 2)
    (turn,) = waterfalls(events[: midway + 1])
    lines = render(turn, 100, None).plain.splitlines()
    assert lines[1].startswith("step 1 · ") and lines[1].endswith(" s")
    assert lines[-3].startswith("step 2 · ") and lines[-3].endswith(" running")


def test_a_watched_segment_seen_before_keeps_its_digest_and_a_changed_one_gets_a_new_one() -> None:
    """The watch fingerprints each request from its segments, looking up those the last request had: the fingerprint
    is the one a fresh explainer computes, for what was kept and for what changed."""
    system, tools = "You are careful. " * 100, {"read": b'{"name":"read"}', "grep": b'{"name":"grep"}'}
    first = WireSegments(system, tools, [b'{"role":"user","content":"a"}'], ["user"], b"")
    changed = WireSegments(
        system.replace("careful", "brief"),
        {**tools, "grep": b'{"name":"grep","description":"new"}'},
        [*first.messages, b'{"role":"assistant","content":"b"}', b'{"role":"user","content":"a"}'],
        ["user", "assistant", "user"],
        b"",
    )
    explainer = CacheExplainer()
    for segments in (first, first, changed, first):
        assert explainer.fingerprint_wire(segments, "vllm", "m", 0.0) == CacheExplainer().fingerprint_wire(
            segments, "vllm", "m", 0.0
        )
