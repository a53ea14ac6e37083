"""A session title on the conversation's own model: a fresh prompt, or the conversation's prefix plus the ask?

A session on one model (the fast tier, which is also the helper tier) runs a first turn on the
embedded simulator, asks for the session's title, then starts a second turn. Two first turns:
three tool calls in two steps (today's title prompt is short: the answer is past the six
messages it quotes), and a question answered in prose. The title is asked both ways, each in a
session of its own, in one run:

- fresh: the title's own system prompt and the conversation flattened to text (what a helper
  on another model gets, and what every helper got before);
- prefix: the conversation's own request, byte for byte, then one user message with the ask.

The figures are the simulator's own, per request: prompt tokens, those read from the cache, and
those computed (prompt − read; on the Anthropic API that includes the cache write), for the
title and for the second turn's first step. Three servers:

- OpenAI API, vLLM's prefix cache: roomy, least recently used blocks leave first;
- OpenAI API, one llama.cpp slot: the benchmark swaps the simulator's cache for one that keeps
  only the last request's tokens and reuses what the next one shares with them, as llama.cpp
  does with one slot (`--parallel 1`, `cache_prompt`);
- Anthropic API: explicit breakpoints, nothing cached below 1,024 tokens.

Target: the title request computes at least 5× fewer prompt tokens with the prefix than fresh.

    python benchmarks/helper_prefix.py
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hotloop.config import TIER_NAMES, Choice, Config, RoutingSettings, SimSettings, Tier, resolve
from hotloop.core.routing import Router
from hotloop.core.runtime import Runtime
from hotloop.core.side_jobs import Prefix
from hotloop.sim.cache import PrefixCache
from hotloop.sim.server import RecordedRequest

FIRST_TURNS = (
    (
        "tools",
        "I'm new to this project and want my bearings before I change anything. "
        "Read README.md and pyproject.toml, then grep for TODO",
    ),
    ("prose", "Explain how a prefix cache works and why an agent should keep it warm"),
)
SECOND = "Now read notes.txt too"
TARGET = 5.0


class OneSlot(PrefixCache):
    """llama.cpp with one slot: it holds the last request's tokens only, and a request reuses what it shares.

    Token by token, not in blocks: llama.cpp keeps the common prefix and recomputes only the
    last token of an identical prompt (tests/fixtures/llamacpp 03: cached 1,043 of 1,044).
    """

    def __init__(self) -> None:
        super().__init__(block_size=1)

    def insert(self, hashes: Sequence[int]) -> None:
        self.clear()
        super().insert(hashes)


@dataclass(frozen=True)
class Server:
    label: str
    provider: str  # sim or sim-anthropic
    one_slot: bool = False


@dataclass(frozen=True)
class Figures:
    title: RecordedRequest
    next_step: RecordedRequest


def workspace(root: Path) -> Path:
    """A small project: a README worth reading, a pyproject, and notes with TODOs."""
    folder = root / "ws"
    folder.mkdir()
    sections = "".join(
        f"## {name}\n\n{name} keeps its state in one place and says what it did. TODO: document {name.lower()}.\n\n"
        for name in ("Routing", "Lanes", "Titles", "Summaries", "Discovery", "Metrics", "Sessions", "Replay")
    )
    (folder / "README.md").write_text(f"# Demo\n\nA demo project for the agent to read.\n\n{sections}")
    (folder / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0.1.0"\nrequires-python = ">=3.12"\n')
    (folder / "notes.txt").write_text("TODO: more tests\nTODO: a faster cache\n")
    return folder


def config_for(root: Path, server: Server) -> Config:
    """Every tier on the server's provider, no latency; titles are asked by the benchmark itself."""
    return Config(
        path=root / "config.toml",
        loaded=False,
        sim=SimSettings(ttft_ms=0, prefill_us_per_token=0, decode_ms_per_token=0),
        tiers={name: Tier(name, server.provider, f"sim-{name}") for name in TIER_NAMES},
        routing=RoutingSettings(titles=False),
    )


async def session(folder: Path, server: Server, first: str, prefixed: bool) -> Figures:
    """A first turn in `folder` on the fast tier, its title asked one way, then the second turn's first step."""
    config = config_for(folder, server)
    runtime = Runtime(config)
    try:
        router = Router(config, runtime)
        provider = await runtime.connect(resolve(config, Choice(tier="fast")))
        agent = router.new_agent(provider, emit=lambda _: None, workspace=folder, cache_key="bench")
        assert runtime.simulator is not None
        if server.one_slot:
            runtime.simulator.server.engine.cache = OneSlot()
        requests = runtime.simulator.server.requests
        await router.turn(agent, first)
        asked = len(requests)
        prefix = replace(Prefix.of(agent), reuse=True) if prefixed else None  # on Anthropic too: what it would cost
        assert await router.side_jobs.title(tuple(agent.messages), prefix)
        await router.turn(agent, SECOND)
        return Figures(requests[asked], requests[asked + 1])
    finally:
        await runtime.aclose()


def computed(request: RecordedRequest) -> int:
    """Prompt tokens the server computed: all but those it read from its cache."""
    return request.prompt_tokens - request.cached_tokens


def report(first: str, rows: list[tuple[Server, Figures, Figures]]) -> list[tuple[str, float]]:
    print(f"  first turn: {first!r}; then {SECOND!r}")
    print(f"  {'prompt tokens':<18}{'title:':<8}{'prompt':>7} {'read':>6} {'written':>8} {'computed':>9}", end="")
    print(f"   {'next step:':<11}{'prompt':>7} {'read':>6} {'computed':>9}")
    ratios = []
    for server, fresh, prefix in rows:
        print(f"  {server.label}")
        for way, figures in (("fresh", fresh), ("prefix", prefix)):
            title, step = figures.title, figures.next_step
            print(
                f"    {way:<22}{title.prompt_tokens:>7,} {title.cached_tokens:>6,} {title.cache_write_tokens:>8,} "
                f"{computed(title):>9,}   {'':<11}{step.prompt_tokens:>7,} {step.cached_tokens:>6,} {computed(step):>9,}"
            )
        ratio = computed(fresh.title) / computed(prefix.title)
        both = (computed(fresh.title) + computed(fresh.next_step)) / (
            computed(prefix.title) + computed(prefix.next_step)
        )
        ratios.append((server.label, ratio))
        print(f"    fresh ÷ prefix, computed: the title {ratio:.1f}×, the title and the next step {both:.1f}×")
    return ratios


async def main() -> None:
    servers = (
        Server("OpenAI API, vLLM prefix cache", "sim"),
        Server("OpenAI API, one llama.cpp slot", "sim", one_slot=True),
        Server("Anthropic API (hotloop sends it fresh)", "sim-anthropic"),
    )
    print("A session title on the conversation's own model: a fresh prompt vs the conversation's prefix + the ask")
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = workspace(Path(tmp))  # one for all: prompts carry its path, so every session's are alike
        for name, first in FIRST_TURNS:
            rows = []
            for server in servers:
                fresh = await session(folder, server, first, prefixed=False)
                prefix = await session(folder, server, first, prefixed=True)
                rows.append((server, fresh, prefix))
            verdicts += [(f"{label}, {name}", ratio) for label, ratio in report(first, rows)[:2]]
    met = ", ".join(f"{label} {ratio:.1f}× ({'met' if ratio >= TARGET else 'not met'})" for label, ratio in verdicts)
    print(f"target, the title computes ≥ {TARGET:g}× fewer prompt tokens on a server hotloop asks it so: {met}")


if __name__ == "__main__":
    asyncio.run(main())
