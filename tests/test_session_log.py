"""The session log is private, valid JSON lines, flushed per step, and never holds a key."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hotloop.agent.events import StepFinished, TurnStarted, decode, fan_out
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import list_sessions, summarize

from support import make_agent, present, start_sim, wait_until


def create_log(folder: Path, secrets: tuple[str, ...] = ()) -> SessionLog:
    return SessionLog.create(folder, provider="sim", model="sim-fast", workspace=Path("/w"), secrets_to_mask=secrets)


async def test_a_logged_run_is_private_complete_and_handed_to_the_disk_per_step(tmp_path: Path) -> None:
    """Each finished step leaves nothing buffered on the caller and reaches the disk with no flush or close."""
    folder = tmp_path / "sessions"
    (tmp_path / "README.md").write_text("# Demo\n")
    held_back: list[int] = []
    sim = start_sim()
    try:
        with create_log(folder) as log:

            def check_buffer(event: object) -> None:
                if isinstance(event, StepFinished):
                    held_back.append(len(log._buffer))

            agent, recorder = make_agent(sim, tmp_path)
            agent.emit = fan_out(recorder, log.write, check_buffer)
            await agent.run_turn("Read README.md")
            path = log.path
            await wait_until(lambda: path.read_bytes().count(b'"type":"step_finished"') == 2, what="both steps on disk")
    finally:
        sim.stop()

    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert held_back == [0, 0]  # each step was handed to the writer thread when it finished
    header, *lines = path.read_bytes().splitlines()
    assert header.startswith(b'{"type":"session","id":"') and b'"format":1' in header
    assert [decode(line) for line in lines] == recorder.events


def test_secret_values_never_reach_the_disk(tmp_path: Path) -> None:
    key = "sk-live-0123456789abcdef"
    with create_log(tmp_path, secrets=(key,)) as log:
        log.write(TurnStarted(turn=1, prompt=f"my key is {key}, keep it"))
    text = log.path.read_text()
    assert key not in text and "my key is [redacted], keep it" in text


def test_listing_summarizes_and_survives_a_torn_last_line(tmp_path: Path) -> None:
    from hotloop.providers.events import UsageLedger

    with create_log(tmp_path) as first:
        first.write(TurnStarted(turn=1, prompt="first question"))
        first.write(
            StepFinished(
                turn=1,
                step=1,
                usage=UsageLedger(prompt_total=100, output=20),
                ttft=0.1,
                decode_tps=50.0,
                model_time=0.5,
                wall=0.6,
                tool_count=0,
                tool_sum=0.0,
                tool_wall=0.0,
                finish_reason="stop",
            )
        )
        first.write(TurnStarted(turn=2, prompt="second question"))
    with first.path.open("ab") as torn:
        torn.write(b'{"type":"step_finished","turn":2,"st')
    with create_log(tmp_path) as second:
        second.write(TurnStarted(turn=1, prompt="later"))
        second.write(
            StepFinished(
                turn=1,
                step=1,
                usage=None,
                ttft=None,
                decode_tps=None,
                model_time=0.1,
                wall=0.1,
                tool_count=0,
                tool_sum=0.0,
                tool_wall=0.0,
                finish_reason="stop",
            )
        )

    summary = summarize(first.path)
    assert (summary.id, summary.turns, summary.tokens, summary.title) == (first.id, 2, 120, "first question")
    later = summarize(second.path)
    assert later.tokens is None  # nothing reported is not "0 tokens"
    assert [s.id for s in list_sessions(tmp_path).sessions] == [second.id, first.id]


def test_a_full_disk_stops_the_log_not_the_run(tmp_path: Path) -> None:
    log = create_log(tmp_path)
    os.dup2(os.open("/dev/full", os.O_WRONLY), present(log._fd))  # every later write fails with ENOSPC
    log.write(TurnStarted(turn=1, prompt="hello"))
    log.write(TurnStarted(turn=2, prompt="still running"))
    log.close()
    assert log.error is not None and log.error.errno == errno.ENOSPC
    assert log._buffer == []  # nothing piles up in memory after the failure


def test_a_secret_streamed_in_pieces_is_masked_too(tmp_path: Path) -> None:
    from hotloop.agent.events import ToolOutput
    from hotloop.providers.events import TextDelta

    key = "sk-live-0123456789abcdef"
    pieces = ["Your key: s", "k-live-01", "2345", "6789ab", "cdef. And s", "o on."]
    with create_log(tmp_path, secrets=(key,)) as log:
        log.write(TurnStarted(turn=1, prompt="x"))
        for piece in pieces:
            log.write(TextDelta(piece))
        log.write(ToolOutput(call_id="c1", text="sk-live-0123"))
        log.write(ToolOutput(call_id="c1", text="456789abcdef"))
    events = [decode(line) for line in log.path.read_bytes().splitlines()[1:]]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    output = "".join(e.text for e in events if isinstance(e, ToolOutput))
    # Nothing held back is lost: the text is whole, with the key masked.
    assert text == "Your key: [redacted]. And so on." and output == "[redacted]"
    assert key.encode() not in log.path.read_bytes()
