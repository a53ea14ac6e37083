"""Startup: `hotloop --version`, and the app's first paint, each the median of 5 runs.

First paint is measured as a user sees it: `hotloop` starts in a real terminal (tmux), and
the clock stops when the first frame's text (the prompt's placeholder) is on the screen.
A bare pseudo-terminal would not do: it never answers the queries Textual sends at
startup. A minimal Textual app (a prompt and a footer) is timed in the same run, so the
machine's speed and hotloop's own cost can be told apart. Needs tmux.
Targets: --version ≤ 150 ms, first paint ≤ 500 ms.

    python benchmarks/startup.py
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

RUNS = 5
MARKER = "Ask anything"
SESSION = "hotloop-startup"
MINIMAL_APP = textwrap.dedent(
    """
    from textual.app import App
    from textual.widgets import Footer, TextArea

    class Minimal(App):
        BINDINGS = [("ctrl+q", "quit", "Quit")]

        def compose(self):
            yield TextArea(placeholder="Ask anything")
            yield Footer()

    Minimal().run()
    """
)


def hotloop() -> list[str]:
    found = shutil.which("hotloop", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-m", "hotloop"]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def version_time() -> float:
    started = time.perf_counter()
    subprocess.run([*hotloop(), "--version"], check=True, capture_output=True)
    return time.perf_counter() - started


def paint_time(command: list[str], env: dict[str, str]) -> float:
    """Seconds from starting `command` in a 120×40 terminal to MARKER on its screen."""
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", "bash --norc --noprofile")
    try:
        time.sleep(0.3)
        tmux("send-keys", "-t", SESSION, f"export {exports}; clear", "Enter")
        time.sleep(0.2)
        started = time.perf_counter()
        tmux("send-keys", "-t", SESSION, shlex.join(command), "Enter")
        while MARKER not in tmux("capture-pane", "-t", SESSION, "-p"):
            if time.perf_counter() - started > 20:
                raise TimeoutError(f"{command[0]} painted nothing within 20 s")
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        tmux("send-keys", "-t", SESSION, "C-q")
        time.sleep(0.3)
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {"HOTLOOP_DATA_DIR": home, "HOTLOOP_CONFIG": os.path.join(home, "none.toml")}
        minimal = os.path.join(home, "minimal.py")
        with open(minimal, "w") as file:
            file.write(MINIMAL_APP)
        version_time()  # warm the file cache, as a user's second run would be
        versions = [version_time() for _ in range(RUNS)]
        pairs = [(paint_time(hotloop(), env), paint_time([sys.executable, minimal], env)) for _ in range(RUNS)]
    paints, baselines = [p for p, _ in pairs], [b for _, b in pairs]

    def ms(values: list[float]) -> str:
        return f"{1000 * statistics.median(values):.0f} ms (runs {', '.join(f'{1000 * v:.0f}' for v in values)})"

    print(f"startup, median of {RUNS}:")
    print(f"  hotloop --version:             {ms(versions)}  target ≤ 150 ms")
    print(f"  hotloop first paint:           {ms(paints)}  target ≤ 500 ms")
    print(f"  minimal Textual app, same run: {ms(baselines)}")
    print(f"  hotloop's own share:           {1000 * statistics.median(p - b for p, b in pairs):.0f} ms")


if __name__ == "__main__":
    main()
