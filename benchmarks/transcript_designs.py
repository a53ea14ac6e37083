"""Why the transcript is a custom line-API widget: Textual's Markdown widgets against hotloop's real `Transcript`.

docs/architecture.md calls hotloop's transcript "design F" of a feasibility study
(shared/notes/transcript_feasibility.md): everything finished is pre-rendered into one
line-API widget (`HistoryView`), and the live answer streams into `StreamingText`, which
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
`--rounds` rounds (default 3) and, below it, each figure's range over the rounds.

    python benchmarks/transcript_designs.py [--rounds 3] [--cap 60]
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


def tune_gc() -> None:
    """What hotloop does once the session has started: the heap so far is long-lived."""
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
    """Stream `tokens` through `write`, paced at `rate` (None: unthrottled); time it and the heartbeat."""
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
            await asyncio.sleep(0)
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
    history: list[str], tokens: list[str], rate: float | None, cap: float
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
        tune_gc()
        live = Markdown()
        await chat.mount(live)
        chat.anchor()
        await pilot.pause()
        widgets = len(app.query("*"))
        stream = Markdown.get_stream(live)
        sent: list[str] = []

        async def write(token: str) -> None:
            sent.append(token)
            await stream.write(token)

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
    history: list[str], tokens: list[str], rate: float | None, cap: float
) -> tuple[Stream, bool, int, float]:
    """hotloop: the real `Transcript`, fed the agent's events."""
    from textual.app import App, ComposeResult

    from hotloop.agent.events import AgentEvent, ResponseFinished, StepFinished, StepStarted, TurnFinished, TurnStarted
    from hotloop.providers.events import TextDelta, UsageLedger
    from hotloop.tui.render import Palette, theme_palette
    from hotloop.tui.widgets.transcript import Transcript

    class TranscriptApp(App[None]):
        CSS = "#transcript { height: 1fr; }"

        def __init__(self) -> None:
            super().__init__()
            self._palette: Palette | None = None

        def compose(self) -> ComposeResult:
            yield Transcript(time.time, self.palette, id="transcript")

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
        tune_gc()
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

        async def shown() -> None:
            while answer.text != answer.source:  # the flush timer has applied every token
                await asyncio.sleep(0.001)
            await pilot.pause()
            await app.screen.wait_for_refresh()

        result = await drive(write, shown, tokens, rate, cap)
        ok = answer.source == "".join(sent)
    return result, ok, widgets, history_s


def child(design: str, pace: str, cap: float) -> None:
    """One run: the documents come on stdin as JSON, the result goes to stdout as one JSON line."""
    documents = json.load(sys.stdin)
    history: list[str] = documents["history"]
    tokens: list[str] = documents["live"]
    rate = PACED_RATE if pace == "paced" else None
    runner = run_markdown if design == "A" else run_hotloop
    stream, ok, widgets, history_s = asyncio.run(runner(history, tokens, rate, cap))
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
    """The history's texts and each pace's live tokens, from transcript_stream.py's generator."""
    from hotloop.benchmarks.transcript_stream import HISTORY_TURNS, LIVE_TOKENS, TOKENS_PER_TURN, markdown_tokens

    turns = [markdown_tokens(TOKENS_PER_TURN, HISTORY_SEED + n) for n in range(HISTORY_TURNS)]
    live = {pace: markdown_tokens(LIVE_TOKENS, seed) for pace, seed in LIVE_SEEDS.items()}
    return ["".join(turn) for turn in turns], live, sum(map(len, turns))


def run_child(design: str, pace: str, cap: float, stdin: str) -> Result | str:
    command = [sys.executable, __file__, "--child", design, "--pace", pace, "--cap", str(cap)]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=cap + 240)
    except subprocess.TimeoutExpired:
        return f"timed out after {cap + 240:.0f} s"
    if done.returncode:
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    result: Result = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def spread(values: list[float], fmt: str) -> str:
    return f"{min(values):{fmt}}–{max(values):{fmt}}" if values else "—"


