"""A fleet: 32 agents against one simulated replica, and against four behind each router.

Every agent is hotloop's own `Agent` with its own session key (sent in `x-session-id`) and
its own connection. All share a long system prompt (project instructions of ~3,000 tokens)
and each builds a history of its own: four turns of three steps (two tool phases, then an
answer), with tool results that name the agent, so that from the second step on most of a
prompt is that agent's history. Tools sleep for fixed times. Every connection is open before
the clock starts; the agents start 40 ms apart, as sessions arrive, and all run at once.

Each configuration gets fresh simulators (cold caches) with the same figures: the fast tier's
TTFT and decode pace, prefill at 100 µs a token, `max_running` 16 per replica, continuous
batching at the default 2% a request, and caches big enough to hold every session (only the
routing decides what is cached where):

- one replica: the reference for the cache hit rate (and a quarter of the capacity);
- four replicas, `round-robin`: a session's steps land on every replica in turn;
- four replicas, `affinity`: by the session key, as vLLM's production-stack router;
- four replicas, `prefix`: to the replica with the longest cached prefix, as llm-d.

The table gives, per configuration, what the agents' usage reports (cache hit rate and
uncached prompt tokens), their TTFT and turn p95, and the requests each replica served.

    python benchmarks/fleet.py [--agents 32] [--replicas 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished
from hotloop.agent.loop import Agent
from hotloop.agent.prompt import system_prompt
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sim.defaults import AFFINITY_HEADER, ROUTERS
from hotloop.sim.embedded import EmbeddedServer, EmbeddedSimulator
from hotloop.sim.engine import TIERS, SimConfig
from hotloop.sim.fleet import EmbeddedFleet
from hotloop.sim.scenario import load_scenario
from hotloop.sim.server import SimServer

MODEL = "sim-fast"
PROFILE = TIERS[MODEL]
PREFILL_PER_TOKEN = 0.000_100
MAX_RUNNING = 16
CACHE_BLOCKS = 65_536  # a million tokens: every session fits, on one replica too
TURNS = 4
TOOL_SECONDS = {"search": 0.15, "read": 0.1}
STAGGER = 0.04
INSTRUCTIONS = "\n".join(
    f"- Rule {n}: cite the file and line of every claim, and prefer primary sources over summaries." for n in range(150)
)
SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}


def steps() -> list[dict[str, Any]]:
    """Three steps a turn: two searches at once, a read, then the answer; each turn asks about its own topic."""
    script: list[dict[str, Any]] = []
    for turn in range(TURNS):
        script += [
            {
                "text": "Searching both angles.",
                "tool_calls": [{"name": "search", "arguments": {"topic": f"turn {turn}, angle {a}"}} for a in (1, 2)],
            },
            {"tool_calls": [{"name": "read", "arguments": {"topic": f"turn {turn}, the best source"}}]},
            {"text": f"## Turn {turn}\n\n" + "The sources agree on the eviction order and on why it matters. " * 4},
        ]
    return script


def tools(agent: int) -> ToolRegistry:
    """Tools of fixed latency whose results name `agent`: each agent's history is its own."""

    def tool(name: str) -> Tool:
        async def run(args: dict[str, Any], ctx: ToolContext) -> str:
            await asyncio.sleep(TOOL_SECONDS[name])
            return f"agent {agent}, {name} {args['topic']}: " + f"passage {agent} on blocks and eviction. " * 60

        return Tool(name, f"{name.title()} the sources.", SCHEMA, run, read_only=True)

    return ToolRegistry([tool(name) for name in TOOL_SECONDS])


async def agent_session(agent: Agent, n: int) -> None:
    await asyncio.sleep(n * STAGGER)
    for turn in range(TURNS):
        await agent.run_turn(f"Agent {n}, turn {turn}: research how subsystem {n} evicts its blocks.")


