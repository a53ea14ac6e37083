"""A 5-step run against the simulator, over each protocol: does each step read the previous request from cache?

hotloop builds requests static part first and append-only, so the simulator's vLLM-style
prefix cache should cover everything the previous request sent. Target: every step after
the first reports cache-read tokens ≥ the previous request's prompt tokens − 32. The same
holds over the Responses API, where each step's reasoning items go back as they came (the
requests ask for reasoning summaries, so the simulator's model reasons at every step).

Over the Anthropic API only what a `cache_control` breakpoint marks is cached. hotloop puts
one on the newest message, so each step should read the previous request up to its last
block: everything but the generation prompt (the simulator's is 4 tokens), once that
request reached the minimum cacheable length (1,024 tokens, as for Claude Sonnet).

    python benchmarks/prefix_cache.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hotloop.agent.events import AgentEvent, StepFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig
from hotloop.sim.scenario import load_scenario

TARGETS = {"openai": -32, "openai-responses": -32, "anthropic": -4}


async def run(root: Path, protocol: str) -> list[StepFinished]:
    events: list[AgentEvent] = []
    config = SimConfig(scenario=load_scenario(root / "scenario.json")).with_latency(0, 0, 0)
    with EmbeddedSimulator(config) as sim:
        provider: Provider
        if protocol == "anthropic":
            provider = AnthropicProvider(
                ProviderOptions(
                    name="sim-anthropic",
                    model="sim-balanced",
                    base_url=sim.url,
                    cache_min_tokens=config.cache_min_tokens,
                )
            )
        elif protocol == "openai-responses":
            provider = OpenAIResponsesProvider(
                ProviderOptions(name="sim-responses", model="sim-balanced", base_url=sim.base_url),
                reasoning_summary=True,
            )
        else:
            provider = OpenAIChatProvider(ProviderOptions(name="sim", model="sim-balanced", base_url=sim.base_url))
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=events.append, workspace=root)
        await agent.run_turn("read notes.md page by page")
        await provider.aclose()
    return [e for e in events if isinstance(e, StepFinished)]


def report(protocol: str, steps: list[StepFinished]) -> None:
    print(f"{protocol} API:")
    print(
        f"  {'step':>4} {'prompt':>7} {'cache read':>10} {'cache write':>11} {'prev prompt':>11} {'read − prev':>11}  note"
    )
    previous = None
    for step in steps:
        usage = step.usage
        assert usage is not None and usage.prompt_total is not None
        read = usage.cache_read or 0
        write = "–" if usage.cache_write is None else f"{usage.cache_write:,}"
        gap = f"{read - previous:+,}" if previous is not None else "–"
        prev = f"{previous:,}" if previous is not None else "–"
        note = f"below cache minimum ({usage.below_cache_min:,})" if usage.below_cache_min else ""
        print(f"  {step.step:>4} {usage.prompt_total:>7,} {read:>10,} {write:>11} {prev:>11} {gap:>11}  {note}")
        previous = usage.prompt_total
    total = sum(s.usage.prompt_total or 0 for s in steps if s.usage)
    read = sum(s.usage.cache_read or 0 for s in steps if s.usage)
    print(
        f"  cache-hit {read / total:.1%} of {total:,} prompt tokens (target: read − prev ≥ {TARGETS[protocol]} after a cacheable step)"
    )


async def main() -> None:
    print("prefix cache over a 5-step run (simulator: vLLM's 16-token blocks; Anthropic's breakpoints)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.md").write_text(
            "".join(f"Line {n}: notes about the project and its plans.\n" for n in range(200))
        )
        pages = [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "notes.md", "offset": 1 + 50 * n, "limit": 50}}
                ]
            }
            for n in range(4)
        ]
        (root / "scenario.json").write_text(json.dumps([*pages, {"text": "Read all four pages."}]))
        for protocol in ("openai", "openai-responses", "anthropic"):
            report(protocol, await run(root, protocol))


if __name__ == "__main__":
    asyncio.run(main())
