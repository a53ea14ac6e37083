"""Compaction that keeps the cache, against a naive one: prefill tokens and wall time, side by side in one run.

Both start from the same conversation on a simulator of their own (`--turns` turns of about 400
tokens each, built at zero latency so the setup is quick); then the simulator takes the
`sim-balanced` latency profile (TTFT 0.12 s + 30 µs per uncached prompt token, 10 ms per output
token) and each compacts and sends one more turn:

- hotloop: `Agent.compact`, the conversation's own request plus one instruction (it reads the
  conversation from the cache), then the next turn on the same system prompt and tools with
  the summary as the first message (it reads the static prefix from the cache).
- naive: a fresh summarization prompt (a summarizer's system prompt, no tools, the same
  messages and instruction), then a fresh conversation whose system prompt carries the summary,
  so its request shares nothing with the old one.

Both summaries are the same text (the simulator writes it from the same turns), so the
difference is prefill alone.

    python benchmarks/compaction.py [--turns 60]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hotloop.agent.compaction import INSTRUCTION
from hotloop.agent.events import AgentEvent, StepFinished
from hotloop.agent.loop import Agent
from hotloop.agent.prompt import system_prompt
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.events import TextDelta, Usage, UsageLedger
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import NO_LATENCY, TIERS, SimConfig

MODEL = "sim-balanced"
SUMMARIZER = "You summarize conversations between a user and a coding agent."
NEXT_PROMPT = "what should we do next?"


@dataclass
class Phase:
    name: str
    prompt: int
    prefilled: int  # uncached prompt tokens
    ttft: float  # the prefill's time, mostly
    wall: float


async def built(sim: EmbeddedSimulator, workspace: Path, turns: int) -> tuple[Agent, list[AgentEvent]]:
    """An agent holding `turns` turns of conversation, built at zero latency; then the simulator slows to MODEL's pace."""
    events: list[AgentEvent] = []
    provider = OpenAIChatProvider(ProviderOptions(name="sim", model=MODEL, base_url=sim.base_url))
    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=events.append, workspace=workspace)
    for n in range(1, turns + 1):
        await agent.run_turn(f"write 300 words about topic {n}")
    sim.server.config.models[MODEL] = TIERS[MODEL]
    return agent, events


def prefilled(usage: UsageLedger | None) -> tuple[int, int]:
    assert usage is not None and usage.prompt_total is not None
    return usage.prompt_total, usage.prompt_total - (usage.cache_read or 0)


async def next_turn(agent: Agent, events: list[AgentEvent]) -> Phase:
    started, seen = time.perf_counter(), len(events)
    await agent.run_turn(NEXT_PROMPT)
    wall = time.perf_counter() - started
    step = next(e for e in events[seen:] if isinstance(e, StepFinished))
    assert step.ttft is not None
    return Phase("next turn", *prefilled(step.usage), step.ttft, wall)


async def hotloop(turns: int, workspace: Path) -> list[Phase]:
    with EmbeddedSimulator(SimConfig().with_latency(NO_LATENCY.ttft, 0, 0)) as sim:
        agent, events = await built(sim, workspace, turns)
        started = time.perf_counter()
        compacted = await agent.compact("manual")
        assert compacted.ttft is not None
        summary = Phase("summary request", *prefilled(compacted.usage), compacted.ttft, time.perf_counter() - started)
        after = await next_turn(agent, events)
        await agent.provider.aclose()
    return [summary, after]


async def naive(turns: int, workspace: Path) -> list[Phase]:
    with EmbeddedSimulator(SimConfig().with_latency(NO_LATENCY.ttft, 0, 0)) as sim:
        agent, events = await built(sim, workspace, turns)
        request = ChatRequest(
            system=SUMMARIZER, tools=(), messages=(*agent.messages, UserMessage(INSTRUCTION)), cache_key=None
        )
        started = time.perf_counter()
        text, usage, first = [], None, 0.0
        async for event in agent.provider.stream(request):
            if isinstance(event, TextDelta):
                first = first or time.perf_counter() - started
                text.append(event.text)
            elif isinstance(event, Usage):
                usage = event.ledger
        summary = Phase("summary request", *prefilled(usage), first, time.perf_counter() - started)
        agent.system = f"{system_prompt()}\n\nThe conversation so far, summarized:\n{''.join(text)}"
        agent.restore([], agent.turn, agent.warmth)
        after = await next_turn(agent, events)
        await agent.provider.aclose()
    return [summary, after]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=60, help="turns of conversation before the compaction")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        ours = asyncio.run(hotloop(args.turns, workspace))
        theirs = asyncio.run(naive(args.turns, workspace))
    print(f"compaction of a {ours[0].prompt:,}-token conversation ({args.turns} turns), simulator at {MODEL}'s pace")
    print(
        f"{'':16} {'hotloop: prefilled / prompt · ttft · wall':>44}   {'naive: prefilled / prompt · ttft · wall':>44}"
    )
    for mine, other in zip(ours, theirs, strict=True):
        print(f"{mine.name:16} {_cells(mine):>44}   {_cells(other):>44}")
    total = [sum(p.prefilled for p in phases) for phases in (ours, theirs)]
    ttft = [sum(p.ttft for p in phases) for phases in (ours, theirs)]
    wall = [sum(p.wall for p in phases) for phases in (ours, theirs)]
    both = [f"{total[n]:,} tokens · {ttft[n]:.2f} s · {wall[n]:.2f} s" for n in (0, 1)]
    print(f"{'both':16} {both[0]:>44}   {both[1]:>44}")
    print(
        f"hotloop prefills {total[0] / total[1]:.1%} of the naive tokens; time to first token {ttft[0] / ttft[1]:.0%}, "
        f"wall {wall[0] / wall[1]:.0%} (the same summary is written at the same pace in both)"
    )


def _cells(phase: Phase) -> str:
    return f"{phase.prefilled:,} / {phase.prompt:,} · {phase.ttft:.2f} s · {phase.wall:.2f} s"


if __name__ == "__main__":
    main()
