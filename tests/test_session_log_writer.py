"""The session log's disk work runs on the writer thread: the caller hands over and goes on, nothing handed over is
lost by SIGKILL or an exit without `close`, the summary is saved without a close, and a step is priced once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from hotloop.agent.events import (
    Compacted,
    ProviderSwitched,
    SessionTitled,
    SideOf,
    SideRequest,
    StepFinished,
    StepStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.pricing import price_step
from hotloop.providers.events import TextDelta, UsageLedger
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import read_session
from hotloop.sessions.summary import Summary, read_summary, summary_path

from support import lines_of, wait_until

KEY = "sk-live-0123456789abcdef"
BOUND = 30.0

# A process that writes a session: turn 1 whole, then turn 2's start and a stream it is in the middle of.
WRITER = """
import sys
from pathlib import Path
from hotloop.agent.events import StepFinished, TurnFinished, TurnStarted
from hotloop.providers.events import TextDelta, UsageLedger
from hotloop.sessions.log import SessionLog

log = SessionLog.create(Path(sys.argv[1]), provider="sim", model="sim-fast", workspace=Path("/w"))
print(log.path, flush=True)
log.write(TurnStarted(turn=1, prompt="first question"))
for _ in range(50):
    log.write(TextDelta("word "))
usage = UsageLedger(prompt_total=100, output=50)
log.write(StepFinished(1, 1, usage, 0.1, 50.0, 1.0, 1.0, 0, 0.0, 0.0, "stop"))
log.write(TurnFinished(turn=1, reason="answer", steps=1, wall=1.0))
print("turn 1 finished", flush=True)
log.write(TurnStarted(turn=2, prompt="second question"))
log.write(TextDelta("half of an ans"))
print("turn 2 streaming", flush=True)
if sys.argv[2] == "wait":
    sys.stdin.read()  # killed here
for turn in range(3, 3001):  # handed over faster than a disk takes them: the writer is behind at exit
    log.write(TurnStarted(turn=turn, prompt=f"question {turn}"))
    log.write(TurnFinished(turn=turn, reason="answer", steps=0, wall=0.0))
"""


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait, at most BOUND seconds, until `condition` holds; a TimeoutError naming `what` after that."""
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {BOUND:g} s for {what}")
        time.sleep(0.01)  # the poll's pace; the wait ends on the condition


def _step(turn: int, prompt: int = 100) -> StepFinished:
    return StepFinished(turn, 1, UsageLedger(prompt_total=prompt, output=20), 0.1, 50.0, 0.5, 0.6, 0, 0.0, 0.0, "stop")


def _turn(log: SessionLog, turn: int, prompt: str) -> None:
    log.write(TurnStarted(turn=turn, prompt=prompt))
    log.write(TextDelta("an answer"))
    log.write(_step(turn))
    log.write(TurnFinished(turn=turn, reason="answer", steps=1, wall=0.6))


def test_sigkill_keeps_every_finished_turn_and_frees_the_session(tmp_path: Path) -> None:
    """A process killed with SIGKILL mid-stream leaves its finished turn and the next turn's start, handed to the
    writer thread without a flush; the summary is rebuilt from the log and the session can be continued."""
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = lines_of(process.stdout)  # type: ignore[arg-type]
        path = Path(lines.get(timeout=BOUND))
        assert lines.get(timeout=BOUND) == "turn 1 finished"
        assert lines.get(timeout=BOUND) == "turn 2 streaming"
        # The writer thread puts turn 2's start on disk by itself: nothing flushes it.
        _until(lambda: b'"type":"turn_started","turn":2' in path.read_bytes(), "turn 2's start on disk")
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=BOUND) == -signal.SIGKILL
    finally:
        process.kill()

    logged = read_session(path)
    assert [type(e).__name__ for e in logged.events if not isinstance(e, TextDelta)] == [
        "TurnStarted",
        "StepFinished",
        "TurnFinished",
        "TurnStarted",
    ]
    assert sum(isinstance(e, TextDelta) for e in logged.events) == 50  # turn 1's stream whole
    summary = read_summary(path, len(path.read_bytes().splitlines(keepends=True)[0]))
    assert (summary.turns, summary.tokens, summary.prompts) == (2, 150, ["first question", "second question"])
    with SessionLog.reopen(path, logged.header.id, 0) as resumed:  # the kernel dropped the dead writer's lock
        resumed.write(TurnFinished(turn=2, reason="interrupted", steps=0, wall=0.0))
    assert isinstance(read_session(path).events[-1], TurnFinished)


