"""Sessions at scale: listing 500 sessions, and opening and replaying one of 1,000 turns.

The script writes, through the real session log, 499 sessions of 3 to 12 turns and one of
1,000 turns, each turn a step with 3 parallel tool calls and a step with the answer, as a
streamed session logs them. Then it measures, each in a fresh process:

- `hotloop sessions list` over the 500 sessions (wall time, process start included);
- opening the 1,000-turn session in the app's sessions sidebar, until the session view is
  painted, and the process's peak RSS;
- `hotloop replay --speed 0` of it, headless to /dev/null, and in the app until drawn.

    python benchmarks/session_scale.py [--runs N] [--quick]

`--quick` (a check that it runs) writes 20 sessions, the big one of 50 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hotloop.agent.events import (
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.providers.events import (
    Finished,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.sessions.log import SessionLog

BIG_TURNS = 1_000
SESSIONS = 500
WORDS = [
    "the",
    "cache",
    "keeps",
    "every",
    "step",
    "warm",
    "so",
    "a",
    "turn",
    "pays",
    "only",
    "for",
    "what",
    "it",
    "adds",
    "to",
    "the",
    "prompt",
]


def write_turn(log: SessionLog, turn: int, clock: list[float], rng: random.Random, context: int) -> int:
    """Log one turn as a live session logs it; returns the conversation's prompt size after it."""

    def at(seconds: float) -> float:
        clock[0] += seconds
        return clock[0]

    log.write(
        TurnStarted(
            turn=turn,
            prompt=f"read the module {turn} and its tests, then grep for TODO",
            context="\n\n<context>\ndate: 2026-11-22\nworkspace: /home/user/project\n</context>",
            ts=at(5.0),
        )
    )
    log.write(StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced", ts=at(0.01)))
    for _ in range(40):
        log.write(TextDelta(f" {rng.choice(WORDS)}", ts=at(0.01)))
    calls = [(f"call_{turn}_{n}", "read_file", f'{{"path": "src/module_{turn}_{n}.py"}}') for n in range(3)]
    for index, (call_id, name, arguments) in enumerate(calls):
        log.write(ToolCallStarted(index, call_id, name, ts=at(0.01)))
        for start in range(0, len(arguments), 8):
            log.write(ToolCallArgsDelta(index, call_id, arguments[start : start + 8], ts=at(0.01)))
        log.write(ToolCallReady(index, call_id, name, arguments, ts=at(0.0)))
    context += 300
    usage = UsageLedger(prompt_total=context, cache_read=context - 200, uncached=200, output=120)
    log.write(Usage(ledger=usage, ts=at(0.0)))
    log.write(Finished(reason="tool_calls", ts=at(0.0)))
    log.write(
        ResponseFinished(
            turn=turn,
            step=1,
            usage=usage,
            ttft=0.12,
            decode_tps=95.0,
            model_time=1.3,
            finish_reason="tool_calls",
            ts=at(0.0),
        )
    )
    for call_id, name, arguments in calls:
        log.write(ToolStarted(call_id=call_id, name=name, arguments=arguments, ts=at(0.0)))
    result = "\n".join(f"    line {n}: {' '.join(rng.choices(WORDS, k=6))}" for n in range(30))
    for call_id, name, _ in calls:
        log.write(ToolOutput(call_id=call_id, text="reading", ts=at(0.01)))
        log.write(ToolFinished(call_id=call_id, name=name, status="ok", duration=0.2, result=result, ts=at(0.1)))
    log.write(
        StepFinished(
            turn=turn,
            step=1,
            usage=usage,
            ttft=0.12,
            decode_tps=95.0,
            model_time=1.3,
            wall=1.6,
            tool_count=3,
            tool_sum=0.6,
            tool_wall=0.3,
            finish_reason="tool_calls",
            ts=at(0.0),
        )
    )
    log.write(StepStarted(turn=turn, step=2, provider="sim", model="sim-balanced", ts=at(0.01)))
    log.write(TextDelta("## Findings\n\n", ts=at(0.1)))
    for n in range(200):
        log.write(
            TextDelta(
                f"{rng.choice(WORDS)}{'.' if n % 15 == 14 else ''}{chr(10) * 2 if n % 60 == 59 else ' '}", ts=at(0.01)
            )
        )
    context += 3 * 400
    usage = UsageLedger(prompt_total=context, cache_read=context - 1200, uncached=1200, output=210)
    for event in (Usage(ledger=usage, ts=at(0.0)), Finished(reason="stop", ts=at(0.0))):
        log.write(event)
    log.write(
        ResponseFinished(
            turn=turn, step=2, usage=usage, ttft=0.14, decode_tps=96.0, model_time=2.3, finish_reason="stop", ts=at(0.0)
        )
    )
    log.write(
        StepFinished(
            turn=turn,
            step=2,
            usage=usage,
            ttft=0.14,
            decode_tps=96.0,
            model_time=2.3,
            wall=2.3,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="stop",
            ts=at(0.0),
        )
    )
    log.write(TurnFinished(turn=turn, reason="answer", steps=2, wall=4.0, ts=at(0.0)))
    return context + 210


def write_session(folder: Path, turns: int, seed: int) -> SessionLog:
    rng = random.Random(seed)
    clock = [1_800_000_000.0 + seed * 10_000]
    with SessionLog.create(folder, provider="sim", model="sim-balanced", workspace=Path("/home/user/project")) as log:
        context = 600
        for turn in range(1, turns + 1):
            context = write_turn(log, turn, clock, rng, context)
    return log


def generate(folder: Path, sessions: int, big_turns: int) -> tuple[str, float]:
    started = time.perf_counter()
    big = write_session(folder, big_turns, 0)
    rng = random.Random(1)
    for seed in range(1, sessions):
        write_session(folder, rng.randint(3, 12), seed)
    # Session files are named by their start time to the second: make the big one the newest.
    os.utime(big.path)
    return big.id, time.perf_counter() - started


def environment_for(data: Path, **more: str) -> dict[str, str]:
    """The data folder; and Python's bytecode cache on, as an installed hotloop has it."""
    environment = {**os.environ, "HOTLOOP_DATA_DIR": str(data), "HOTLOOP_CONFIG": str(data / "none.toml"), **more}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


def timed_command(argv: list[str], data: Path, runs: int) -> list[float]:
    environment = environment_for(data)
    subprocess.run(
        [sys.executable, "-m", "hotloop", "--version"], env=environment, check=True, stdout=subprocess.DEVNULL
    )
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "hotloop", *argv],
            env=environment,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - started)
    return times


