"""Do background requests hold up interactive ones? Priority lanes on, off, and no background load.

Four agents run multi-step turns on the balanced tier against the embedded simulator,
started with `max_running = 4` (vLLM's --max-num-seqs 4) and priority scheduling. Each step
calls a 0.2 s tool. Meanwhile sixteen sessions ask the fast tier for a title. The figure is
the agents' TTFT p95 as the client measures it, in three modes of the same run:

- no background load: the agents alone;
- lanes off: the titles go out at once, without a priority, and queue with the agents;
- lanes on: hotloop's lanes hold the titles back while an interactive request is in flight,
  preempt them when one starts, and send them with priority 10.

Target: with lanes on, TTFT p95 ≤ 1.2 × the value without background load.

    python benchmarks/priority_lanes.py [--rounds 3]
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

from hotloop.agent.events import AgentEvent, StepFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.config import Choice, Config, RoutingSettings, SimSettings, resolve
from hotloop.core.routing import Router
from hotloop.core.runtime import Runtime
from hotloop.providers.conversation import AssistantMessage, UserMessage

AGENTS, TITLES, STEPS, TOOL_SECONDS = 4, 16, 8, 0.2
TOPICS = ("the cache", "the scheduler", "the tokenizer", "routing", "the server panel", "replay", "exports", "lanes")


async def wait(args: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.sleep(args["seconds"])
    return "done"


def scenario(folder: Path) -> Path:
    step = {"text": "Checking. " * 8, "tool_calls": [{"name": "wait", "arguments": {"seconds": TOOL_SECONDS}}]}
    path = folder / "scenario.json"
    path.write_text(json.dumps([step] * (STEPS - 1) + [{"text": "All checked. " * 10}]))
    return path


async def one_round(folder: Path, mode: str) -> tuple[list[float], float | None]:
    """The agents' TTFTs in one mode, and when the last title arrived (seconds after the start)."""
    config = Config(
        path=folder / "config.toml",
        loaded=False,
        sim=SimSettings(scenario=scenario(folder), max_running=AGENTS, scheduling_policy="priority"),
        routing=RoutingSettings(lanes=mode == "lanes on"),
    )
    runtime = Runtime(config)
    schema = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
    runtime.tools.add(Tool("wait", "Wait.", schema, wait))
    ttfts: list[float] = []

    def emit(event: AgentEvent) -> None:
        if isinstance(event, StepFinished) and event.ttft is not None:
            ttfts.append(event.ttft)

    try:
        provider = await runtime.connect(resolve(config, Choice(tier="balanced")))
        await runtime.server_of(provider)
        router = Router(config, runtime)
        await runtime.helper(router.side_jobs.helper_target())  # connected before the clock starts, like a running app
        agents = [
            Agent(provider, runtime.tools, emit=emit, workspace=folder, lanes=runtime.lanes) for _ in range(AGENTS)
        ]
        started = time.perf_counter()
        titles = (
            []
            if mode == "no background"
            else [
                asyncio.create_task(
                    router.side_jobs.title(
                        [
                            UserMessage(f"Session {n}: explain {TOPICS[n % len(TOPICS)]} in depth"),
                            AssistantMessage(f"Here is how {TOPICS[n % len(TOPICS)]} works."),
                        ]
                    )
                )
                for n in range(TITLES)
            ]
        )
        title_times: list[float] = []
        for task in titles:
            task.add_done_callback(lambda _: title_times.append(time.perf_counter() - started))
        await asyncio.gather(*(agent.run_turn(f"agent {n}: check everything") for n, agent in enumerate(agents)))
        await asyncio.gather(*titles)
        return ttfts, max(title_times) if title_times else None
    finally:
        await runtime.aclose()


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


async def main(rounds: int) -> None:
    modes = ("no background", "lanes off", "lanes on")
    ttfts: dict[str, list[float]] = {mode: [] for mode in modes}
    last_title: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for mode in modes:  # interleaved, so drift on this shared machine hits every mode alike
                values, done = await one_round(Path(tmp), mode)
                ttfts[mode] += values
                if done is not None:
                    last_title[mode].append(done)
    print(
        f"priority lanes: {AGENTS} agents × {STEPS} steps (balanced tier, {TOOL_SECONDS:g} s tool per step) and "
        f"{TITLES} title requests (fast tier); simulator max_running {AGENTS}, priority scheduling; {rounds} rounds"
    )
    base = p95(ttfts["no background"])
    for mode in modes:
        values = ttfts[mode]
        line = (
            f"  {mode:<14} interactive TTFT p50 {statistics.median(values) * 1000:5.0f} ms · "
            f"p95 {p95(values) * 1000:5.0f} ms ({p95(values) / base:.2f}× no-background) · {len(values)} steps"
        )
        if last_title[mode]:
            line += f" · last title after {statistics.median(last_title[mode]):.2f} s"
        print(line)
    print(f"  target: lanes on p95 ≤ 1.2× no-background: {p95(ttfts['lanes on']) / base:.2f}×")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
