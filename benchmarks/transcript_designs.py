"""Why the transcript is a custom line-API widget: Textual's Markdown widgets against hotloop's real `Transcript`.

docs/architecture.md calls hotloop's transcript "design F", the one an early feasibility study
chose: everything finished is pre-rendered into one
line-API widget (`HistoryView`), which also draws the live answer (`LiveAnswer`): it
renders finished Markdown blocks once and only the open block again, on a coalescing 30 Hz
flush. The study found that Textual's own `Markdown` widget, streamed through
`Markdown.get_stream`, can't keep up with a fast model once a session has some history.
This script reproduces that comparison with hotloop's real widget:

- design A: Textual's stock way. A `VerticalScroll` holding one `Markdown` widget per
  finished turn, mounted with its full text; the live turn is a new `Markdown` fed through
  `Markdown.get_stream(widget)` (`await stream.write(token)`, `stream.stop()` at the end).
- hotloop: `hotloop.tui.widgets.transcript.Transcript` in a minimal app, fed the agent's own
  events (`TurnStarted`, `StepStarted`, `TextDelta`, `ResponseFinished`, `StepFinished`,
  `TurnFinished`) as `HotloopApp.show` feeds them, the way benchmarks/transcript_stream.py
  does with the whole app.

Scenario, the same for both (headless, `App.run_test(size=(120, 40))`): 20 finished
assistant turns of 1,000 tokens of Markdown each (20,000 tokens: prose, `##` headings,
bullet lists, fenced Python code), from transcript_stream.py's deterministic generator;
then hotloop's GC tuning (`gc.collect(); gc.freeze(); gc.set_threshold(700, 10, 1_000_000)`,
as `core/session.py` does); then a live turn of 4,000 tokens, (i) paced at 2,000 tok/s
(tokens released on a 2 ms schedule) and (ii) unthrottled (the producer yields to the event
loop after every token). Every (design, pace) run is a fresh interpreter, so GC state and
memory don't carry over. Measured per run:

- tok/s: tokens streamed / (first token written → the widget holds the last one and the
  screen has been refreshed). At 2,000 tok/s, about 1,900 means the display kept up (the
  shortfall is the last flush).
- heartbeat lateness: how late a 10 ms `asyncio.sleep` in the same event loop wakes during
  that window, p50 / p99 / max (a stand-in for input lag; the method of the study).
- peak RSS: `ru_maxrss` of the run's process; a design's figure is the larger of its two runs.

Design A is slow: a run stops producing after `--cap` seconds (default 60) and reports
tok/s over what it streamed, flagged in the output. The table gives the median of
`--rounds` rounds (default 3) and, below it, each figure's range over the rounds; each
run's figures are printed as it finishes. `--gc default` leaves Python's GC settings alone
(for comparison: design A then stalls longer but holds less memory, since the tuned
threshold also leaves the widget churn's cyclic garbage uncollected). About 2.5 minutes on
2 cores at the defaults, nearly all of it design A.

    python benchmarks/transcript_designs.py [--rounds 3] [--cap 60] [--designs A hotloop] [--gc tuned|default]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal, TypedDict

HEARTBEAT = 0.010  # seconds
PACE_TICK = 0.002  # paced tokens are released on this schedule
PACED_RATE = 2_000  # tok/s; also transcript_stream.RATE
LIVE_SEEDS = {"paced": 0, "unthrottled": 1}  # the live turns transcript_stream.py streams
HISTORY_SEED = 100  # history turn n uses seed HISTORY_SEED + n, as in transcript_stream.py
DESIGNS = {
    "A": "A: Textual Markdown per turn + get_stream",
    "hotloop": "hotloop Transcript (design F)",
}
PACES = ("paced", "unthrottled")


class Result(TypedDict):
    design: str
    pace: str
    tokens: int  # tokens streamed (fewer than offered if capped)
    offered: int
    capped: bool
    tok_s: float
    drain_ms: float  # last token written → shown
    hb_p50: float
    hb_p99: float
    hb_max: float
    heartbeats: int
    gen2: int  # generation-2 collections during the stream
    widgets: int  # widgets in the app when the stream starts
    shown_ok: bool  # the widget ends up holding exactly the tokens streamed
    history_s: float  # building (and showing) the history
    rss_mb: float


class Stream(TypedDict):
    tokens: int
    capped: bool
    tok_s: float
    drain_ms: float
    hb_p50: float
    hb_p99: float
    hb_max: float
    heartbeats: int
    gen2: int


# -- in the child: one design, one pace ------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest rank of sorted `values`, as the study computes it."""
    return values[max(0, min(len(values) - 1, round(q * (len(values) - 1))))] if values else 0.0


