"""Compaction on Anthropic's cache rules, its sizes on a resumed session, and a /compact that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.agent.events import AgentEvent, Compacted, SideRequest, StepFinished, TurnStarted
from hotloop.agent.figures import SessionTotals
from hotloop.agent.loop import Agent
from hotloop.agent.prompt import system_prompt
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.cli import main
from hotloop.sessions.store import read_session
from hotloop.sim.cache import BreakpointCache, CacheBlock
from hotloop.sim.tokenizer import count

from support import FIXTURES, Recorder, provider_on, start_sim
from tui_support import FAST_SIM, write_config

# Rules long enough that the system prompt and tools pass Anthropic's 1,024-token cache minimum on their own.
RULES = "\n\nRules of this project:\n" + "- Keep every change small, tested and explained in its commit.\n" * 60


def _fixture_usage() -> tuple[dict[str, int], dict[str, int]]:
    """message_start's usage (the first sampling iteration) and message_delta's (cumulative over all of them)."""
    events = [json.loads(line) for line in (FIXTURES / "anthropic_prompt_cache.chunks.jsonl").read_text().splitlines()]
    (start,) = [e["message"]["usage"] for e in events if e["type"] == "message_start"]
    (delta,) = [e["usage"] for e in events if e["type"] == "message_delta"]
    return start, delta


def test_the_simulators_anthropic_cache_reads_only_prefixes_written_at_breakpoints_as_the_recorded_stream_does() -> (
    None
):
    """The recorded claude-sonnet-5 stream ran three sampling iterations (input 2 each), each prompt the last one
    grown: it wrote 3,068 first, then 3,337 and read 6,289 in all, which only the breakpoint rule gives (each read
    is a prefix an earlier iteration wrote, each write only what lies past it: 3,068 + 153 + 116 written, 0 +
    3,068 + 3,221 read). The simulator's cache gives the same figures; and a prefix below the minimum is written
    nowhere, so a later request that shares only it reads nothing."""
    start, delta = _fixture_usage()
    assert (start["cache_creation_input_tokens"], start["cache_read_input_tokens"], delta["input_tokens"]) == (
        3068,
        0,
        6,
    )
    cache = BreakpointCache(min_tokens=1024, clock=lambda: 0.0)
    grown = [CacheBlock(3068, 1), CacheBlock(153, 2), CacheBlock(116, 3)]
    uses = [cache.use([*grown[:n], CacheBlock(grown[n].tokens, grown[n].key, 300.0)]) for n in range(3)]
    assert uses[0].write == start["cache_creation_input_tokens"] and uses[0].read == 0
    assert sum(use.write for use in uses) == delta["cache_creation_input_tokens"]
    assert sum(use.read for use in uses) == delta["cache_read_input_tokens"]

    static = CacheBlock(900, 10, 300.0)  # a system prompt and tools under the minimum, marked
    assert cache.use([static, CacheBlock(400, 11, 300.0)]).write == 1300  # the whole prefix, at the newest mark
    assert cache.use([static, CacheBlock(300, 12, 300.0)]).read == 0  # the 900 alone were never written


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_the_first_step_after_a_compaction_reads_the_system_prompt_and_tools(
    protocol: str, workspace: Path
) -> None:
    """Over the real SDKs against the simulator: two turns, /compact, a turn. Its request keeps the system prompt
    and tools byte for byte (on Anthropic with a breakpoint at their end), and reads them from the cache on
    Anthropic as on Chat: all of the first request but its user message; the step says it was as expected."""
    sim = start_sim()
    recorder = Recorder()
    provider = provider_on(sim, protocol)
    agent = Agent(
        provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace, system=system_prompt() + RULES
    )
    try:
        for prompt in ("hello", "write 50 words about caching"):
            assert (await agent.run_turn(prompt)).reason == "answer"
        compacted = await agent.compact("manual")
        summary_request = json.loads(sim.server.requests[-1].body)
        assert (await agent.run_turn("and then?")).reason == "answer"
        after_request = json.loads(sim.server.requests[-1].body)
    finally:
        await provider.aclose()
        sim.stop()
    assert json.dumps(compacted.summary)[1:-1] in json.dumps(after_request["messages"])
    if protocol == "anthropic":
        assert (
            after_request["tools"] == summary_request["tools"] and after_request["system"] == summary_request["system"]
        )
        assert after_request["system"][-1]["cache_control"] == {"type": "ephemeral"}
    else:
        assert after_request["messages"][0] == summary_request["messages"][0]
    first, *_, after = recorder.of(StepFinished)
    opening = next(e for e in recorder.events if isinstance(e, TurnStarted))
    assert first.usage is not None and first.usage.prompt_total is not None
    static = first.usage.prompt_total - count(opening.prompt + opening.context)
    assert static > 1024
    assert after.usage is not None and after.usage.cache_read is not None and after.usage.prompt_total is not None
    assert static - 48 <= after.usage.cache_read < after.usage.prompt_total  # the static prefix, to a few tokens
    assert "compacted into its summary, which is new to the cache (as expected)" in after.cache_note


async def test_on_anthropic_a_static_prefix_under_the_cache_minimum_is_said_not_called_expected(
    workspace: Path,
) -> None:
    """hotloop's own system prompt and tools are under Anthropic's minimum: nothing of them is ever cached on its own,
    so the step after a compaction reads nothing, and its note says why instead of "as expected"."""
    sim = start_sim()
    recorder = Recorder()
    provider = provider_on(sim, "anthropic")
    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
    try:
        for prompt in ("hello", "write 80 words about caching", "write 80 words about tests"):
            assert (await agent.run_turn(prompt)).reason == "answer"
        await agent.compact("manual")
        assert (await agent.run_turn("and then?")).reason == "answer"
    finally:
        await provider.aclose()
        sim.stop()
    after = recorder.of(StepFinished)[-1]
    assert after.usage is not None and after.usage.cache_read == 0 and after.usage.below_cache_min is None
    assert "nothing before it was cached: the system prompt and tools alone are below the model's cache minimum" in (
        after.cache_note
    )
    assert "as expected" not in after.cache_note


def _logged(home: Path) -> list[list[AgentEvent]]:
    logs = sorted((home / "data" / "sessions").glob("*.jsonl"), key=lambda path: path.stat().st_mtime_ns)
    return [read_session(log).events for log in logs]


@pytest.mark.parametrize("provider", ["sim", "sim-anthropic"])
def test_a_resumed_sessions_compaction_sizes_come_from_the_servers_counts(
    provider: str, isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same conversation compacted live and after `-c` in a new process: the same figures, before and after,
    from the log's counts (the first request's and the summary's), and the next step's count agrees with them."""
    monkeypatch.chdir(workspace)
    (isolated_home / "config.toml").write_text(FAST_SIM + '[cache]\nprewarm = "off"\n')
    turns = ["hello", "read README.md", "write 60 words about caching"]
    assert main(["run", "--provider", provider, *turns, "/compact", "and then?"]) == 0
    assert main(["run", "--provider", provider, *turns]) == 0
    assert main(["run", "--provider", provider, "-c", "/compact", "and then?"]) == 0
    live, resumed = _logged(isolated_home)
    figures = []
    for events in (live, resumed):
        (compacted,) = [e for e in events if isinstance(e, Compacted)]
        figures.append((compacted.context_tokens, compacted.after_tokens))
        turn = [e for e in events if isinstance(e, TurnStarted)][-1]
        after = [e for e in events if isinstance(e, StepFinished)][-1]
        assert after.usage is not None and after.usage.prompt_total is not None and compacted.after_tokens
        counted = after.usage.prompt_total - count(turn.prompt + turn.context)
        assert abs(compacted.after_tokens - counted) <= 0.03 * counted
    assert figures[0] == figures[1]


