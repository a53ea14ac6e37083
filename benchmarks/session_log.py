"""What the session log costs the thread that writes it: the old synchronous log against the writer thread.

One run writes the same session of 2,000 turns (each a prompt, a step of 64 streamed words priced by the
price table, the turn's end; the watch logs a Claude Code turn so) twice, interleaved in rounds, in the
data folder on the real disk (`HOTLOOP_DATA_DIR` or the user's; it says which file system that is):

- `sync`: a few lines doing what the log did before: mask, encode and `os.write` on the caller at each
  boundary, every step priced afresh, and at every turn end the summary (every prompt so far) encoded
  and written with `os.replace`;
- `writer`: `SessionLog` as it is: the caller keeps the events and hands them over; the writer thread masks,
  encodes, prices and writes them, and saves the summary at most once a second.

It prints, for each, the caller's time per event and per turn (p50, p99, max) and in all, and the
time to write and close the whole session.

    python benchmarks/session_log.py [--turns N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from hotloop import paths
from hotloop.agent import pricing
from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, TurnFinished, TurnStarted, encode
from hotloop.providers.events import TextDelta, UsageLedger
from hotloop.sessions.caps import LogCaps
from hotloop.sessions.log import FLUSH_INTERVAL, SessionLog
from hotloop.sessions.masking import Masker
from hotloop.sessions.summary import Summary, summary_path

PROVIDER, MODEL, URL = "anthropic", "claude-sonnet-4-5", "https://api.anthropic.com"
SECRETS = ["sk-ant-api03-benchmark0123456789abcdefghijklmnop"]
_FLUSH_ON = (TurnStarted, StepFinished, TurnFinished)


class SyncLog:
    """The log as it was: everything on the caller's thread."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "sync.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._masker, self._caps, self._buffer = Masker(SECRETS), LogCaps(), list[bytes]()
        self._summary = Summary(costed=True)
        self._summary.learn(PROVIDER, URL)
        self._last = time.monotonic()

    def write(self, event: AgentEvent) -> None:
        kept = self._caps.capped(event)
        for masked in self._masker.events(kept) if kept is not None else ():
            self._buffer.append(self._masker.masked(encode(masked)) + b"\n")
        self._summary.observe(event)
        if isinstance(event, _FLUSH_ON) or time.monotonic() - self._last >= FLUSH_INTERVAL:
            os.write(self._fd, b"".join(self._buffer))
            self._buffer.clear()
            self._last = time.monotonic()
        if isinstance(event, TurnFinished):
            self._summary.size = os.fstat(self._fd).st_size
            target = summary_path(self.path)
            temporary = target.with_name(f".{target.name}.{os.getpid()}")
            with temporary.open("wb") as file:
                file.write(self._masker.masked(msgspec.json.encode(self._summary)))
            os.replace(temporary, target)

    def close(self) -> None:
        os.close(self._fd)


def session(turns: int) -> list[list[AgentEvent]]:
    """The events of each turn, as the watch logs a Claude Code turn."""
    made: list[list[AgentEvent]] = []
    context = 8_000
    for turn in range(1, turns + 1):
        context += 400
        usage = UsageLedger(prompt_total=context, cache_read=context - 400, cache_write=400, uncached=0, output=64)
        events: list[AgentEvent] = [
            TurnStarted(turn=turn, prompt=f"look at module {turn} and tell me what its tests miss, briefly"),
            StepStarted(turn=turn, step=1, provider=PROVIDER, model=MODEL),
        ]
        events += [TextDelta(f"word{n} ") for n in range(64)]
        events += [
            StepFinished(turn, 1, usage, 0.4, 80.0, 1.2, 1.3, 0, 0.0, 0.0, "stop"),
            TurnFinished(turn=turn, reason="answer", steps=1, wall=1.3),
        ]
        made.append(events)
    return made


def measure(
    log: SyncLog | SessionLog, turns: list[list[AgentEvent]], fresh_prices: bool, gap: float
) -> dict[str, list[float]]:
    """The caller's seconds for each event and each turn, a turn `gap` seconds after the last; and the whole."""
    per_event: list[float] = []
    per_turn: list[float] = []
    clock = time.perf_counter
    began = clock()
    for events in turns:
        spent = 0.0
        for event in events:
            if fresh_prices and isinstance(event, StepFinished):
                pricing._priced_once.cache_clear()  # the old code priced every step afresh (untimed)
            start = clock()
            log.write(event)
            took = clock() - start
            per_event.append(took)
            spent += took
        per_turn.append(spent)
        time.sleep(gap)  # the agent's next request: a live session's thread waits on the network between turns
    log.close()
    return {"event": per_event, "turn": per_turn, "whole": [clock() - began]}


def file_system(folder: Path) -> str:
    """The type of the file system `folder` is on (tmpfs would hide what a disk costs)."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    best = max((m for m in mounts if str(folder).startswith(m[0])), key=lambda m: len(m[0]), default=["?", "?"])
    return f"{best[1]} at {best[0]}"


def quantiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)

    def at(share: float) -> float:
        return ordered[min(int(share * len(ordered)), len(ordered) - 1)] * 1e3

    return f"{at(0.5):8.3f} {at(0.99):8.3f} {ordered[-1] * 1e3:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gap-ms", type=float, default=5.0, help="idle time between two turns (default 5 ms)")
    args = parser.parse_args()
    pricing.warm()
    turns = session(args.turns)
    base = paths.data_dir()
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="bench-session-log-", dir=base))
    print(f"{args.turns:,} turns of {len(turns[0])} events, {args.gap_ms:g} ms apart, {args.rounds} rounds")
    print(f"in {folder} ({file_system(folder)}), load average {os.getloadavg()[0]:.2f}")
    results: dict[str, dict[str, list[float]]] = {"sync": {}, "writer": {}}
    ways: dict[str, Callable[[Path], SyncLog | SessionLog]] = {
        "sync": SyncLog,
        "writer": lambda where: SessionLog.create(
            where, provider=PROVIDER, model=MODEL, workspace=where, base_url=URL, secrets_to_mask=SECRETS
        ),
    }
    try:
        for round_ in range(args.rounds):
            for name, make in ways.items():
                where = folder / f"{name}-{round_}"
                where.mkdir()
                for kind, values in measure(make(where), turns, name == "sync", args.gap_ms / 1e3).items():
                    results[name].setdefault(kind, []).extend(values)
    finally:
        shutil.rmtree(folder)
    print(f"\n{'caller ms':<20} {'p50':>8} {'p99':>8} {'max':>8}")
    for kind in ("event", "turn"):
        for name in results:
            print(f"{'per ' + kind + ', ' + name:<20} {quantiles(results[name][kind])}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    for name, figures in results.items():
        caller = sum(figures["event"]) / args.rounds
        whole = statistics.mean(figures["whole"])
        print(f"{name:<7} caller {caller:6.2f} s a session · written and closed in {whole:6.2f} s")


if __name__ == "__main__":
    main()