async def open_in_app(session_id: str) -> tuple[float, float]:
    """Seconds from picking the session in the app's sidebar until its view's first frame is drawn,
    and until every item of it has been rendered in the background."""
    from hotloop import paths
    from hotloop.config import load_config
    from hotloop.sessions.store import find_session
    from hotloop.tui.app import HotloopApp
    from hotloop.tui.screens.session_view import SessionView
    from hotloop.tui.widgets.history_view import HistoryView
    from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar

    path = find_session(paths.sessions_dir(), session_id)
    app = HotloopApp(load_config())
    drawn: list[float] = []
    render_line = HistoryView.render_line

    def watched(view: HistoryView, y: int):  # type: ignore[no-untyped-def]
        if isinstance(view.screen, SessionView) and not drawn:
            drawn.append(time.perf_counter())
        return render_line(view, y)

    HistoryView.render_line = watched  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        while app.agent is None:
            await asyncio.sleep(0.05)
        await app.workers.wait_for_complete()
        await pilot.pause()
        started = time.perf_counter()
        app.screen.post_message(SessionsSidebar.Picked(path, "open"))  # the main screen opens what its sidebar picks
        while not drawn:
            await asyncio.sleep(0.005)
        await pilot.pause()  # the background rendering is done when the app is idle
        return drawn[0] - started, time.perf_counter() - started


async def replay_in_app(session_id: str) -> tuple[float, float]:
    """Seconds for `hotloop replay --speed 0`'s app to read the session and draw all of it."""
    from hotloop import paths
    from hotloop.sessions.store import find_session, read_session
    from hotloop.tui.replay_app import ReplayApp
    from hotloop.tui.screens.replay import ReplayScreen

    started = time.perf_counter()
    app = ReplayApp(read_session(find_session(paths.sessions_dir(), session_id)), speed=0)
    async with app.run_test(size=(120, 40)) as pilot:
        while not (isinstance(app.screen, ReplayScreen) and app.screen.replay.done):
            await asyncio.sleep(0.005)
        await pilot.pause()  # drawn
        took = time.perf_counter() - started
        return took, took


def measure_in_app(how: str) -> None:
    """Run in a fresh process: one figure, then the peak RSS."""
    measure = open_in_app if how == "open" else replay_in_app
    first, settled = asyncio.run(measure(os.environ["SESSION_ID"]))
    print(f"{first:.4f} {settled:.4f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def in_fresh_process(how: str, data: Path, session_id: str, runs: int) -> tuple[list[float], list[float], list[float]]:
    environment = environment_for(data, SESSION_ID=session_id)
    first, settled, rss = [], [], []
    for _ in range(runs):
        output = subprocess.run(
            [sys.executable, __file__, "--measure", how], env=environment, check=True, capture_output=True, text=True
        ).stdout.split()
        first.append(float(output[0]))
        settled.append(float(output[1]))
        rss.append(float(output[2]))
    return first, settled, rss


def spread(values: list[float], unit: float = 1000, suffix: str = "ms") -> str:
    return f"median {statistics.median(values) * unit:,.0f} {suffix} (runs {', '.join(f'{v * unit:,.0f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="a check that it runs: 20 sessions, the big one of 50 turns"
    )
    parser.add_argument("--measure", choices=("open", "replay"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sessions, big_turns = (20, 50) if args.quick else (SESSIONS, BIG_TURNS)
    if args.measure:
        measure_in_app(args.measure)
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        folder = data / "sessions"
        session_id, took = generate(folder, sessions, big_turns)
        big = next(folder.glob(f"*_{session_id}.jsonl"))
        print(
            f"session scale: {sessions} sessions written in {took:.1f} s; the big one has {big_turns:,} turns, "
            f"{sum(1 for _ in big.open('rb')) - 1:,} events, {big.stat().st_size / 1e6:.1f} MB"
        )
        listing = timed_command(["sessions", "list"], data, args.runs)
        print(f"  hotloop sessions list, {sessions} sessions: {spread(listing)}  target ≤ 300 ms")
        opened, settled, rss = in_fresh_process("open", data, session_id, args.runs)
        print(
            f"  open the {big_turns:,}-turn session from the app's sidebar, to its first frame: {spread(opened)}"
            "  target ≤ 1 s"
        )
        print(f"  … until all of its items are rendered, in the background: {spread(settled)}")
        print(
            f"  peak RSS of that process: median {statistics.median(rss):.0f} MB (runs {', '.join(f'{r:.0f}' for r in rss)})"
            "  target ≤ 250 MB"
        )
        headless = timed_command(["replay", "--speed", "0", "--headless", session_id], data, args.runs)
        print(f"  hotloop replay --speed 0 --headless: {spread(headless)}  target ≤ 3 s")
        drawn, _, _ = in_fresh_process("replay", data, session_id, args.runs)
        print(f"  replay at --speed 0 in the app, to drawn: {spread(drawn)}  target ≤ 3 s")


if __name__ == "__main__":
    main()
