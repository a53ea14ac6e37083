"""The app stopped by a service manager or a closed terminal: SIGTERM, SIGHUP and SIGINT quit it as its quit key
does, so the turn in flight gets its end in the log (Textual leaves them at their defaults, which end the process
where it stands)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from hotloop.agent.events import ResponseFinished, TurnFinished, decode

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
# The model's answer asks to run a command: the turn waits for the user's approval, in flight for as long as it takes.
ASKS_TO_RUN = [{"text": "Let me look.\n", "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}}]}]
CONFIG = (
    '[routing]\ntitles = false\n[cache]\nprewarm = "off"\n'
    '[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\nscenario = "scenario.json"\n'
)


def _as_in_a_terminal() -> None:
    """SIGINT and SIGHUP at their defaults, as a terminal starts a command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _logged(data: Path) -> list[object]:
    logs = list((data / "sessions").glob("*.jsonl"))
    if not logs:
        return []
    return [decode(line) for line in logs[0].read_bytes().splitlines()[1:] if line.endswith(b"}")]


def _read_until(master: int, drawn: bytearray, done: object, what: str) -> None:
    """Read what the app draws until `done()` holds; 30 s at most without a byte."""
    assert callable(done)
    while not done():
        assert select.select([master], [], [], 30)[0], f"no {what} after 30 s: {drawn[-2000:]!r}"
        drawn += os.read(master, 65536)


@pytest.mark.parametrize("stop", SIGNALS, ids=lambda stop: stop.name)
def test_the_app_stopped_mid_answer_ends_its_turn_in_the_log(stop: signal.Signals, tmp_path: Path) -> None:
    """Stopped while its turn waits for an approval, the app exits 0 and the log keeps the answered response and
    the turn's end, which is not an answer."""
    (tmp_path / "config.toml").write_text(CONFIG)
    (tmp_path / "scenario.json").write_text(json.dumps(ASKS_TO_RUN))
    data = tmp_path / "data"
    environment = {
        **os.environ,
        "HOTLOOP_CONFIG": str(tmp_path / "config.toml"),
        "HOTLOOP_DATA_DIR": str(data),
        "TERM": "xterm-256color",
    }
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "hotloop"],
        env=environment,
        cwd=tmp_path,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        preexec_fn=_as_in_a_terminal,
    )
    os.close(terminal)
    drawn = bytearray()
    try:
        _read_until(master, drawn, lambda: b"ready" in drawn, "ready state drawn")
        os.write(master, b"tell me about the project\r")
        _read_until(master, drawn, lambda: b"allow once" in drawn, "approval asked")
        process.send_signal(stop)
        while select.select([master], [], [], 30)[0]:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the app has exited and closed its end
                break
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 0
    events = _logged(data)
    assert [type(event) for event in events if isinstance(event, ResponseFinished)] == [ResponseFinished]
    ends = [event for event in events if isinstance(event, TurnFinished)]
    assert len(ends) == 1 and ends[0].turn == 1 and ends[0].reason != "answer", ends
