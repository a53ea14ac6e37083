"""A research-style task, run as shipped and with each latency technique taken away.

Five steps against the embedded simulator (balanced tier, prefill at 200 µs a token so that
the 3,000-token static prefix matters): three searches at once with long, slowly written
queries, then three fetches, two greps, one last fetch, and the answer. Tools sleep for their
stated time; in each batch the first call is the slowest, as a broad search usually is. Each configuration runs on a fresh simulator (a cold cache), interleaved over
the rounds, and the table gives medians with ratios against the shipped configuration:

- shipped: what shipped before prefetch was on by default: parallel tools, early dispatch, a
  byte-stable prefix, no prefetch, no pre-warm;
- sequential tools: one call after another;
- no early dispatch: calls start when the message ends;
- unstable prefix: the time planted at the top of the system prompt before every request;
- defaults, first session: today's defaults (prefetch on) with nothing learned yet: no guess;
- defaults, learned: prefetch having learned from one earlier session of the same task, read
  back from its log in the workspace as hotloop does (`Runtime.learn_from_past`);
- defaults, wrong guesses: prefetch having learned from a session of a different task under the
  same prompt (other queries, other pages), so every guess is run and every guess misses: the
  wasted work, shown in the steps' `prefetched N, used M` notices, and what it costs the task;
- defaults + pre-warm: the pre-warm request hotloop sends while the user types
  (`core.prewarm.prewarm_request`), streamed to its end before the turn, then the turn with
  prefetch learned as above.

The last lines check the issue's bar: the defaults (pre-warm + prefetch) at most 0.90 of the
shipped wall, and no defaults row slower than shipped by more than shipped's own spread.

A second table runs the shipped configuration and the one without early dispatch on each wire
protocol the simulator speaks (Chat Completions, the Responses API, Anthropic Messages): each
starts a call at its own "arguments complete" event (a finished call's index passed, a
`function_call_arguments.done`, a `content_block_stop`).

A third table is pre-warming's (`[cache] prewarm`, core/prewarm.py): the first step's TTFT of a new session, through
`Session` as the app runs it, on the simulator's default latency profile with a 12,000-token static prefix (Claude
Code's size: hotloop's prompt and tools plus project instructions), per protocol: pre-warming off; on, with the
prompt typed after the pre-warm answered; and on, with the prompt sent while the pre-warm is at the server
("at once"), the pre-warm left to finish or cancelled. Each run starts its own simulator (a cold cache).

The theoretical minimum is, per step, the TTFT of only the step's new tokens plus its
decode, plus the slowest tool of the step.

    python benchmarks/agent_latency.py [--rounds 3] [--prewarm-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hotloop.agent.events import AgentEvent, Notice, StepFinished, ToolStarted, TurnFinished
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.prefetch import MAX_GUESSES
from hotloop.agent.prompt import system_prompt
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.core.prewarm import prewarm_request
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import past_events
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import TIERS, SimConfig
from hotloop.sim.scenario import load_scenario

MODEL = "sim-balanced"
PROFILE = TIERS[MODEL]
PREFILL_PER_TOKEN = 0.000_200
TOOL_DECODE_MS = 12
# Project instructions of about 3,000 tokens: the static prefix a stable prompt keeps cached.
INSTRUCTIONS = "\n".join(
    f"- Rule {n}: cite the file and line of every claim, and prefer primary sources over summaries." for n in range(150)
)


def call(name: str, seconds: float, **arguments: str) -> dict[str, Any]:
    return {"name": name, "arguments": {**arguments, "seconds": seconds}}


def research(query: str, site: str, patterns: tuple[str, str], last: str, answer: str) -> list[dict[str, Any]]:
    """The task's five steps: three searches at once, three fetches, two greps, one last fetch, then the answer."""
    return [
        {
            "tool_calls": [call("search", s, query=f"{query} ({n})") for n, s in enumerate((1.6, 0.4, 0.3))],
            "decode_ms": TOOL_DECODE_MS,
        },
        {
            "tool_calls": [
                call("fetch", s, url=f"https://docs.example/{site}/{n}") for n, s in enumerate((0.9, 0.2, 0.3))
            ],
            "decode_ms": TOOL_DECODE_MS,
        },
        {
            "tool_calls": [call("grep", s, pattern=p) for p, s in zip(patterns, (0.2, 0.3), strict=True)],
            "decode_ms": TOOL_DECODE_MS,
        },
        {"tool_calls": [call("fetch", 0.4, url=f"https://docs.example/{site}/{last}")], "decode_ms": TOOL_DECODE_MS},
        {"text": answer},
    ]