def test_an_exit_without_close_writes_what_was_handed_over(tmp_path: Path) -> None:
    """A process that returns from its main code without closing the log still gets its finished turn on disk:
    the writer thread is drained at exit."""
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), "exit"], capture_output=True, text=True, timeout=BOUND
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.splitlines()[0])
    events = read_session(path).events
    assert [e.turn for e in events if isinstance(e, TurnStarted)] == list(range(1, 3001))
    assert [e.turn for e in events if isinstance(e, TurnFinished)] == [1, *range(3, 3001)]


def test_flush_returns_once_the_bytes_are_on_disk(tmp_path: Path) -> None:
    """`flush` hands a stream's buffered deltas over and waits for them: the file holds them when it returns."""
    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"))
    log.write(TurnStarted(turn=1, prompt="hi"))
    log.write(TextDelta("buffered until a boundary"))
    assert log.flush()
    assert b"buffered until a boundary" in log.path.read_bytes()
    log.close()
    assert not log.flush()  # a closed log takes nothing more


def test_the_summary_is_saved_without_a_close_and_matches_the_log(tmp_path: Path) -> None:
    """A turn's summary reaches the disk from the writer thread within a second even when nothing follows it, never
    holds a key, and says what a scan of the whole log says (the format old summaries have, so both read)."""
    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"), secrets_to_mask=[KEY])
    sidecar = summary_path(log.path)
    for turn in range(1, 41):
        _turn(log, turn, f"question {turn} with {KEY}" if turn == 3 else f"question {turn}")
    log.write(SessionTitled(title="A title", model="sim-fast"))

    def saved() -> Summary | None:
        try:
            return msgspec.json.decode(sidecar.read_bytes(), type=Summary)
        except (OSError, msgspec.DecodeError):
            return None

    _until(lambda: (found := saved()) is not None and found.titled == "A title", "the summary with the title")
    on_disk = saved()
    assert on_disk is not None and (on_disk.turns, on_disk.titled) == (40, "A title")
    assert on_disk.size == log.path.stat().st_size  # it covers the whole log: nothing for a reader to scan
    log.close()
    assert KEY.encode() not in sidecar.read_bytes() and KEY.encode() not in log.path.read_bytes()
    kept = read_summary(log.path, 0)
    sidecar.unlink()
    scanned = read_summary(log.path, len(log.path.read_bytes().splitlines(keepends=True)[0]))
    assert kept == scanned
    assert kept.prompts[2] == "question 3 with [redacted]" and kept.title == "A title"


def test_the_summary_kept_as_the_log_is_written_is_the_scan_of_every_kind_of_event(tmp_path: Path) -> None:
    """Every kind of event a summary keeps something of (a switch to a priced server, a step's model, a compaction, a
    side request, a side-of, a title) amid those it keeps nothing of: the summary the log keeps as it writes (which
    looks only at the former) is the one a scan of the whole log makes."""
    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"))
    usage = UsageLedger(prompt_total=1_000, output=20)
    _turn(log, 1, "first")
    log.write(ProviderSwitched("gpu", "big-model", "sim", "sim-fast", 900, 900, "http://gpu:8000", cost_per_hour=3.6))
    log.write(TurnStarted(turn=2, prompt="second"))
    log.write(StepStarted(turn=2, step=1, provider="gpu", model="big-model"))
    log.write(TextDelta("an answer"))
    log.write(StepFinished(2, 1, usage, 0.1, 50.0, 0.5, 2.0, 0, 0.0, 0.0, "stop"))
    log.write(Compacted("auto", 2, "what happened", "gpu", "big-model", usage, 0.1, 1.5))
    log.write(SideRequest("prewarm", "idle", "gpu", "big-model", usage, 0.5))
    log.write(SideOf(parent="abcd1234"))
    log.write(SessionTitled(title="Switched", model="big-model"))
    log.write(TurnFinished(turn=2, reason="answer", steps=1, wall=2.0))
    log.close()
    kept = read_summary(log.path, 0)
    summary_path(log.path).unlink()
    scanned = read_summary(log.path, len(log.path.read_bytes().splitlines(keepends=True)[0]))
    assert kept == scanned
    assert (kept.turns, kept.model, kept.side_of, kept.titled) == (2, "big-model", "abcd1234", "Switched")
    assert kept.servers["gpu"] == "http://gpu:8000" and kept.priced >= 3 and kept.tokens == 100 + 20 + 3 * 1_020


