"""`hotloop run` on a terminal: the streamed answer is drawn as Markdown (headless/markdown_stream.py, with rich)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from hotloop.providers.events import TextDelta
from hotloop.sessions.store import read_session

ZERO_LATENCY = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
# Control sequences: CSI (colours, cursor moves, erasing) and the few two-byte escapes.
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
STYLED = r"\x1b\[[0-9;]+m"


def run_on_a_terminal(args: list[str], cwd: Path, timeout: float = 30) -> tuple[str, str, int]:
    """Run `python -m hotloop ARGS` with a 100×40 pseudo-terminal as its stdout; what it drew, its stderr, its code."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    environment = {**os.environ, "TERM": "xterm-256color"}  # HOTLOOP_CONFIG and HOTLOOP_DATA_DIR: isolated_home's
    for name in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES"):
        environment.pop(name, None)
    errors = cwd / "stderr.txt"
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "hotloop", *args],
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=stderr,
            env=environment,
            cwd=cwd,
        )
    os.close(terminal)  # the child holds the only other copy: reading ends when it exits
    drawn = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([master], [], [], left)[0]:
                raise TimeoutError(f"hotloop {' '.join(args)} still running after {timeout:g} s; it drew {drawn!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            drawn += chunk
        code = process.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return drawn.decode(), errors.read_text(), code


def visible_lines(markdown: str) -> list[str]:
    """The lines of text a Markdown document shows once drawn: without fences, heading and list marks, or backticks."""
    lines, in_code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            line = re.sub(r"^(#{1,6} |- )", "", line).replace("`", "")
        if line.strip():
            lines.append(" ".join(line.split()))
    return lines


def test_on_a_terminal_the_answer_is_drawn_as_markdown(workspace: Path, isolated_home: Path) -> None:
    (isolated_home / "config.toml").write_text(ZERO_LATENCY)
    drawn, errors, code = run_on_a_terminal(["run", "Read README.md"], workspace)
    assert code == 0, errors

    (log,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    answer = "".join(event.text for event in read_session(log).events if isinstance(event, TextDelta))
    # What the simulator wrote: a heading, a list, inline code and a fenced code block (README.md's first lines).
    assert answer.count("\n## Results for: Read README.md\n") == 1 and "\n```markdown\n# Demo\n" in answer
    assert "\n- `read_file` " in answer

    plain = CONTROL.sub("", drawn).replace("\r", "")
    # Drawn, not printed raw: the heading's marks are gone and it is styled, as is the inline code.
    assert "##" not in plain and re.search(STYLED + r"Results for: Read README\.md\x1b\[0m", drawn)
    assert re.search(STYLED + r"read_file\x1b\[0m", drawn)
    assert "```" not in plain  # the fences became the code block's frame
    assert "•" in plain and not any(line.startswith("- ") for line in plain.splitlines())  # the list's bullet
    # All of the answer's text is there, in order.
    shown, found = " ".join(plain.split()), 0
    for line in visible_lines(answer):
        at = shown.find(line, found)
        assert at >= 0, f"{line!r} is missing from what was drawn after {shown[:found][-200:]!r}"
        found = at + len(line)
    assert "TODO: write the docs." in plain
