"""The simulator's capacity: streams a second and server CPU per streamed token, one process, then P processes.

`hotloop sim serve` runs as a real server process (`--processes P` for P > 1), with the fast
tier's pacing (40 ms to the first token, then 4 ms a token, each token its own write, as a
paced stream is) and batching off, so a stream's length is fixed and anything slower is the
server's CPU. Load processes keep `--streams` streams open at once for `--seconds`, each
asking for a 200-word answer. The load is raw HTTP (aiohttp, the body read as it comes,
only the usage chunk parsed) on purpose: the figure is the server's, and an SDK's per-chunk
parsing would make the client the bottleneck first. Tokens and streams come from the
server's `/metrics` deltas (exact), CPU from /proc (user + system of every server process).

    python benchmarks/sim_capacity.py [--processes 1 2] [--streams 256] [--seconds 10] [--load-processes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

PROMPT = "say 200 words about prefix caches"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and its children that still run (the server's processes)."""
    total = 0.0
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for each in (pid, *map(int, children)):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    return total


async def scrape(url: str) -> tuple[float, float]:
    """(requests finished, generation tokens) since the server started."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as response:
        text = await response.text()
    totals = dict.fromkeys(("vllm:request_success_total", "vllm:generation_tokens_total"), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value  # every replica's, every model's
    return totals["vllm:request_success_total"], totals["vllm:generation_tokens_total"]


async def load(url: str, streams: int, seconds: float) -> dict[str, int]:
    """`streams` streams at once until `seconds` pass; the streams and errors this process saw."""
    body = {"model": "sim-fast", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    deadline = time.monotonic() + seconds
    done = errors = 0

    async def one_at_a_time(http: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        while time.monotonic() < deadline:
            async with http.post(f"{url}/v1/chat/completions", json=body) as response:
                async for _ in response.content.iter_any():
                    pass
                if response.status == 200:
                    done += 1
                else:
                    errors += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(one_at_a_time(http) for _ in range(streams)))
    return {"streams": done, "errors": errors}


def serve(processes: int) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "hotloop", "sim", "serve", "--port", "0", "--batch-slowdown", "0"]
    if processes > 1:
        command += ["--processes", str(processes)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    banner = server.stdout.readline()
    if " on " not in banner:
        raise SystemExit(f"the simulator did not start: {banner!r}")
    return server, banner.split(" on ", 1)[1].split(" ", 1)[0].removesuffix("/v1")


def measure(processes: int, streams: int, seconds: float, loaders: int) -> dict[str, Any]:
    server, url = serve(processes)
    try:
        asyncio.run(_warm(url))
        requests, tokens = asyncio.run(scrape(url))
        cpu, started = cpu_seconds(server.pid), time.monotonic()
        load_cpu = _children_cpu()
        command = [sys.executable, __file__, "--load", url, "--seconds", str(seconds)]
        shares = [streams // loaders + (n < streams % loaders) for n in range(loaders)]
        runs = [subprocess.Popen([*command, "--streams", str(s)], stdout=subprocess.PIPE, text=True) for s in shares]
        seen = [json.loads(run.communicate()[0]) for run in runs]
        wall, cpu = time.monotonic() - started, cpu_seconds(server.pid) - cpu
        load_cpu = _children_cpu() - load_cpu
        after_requests, after_tokens = asyncio.run(scrape(url))
    finally:
        server.terminate()
        server.wait()
    tokens = after_tokens - tokens
    return {
        "processes": processes,
        "streams_at_once": streams,
        "streams_per_s": (after_requests - requests) / wall,
        "tokens_per_s": tokens / wall,
        "server_cpu_cores": cpu / wall,
        "cpu_us_per_token": cpu / tokens * 1e6 if tokens else None,
        "load_cpu_cores": load_cpu / wall,
        "errors": sum(s["errors"] for s in seen),
    }


def _children_cpu() -> float:
    """CPU of the load processes that ended (the server, a child too, is waited only at the end)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _warm(url: str) -> None:
    await load(url, 4, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--load-processes", type=int, default=2)
    parser.add_argument("--load", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        print(json.dumps(asyncio.run(load(args.load, args.streams, args.seconds))))
        return
    print(
        f"{os.cpu_count()} cores; {args.streams} streams at once for {args.seconds:g} s, {args.load_processes} "
        "load processes\n"
    )
    print(
        "| server processes | streams/s | tokens/s | server CPU (cores) | CPU per token | load CPU (cores) | errors |"
    )
    print("|---|---|---|---|---|---|---|")
    for processes in args.processes:
        r = measure(processes, args.streams, args.seconds, args.load_processes)
        per_token = f"{r['cpu_us_per_token']:.1f} µs" if r["cpu_us_per_token"] is not None else "-"
        print(
            f"| {processes} | {r['streams_per_s']:,.1f} | {r['tokens_per_s']:,.0f} | {r['server_cpu_cores']:.2f} | "
            f"{per_token} | {r['load_cpu_cores']:.2f} | {r['errors']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