QUERY = "how does the prefix cache decide what to evict when blocks are shared between requests"
STEPS = research(
    QUERY,
    "cache",
    ("evict", "free_queue"),
    "lru",
    "## How eviction works\n\n" + "Blocks return to a free queue in reverse order, so a prompt's tail goes first. " * 6,
)
# Another task the same prompt once led to (another project's cache): what "defaults, wrong guesses" learned from.
# Same shape and tool times, other arguments, so each guess runs as long as a right one would and is never used.
OTHER = "how does the scheduler decide which waiting request to preempt when the KV cache runs out"
WRONG_STEPS = research(
    OTHER,
    "sched",
    ("preempt", "waiting"),
    "fcfs",
    "## How preemption works\n\n" + "The newest running request is preempted first. " * 6,
)
PROMPT = "Research how the prefix cache evicts shared blocks, then summarize."
SCHEMA = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
CONFIGURATIONS = (
    "shipped",
    "sequential tools",
    "no early dispatch",
    "unstable prefix",
    "defaults, first session",
    "defaults, learned",
    "defaults, wrong guesses",
    "defaults + pre-warm",
)
DEFAULTS = tuple(c for c in CONFIGURATIONS if c.startswith("defaults"))
# Prefetch guesses at most MAX_GUESSES calls a step (agent/prefetch.py); this task's widest step asks for 3.
assert max(len(step.get("tool_calls", [])) for step in STEPS) <= MAX_GUESSES
PROTOCOLS = ("Chat Completions", "Responses", "Anthropic Messages")


def provider_for(protocol: str, sim: EmbeddedSimulator) -> Provider:
    if protocol == "Responses":
        return OpenAIResponsesProvider(ProviderOptions(name="sim", model=MODEL, base_url=sim.base_url))
    if protocol == "Anthropic Messages":
        return AnthropicProvider(ProviderOptions(name="sim", model=MODEL, base_url=sim.url), max_tokens=4096)
    return OpenAIChatProvider(ProviderOptions(name="sim", model=MODEL, base_url=sim.base_url))


async def sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.sleep(args["seconds"])
    return f"result after {args['seconds']} s: " + "relevant passage about eviction and shared blocks. " * 20


def tools() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(name, f"{name.title()}.", SCHEMA, sleep, read_only=True, prefetch=True)
            for name in ("search", "fetch", "grep")
        ]
    )


def options_for(configuration: str) -> AgentOptions:
    """Today's defaults for the "defaults" rows; for the others, what shipped before (prefetch off) less one technique."""
    if configuration in DEFAULTS:
        return AgentOptions()
    return AgentOptions(
        parallel_tools=configuration != "sequential tools",
        early_dispatch=configuration != "no early dispatch",
        prefetch=False,
    )


def logs_of(configuration: str, workspace: Path) -> Path | None:
    """The folder of session logs a configuration's predictor learns from (the workspace's past), if any."""
    if configuration in ("defaults, learned", "defaults + pre-warm"):
        return workspace / "same-task"
    if configuration == "defaults, wrong guesses":
        return workspace / "other-task"
    return None


async def record_past(workspace: Path) -> None:
    """An earlier session of this task and one of another, each logged as hotloop logs a session in `workspace`."""
    for name, steps in (("same-task", STEPS), ("other-task", WRONG_STEPS)):
        events = await run("shipped", workspace, steps=steps)
        log = SessionLog.create(workspace / name, provider="sim", model=MODEL, workspace=workspace)
        for event in events:
            log.write(event)
        log.close()


async def run(
    configuration: str,
    folder: Path,
    protocol: str = PROTOCOLS[0],
    steps: list[dict[str, Any]] = STEPS,
) -> list[AgentEvent]:
    scenario = folder / "scenario.json"
    scenario.write_text(json.dumps(steps))
    config = SimConfig(scenario=load_scenario(scenario)).with_latency(prefill_per_token=PREFILL_PER_TOKEN)
    events: list[AgentEvent] = []
    with EmbeddedSimulator(config) as sim:
        provider = provider_for(protocol, sim)
        await provider.fetch(sim.url + "/health")  # a warm connection, as the runtime leaves it
        agent = Agent(
            provider,
            tools(),
            emit=events.append,
            workspace=folder,
            system=system_prompt(INSTRUCTIONS),
            options=options_for(configuration),
        )
        logs = logs_of(configuration, folder)
        if agent.runner.prefetcher is not None and logs is not None:  # as `Runtime.learn_from_past` does
            for past in past_events(logs, folder):
                agent.runner.prefetcher.predictor.learn_from(past)
        if configuration == "defaults + pre-warm":  # sent while the user types: done before the prompt is
            async for _ in provider.stream(prewarm_request(agent)):
                pass
        if configuration == "unstable prefix":
            base = agent.system

            def emit(event: AgentEvent) -> None:
                events.append(event)
                if isinstance(event, ToolStarted):  # the next request carries a new time at the very top
                    agent.system = f"Current time: {time.time():.6f}\n{base}"

            agent.emit = emit
        await agent.run_turn(PROMPT)
        await provider.aclose()
    return events