def tune_gc(tuned: bool) -> None:
    """What hotloop does once the session has started (`tuned`): the heap so far is long-lived."""
    if not tuned:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 1_000_000)


async def drive(
    write: Callable[[str], Awaitable[None]],
    shown: Callable[[], Awaitable[None]],
    tokens: list[str],
    rate: float | None,
    cap: float,
) -> Stream:
    """Stream `tokens` through `write`, paced at `rate` (None: unthrottled); time it and the heartbeat.

    `write` hands one token to the widget and yields to the event loop once, as a token read from a
    provider's stream would: so an unthrottled producer costs every design one loop pass per token.
    """
    lateness: list[float] = []
    done = asyncio.Event()
    gen2 = 0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal gen2
        if phase == "stop" and info["generation"] == 2:
            gen2 += 1

    async def heartbeat() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(HEARTBEAT)
            lateness.append(max(time.perf_counter() - before - HEARTBEAT, 0.0))

    gc.callbacks.append(on_gc)
    beating = asyncio.create_task(heartbeat())
    await asyncio.sleep(0)
    written = 0
    start = time.perf_counter()
    capped = False
    if rate is None:
        for token in tokens:
            await write(token)
            written += 1
            if time.perf_counter() - start > cap:
                capped = written < len(tokens)
                break
    else:
        while written < len(tokens):
            due = min(len(tokens), int((time.perf_counter() - start) * rate) + 1)
            while written < due:
                await write(tokens[written])
                written += 1
            if time.perf_counter() - start > cap:
                capped = written < len(tokens)
                break
            await asyncio.sleep(PACE_TICK)
    produced = time.perf_counter()
    await shown()
    end = time.perf_counter()
    done.set()
    await beating
    gc.callbacks.remove(on_gc)
    ms = sorted(1000 * late for late in lateness)
    return Stream(
        tokens=written,
        capped=capped,
        tok_s=written / (end - start),
        drain_ms=1000 * (end - produced),
        hb_p50=percentile(ms, 0.5),
        hb_p99=percentile(ms, 0.99),
        hb_max=ms[-1] if ms else 0.0,
        heartbeats=len(ms),
        gen2=gen2,
    )


async def run_markdown(
    history: list[str], tokens: list[str], rate: float | None, cap: float, tuned: bool
) -> tuple[Stream, bool, int, float]:
    """Design A: Textual's `Markdown` per turn in a `VerticalScroll`; the live turn through `get_stream`."""
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual.widgets import Markdown

    class MarkdownApp(App[None]):
        def compose(self) -> ComposeResult:
            yield VerticalScroll(id="chat")

    app = MarkdownApp()
    async with app.run_test(size=(120, 40)) as pilot:
        chat = app.query_one("#chat", VerticalScroll)
        began = time.perf_counter()
        await chat.mount_all([Markdown(text) for text in history])
        await pilot.pause()
        await pilot.pause()
        chat.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        history_s = time.perf_counter() - began
        tune_gc(tuned)
        live = Markdown()
        await chat.mount(live)
        chat.anchor()
        await pilot.pause()
        widgets = len(app.query("*"))
        stream = Markdown.get_stream(live)
        sent: list[str] = []

        async def write(token: str) -> None:
            sent.append(token)
            await stream.write(token)  # which yields once

        async def shown() -> None:
            await stream.stop()
            async with live.lock:  # an append the stop left running has finished
                pass
            await pilot.pause()
            await app.screen.wait_for_refresh()

        result = await drive(write, shown, tokens, rate, cap)
        ok = live.source == "".join(sent)
    return result, ok, widgets, history_s