def test_a_failed_compact_between_prompts_is_one_line_counted_and_the_prompts_after_it_run(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hotloop run a /compact b c` where the summary request fails (cut off by an 8-token output limit, which the
    scripted answers fit): b and c still run on the unchanged conversation, the failure is one line, and the
    summary request's tokens are in the session's totals; the run exits 1."""
    monkeypatch.chdir(workspace)
    write_config(isolated_home, [{"text": "hi"}] * 4)
    with (isolated_home / "config.toml").open("a") as config:
        config.write('[cache]\nprewarm = "off"\n[providers.tiny]\nkind = "sim-anthropic"\nmax_tokens = 8\n')
    assert main(["run", "--provider", "tiny", "first", "/compact", "second", "third"]) == 1
    err = capsys.readouterr().err
    (events,) = _logged(isolated_home)
    assert [e.prompt for e in events if isinstance(e, TurnStarted)] == ["first", "second", "third"]
    assert not any(isinstance(e, Compacted) for e in events)
    (failed,) = [e for e in events if isinstance(e, SideRequest)]
    assert (failed.kind, failed.why, failed.outcome) == ("compaction", "manual", "failed")
    assert failed.usage is not None and failed.usage.prompt_total and failed.usage.output
    said = [line for line in err.splitlines() if "compaction" in line]
    assert said == [
        "compaction (manual, side request) · tiny sim-fast · failed: the summary was cut off by the output "
        "limit; the conversation is unchanged · price unknown"
    ]
    totals = SessionTotals()
    steps = [e for e in events if isinstance(e, StepFinished)]
    for event in events:
        if isinstance(event, StepFinished | SideRequest):
            totals.add(event)
    assert totals.prompt == sum(s.usage.prompt_total or 0 for s in steps if s.usage) + failed.usage.prompt_total
    assert totals.output == sum(s.usage.output or 0 for s in steps if s.usage) + failed.usage.output
