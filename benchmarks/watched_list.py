"""What the watch app's conversation list costs with a busy fleet behind one `hotloop watch`.

The real `WatchApp` runs headless at 160×45 on a real `Watch` (its server on a loopback port, no
traffic) and gets N conversations' events through the watch's own `sink(conversation_id, event)`,
the producer yielding to the event loop after each event. A quarter of them are title requests
listed under their conversation, an eighth side requests of those, and a quarter arrive before
the conversation they belong to, which adopts them (its `SideOf` moves them under it, as opencode's
title requests are). Round one: each conversation's first turn; round two: another turn of each.

Measured per run: the time to absorb the feed (first event to the app idle with every row drawn),
the part of it spent in the list's own code (its updates and drawing its lines), and how late a
10 ms `asyncio.sleep` in the same event loop wakes meanwhile (heartbeat p99, max). Each N runs the
list as it is and the list of commit b5f460a (which rebuilt every row on each update; loaded with
`git show` into a module of its own), each in a fresh interpreter, and checks that both list the
same rows in the same order. The baseline grows as N², so it runs up to `--baseline-up-to` (300).

Then the cost of one update once N conversations are listed (`--update-sizes`): 20 more turns, each
of a conversation not on screen, spread over the list; per event, the time in the screen's own code
(the sink's call: transcript, totals, list row, the top line), and per turn, its five events to the
frame that draws them (median). Each N runs the screen as it is and the screen of commit a8ae636,
which summed every conversation's totals for the top line at each update.

    python benchmarks/watched_list.py [--sizes 50 300 1200] [--baseline-up-to 300] [--update-sizes 10 100 1200]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.geometry import Region
from textual.strip import Strip

from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    SideOf,
    StepFinished,
    StepStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import SessionTotals
from hotloop.providers.events import UsageLedger
from hotloop.tui import watch_app
from hotloop.tui.screens import watch as watch_screen
from hotloop.tui.watch_app import WatchApp
from hotloop.tui.widgets.watched_list import WatchedList
from hotloop.watch import ConversationInfo, Watch, upstream_at

BASELINE = "b5f460a"
BASELINE_SCREEN = "a8ae636"
UPDATES = 20  # turns measured once the list is full
HEARTBEAT = 0.010  # seconds
ROOT = Path(__file__).resolve().parent.parent


def from_commit(folder: Path, commit: str, path: str) -> Any:
    """A module as a commit had it, imported from its source as a module of its own."""
    source = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
    name = f"{Path(path).stem}_baseline"
    (folder / f"{name}.py").write_bytes(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baseline_list(folder: Path) -> type[WatchedList]:
    """The list as commit b5f460a had it."""
    widget: type[WatchedList] = from_commit(folder, BASELINE, "tui/widgets/watched_list.py").WatchedList
    return widget


def turn(number: int) -> list[AgentEvent]:
    """A turn of one request: the events the watch gives a conversation for it."""
    usage = UsageLedger(prompt_total=2_000 * number, cache_read=1_900 * number, uncached=100 * number, output=200)
    figures = {"usage": usage, "ttft": 0.2, "decode_tps": 80.0, "model_time": 2.5, "finish_reason": "stop"}
    return [
        TurnStarted(turn=number, prompt=f"question {number}"),
        StepStarted(turn=number, step=1, provider="sim", model="sim-balanced"),
        ResponseFinished(turn=number, step=1, **figures),  # type: ignore[arg-type]
        StepFinished(turn=number, step=1, wall=2.6, tool_count=0, tool_sum=0.0, tool_wall=0.0, **figures),  # type: ignore[arg-type]
        TurnFinished(turn=number, reason="answer", steps=1, wall=2.6),
    ]


def timed(widget: type[WatchedList]) -> type[WatchedList]:
    """The list, adding up the time spent in its own code: its updates and drawing its lines."""

    class Timed(widget):  # type: ignore[valid-type, misc]
        spent = 0.0

        def update(self, conversation: ConversationInfo, totals: SessionTotals) -> None:
            started = time.perf_counter()
            super().update(conversation, totals)
            Timed.spent += time.perf_counter() - started

        def render_lines(self, crop: Region) -> list[Strip]:
            started = time.perf_counter()
            lines = super().render_lines(crop)
            Timed.spent += time.perf_counter() - started
            return lines

    return Timed


def watching(folder: str) -> Watch:
    return Watch(
        upstream_at("http://127.0.0.1:9", "sim"), lambda _c, _e: None, folder=Path(folder), workspace=Path(folder)
    )


async def feed(watch: Watch, size: int) -> None:
    """N conversations' two rounds of turns through the watch's sink, yielding after every event."""
    template = ConversationInfo(
        "",
        "claude-cli/2.1.332",
        "watch:claude-cli/2.1.332",
        "",
        "",
        "sim",
        "sim-balanced",
        "http://127.0.0.1:9",
        None,
        "",
    )
    keys = [f"c{number:05d}" for number in range(size)]

    async def send(key: str, event: AgentEvent) -> None:
        watch.sink(key, event)
        await asyncio.sleep(0)

    for number, key in enumerate(keys):
        parent = ""
        if number % 4 == 1:
            parent = keys[number - 1]  # a title request of the conversation before it
        elif number % 8 == 2:
            parent = keys[number - 1]  # a side request of that title request
        title = f"conversation {number}: fix the failing test in module {number % 37}"
        watch.conversations[key] = replace(template, id=key, parent=parent, title=title)
        if number % 4 == 0 and number >= 4 and keys[number - 1] in watch.conversations:
            adopted = keys[number - 1]  # began first, as a conversation of its own: this one adopts it
            watch.conversations[adopted].parent = key
            await send(adopted, SideOf(parent=key))
        for event in turn(1):
            await send(key, event)
    for key in keys:
        for event in turn(2):
            await send(key, event)


async def measure(size: int, baseline: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        listing = timed(baseline_list(Path(folder)) if baseline else WatchedList)
        watch_screen.WatchedList = listing  # type: ignore[misc]
        watch = watching(folder)
        app = WatchApp(watch, "127.0.0.1", 0)
        lateness: list[float] = []
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()
            done = asyncio.Event()

            async def heartbeat() -> None:
                while not done.is_set():
                    before = time.perf_counter()
                    await asyncio.sleep(HEARTBEAT)
                    lateness.append(time.perf_counter() - before - HEARTBEAT)

            beating = asyncio.create_task(heartbeat())
            started = time.perf_counter()
            await feed(watch, size)
            await pilot.pause()
            listed = app.screen.query_one(watch_screen.WatchedList)
            rows = [listed.get_option_at_index(n).id for n in range(listed.option_count)]
            seconds = time.perf_counter() - started
            spent = listing.spent  # type: ignore[attr-defined]
            done.set()
            await beating
    lateness.sort()
    return {
        "seconds": seconds,
        "list_s": spent,
        "p99_ms": 1000 * lateness[int(0.99 * (len(lateness) - 1))],
        "max_ms": 1000 * lateness[-1],
        "rows": rows,
    }


async def measure_updates(size: int, baseline: bool) -> dict[str, object]:
    """N conversations listed, then `UPDATES` turns of conversations not on screen: each event's time in the sink's
    call, and each turn's to the frame that draws it."""
    with tempfile.TemporaryDirectory() as folder:
        if baseline:
            watch_app.WatchScreen = from_commit(Path(folder), BASELINE_SCREEN, "tui/screens/watch.py").WatchScreen  # type: ignore[misc]
        watch = watching(folder)
        app = WatchApp(watch, "127.0.0.1", 0)
        in_sink: list[float] = []
        drawn: list[float] = []
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()
            await feed(watch, size)
            await pilot.pause()
            keys = list(watch.conversations)
            for number in range(UPDATES):
                key = keys[(size // 2 + 1 + number * 7_919) % size]  # spread over the list, rarely the first
                started = time.perf_counter()
                for event in turn(3 + number):
                    before = time.perf_counter()
                    watch.sink(key, event)
                    in_sink.append(time.perf_counter() - before)
                    await asyncio.sleep(0)
                frame = asyncio.Event()
                app.screen.call_after_refresh(frame.set)
                await asyncio.wait_for(frame.wait(), 30)
                drawn.append(time.perf_counter() - started)
    drawn.sort()
    return {"sink_us": 1e6 * sum(in_sink) / len(in_sink), "turn_ms": 1000 * drawn[len(drawn) // 2]}


def run(widget: str, size: int, mode: str = "--child") -> dict[str, Any]:
    """One measurement, in an interpreter of its own."""
    child = subprocess.run(
        [sys.executable, __file__, mode, widget, str(size)], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(child.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 300, 1_200])
    parser.add_argument(
        "--baseline-up-to", type=int, default=300, help="the baseline's largest N (it grows as N²: 1,200 takes an hour)"
    )
    parser.add_argument("--update-sizes", type=int, nargs="*", default=[10, 100, 1_200])
    parser.add_argument("--child", nargs=2, metavar=("WIDGET", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--child-updates", nargs=2, metavar=("SCREEN", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        widget, size = args.child
        print(json.dumps(asyncio.run(measure(int(size), widget == "baseline"))))
        return
    if args.child_updates:
        screen, size = args.child_updates
        print(json.dumps(asyncio.run(measure_updates(int(size), screen == "baseline"))))
        return
    if args.sizes:
        print(f"{'conversations':>13}  {'list':<18} {'absorb':>9} {'in the list':>12} {'heartbeat p99':>14} {'max':>9}")
    for size in args.sizes:
        widgets = ("baseline", "now") if size <= args.baseline_up_to else ("now",)
        results = {widget: run(widget, size) for widget in widgets}
        for widget, result in results.items():
            name = f"{BASELINE} (rebuild)" if widget == "baseline" else "now (row by row)"
            print(
                f"{size:>13,}  {name:<18} {result['seconds']:>8.2f}s {result['list_s']:>11.2f}s"
                f" {result['p99_ms']:>11.1f} ms {result['max_ms']:>6.0f} ms",
                flush=True,
            )
        if len(results) == 2:
            same = results["baseline"]["rows"] == results["now"]["rows"]
            print(f"{'':>13}  same rows in the same order: {'yes' if same else 'NO'}")
        else:
            print(f"{'':>13}  {BASELINE}: not run past --baseline-up-to {args.baseline_up_to}")
    if args.update_sizes:
        print(f"\none update, N listed  {'screen':<27} {'per event in the sink':>22} {'a turn to its frame':>20}")
    for size in args.update_sizes:
        for screen in ("baseline", "now"):
            result = run(screen, size, "--child-updates")
            name = f"{BASELINE_SCREEN} (sums every total)" if screen == "baseline" else "now (running totals)"
            print(f"{size:>20,}  {name:<27} {result['sink_us']:>19.0f} us {result['turn_ms']:>17.1f} ms", flush=True)


if __name__ == "__main__":
    main()