def test_logs_written_together_each_get_their_own_lines(tmp_path: Path) -> None:
    """Two logs written from two threads through the one writer thread each hold exactly their own events."""
    logs = [SessionLog.create(tmp_path / name, provider="sim", model="sim-fast", workspace=Path("/w")) for name in "ab"]

    def run(log: SessionLog, name: str) -> None:
        for turn in range(1, 101):
            _turn(log, turn, f"{name} {turn}")
        log.close()

    threads = [threading.Thread(target=run, args=(log, name)) for log, name in zip(logs, "ab", strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    for log, name in zip(logs, "ab", strict=True):
        prompts = [e.prompt for e in read_session(log.path).events if isinstance(e, TurnStarted)]
        assert prompts == [f"{name} {turn}" for turn in range(1, 101)]
        assert read_summary(log.path, 0).turns == 100


async def test_hand_overs_taken_while_the_writer_thread_runs_all_land_once_in_order(tmp_path: Path) -> None:
    """A log's hand-overs wait together and one job of the writer thread takes all of them: 300 turns handed over
    across 100 turns of the loop, the thread taking earlier ones meanwhile, are each on disk once, in order."""
    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"))
    for turn in range(1, 301):
        _turn(log, turn, f"question {turn}")
        if turn % 3 == 0:
            await asyncio.sleep(0)
    assert await log.synced(BOUND)
    prompts = [e.prompt for e in read_session(log.path).events if isinstance(e, TurnStarted)]
    assert prompts == [f"question {turn}" for turn in range(1, 301)]
    log.close()
    assert read_summary(log.path, 0).turns == 300


async def test_a_disk_that_fails_on_the_writer_thread_stops_the_log_with_its_error(tmp_path: Path) -> None:
    """ENOSPC met by the writer thread stops the log (`error`) while writes go on returning: the run never sees it."""
    import errno

    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"))
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, log._fd or -1)
    os.close(full)
    _turn(log, 1, "hello")
    await wait_until(lambda: log.error is not None, what="the writer thread to meet the full disk")
    _turn(log, 2, "still running")
    log.close()
    assert log.error is not None and log.error.errno == errno.ENOSPC


def test_a_step_is_priced_once_for_all_its_readers() -> None:
    """The same step priced again (the summary, then the printer, the spans) is the first price, not a second
    computation; another step's figures get their own."""
    usage = UsageLedger(prompt_total=12_000, cache_read=10_000, cache_write=0, uncached=2_000, output=300)
    first = price_step(usage, "claude-sonnet-4-5", "https://api.anthropic.com", at=1.7e9)
    again = price_step(usage, "claude-sonnet-4-5", "https://api.anthropic.com", at=1.7e9 + 60)
    other = price_step(
        msgspec.structs.replace(usage, output=301), "claude-sonnet-4-5", "https://api.anthropic.com", at=1.7e9
    )
    assert first is not None and again is first
    assert other is not None and other.total > first.total


def test_a_stalled_disk_never_holds_up_the_writes(tmp_path: Path) -> None:
    """With the log's file replaced by a pipe nobody reads (a disk that stalls), 200 turns are still written without
    a wait, a flush says the bytes did not land, and once the pipe is read every turn comes out whole."""
    log = SessionLog.create(tmp_path, provider="sim", model="sim-fast", workspace=Path("/w"))
    reader, writer = os.pipe()
    os.dup2(writer, log._fd or -1)
    os.close(writer)
    drained = bytearray()

    def pump() -> None:
        while chunk := os.read(reader, 65536):  # until the log closes its end
            drained.extend(chunk)

    def write_turns() -> None:
        for turn in range(1, 201):
            _turn(log, turn, f"question {turn}")

    wrote = threading.Thread(target=write_turns)
    wrote.start()
    wrote.join(BOUND)
    assert not wrote.is_alive()  # 200 turns (more than the pipe holds) written while nothing was read
    assert not log.flush(timeout=0.1)  # the writer thread is stuck in the pipe: the bytes are not on disk
    reading = threading.Thread(target=pump)
    reading.start()
    log.close()
    reading.join(BOUND)
    os.close(reader)
    prompts = [line for line in drained.splitlines() if line.startswith(b'{"type":"turn_started"')]
    assert len(prompts) == 200 and log.error is None