def prefetched(events: list[AgentEvent]) -> str:
    """The steps' prefetch notices, summed: `prefetched N, used M`, or "" when nothing was prefetched."""
    guessed = used = 0
    for event in events:
        if isinstance(event, Notice) and event.message.startswith("prefetched "):
            counts = event.message.split(" · ")[0].removeprefix("prefetched ").split(", used ")
            guessed, used = guessed + int(counts[0]), used + int(counts[1])
    return f"prefetched {guessed}, used {used}" if guessed else ""


def figures(events: list[AgentEvent]) -> tuple[float, int, float]:
    """Wall time, uncached prefill tokens and cache-hit share of one run."""
    steps = [e for e in events if isinstance(e, StepFinished)]
    prompt = sum(s.usage.prompt_total or 0 for s in steps if s.usage)
    read = sum(s.usage.cache_read or 0 for s in steps if s.usage)
    wall = next(e.wall for e in events if isinstance(e, TurnFinished))
    return wall, prompt - read, read / prompt if prompt else 0.0


def theoretical_minimum(events: list[AgentEvent]) -> float:
    """Per step: TTFT for only its new tokens, its decode, and its slowest tool."""
    steps = [e for e in events if isinstance(e, StepFinished)]
    total, seen = 0.0, 0
    for step, planned in zip(steps, STEPS, strict=True):
        usage = step.usage
        assert usage is not None and usage.prompt_total is not None and usage.output is not None
        new = usage.prompt_total - seen
        decode = (planned.get("decode_ms", PROFILE.decode_per_token * 1000) / 1000) * (usage.output - 1)
        slowest = max((c["arguments"]["seconds"] for c in planned.get("tool_calls", [])), default=0.0)
        total += PROFILE.ttft + PREFILL_PER_TOKEN * new + decode + slowest
        seen = usage.prompt_total + usage.output
    return total


async def main(rounds: int) -> None:
    results: dict[str, list[tuple[float, int, float]]] = {c: [] for c in CONFIGURATIONS}
    wasted: dict[str, str] = {}
    minimum: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        await record_past(Path(tmp))  # the earlier sessions prefetch learns from
        for _ in range(rounds):
            for configuration in CONFIGURATIONS:
                events = await run(configuration, Path(tmp))
                results[configuration].append(figures(events))
                wasted[configuration] = prefetched(events)
                if configuration == "shipped":
                    minimum.append(theoretical_minimum(events))
    shipped_wall = statistics.median(r[0] for r in results["shipped"])
    shipped_uncached = statistics.median(r[1] for r in results["shipped"])
    print(
        f"agent latency: a 5-step research task (9 tool calls), {MODEL}, prefill {PREFILL_PER_TOKEN * 1e6:.0f} µs/token, "
        f"tool arguments written at {TOOL_DECODE_MS} ms/token; median of {rounds} rounds"
    )
    print(
        f"  {'configuration':<24} {'wall':>8} {'× shipped':>10} {'uncached prefill':>17} {'× shipped':>10} "
        f"{'cache hit':>10}  prefetch"
    )
    walls = {c: statistics.median(r[0] for r in results[c]) for c in CONFIGURATIONS}
    for configuration in CONFIGURATIONS:
        wall = walls[configuration]
        uncached = statistics.median(r[1] for r in results[configuration])
        hit = statistics.median(r[2] for r in results[configuration])
        print(
            f"  {configuration:<24} {wall:7.2f}s {wall / shipped_wall:9.2f}× {uncached:17,.0f} "
            f"{uncached / shipped_uncached:9.2f}× {hit:9.1%}  {wasted[configuration] or '-'}"
        )
    floor = statistics.median(minimum)
    print(f"  {'theoretical min':<24} {floor:7.2f}s {floor / shipped_wall:9.2f}×")
    # Noise: how far shipped's own rounds stray from their median (the same configuration, run again).
    noise = max(abs(r[0] - shipped_wall) for r in results["shipped"]) / shipped_wall
    slower = [f"{c} {walls[c] / shipped_wall:.2f}×" for c in DEFAULTS if walls[c] > shipped_wall * (1 + noise)]
    print(
        f"defaults slower than shipped by more than noise (±{noise:.1%}, shipped's own spread): "
        f"{', '.join(slower) or 'none'}"
    )
    best = walls["defaults + pre-warm"] / shipped_wall
    verdict = "met" if best <= 0.90 else "NOT met"
    print(f"defaults (pre-warm + prefetch) ÷ shipped: {best:.2f}× (target ≤ 0.90: {verdict})")
    await early_dispatch_by_protocol(rounds)
    await prewarm_by_protocol(rounds)


