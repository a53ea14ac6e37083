"""A run that ends before the provider billed anything leaves no session for `-c` to continue (issue 25, item 9).

`hotloop run … | head` died on the broken pipe in the middle of a step: its log kept the text streamed so far and no
tokens, and `hotloop -c` continued that session instead of the user's last real one. Ctrl-C before the first byte
left one too: the cancelled step's end counted as an answer. Real processes, real pipes, real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import sim_with_scenario
from tui_support import FAST_SIM


@pytest.fixture
def home(isolated_home: Path) -> Path:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    return isolated_home


def hotloop(home: Path, *args: str, stdout: int | None = None, stderr: int | None = None) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    command = [sys.executable, "-m", "hotloop", *args]
    # Ctrl-C as a terminal sends it: a runner started in the background (`cmd &` in a script) ignores SIGINT, and
    # its children inherit that, so Python would never turn the signal into a cancel.
    return subprocess.Popen(
        command, cwd=home, env=environment, stdout=stdout, stderr=stderr, preexec_fn=_sigint_as_in_a_terminal
    )


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sessions(home: Path) -> list[Path]:
    return sorted((home / "data" / "sessions").glob("*.jsonl"))


def a_real_session(home: Path) -> Path:
    """A whole turn, answered and billed: the session `-c` should go on with."""
    assert hotloop(home, "run", "hello", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait(timeout=60) == 0
    (path,) = sessions(home)
    return path


def continued_by_c(home: Path, earlier: Path) -> None:
    """`hotloop run -c` goes on with `earlier`: its log grows by a turn, and no other session appears."""
    before = earlier.read_text().count('"type":"turn_started"')
    process = hotloop(home, "run", "-c", "and again", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    assert sessions(home) == [earlier]
    assert earlier.read_text().count('"type":"turn_started"') == before + 1


def test_a_reader_that_stops_reading_leaves_no_session_behind(home: Path) -> None:
    earlier = a_real_session(home)
    # 5 ms a token: the answer streams for seconds after the reader has gone.
    (home / "config.toml").write_text(FAST_SIM.replace("decode_ms_per_token = 0", "decode_ms_per_token = 5"))
    process = hotloop(home, "run", "write 2000 words about caching", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"## write 2000 words")  # `| head -1`
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141  # as SIGPIPE would have it, and at once: not after the whole answer
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert sessions(home) == [earlier]  # the cut-short run, with no tokens billed, is gone
    assert err == ""  # quiet, as SIGPIPE would leave it: the cancel's lines answer no one's Ctrl-C
    continued_by_c(home, earlier)


def test_ctrl_c_before_the_first_byte_leaves_no_session_behind(home: Path, tmp_path: Path) -> None:
    earlier = a_real_session(home)
    stalled = sim_with_scenario(tmp_path, [{"text": "late", "stall": {"before_headers": 30}}])
    try:
        server = f'[providers.stalled]\nkind = "openai"\nbase_url = "{stalled.base_url}"\ndefault_model = "sim-fast"\n'
        (home / "config.toml").write_text(FAST_SIM + server)
        process = hotloop(home, "run", "--provider", "stalled", "say something", stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        # The request is out and no byte of the answer has come: Ctrl-C.
        while not any(request.path.endswith("/chat/completions") for request in stalled.server.requests):
            assert process.poll() is None and time.monotonic() < deadline, "the run never sent its request"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        stalled.stop()
    assert process.returncode == 130, err.decode()
    assert sessions(home) == [earlier]  # was kept: the cancelled step's end counted as an answer
    continued_by_c(home, earlier)
