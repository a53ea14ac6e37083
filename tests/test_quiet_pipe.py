"""`hotloop run … | head -1` is quiet, as the README says (issue 35, item 6): the first line, exit 141, nothing more.

It printed `turn 1 · step 1 · … · cancelled` and `turn 1 cancelled` on stderr: the lines of the cancel the closed
pipe caused. The real CLI, its stdout read by a real `head -1`, which exits after one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui_support import FAST_SIM


@pytest.fixture
def home(isolated_home: Path) -> Path:
    # 5 ms a token: the answer streams for seconds after the reader has gone.
    (isolated_home / "config.toml").write_text(FAST_SIM.replace("decode_ms_per_token = 0", "decode_ms_per_token = 5"))
    return isolated_home


def through_head(home: Path, *args: str) -> tuple[int, str, str]:
    """`hotloop ARGS | head -1`: hotloop's exit code, what head printed, and hotloop's stderr."""
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    with (home / "stderr.txt").open("wb") as errors:
        hotloop = subprocess.Popen(
            [sys.executable, "-m", "hotloop", *args], cwd=home, env=environment, stdout=subprocess.PIPE, stderr=errors
        )
        assert hotloop.stdout is not None
        head = subprocess.Popen(["head", "-1"], stdin=hotloop.stdout, stdout=subprocess.PIPE)
        hotloop.stdout.close()  # head alone reads it now
        try:
            shown, _ = head.communicate(timeout=60)
            code = hotloop.wait(timeout=60)
        finally:
            for process in (head, hotloop):
                if process.poll() is None:
                    process.kill()
                    process.wait()
    return code, shown.decode(), (home / "stderr.txt").read_text()


def test_a_closed_pipe_ends_the_run_with_141_and_nothing_on_stderr(home: Path) -> None:
    """The answer's first line reaches head; then the run ends at once with 141 and says nothing: not the cut step,
    not the cancelled turn, not the session saved."""
    code, shown, err = through_head(home, "run", "write 2000 words about caching")
    assert shown == "## write 2000 words about caching\n"
    assert code == 141
    assert err == ""


def test_a_continued_session_through_a_closed_pipe_is_as_quiet(home: Path) -> None:
    """Continuing a saved session with --json: head gets the first event (the turn's start, with the session's id),
    and stderr stays empty, without the line naming the session saved that a finished run ends with."""
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    first = subprocess.run(
        [sys.executable, "-m", "hotloop", "run", "hello"], cwd=home, env=environment, capture_output=True, timeout=60
    )
    assert first.returncode == 0 and first.stderr.decode().endswith("saved · hotloop -c\n")
    code, shown, err = through_head(home, "run", "--json", "-c", "write 2000 words about caching")
    assert shown.startswith('{"type":"turn_started","session":"')
    assert code == 141
    assert err == ""