async def early_dispatch_by_protocol(rounds: int) -> None:
    walls: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for protocol in PROTOCOLS:
                for configuration in ("shipped", "no early dispatch"):
                    events = await run(configuration, Path(tmp), protocol=protocol)
                    walls.setdefault((protocol, configuration), []).append(figures(events)[0])
    print(f"\nearly dispatch by protocol (same task, median of {rounds} rounds)")
    print(f"  {'protocol':<20} {'shipped':>8} {'no early dispatch':>18} {'saved':>7}")
    for protocol in PROTOCOLS:
        shipped = statistics.median(walls[(protocol, "shipped")])
        late = statistics.median(walls[(protocol, "no early dispatch")])
        print(f"  {protocol:<20} {shipped:7.2f}s {late:17.2f}s {late - shipped:6.2f}s")


# "at once, cancelled" is what hotloop does when a prompt goes out before the pre-warm answered.
PREWARM_MODES = ("off", "typed", "at once, left", "at once, cancelled")
# About 9,000 tokens of project instructions: with hotloop's own prompt and tools, a 12,000-token prefix.
PREWARM_RULES = "\n".join(
    f"- Rule {n}: cite the file and line of every claim, and prefer primary sources over summaries." for n in range(450)
)


async def first_step_ttft(protocol: str, mode: str, home: Path) -> tuple[float, int]:
    """A new session's first step: its TTFT and the prompt tokens it read from the cache."""
    import os

    from hotloop.config import load_config
    from hotloop.core.session import Session, SessionOptions

    os.environ["HOTLOOP_CONFIG"] = str(home / "config.toml")
    os.environ["HOTLOOP_DATA_DIR"] = str(home / "data")
    prewarm = "off" if mode == "off" else "auto"
    (home / "config.toml").write_text(f'[routing]\ntitles = false\n[cache]\nprewarm = "{prewarm}"\n')
    workspace = home / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "AGENTS.md").write_text(PREWARM_RULES)
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider=protocol, workspace=workspace), events.append)
    session.prewarmer.delay = 0.0  # at once: what a pre-warm in flight does to a prompt sent beside it
    await session.open()
    warming = session.prewarmer.task
    try:
        if warming is not None and mode == "typed":
            await asyncio.wait_for(asyncio.shield(warming), 30)
        elif warming is not None:  # the prompt sent while the pre-warm is at the server, prefilling
            simulator = session.runtime.simulator if session.runtime is not None else None
            assert simulator is not None
            while not simulator.server.requests and not warming.done():
                await asyncio.sleep(0.001)
            if mode == "at once, left":
                session.prewarmer.task = None  # hidden from the turn, which would cancel it (what hotloop does)
        await session.turn("hello")
    finally:
        if warming is not None:
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
        await session.close()
    step = next(e for e in events if isinstance(e, StepFinished))
    assert step.ttft is not None and step.usage is not None
    return step.ttft, step.usage.cache_read or 0


async def prewarm_by_protocol(rounds: int) -> None:
    ttfts: dict[tuple[str, str], list[float]] = {}
    reads: dict[tuple[str, str], list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for protocol in ("sim", "sim-anthropic"):
                for mode in PREWARM_MODES:
                    home = Path(tmp) / f"{n}-{protocol}-{mode.replace(' ', '').replace(',', '-')}"
                    home.mkdir()
                    ttft, read = await first_step_ttft(protocol, mode, home)
                    ttfts.setdefault((protocol, mode), []).append(ttft)
                    reads.setdefault((protocol, mode), []).append(read)
    profile = TIERS[MODEL]
    print(
        f"\npre-warming: a new session's first-step TTFT, {MODEL} at the simulator's defaults (TTFT "
        f"{profile.ttft * 1000:.0f} ms + {profile.prefill_per_token * 1e6:.0f} µs/uncached token), a ~12,000-token "
        f"prefix; median of {rounds} rounds (min–max)"
    )
    print(f"  {'protocol':<16} {'pre-warm':<20} {'first TTFT':>11} {'range':>15} {'× off':>7} {'cache read':>11}")
    for protocol in ("sim", "sim-anthropic"):
        off = statistics.median(ttfts[(protocol, "off")])
        for mode in PREWARM_MODES:
            values = ttfts[(protocol, mode)]
            ttft = statistics.median(values)
            spread = f"{min(values) * 1000:.0f}–{max(values) * 1000:.0f} ms"
            read = statistics.median(reads[(protocol, mode)])
            print(f"  {protocol:<16} {mode:<20} {ttft * 1000:8.0f} ms {spread:>15} {ttft / off:6.2f}× {read:11,.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prewarm-only", action="store_true", help="only the pre-warming table")
    arguments = parser.parse_args()
    if arguments.prewarm_only:
        asyncio.run(prewarm_by_protocol(arguments.rounds))
    else:
        asyncio.run(main(arguments.rounds))