async def run_hotloop(
    history: list[str], tokens: list[str], rate: float | None, cap: float, tuned: bool
) -> tuple[Stream, bool, int, float]:
    """hotloop: the real `Transcript`, fed the agent's events."""
    from textual.app import App, ComposeResult

    from hotloop.agent.events import AgentEvent, ResponseFinished, StepFinished, StepStarted, TurnFinished, TurnStarted
    from hotloop.agent.pricing import StepPricer
    from hotloop.providers.events import TextDelta, UsageLedger
    from hotloop.tui.render import Palette, theme_palette
    from hotloop.tui.widgets.transcript import Transcript

    class TranscriptApp(App[None]):
        CSS = "#transcript { height: 1fr; }"

        def __init__(self) -> None:
            super().__init__()
            self._palette: Palette | None = None

        def compose(self) -> ComposeResult:
            yield Transcript(time.time, self.palette, StepPricer, id="transcript")

        def palette(self) -> Palette:
            if self._palette is None:
                self._palette = theme_palette(self)
            return self._palette

    def finished_turn(turn: int, text: str) -> list[AgentEvent]:
        """A one-step turn, as the session emits it (the figures as in transcript_stream.py)."""
        usage = UsageLedger(prompt_total=1_000 * turn, cache_read=990 * turn, uncached=10 * turn, output=1_000)
        figures: dict[str, Any] = {"usage": usage, "ttft": 0.1, "decode_tps": 90.0, "model_time": 1.0}
        return [
            TurnStarted(turn=turn, prompt=f"question {turn}"),
            StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"),
            TextDelta(text),
            ResponseFinished(turn=turn, step=1, finish_reason="stop", **figures),
            StepFinished(
                turn=turn, step=1, wall=1.0, tool_count=0, tool_sum=0.0, tool_wall=0.0, finish_reason="stop", **figures
            ),
            TurnFinished(turn=turn, reason="answer", steps=1, wall=1.0),
        ]

    app = TranscriptApp()
    async with app.run_test(size=(120, 40)) as pilot:
        transcript = app.query_one(Transcript)
        await pilot.pause()  # laid out: the history renders at its real width
        began = time.perf_counter()
        for turn, text in enumerate(history, 1):
            for event in finished_turn(turn, text):
                transcript.apply(event)
        await pilot.pause()
        await pilot.pause()
        history_s = time.perf_counter() - began
        tune_gc(tuned)
        turn = len(history) + 1
        transcript.apply(TurnStarted(turn=turn, prompt="the live turn"))
        transcript.apply(StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"))
        await pilot.pause()
        widgets = len(app.query("*"))
        answer = transcript.answer
        sent: list[str] = []

        async def write(token: str) -> None:
            sent.append(token)
            transcript.apply(TextDelta(token))
            await asyncio.sleep(0)

        async def shown() -> None:
            while not answer.complete:  # the flush timer has applied every token
                await asyncio.sleep(0.001)
            await pilot.pause()
            await app.screen.wait_for_refresh()

        result = await drive(write, shown, tokens, rate, cap)
        ok = answer.complete and answer.text == "".join(sent)
    return result, ok, widgets, history_s


def child(design: str, pace: str, cap: float, tuned: bool) -> None:
    """One run: the documents come on stdin as JSON, the result goes to stdout as one JSON line."""
    documents = json.load(sys.stdin)
    history: list[str] = documents["history"]
    tokens: list[str] = documents["live"]
    rate = PACED_RATE if pace == "paced" else None
    runner = run_markdown if design == "A" else run_hotloop
    stream, ok, widgets, history_s = asyncio.run(runner(history, tokens, rate, cap, tuned))
    result = Result(
        design=design,
        pace=pace,
        offered=len(tokens),
        shown_ok=ok,
        widgets=widgets,
        history_s=history_s,
        rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **stream,
    )
    print(json.dumps(result))


# -- in the parent: every run, then the table -------------------------------------------------


def documents() -> tuple[list[str], dict[str, list[str]], int]:
    """The history's texts and each pace's live tokens, from transcript_stream.py's generator.

    Made once here and sent to every run, so the runs of design A don't import hotloop at all.
    """
    from hotloop.benchmarks.transcript_stream import HISTORY_TURNS, LIVE_TOKENS, TOKENS_PER_TURN, markdown_tokens

    turns = [markdown_tokens(TOKENS_PER_TURN, HISTORY_SEED + n) for n in range(HISTORY_TURNS)]
    live = {pace: markdown_tokens(LIVE_TOKENS, seed) for pace, seed in LIVE_SEEDS.items()}
    return ["".join(turn) for turn in turns], live, sum(map(len, turns))


def run_child(design: str, pace: str, cap: float, gc_mode: str, stdin: str) -> Result | str:
    """One (design, pace) run in a fresh interpreter: its result, or why it failed."""
    command = [sys.executable, __file__, "--child", design, "--pace", pace, "--cap", str(cap), "--gc", gc_mode]
    timeout = cap + 240  # the history and the drain come on top of the capped streaming
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if done.returncode:
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    result: Result = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def describe(run: Result) -> str:
    return (
        f"{run['tok_s']:7,.0f} tok/s{' (capped)' if run['capped'] else ''} · {run['tokens']:,} tokens · "
        f"heartbeat p50/p99/max {run['hb_p50']:.1f}/{run['hb_p99']:.1f}/{run['hb_max']:.1f} ms "
        f"({run['heartbeats']} beats) · last token shown {run['drain_ms']:.0f} ms after it was written · "
        f"gen-2 GCs {run['gen2']} · {run['widgets']:,} widgets · history built in {run['history_s']:.1f} s · "
        f"RSS {run['rss_mb']:.0f} MB · {'text ok' if run['shown_ok'] else 'TEXT MISMATCH'}"
    )


def median(values: list[float], fmt: str) -> str:
    return format(statistics.median(values), fmt) if values else "—"


def span(values: list[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}–{format(max(values), fmt)}" if values else "—"


def print_table(rows: list[list[str]]) -> None:
    """Left-aligned first column, the rest right-aligned, each as wide as its widest cell."""
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        print("  ".join(cells))


def versions() -> str:
    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"Python {platform.python_version()}, Textual {of('textual')}, Rich {of('rich')}, "
        f"textual-speedups {of('textual-speedups')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every (design, pace) run (default 3)")
    parser.add_argument(
        "--cap", type=float, default=60.0, help="stop producing after this many seconds of streaming (default 60)"
    )
    parser.add_argument("--designs", nargs="+", choices=list(DESIGNS), default=list(DESIGNS))
    parser.add_argument(
        "--gc",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned: hotloop's GC settings after the history (default); default: Python's",
    )
    parser.add_argument("--child", choices=list(DESIGNS), help=argparse.SUPPRESS)
    parser.add_argument("--pace", choices=PACES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pace, args.cap, args.gc == "tuned")
        return

    began = time.perf_counter()
    print(f"command: python {shlex.join(sys.argv)}", flush=True)
    history, live, history_tokens = documents()
    stdin = {pace: json.dumps({"history": history, "live": tokens}) for pace, tokens in live.items()}
    results: dict[tuple[str, str], list[Result]] = {(d, p): [] for d in args.designs for p in PACES}
    rss: dict[str, list[float]] = {design: [] for design in args.designs}
    failures: list[str] = []
    for round_ in range(1, args.rounds + 1):
        # Alternate the order, so a noisy stretch of the machine doesn't always hit the same design.
        order = args.designs if round_ % 2 else list(reversed(args.designs))
        for design in order:
            peak = 0.0
            for pace in PACES:
                outcome = run_child(design, pace, args.cap, args.gc, stdin[pace])
                if isinstance(outcome, str):
                    failures.append(f"round {round_} {design} {pace}: {outcome}")
                    print(f"round {round_} {design:>7} {pace:>11}: FAILED {outcome}", flush=True)
                    continue
                results[design, pace].append(outcome)
                peak = max(peak, outcome["rss_mb"])
                print(f"round {round_} {design:>7} {pace:>11}: {describe(outcome)}", flush=True)
            if peak:
                rss[design].append(peak)

    def column(design: str, pace: str, key: Literal["tok_s", "hb_p99", "hb_max"]) -> list[float]:
        return [run[key] for run in results[design, pace]]

    print()
    print(
        f"transcript designs, headless 120×40: {history_tokens:,} tokens of history (20 turns), then "
        f"{len(live['paced']):,} live tokens paced at {PACED_RATE:,} tok/s and unthrottled; "
        f"{'GC tuned as hotloop' if args.gc == 'tuned' else 'default GC'}; each run a fresh process; {versions()}"
    )
    header = ["design", "paced tok/s", "paced hb p99 / max", "unthr. tok/s", "unthr. hb p99 / max", "peak RSS MB"]
    for title, show in (
        (f"median of {args.rounds} rounds (heartbeat lateness in ms)", median),
        ("range over the rounds (min–max)", span),
    ):
        rows = [header]
        for design in args.designs:
            row = [DESIGNS[design]]
            for pace in PACES:
                row.append(show(column(design, pace, "tok_s"), ",.0f"))
                p99, worst = column(design, pace, "hb_p99"), column(design, pace, "hb_max")
                row.append(f"{show(p99, '.1f')} / {show(worst, '.1f')}")
            row.append(show(rss[design], ".0f"))
            rows.append(row)
        print()
        print(title)
        print_table(rows)
    print()
    for design in args.designs:
        for pace in PACES:
            runs = results[design, pace]
            capped = [run for run in runs if run["capped"]]
            if capped:
                streamed = ", ".join(f"{run['tokens']:,}" for run in capped)
                print(
                    f"note: {design} {pace}: {len(capped)} of {len(runs)} runs stopped after {args.cap:.0f} s of "
                    f"streaming; their tok/s is over the tokens streamed ({streamed} of {runs[0]['offered']:,})"
                )
            if any(not run["shown_ok"] for run in runs):
                print(f"note: {design} {pace}: the widget's text differs from the tokens streamed")
    for failure in failures:
        print(f"note: FAILED {failure}")
    print(
        "tok/s: first token written → last token in the widget and the screen refreshed. hb: lateness of a 10 ms "
        "asyncio.sleep in the same event loop meanwhile. Peak RSS: the larger of a round's two runs (ru_maxrss)."
    )
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