def middle(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}}" if values else "—"


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
    parser.add_argument("--child", choices=list(DESIGNS), help=argparse.SUPPRESS)
    parser.add_argument("--pace", choices=PACES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pace, args.cap)
        return

    began = time.perf_counter()
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
                outcome = run_child(design, pace, args.cap, stdin[pace])
                if isinstance(outcome, str):
                    failures.append(f"round {round_} {design} {pace}: {outcome}")
                    print(f"round {round_} {design:>7} {pace:>11}: FAILED {outcome}", file=sys.stderr, flush=True)
                    continue
                results[design, pace].append(outcome)
                peak = max(peak, outcome["rss_mb"])
                print(
                    f"round {round_} {design:>7} {pace:>11}: {outcome['tok_s']:7,.0f} tok/s"
                    f"{' (capped)' if outcome['capped'] else ''} · {outcome['tokens']:,} tokens · heartbeat p50/p99/max "
                    f"{outcome['hb_p50']:.1f}/{outcome['hb_p99']:.1f}/{outcome['hb_max']:.1f} ms "
                    f"({outcome['heartbeats']} beats) · shown {outcome['drain_ms']:.0f} ms after the last token · "
                    f"gen-2 GCs {outcome['gen2']} · {outcome['widgets']:,} widgets · history {outcome['history_s']:.1f} s · "
                    f"RSS {outcome['rss_mb']:.0f} MB · {'ok' if outcome['shown_ok'] else 'TEXT MISMATCH'}",
                    file=sys.stderr,
                    flush=True,
                )
            if peak:
                rss[design].append(peak)

    def column(design: str, pace: str, key: Literal["tok_s", "hb_p99", "hb_max"]) -> list[float]:
        return [run[key] for run in results[design, pace]]

    header = (
        f"{'design':<42} {'paced tok/s':>11} {'paced hb p99 / max':>19} "
        f"{'unthr. tok/s':>12} {'unthr. hb p99 / max':>19} {'peak RSS MB':>11}"
    )
    print()
    print(f"command: python {shlex.join(sys.argv)}")
    print(
        f"transcript designs, headless 120×40: {history_tokens:,} tokens of history (20 turns), then "
        f"{len(live['paced']):,} live tokens paced at {PACED_RATE:,} tok/s and unthrottled; GC tuned as hotloop; "
        f"each run a fresh process; {versions()}"
    )
    for title, show in (
        (f"median of {args.rounds} rounds (heartbeat lateness in ms)", middle),
        ("range over the rounds (min–max)", spread),
    ):
        print()
        print(title)
        print(header)
        for design in args.designs:
            cells = []
            for pace in PACES:
                cells.append(f"{show(column(design, pace, 'tok_s'), ',.0f'):>{11 if pace == 'paced' else 12}}")
                hb = f"{show(column(design, pace, 'hb_p99'), '.1f')} / {show(column(design, pace, 'hb_max'), '.1f')}"
                cells.append(f"{hb:>19}")
            print(f"{DESIGNS[design]:<42} {' '.join(cells)} {show(rss[design], '.0f'):>11}")
    notes = []
    for design in args.designs:
        for pace in PACES:
            runs = results[design, pace]
            capped = [run for run in runs if run["capped"]]
            if capped:
                streamed = ", ".join(f"{run['tokens']:,}" for run in capped)
                notes.append(
                    f"{design} {pace}: {len(capped)} of {len(runs)} runs stopped after {args.cap:.0f} s of streaming; "
                    f"tok/s is over the tokens streamed ({streamed} of {runs[0]['offered']:,})"
                )
            if any(not run["shown_ok"] for run in runs):
                notes.append(f"{design} {pace}: the widget's text differs from the tokens streamed")
    print()
    for note in notes + failures:
        print(f"note: {note}")
    print(
        "tok/s: first token written → last token in the widget, screen refreshed. Heartbeat: lateness of a 10 ms "
        "asyncio.sleep in the same loop while streaming. Peak RSS: the larger of the design's two runs (ru_maxrss)."
    )
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
