"""The instructions a request costs the hop and the watch, counted by valgrind: a figure this VM's noise can't move.

`benchmarks/passthrough.py` times CPU, which on a shared 2-core VM swings by ±15% between runs of the same code. This
counts instructions instead (callgrind; user space only, so not the kernel's socket work, which is the same for
every way): each way serves N₁ and then N₂ plain requests (`--big`: ~100 KB ones, a long conversation's; 64-token
answers from the zero-latency simulator, 8 streams) in a process of its own under valgrind, and the difference over
N₂ − N₁ is one request's, start-up and shutdown cancelled out. The ways:

- hop: the bare aiohttp pass-through of `passthrough.py` (`passthrough_ways.py`);
- watch: `hotloop watch`, its sessions on the real disk;
- watch/base, with `--baseline DIR`: the watch of another copy of hotloop's tree, for an A/B.

The same code counts the same to about 1% on a quiet machine; beside other work the watch's count moved up to 10%
(its loop and writer batch by the clock). Needs valgrind (`apt install
valgrind`); ~40 s a way at the default sizes.

    python benchmarks/passthrough_instructions.py [--requests N] [--baseline DIR] [--big]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))

import passthrough
import passthrough_ways

STREAMS = 8


def serve(way: str, upstream: str, folder: str) -> None:
    """This process's one way to `upstream`, its URL printed, until SIGTERM."""

    async def main() -> None:
        stopped = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        start = (
            passthrough_ways.start_hops([upstream])
            if way == "hop"
            else passthrough_ways.start_watches([upstream], folder)
        )
        urls, stop = await start
        print(urls[0], flush=True)
        await stopped.wait()
        await stop()

    asyncio.run(main())


async def load(url: str, requests: int, body: bytes) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        client = passthrough.Client(session)
        left = [requests]

        async def stream() -> None:
            while left[0] > 0:
                left[0] -= 1
                await client.one("way", url, body)

        await asyncio.gather(*(stream() for _ in range(STREAMS)))


def counted(way: str, upstream: str, requests: int, body: bytes, folder: Path, tree: str) -> int:
    """The instructions the way's process ran, start to end, serving `requests` requests."""
    out = folder / f"callgrind.{way.replace('/', '-')}.{requests}"
    environment = {"PYTHONPATH": tree} if tree else {}
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--serve"]
    server = subprocess.Popen(
        [*command, way.split("/")[0], upstream, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **environment},
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url:
        raise SystemExit(f"{way} did not start under valgrind")
    asyncio.run(load(url, requests, body))
    server.terminate()
    server.wait(timeout=600)
    found = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"callgrind wrote no summary for {way}")
    return int(found.group(1))


def tree_path(baseline: str, folder: Path) -> str:
    """A folder holding `hotloop` → the baseline's tree, to put first on the path."""
    parent = folder / "tree"
    parent.mkdir()
    (parent / "hotloop").symlink_to(Path(baseline).resolve())
    return str(parent)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=300, help="requests counted per way (default 300)")
    parser.add_argument("--baseline", metavar="DIR", help="add the watch of the copy of hotloop's tree in DIR")
    parser.add_argument("--big", action="store_true", help="~100 KB requests (a long conversation's) instead of plain")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed here (apt install valgrind): nothing to count with")
    multiprocessing.set_start_method("spawn")
    folder = Path(tempfile.mkdtemp(prefix="hotloop-instructions-"))
    ways = {"hop": "", "watch": ""}
    if args.baseline:
        ways["watch/base"] = tree_path(args.baseline, folder)
    simulator = passthrough_ways.Process(passthrough_ways.simulators)
    first = max(args.requests // 6, 10)
    body = passthrough.BIG if args.big else passthrough.PLAIN
    per_request = {}
    try:
        for way, tree in ways.items():
            a = counted(way, simulator.urls[0], first, body, folder, tree)
            b = counted(way, simulator.urls[0], first + args.requests, body, folder, tree)
            per_request[way] = (b - a) / args.requests
    finally:
        simulator.stop()
        shutil.rmtree(folder, ignore_errors=True)
    size = f"{len(body) // 1024} KB" if args.big else "plain"
    print(f"instructions per request ({args.requests} {size} requests counted, {STREAMS} streams, 64-token answers)")
    for way, count in per_request.items():
        print(f"  {way:12}{count / 1e3:9,.0f} k{count / per_request['hop']:8.2f}× the hop's")


if __name__ == "__main__":
    main()
