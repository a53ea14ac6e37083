"""The app stopped by a service manager or a closed terminal: SIGTERM, SIGHUP and SIGINT quit it as its quit key
does, so the turn in flight gets its end in the log (Textual leaves them at their defaults, which end the process
where it stands)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from hotloop.agent.events import ResponseFinished, TurnFinished, decode

from support import in_a_terminal, read_until, stopped_in_a_terminal

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
# The model's answer asks to run a command: the turn waits for the user's approval, in flight for as long as it takes.
ASKS_TO_RUN = [{"text": "Let me look.\n", "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}}]}]
CONFIG = (
    '[routing]\ntitles = false\n[cache]\nprewarm = "off"\n'
    '[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\nscenario = "scenario.json"\n'
)


def _logged(data: Path) -> list[object]:
    logs = list((data / "sessions").glob("*.jsonl"))
    if not logs:
        return []
    return [decode(line) for line in logs[0].read_bytes().splitlines()[1:] if line.endswith(b"}")]


@pytest.mark.parametrize("stop", SIGNALS, ids=lambda stop: stop.name)
def test_the_app_stopped_mid_answer_ends_its_turn_in_the_log(stop: signal.Signals, tmp_path: Path) -> None:
    """Stopped while its turn waits for an approval, the app exits 0 and the log keeps the answered response and
    the turn's end, which is not an answer."""
    (tmp_path / "config.toml").write_text(CONFIG)
    (tmp_path / "scenario.json").write_text(json.dumps(ASKS_TO_RUN))
    data = tmp_path / "data"
    environment = {**os.environ, "HOTLOOP_CONFIG": str(tmp_path / "config.toml"), "HOTLOOP_DATA_DIR": str(data)}
    drawn = bytearray()
    with in_a_terminal([sys.executable, "-m", "hotloop"], environment, tmp_path) as (process, master):
        read_until(master, drawn, lambda: b"ready" in drawn, "ready state drawn")
        os.write(master, b"tell me about the project\r")
        read_until(master, drawn, lambda: b"allow once" in drawn, "approval asked")
        stopped_in_a_terminal(process, master, stop)
    assert process.returncode == 0
    events = _logged(data)
    assert [type(event) for event in events if isinstance(event, ResponseFinished)] == [ResponseFinished]
    ends = [event for event in events if isinstance(event, TurnFinished)]
    assert len(ends) == 1 and ends[0].turn == 1 and ends[0].reason != "answer", ends
