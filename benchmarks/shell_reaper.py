"""What running each command under a subreaper costs: run_shell's wall per call, with it and without.

Each case is the median of RUNS calls of `run_shell` (the handler, as the loop calls it), the two
paths taken in turn so that the machine's drift falls on both: `true` (the cost of a call itself),
`sleep 0.2`, and three `sleep 1` at once (a step's parallel calls, wall of the three). Also the
duration the status line reports (`exit 0 · 0.00 s`), which counts from the shell's start, not the
subreaper's. "without" is the path hotloop takes where there is no subreaper (not Linux):
`shell.use_subreaper` off, nothing else changed. First, the first call's wall (`true`), side by
side, the cases taken in turn: with the program started at that call (as before a session started
it ahead), started ahead as a session's open does and running when the call comes (its spare
forked), and started ahead with the call right behind it (which waits for that same start). Then,
with `--parallel`, benchmarks/parallel_tools.py's run_shell case, with and without.

    python benchmarks/shell_reaper.py [--runs N] [--parallel]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from hotloop.agent.tools import shell
from hotloop.agent.tools.processes import StartAhead, subreaper_problem, subreapers
from hotloop.agent.tools.registry import ToolContext
from hotloop.agent.tools.shell import ShellSettings, shell_tool

RUNS = 21
COMMANDS = (("true", 1), ("sleep 0.2", 1), ("sleep 1", 3))  # a command, and how many run at once
FIRST = ("started at the first call", "started ahead, running", "started ahead, called at once")


async def call(command: str, workspace: Path, reaped: bool, at_once: int = 1) -> tuple[float, float]:
    """The wall in seconds of `at_once` calls started together, and the longest duration their status lines say."""
    shell.use_subreaper = reaped
    tool = shell_tool(ShellSettings(), set())
    started = time.perf_counter()
    results = await asyncio.gather(
        *(tool.handler({"command": command}, ToolContext(f"bench{n}", workspace)) for n in range(at_once))
    )
    wall = time.perf_counter() - started
    return wall, max(float(result.split("\n", 1)[0].split(" · ")[1].removesuffix(" s")) for result in results)


async def measure(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        await first_calls(workspace, runs)
        for command, at_once in COMMANDS:
            walls: dict[bool, list[float]] = {True: [], False: []}
            said: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(runs if at_once == 1 else max(runs // 3, 3)):
                for reaped in (True, False):
                    wall, status = await call(command, workspace, reaped, at_once)
                    walls[reaped].append(wall)
                    said[reaped].append(status)
            with_, without = statistics.median(walls[True]), statistics.median(walls[False])
            print(f"{command!r}{f' ×{at_once} at once' if at_once > 1 else ''}: median of {len(walls[True])}")
            print(
                f"  with the subreaper    {with_ * 1000:7.1f} ms wall · status says {statistics.median(said[True]):.2f} s"
            )
            print(
                f"  without (old path)    {without * 1000:7.1f} ms wall · status says {statistics.median(said[False]):.2f} s"
            )
            print(
                f"  cost                  {(with_ - without) * 1000:+7.1f} ms per {'call' if at_once == 1 else 'step'}"
            )
    shell.use_subreaper = True


async def first_calls(workspace: Path, runs: int) -> None:
    """The first call's wall in each of FIRST's cases, the program closed before each, so that each call is a first."""
    walls: dict[str, list[float]] = {case: [] for case in FIRST}
    for _ in range(runs):
        for case in FIRST:
            subreapers.close()
            ahead = StartAhead()
            if case != FIRST[0]:
                ahead.start(lambda: True)
            if case == FIRST[1]:
                await running(await ahead.started())
            wall, _ = await call("true", workspace, True)
            walls[case].append(wall)
            await ahead.close()
    print(f"first call ('true'): median of {runs} (lowest to highest)")
    for case, each in walls.items():
        print(
            f"  {case:32} {statistics.median(each) * 1000:7.1f} ms  ({min(each) * 1000:.1f} to {max(each) * 1000:.1f})"
        )


async def running(pid: int | None) -> None:
    """Until the program has forked its spare: it has loaded and waits for a call."""
    deadline = time.monotonic() + 30
    while pid is not None and not Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if time.monotonic() > deadline:
            raise TimeoutError("the subreaper program did not start within 30 s")
        await asyncio.sleep(0.002)


async def parallel() -> None:
    from hotloop.benchmarks import parallel_tools  # only with --parallel: it loads the simulator

    for reaped in (True, False):
        shell.use_subreaper = reaped
        print(f"--- benchmarks/parallel_tools.py, {'with' if reaped else 'without'} the subreaper")
        await parallel_tools.main()
    shell.use_subreaper = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--parallel", action="store_true", help="also run parallel_tools.py with and without")
    args = parser.parse_args()
    if (problem := subreaper_problem()) is not None:
        print(f"no subreaper here ({problem}): both paths are the old one")
    asyncio.run(measure(args.runs))
    if args.parallel:
        asyncio.run(parallel())


if __name__ == "__main__":
    main()
