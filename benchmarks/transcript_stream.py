"""How fast the TUI transcript streams with a long session behind it, and how responsive it stays.

The real app runs headless at 120×40 and gets a session's history through its own event path
(`HotloopApp.show`): finished turns of about 1,000 tokens of Markdown each (prose, headings,
lists, code), once the simulator's server panel has docked (so the history is drawn at its final
width). Then a new answer of 4,000 tokens streams, paced at 2,000 tokens/s or as fast
as the event loop takes it (the producer yields after every token). Cases:

- 20k paced, 20k unthrottled: 20 turns of history (20,000 tokens);
- 100k paced, 100k unthrottled: 100 turns (100,000 tokens);
- 20k paced + 3 panes: while the answer streams, three tool panes each get a line of output
  every 10 ms (`ToolOutput` events into the live tool panes).

Measured per run, over the window from the first token to the frame that shows the last one:

- tok/s on screen: tokens ÷ that window;
- token latency: for every token, the time from its event to the first frame painted with it
  in the answer's lines (p50, p99, and the last token's, which no end-of-stream event helps);
- heartbeat lateness: how late a 10 ms `asyncio.sleep` in the same event loop wakes (a
  stand-in for input lag), p99 and max.

Frames are the app's screen updates (`App._display`, called once per compositor update,
headless too). Every run is a fresh interpreter. `--baseline DIR` runs each case against
an earlier checkout of the package too (a folder holding hotloop's source, e.g. a `git
worktree` of an older commit), interleaved run by run with the current tree, and prints the
two side by side with the median of `--runs` runs (default 3). Targets: heartbeat p99 ≤ 16 ms
paced and unthrottled (≥ 8,000 tok/s on screen unthrottled), the last token on screen within
50 ms, with ≥ 20,000 tokens of history.

    python benchmarks/transcript_stream.py [--runs 3] [--baseline DIR] [--cases "20k paced" ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.agent.events import (
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.config import load_config
from hotloop.providers.events import TextDelta, ToolCallReady, ToolCallStarted, UsageLedger
from hotloop.tui.app import HotloopApp
from hotloop.tui.widgets.server_panel import ServerPanel

HISTORY_TURNS = 20
TOKENS_PER_TURN = 1_000
LIVE_TOKENS = 4_000
RATE = 2_000
HEARTBEAT = 0.010  # seconds
PANE_LINE_EVERY = 0.010  # seconds between two lines of one tool pane's output
SETTLE_WAIT = 5.0  # seconds, at most, for the server panel to come before the history is built
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


@dataclass(frozen=True)
class Case:
    history_turns: int
    rate: float | None  # tok/s; None: as fast as the event loop takes them
    panes: int = 0
    seed: int = 0  # of the live answer


CASES = {
    "20k paced": Case(HISTORY_TURNS, RATE),
    "20k unthrottled": Case(HISTORY_TURNS, None, seed=1),
    "100k paced": Case(100, RATE),
    "100k unthrottled": Case(100, None, seed=1),
    "20k paced + 3 panes": Case(HISTORY_TURNS, RATE, panes=3),
}


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


def shown_to(answer: Any) -> int:
    """Where the newest text on screen ends in the answer (a baseline from before the answer
    rendered newest first has only `source`, the text on screen)."""
    return answer.shown_to if hasattr(answer, "shown_to") else len(answer.source)


def start_panes(app: HotloopApp, count: int) -> list[str]:
    """`count` tool calls, ready and running: their panes take output from now on."""
    ids = [f"call-{n}" for n in range(count)]
    for index, call_id in enumerate(ids):
        app.show(ToolCallStarted(index, call_id, "build"))
        app.show(ToolCallReady(index, call_id, "build", f'{{"target": "part-{index}"}}'))
        app.show(ToolStarted(call_id=call_id, name="build", arguments=f'{{"target": "part-{index}"}}'))
    return ids


async def stream(app: HotloopApp, case: Case) -> dict[str, Any]:
    """Stream one answer (and tool output); the run's figures."""
    tokens = markdown_tokens(LIVE_TOKENS, case.seed)
    turn = case.history_turns + 1
    app.show(TurnStarted(turn=turn, prompt="the live turn"))
    app.show(StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"))
    panes = start_panes(app, case.panes)
    answer = app.main.transcript.answer
    ends: list[int] = []  # the answer's length once each token is in
    for token in tokens:
        ends.append((ends[-1] if ends else 0) + len(token))
    sent: list[float] = []
    frames: list[tuple[float, int]] = []  # (when, characters of the answer in its lines)
    all_shown = asyncio.Event()

    def on_display(screen: Any, renderable: Any) -> None:
        display(screen, renderable)
        if renderable is not None and sent:
            frames.append((time.perf_counter(), shown_to(answer)))
            if len(sent) == len(tokens) and shown_to(answer) >= ends[-1]:
                all_shown.set()

    display = app._display
    app._display = on_display  # type: ignore[method-assign]
    lateness: list[float] = []

    async def heartbeat() -> None:
        while not all_shown.is_set():
            expected = time.perf_counter() + HEARTBEAT
            await asyncio.sleep(HEARTBEAT)
            lateness.append(max(time.perf_counter() - expected, 0.0))

    beating = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    next_line = start
    for n, token in enumerate(tokens):
        app.show(TextDelta(token))
        sent.append(time.perf_counter())
        if panes and sent[-1] >= next_line:
            next_line += PANE_LINE_EVERY
            for call_id in panes:
                app.show(ToolOutput(call_id=call_id, text=f"compiling {WORDS[n % len(WORDS)]}_{n}.py … ok\n"))
        if case.rate is None:
            await asyncio.sleep(0)
        else:
            delay = start + (n + 1) / case.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
    await asyncio.wait_for(all_shown.wait(), 30)
    await beating
    app._display = display  # type: ignore[method-assign]
    app.show(TurnFinished(turn=turn, reason="cancelled", steps=1, wall=0.0))
    shown_at = [when for when, _ in frames]
    shown_chars = [chars for _, chars in frames]
    # A token is on screen from the first frame whose answer holds it (lengths only grow).
    latencies = []
    for end, at in zip(ends, sent, strict=True):
        first = bisect_left(shown_chars, end)
        latencies.append(shown_at[first] - at)
    latencies_sorted = sorted(latencies)
    lateness.sort()
    return {
        "tok_s": len(tokens) / (shown_at[-1] - start),
        "latency_p50_ms": 1000 * statistics.median(latencies_sorted),
        "latency_p99_ms": 1000 * latencies_sorted[int(0.99 * (len(latencies_sorted) - 1))],
        "last_ms": 1000 * latencies[-1],
        "p99_ms": 1000 * lateness[int(0.99 * (len(lateness) - 1))],
        "max_ms": 1000 * lateness[-1],
        "frames": len(frames),
    }


async def measure(case: Case) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        os.environ["HOTLOOP_DATA_DIR"] = home
        os.environ["HOTLOOP_CONFIG"] = os.path.join(home, "none.toml")
        app = HotloopApp(load_config())
        async with app.run_test(size=(120, 40)) as pilot:
            while app.agent is None:  # connected: the engine's imports and the startup GC are behind us
                await asyncio.sleep(0.05)
            await app.workers.wait_for_complete()
            # The simulator's server panel docks beside the transcript soon after connecting. Had it
            # come during the stream, the history would re-render at the narrower width while the
            # answer streams: a one-off of startup, not the cost of streaming, and it raced.
            deadline = time.perf_counter() + SETTLE_WAIT
            while not app.query(ServerPanel) and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            await pilot.pause()
            for turn in range(1, case.history_turns + 1):
                finished_turn(app, turn, markdown_tokens(TOKENS_PER_TURN, 99 + turn))
            await pilot.pause()
            return await stream(app, case)


FIGURES = (
    ("tok/s", "tok_s", "{:,.0f}"),
    ("latency p50", "latency_p50_ms", "{:.0f} ms"),
    ("latency p99", "latency_p99_ms", "{:.0f} ms"),
    ("last token", "last_ms", "{:.0f} ms"),
    ("heartbeat p99", "p99_ms", "{:.1f} ms"),
    ("heartbeat max", "max_ms", "{:.1f} ms"),
)


def run_one(case: str, package_root: str | None) -> dict[str, Any]:
    """One run in a fresh interpreter; `package_root` is a folder holding a `hotloop` package to use instead."""
    env = dict(os.environ)
    if package_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, __file__, "--one", case], env=env, capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def report(case: str, designs: dict[str, list[dict[str, Any]]]) -> None:
    history = CASES[case].history_turns * TOKENS_PER_TURN
    print(f"\n{case}: {history:,} tokens of history, {LIVE_TOKENS:,} new tokens, 120×40")
    for label, key, shape in FIGURES:
        cells = []
        for name, runs in designs.items():
            values = [run[key] for run in runs]
            each = " / ".join(shape.format(v) for v in values)
            cells.append(f"{name} {shape.format(statistics.median(values))} ({each})")
        print(f"  {label:>14}: " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--baseline", type=Path, help="an earlier checkout of hotloop's source, to compare with")
    parser.add_argument("--one", choices=list(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(asyncio.run(measure(CASES[args.one]))))
        return
    with tempfile.TemporaryDirectory() as root:
        roots: dict[str, str | None] = {"now": None}
        if args.baseline is not None:
            # The repository root is the package: put it on the path under the package's name.
            os.symlink(args.baseline.resolve(), os.path.join(root, "hotloop"))
            roots = {"before": root, **roots}
        print("median (each run) of", args.runs, "runs; every run a fresh process")
        for case in args.cases:
            designs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
            for _ in range(args.runs):
                for name, package_root in roots.items():
                    designs[name].append(run_one(case, package_root))
            report(case, designs)
    print("\ntargets: heartbeat p99 ≤ 16 ms; unthrottled ≥ 8,000 tok/s; last token ≤ 50 ms")


if __name__ == "__main__":
    main()