def new_agent(n: int, sim: EmbeddedServer, folder: Path, events: list[AgentEvent]) -> Agent:
    provider = OpenAIChatProvider(
        ProviderOptions(name="sim", model=MODEL, base_url=sim.base_url, affinity_header=AFFINITY_HEADER)
    )
    return Agent(
        provider,
        tools(n),
        emit=events.append,
        workspace=folder,
        system=system_prompt(INSTRUCTIONS),
        cache_key=f"bench-agent-{n:02d}",
    )


@contextmanager
def serving(replicas: int, router: str, config: SimConfig) -> Iterator[tuple[EmbeddedServer, list[SimServer]]]:
    if replicas == 1:
        with EmbeddedSimulator(config) as one:
            yield one, [one.server]
    else:
        with EmbeddedFleet(config, replicas, router) as fleet:
            yield fleet, fleet.fleet.replicas


async def run(agents: int, replicas: int, router: str, folder: Path) -> dict[str, Any]:
    config = SimConfig(
        scenario=load_scenario(folder / "scenario.json"), max_running=MAX_RUNNING, cache_blocks=CACHE_BLOCKS
    ).with_latency(prefill_per_token=PREFILL_PER_TOKEN)
    events: list[AgentEvent] = []
    with serving(replicas, router, config) as (sim, servers):
        crowd = [new_agent(n, sim, folder, events) for n in range(agents)]
        # Connections open, as a running hotloop's are: the figures are the fleet's, not the start's.
        await asyncio.gather(*(agent.provider.fetch(sim.url + "/health") for agent in crowd))
        started = time.perf_counter()
        await asyncio.gather(*(agent_session(agent, n) for n, agent in enumerate(crowd)))
        wall = time.perf_counter() - started
        served = [len(server.requests) for server in servers]
        await asyncio.gather(*(agent.provider.aclose() for agent in crowd))
    steps = [e for e in events if isinstance(e, StepFinished)]
    prompt = sum(s.usage.prompt_total or 0 for s in steps if s.usage)
    read = sum(s.usage.cache_read or 0 for s in steps if s.usage)
    turns = [e for e in events if isinstance(e, TurnFinished)]
    assert len(turns) == agents * TURNS and all(t.reason == "answer" for t in turns), "a turn did not finish"
    return {
        "hit": read / prompt,
        "uncached": prompt - read,
        "ttft": p95([s.ttft for s in steps if s.ttft is not None]),
        "turn": p95([t.wall for t in turns]),
        "wall": wall,
        "served": served,
    }


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


async def main(agents: int, replicas: int) -> None:
    configurations = [("1 replica", 1, ROUTERS[0])] + [(f"{replicas} × {r}", replicas, r) for r in ROUTERS]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "scenario.json").write_text(json.dumps(steps()))
        for label, count, router in configurations:
            results[label] = await run(agents, count, router, folder)
    print(
        f"fleet: {agents} agents × {TURNS} turns × 3 steps, {MODEL} (TTFT {PROFILE.ttft * 1000:.0f} ms, "
        f"{PROFILE.decode_per_token * 1000:.0f} ms/token), prefill {PREFILL_PER_TOKEN * 1e6:.0f} µs/token, "
        f"max_running {MAX_RUNNING} per replica"
    )
    print(
        f"  {'configuration':<16} {'cache hit':>9} {'uncached prefill':>17} {'TTFT p95':>9} {'turn p95':>9} "
        f"{'wall':>7}  requests per replica"
    )
    for label, r in results.items():
        print(
            f"  {label:<16} {r['hit']:9.1%} {r['uncached']:17,} {r['ttft']:8.2f}s {r['turn']:8.2f}s "
            f"{r['wall']:6.1f}s  {' / '.join(map(str, r['served']))}"
        )
    reference = results["1 replica"]["hit"]
    for label, r in results.items():
        if label.endswith(("affinity", "prefix")):
            print(f"  {label}: {(r['hit'] - reference) * 100:+.1f} points against one replica")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--replicas", type=int, default=4)
    options = parser.parse_args()
    asyncio.run(main(options.agents, options.replicas))
