"""Startup: `hotloop --version`, the app's first paint and "ready", and the first step's TTFT (medians of 5 runs, of
15 for the TTFT), for the default config and beside it, in the same run, for one with N providers and every proxy
variable set.

First paint and ready are measured as a user sees them: `hotloop` starts in a real terminal (tmux), and the
clock stops when the first frame's text (the prompt's placeholder) is on the screen, then when the status bar
says `● ready`. A bare pseudo-terminal would not do: it never answers the queries Textual sends at startup. A
minimal Textual app (a prompt and a footer) is timed in the same run, so the machine's speed and hotloop's own
cost can be told apart. The N providers are servers behind the proxy (`https://llmN.invalid/v1`; the proxy
variables name a closed loopback port, NO_PROXY the loopback): each costs the switch menu's probe a client, and
each proxy variable one more transport in it.

The first step's TTFT is hotloop's own figure (a session in a fresh process, its prompt sent as soon as it is
open, while the switch menu's probes run) less the simulator's fixed 300 ms: what hotloop adds to the server's
first byte. `--load K` runs K busy loops meanwhile (2 fill a 2-core machine). With PYTHONPATH naming a folder
whose `hotloop` is another checkout, every figure is that checkout's (to compare with the commit before). Needs tmux.
Targets: --version ≤ 150 ms, first paint ≤ 500 ms (quiet), the first step's TTFT within a few ms of the server's.

    python benchmarks/startup.py [--providers 14] [--load 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

RUNS = 5
TTFT_RUNS = 3  # per round: a few ms are measured, and a fresh process costs little
MARKER = "Ask anything"
READY = "● ready"
SESSION = "hotloop-startup"
SERVER_TTFT = 0.3  # the simulator's time to first token in the TTFT runs
PROXIES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
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


def screen_times(command: list[str], env: dict[str, str], ready: bool) -> tuple[float, float | None]:
    """Seconds from starting `command` in a 120×40 terminal to MARKER on its screen, and to READY if `ready`."""
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", "bash --norc --noprofile")
    try:
        time.sleep(0.3)
        tmux("send-keys", "-t", SESSION, f"export {exports}; clear", "Enter")
        time.sleep(0.2)
        started = time.perf_counter()
        tmux("send-keys", "-t", SESSION, shlex.join(command), "Enter")
        painted: float | None = None
        while True:
            screen = tmux("capture-pane", "-t", SESSION, "-p")
            now = time.perf_counter() - started
            if painted is None and MARKER in screen:
                painted = now
            if painted is not None and (not ready or READY in screen):
                return painted, now if ready else None
            if now > 60:
                raise TimeoutError(f"{command[0]} was not {'ready' if painted else 'painted'} within 60 s")
            time.sleep(0.005)
    finally:
        tmux("send-keys", "-t", SESSION, "C-q")
        time.sleep(0.3)
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def providers_toml(count: int) -> str:
    return "".join(
        f'[providers.llm{n}]\nkind = "openai-chat"\nbase_url = "https://llm{n}.invalid/v1"\n' for n in range(count)
    )


def behind_proxy() -> dict[str, str]:
    return {**dict.fromkeys(PROXIES, "http://127.0.0.1:9"), "NO_PROXY": "127.0.0.1,localhost"}


async def first_step_ttft() -> float:
    """In a child process: the first step's TTFT less the simulator's, the prompt sent as soon as the session opens."""
    from hotloop.agent.events import AgentEvent, StepFinished
    from hotloop.config import load_config
    from hotloop.core.session import Session, SessionOptions

    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(workspace=Path.cwd()), events.append)
    await session.open()
    try:
        await session.turn("hello")
    finally:
        await session.close()
    (finished,) = [e for e in events if isinstance(e, StepFinished)]
    assert finished.ttft is not None
    return finished.ttft - SERVER_TTFT


def ttft_run(env: dict[str, str]) -> float:
    child = subprocess.run(
        [sys.executable, __file__, "--ttft-child"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
        text=True,
    )
    return float(child.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", type=int, default=14, help="providers configured beside the default ones")
    parser.add_argument("--load", type=int, default=0, help="busy loops to run meanwhile")
    parser.add_argument("--ttft-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ttft_child:
        print(asyncio.run(first_step_ttft()))
        return
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        figures = measure(args.providers)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
    report(figures, args.providers, args.load)


Figures = dict[str, list[float]]


def measure(count: int) -> Figures:
    figures: Figures = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            figures.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as home:
        # The server's TTFT is all the step waits for: no prefill time, no pre-warm's cache read, no title beside it.
        simulator = (
            f'[cache]\nprewarm = "off"\n[routing]\ntitles = false\n'
            f"[sim]\nttft_ms = {SERVER_TTFT * 1000:g}\nprefill_us_per_token = 0\n"
        )
        configs = {"default": ("", {}), "many": (providers_toml(count), behind_proxy())}
        envs: dict[str, dict[str, str]] = {}
        for name, (providers, extra) in configs.items():
            Path(home, f"{name}.toml").write_text(providers)
            Path(home, f"{name}-ttft.toml").write_text(simulator + providers)
            envs[name] = {"HOTLOOP_DATA_DIR": home, "HOTLOOP_CONFIG": os.path.join(home, f"{name}.toml"), **extra}
            if "PYTHONPATH" in os.environ:  # the hotloop this process imports (another checkout's, to compare)
                envs[name]["PYTHONPATH"] = os.environ["PYTHONPATH"]
        minimal = os.path.join(home, "minimal.py")
        Path(minimal).write_text(MINIMAL_APP)
        version_time()  # warm the file cache, as a user's second run would be
        figures["version"] = [version_time() for _ in range(RUNS)]
        for _ in range(RUNS):  # interleaved: a change in the machine's load touches every figure alike
            for name, env in envs.items():
                painted, ready = screen_times(hotloop(), env, ready=True)
                add(f"{name} paint", painted)
                add(f"{name} ready", ready)
                for _ in range(TTFT_RUNS):
                    add(f"{name} ttft", ttft_run({**env, "HOTLOOP_CONFIG": os.path.join(home, f"{name}-ttft.toml")}))
            add("minimal paint", screen_times([sys.executable, minimal], envs["default"], ready=False)[0])
    return figures


def report(figures: Figures, count: int, load: int) -> None:
    def ms(name: str) -> str:
        values = figures[name]
        runs = (
            ", ".join(f"{1000 * v:.0f}" for v in values)
            if len(values) <= RUNS
            else f"{1000 * min(values):.0f}–{1000 * max(values):.0f}"
        )
        return f"{1000 * statistics.median(values):.0f} ms ({len(values)} runs: {runs})"

    many = f"{count} providers + {', '.join(PROXIES)}"
    print(f"startup, median of {RUNS}, {f'{load} busy loops running' if load else 'no load added'}:")
    print(f"  hotloop --version:                  {ms('version')}  target ≤ 150 ms")
    print(f"  minimal Textual app, first paint:   {ms('minimal paint')}")
    for name, label in (("default", "default config"), ("many", many)):
        print(f"  {label}:")
        print(f"    first paint:                      {ms(f'{name} paint')}  target ≤ 500 ms")
        print(f"    ready:                            {ms(f'{name} ready')}")
        print(f"    first step's TTFT over server's:  {ms(f'{name} ttft')}")
    paints = zip(figures["default paint"], figures["minimal paint"], strict=True)
    print(f"  hotloop's own share of first paint: {1000 * statistics.median(p - b for p, b in paints):.0f} ms")


if __name__ == "__main__":
    main()
