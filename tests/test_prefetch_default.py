"""Prefetch on by default: guesses run ahead, bounded, cancelled when wrong, and each step says what it wasted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hotloop.agent.events import AgentEvent, Notice, ToolFinished, ToolOutput, ToolStarted
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.prefetch import MAX_GUESSES
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.config.settings import LatencySettings
from hotloop.providers.conversation import ToolResultMessage

from support import Recorder, make_agent, provider_for, sim_with_scenario, wait_until

PROMPT = "Look around the project."


class Looks:
    """A read-only, prefetchable tool that logs each run: by whom (the call id; "prefetch" for a guess) and when."""

    def __init__(self, block: set[str] | None = None) -> None:
        self.runs: list[tuple[str, str, int]] = []  # (call id, path, events recorded when it started)
        self.block = block or set()  # paths that run until cancelled
        self.started = asyncio.Event()
        self.cancelled: list[str] = []
        self.recorder = Recorder()

    async def handler(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = str(args["path"])
        self.runs.append((ctx.call_id, path, len(self.recorder.events)))
        self.started.set()
        ctx.emit_output(f"output of {path}")
        if path in self.block:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(path)
                raise
        return f"contents of {path}"

    def tool(self) -> Tool:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        return Tool("look", "Look at a path.", schema, self.handler, read_only=True, prefetch=True)

    def guessed(self) -> list[str]:
        return [path for call_id, path, _ in self.runs if call_id == "prefetch"]


def looks_at(*paths: str) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "look", "arguments": {"path": p}} for p in paths]}, {"text": "Done."}]


async def session(tmp_path: Path, name: str, looks: Looks, paths: tuple[str, ...], past: list[AgentEvent]) -> Agent:
    """One turn of PROMPT on the simulator, the model looking at `paths`, with today's default options, having
    learned from `past` (an earlier session's events, as hotloop reads them from the workspace's logs)."""
    folder = tmp_path / name
    folder.mkdir()
    sim = sim_with_scenario(folder, looks_at(*paths))
    try:
        agent, looks.recorder = make_agent(sim, folder, registry=ToolRegistry([looks.tool()]), memo_ttl=0)
        assert agent.runner.prefetcher is not None  # on by default
        agent.runner.prefetcher.predictor.learn_from(past)
        await asyncio.wait_for(agent.run_turn(PROMPT), 30)
        await agent.provider.aclose()
    finally:
        sim.stop()
    return agent


async def earlier(tmp_path: Path, *paths: str) -> list[AgentEvent]:
    """The events of an earlier session of PROMPT in which the model looked at `paths`."""
    looks = Looks()
    await session(tmp_path, "earlier", looks, paths, [])
    assert looks.guessed() == []  # nothing learned: nothing guessed
    return looks.recorder.events


def notices(looks: Looks) -> list[str]:
    return [e.message for e in looks.recorder.of(Notice) if e.message.startswith("prefetched")]


def test_prefetch_is_on_by_default(tmp_path: Path) -> None:
    assert LatencySettings().prefetch and AgentOptions().prefetch
    sim = sim_with_scenario(tmp_path, [{"text": "hi"}])
    try:
        agent = Agent(provider_for(sim), ToolRegistry(), emit=lambda event: None, workspace=tmp_path)
        assert agent.runner.prefetcher is not None
    finally:
        sim.stop()


async def test_a_predicted_call_runs_ahead_and_the_step_says_prefetched_and_used(tmp_path: Path) -> None:
    past = await earlier(tmp_path, "a.txt", "b.txt")
    looks = Looks()
    agent = await session(tmp_path, "now", looks, ("a.txt", "b.txt"), past)
    assert sorted(looks.guessed()) == ["a.txt", "b.txt"] and len(looks.runs) == 2  # each ran once: ahead
    asked = [i for i, e in enumerate(looks.recorder.events) if isinstance(e, ToolStarted)]
    assert all(seen < asked[0] for _, _, seen in looks.runs)  # before the model asked for either
    finished = looks.recorder.of(ToolFinished)
    assert [e.reused for e in finished] == ["prefetch", "prefetch"]
    assert sorted(e.result for e in finished) == ["contents of a.txt", "contents of b.txt"]
    [line] = notices(looks)
    assert line.startswith("prefetched 2, used 2 · ") and line.endswith(" s of tool time done ahead")
    assert "\n" not in line
    assert agent.runner.prefetcher is not None and agent.runner.prefetcher.stats.misses == 0


async def test_a_wrong_guess_is_cancelled_and_its_output_never_reaches_the_conversation(tmp_path: Path) -> None:
    past = await earlier(tmp_path, "elsewhere.txt")  # another task under the same prompt
    looks = Looks(block={"elsewhere.txt"})
    agent = await session(tmp_path, "now", looks, ("a.txt",), past)
    assert looks.started.is_set() and looks.guessed() == ["elsewhere.txt"]
    await wait_until(lambda: looks.cancelled == ["elsewhere.txt"])
    assert [e.result for e in looks.recorder.of(ToolFinished)] == ["contents of a.txt"]
    assert notices(looks) == [notices(looks)[0]] and notices(looks)[0].startswith("prefetched 1, used 0 · ")
    results = [m.content for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert results == ["contents of a.txt"]
    assert [e.text for e in looks.recorder.of(ToolOutput)] == ["output of a.txt"]  # the guess's output: nowhere
    assert "elsewhere" not in repr(agent.messages)
    assert agent.runner.prefetcher is not None and agent.runner.prefetcher.stats.misses == 1


async def test_no_more_than_the_bound_run_ahead(tmp_path: Path) -> None:
    paths = tuple(f"{n}.txt" for n in range(MAX_GUESSES + 2))
    past = await earlier(tmp_path, *paths)
    looks = Looks()
    await session(tmp_path, "now", looks, paths, past)
    assert len(looks.guessed()) == MAX_GUESSES  # the rest the model asked for ran when it did
    assert sorted(path for _, path, _ in looks.runs) == sorted(paths)
    reused = [e.reused for e in looks.recorder.of(ToolFinished)]
    assert reused.count("prefetch") == MAX_GUESSES and reused.count("") == 2
    assert notices(looks) == [notices(looks)[0]]
    assert notices(looks)[0].startswith(f"prefetched {MAX_GUESSES}, used {MAX_GUESSES} · ")


async def test_a_call_the_memo_answers_is_not_run_ahead(tmp_path: Path) -> None:
    looks = Looks()
    steps = looks_at("a.txt") + looks_at("a.txt")  # the same prompt twice in one session, the same call
    sim = sim_with_scenario(tmp_path, steps)
    try:
        agent, looks.recorder = make_agent(sim, tmp_path, registry=ToolRegistry([looks.tool()]))  # memo on: default
        for _ in range(2):
            await asyncio.wait_for(agent.run_turn(PROMPT), 30)
        await agent.provider.aclose()
    finally:
        sim.stop()
    assert [e.reused for e in looks.recorder.of(ToolFinished)] == ["", "memo"]
    assert looks.guessed() == [] and notices(looks) == []  # nothing wasted on a guess the memo made needless
