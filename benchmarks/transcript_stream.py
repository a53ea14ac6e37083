"""How fast the TUI transcript streams with a long session behind it, and how responsive it stays.

The real app runs headless at 120×40. The session gets 20 finished turns of about 1,000
tokens of Markdown each (prose, headings, lists, code), then a new answer of 4,000 tokens
streams through the app's own event path at 2,000 tokens/s, and once more as fast as
possible. Measured: tokens/s from the first token to the last one on screen, and how late a
10 ms heartbeat timer fires meanwhile (a stand-in for input lag). Targets: ≥ 2,000 tok/s
with ≥ 20,000 tokens of history; heartbeat p99 lateness ≤ 50 ms.

    python benchmarks/transcript_stream.py
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time

from hotloop.agent.events import ResponseFinished, StepFinished, StepStarted, TurnFinished, TurnStarted
from hotloop.config import load_config
from hotloop.providers.events import TextDelta, UsageLedger
from hotloop.tui.app import HotloopApp

HISTORY_TURNS = 20
TOKENS_PER_TURN = 1_000
LIVE_TOKENS = 4_000
RATE = 2_000
WORDS = [
    "cache",
    "prefix",
    "tokens",
    "stream",
    "parallel",
    "tools",
    "latency",
    "decode",
    "prefill",
    "server",
    "model",
    "step",
    "turn",
    "request",
    "answer",
    "vLLM",
    "block",
    "hash",
    "usage",
    "budget",
]


def markdown_tokens(count: int, seed: int) -> list[str]:
    """A deterministic Markdown answer, as the tokens a model would stream."""
    rng = random.Random(seed)
    tokens: list[str] = []
    while len(tokens) < count:
        kind = rng.random()
        if kind < 0.15:
            tokens += ["\n\n## ", *[f"{rng.choice(WORDS)} " for _ in range(4)], "\n\n"]
        elif kind < 0.35:
            for _ in range(rng.randint(2, 5)):
                tokens += ["- ", *[f"{rng.choice(WORDS)} " for _ in range(rng.randint(4, 10))], "\n"]
            tokens.append("\n")
        elif kind < 0.5:
            tokens.append("```python\n")
            for n in range(rng.randint(3, 8)):
                tokens += [f"def {rng.choice(WORDS)}_{n}(", "x", "):\n", "    return ", f"x + {n}", "\n"]
            tokens.append("```\n\n")
        else:
            tokens += [f"{rng.choice(WORDS)} " for _ in range(rng.randint(30, 70))]
            tokens.append("\n\n")
    return tokens[:count]


def finished_turn(app: HotloopApp, turn: int, tokens: list[str]) -> None:
    app.show(TurnStarted(turn=turn, prompt=f"question {turn}"))
    app.show(StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"))
    app.show(TextDelta("".join(tokens)))
    usage = UsageLedger(prompt_total=1_000 * turn, cache_read=990 * turn, uncached=10 * turn, output=len(tokens))
    app.show(
        ResponseFinished(
            turn=turn, step=1, usage=usage, ttft=0.1, decode_tps=90.0, model_time=1.0, finish_reason="stop"
        )
    )
    app.show(
        StepFinished(
            turn=turn,
            step=1,
            usage=usage,
            ttft=0.1,
            decode_tps=90.0,
            model_time=1.0,
            wall=1.0,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="stop",
        )
    )
    app.show(TurnFinished(turn=turn, reason="answer", steps=1, wall=1.0))


async def stream(app: HotloopApp, pilot, tokens: list[str], rate: float | None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    lateness: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            expected = time.perf_counter() + 0.010
            await asyncio.sleep(0.010)
            lateness.append(max(time.perf_counter() - expected, 0.0))

    beating = asyncio.create_task(heartbeat())
    turn = HISTORY_TURNS + 1
    app.show(TurnStarted(turn=turn, prompt="the live turn"))
    app.show(StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"))
    answer = app.transcript.answer
    start = time.perf_counter()
    for n, token in enumerate(tokens):
        app.show(TextDelta(token))
        if rate is None:
            await asyncio.sleep(0)
        else:
            delay = start + (n + 1) / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
    produced = time.perf_counter()
    while answer.text != answer.source:  # every token flushed to the screen's lines
        await asyncio.sleep(0.001)
    await pilot.pause()
    elapsed = time.perf_counter() - start
    lag = time.perf_counter() - produced
    done.set()
    await beating
    app.show(TurnFinished(turn=turn, reason="cancelled", steps=1, wall=elapsed))
    lateness.sort()
    return {
        "tok_s": len(tokens) / elapsed,
        "lag_ms": 1000 * lag,
        "p99_ms": 1000 * lateness[int(0.99 * (len(lateness) - 1))],
        "max_ms": 1000 * lateness[-1],
        "median_ms": 1000 * statistics.median(lateness),
    }


async def measure() -> tuple[int, dict[str, float], dict[str, float]]:
    with tempfile.TemporaryDirectory() as home:
        os.environ["HOTLOOP_DATA_DIR"] = home
        os.environ["HOTLOOP_CONFIG"] = os.path.join(home, "none.toml")
        app = HotloopApp(load_config())
        async with app.run_test(size=(120, 40)) as pilot:
            while app.agent is None:  # connected: the engine's imports and the startup GC are behind us
                await asyncio.sleep(0.05)
            await app.workers.wait_for_complete()
            history = [markdown_tokens(TOKENS_PER_TURN, seed) for seed in range(100, 100 + HISTORY_TURNS)]
            for turn, tokens in enumerate(history, 1):
                finished_turn(app, turn, tokens)
            await pilot.pause()
            paced = await stream(app, pilot, markdown_tokens(LIVE_TOKENS, 0), RATE)
            flat_out = await stream(app, pilot, markdown_tokens(LIVE_TOKENS, 1), None)
        return sum(map(len, history)), paced, flat_out


def main() -> None:
    history, paced, flat_out = asyncio.run(measure())
    print(f"transcript streaming, 120×40, {history:,} tokens of history, {LIVE_TOKENS:,} new tokens")
    for label, result in ((f"at {RATE:,} tok/s", paced), ("unthrottled", flat_out)):
        print(
            f"  {label:>14}: {result['tok_s']:,.0f} tok/s on screen · last token shown {result['lag_ms']:.0f} ms after it "
            f"arrived · heartbeat lateness p99 {result['p99_ms']:.1f} ms (median {result['median_ms']:.1f}, "
            f"max {result['max_ms']:.1f})"
        )
    print("  targets: keep up with 2,000 tok/s (unthrottled ≥ 2,000), heartbeat p99 ≤ 50 ms")


if __name__ == "__main__":
    main()
