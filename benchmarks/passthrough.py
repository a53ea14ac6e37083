"""What `hotloop watch` costs against the floor of any pass-through: the simulator directly, through a TCP relay,
a bare aiohttp hop and the watch, interleaved in one run, at 1, 32 and 256 concurrent streams.

The ways to the same simulator (`hotloop sim` at zero latency, 64-token answers):

- direct: the client to the simulator;
- relay: a TCP relay on raw asyncio streams that copies bytes both ways and reads nothing: the floor
  of any pass-through in Python;
- hop: a bare aiohttp reverse proxy (the watch's server settings, and aiohttp's client) that forwards
  the request and streams the answer back, and does nothing else: the floor of an HTTP hop;
- hop/raw: the hop with its upstream reached by the watch's own client (`watch/upstream_client.py`: HTTP/1.1
  on asyncio's transports), not aiohttp's: what the watch's client spends, against aiohttp's;
- watch: `hotloop watch`, which also reads, parses and logs its copy of every answer, its sessions
  written to a folder on the real disk (never tmpfs: the disk is what the issue found slow);
- hop/uvloop, watch/uvloop: the same on uvloop's event loop, where uvloop is installed;
- watch/base, with `--baseline DIR`: the watch of another copy of hotloop's tree (`git archive <commit> | tar -x
  -C DIR`), for an A/B of a change in one interleaved run.

Each runs in a process of its own (`passthrough_ways.py`), as an agent, hotloop and a model server would (threads would
share the GIL and its 5 ms switch interval). Every client keeps its connections alive.

1. One stream at a time, taken in turn request by request, the order rotating (a burst of load
   elsewhere falls on every way alike): request sent → the answer's first byte, and its end; for
   a plain request and a ~100 KB one (a long conversation's history). Then a simulator paced at
   PACE a token: each later chunk's lateness against the pace.
2. 32 and 256 concurrent streams, each way in turn per round: requests per second, first bytes.
3. CPU per request: each process's CPU time over the run ÷ the requests it served.

It ends with the issue's targets beside the figures. `--quick` is a short run for iteration.

    python benchmarks/passthrough.py [--quick] [--rounds R] [--requests N] [--no-uvloop] [--data DIR] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))

from passthrough_ways import PACE, UVLOOP, Process, hops, relays, simulators, watches

SLOW = 0.050  # a first byte later than this is one an agent's user could notice
PLAIN = (
    b'{"model":"sim-balanced","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,'
    b'"messages":[{"role":"user","content":"say hello"}]}'
)
BIG = (  # ~100 KB: a system prompt and history as an agent sends them, late in a session
    b'{"model":"sim-balanced","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,'
    b'"messages":[{"role":"system","content":"' + b"You are a careful coding agent. " * 3200 + b'"},'
    b'{"role":"user","content":"say hello"}]}'
)
KEY = "Bearer sk-passthrough-benchmark-0123456789abcdef"  # masked in everything the watch writes


class Client:
    """Requests to each way, counted."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.served: Counter[str] = Counter()

    async def one(self, way: str, url: str, body: bytes) -> tuple[list[float], float]:
        """Seconds from sending to each block's arrival, and to the answer's end."""
        self.served[way] += 1
        sent = time.perf_counter()
        arrivals = []
        headers = {"content-type": "application/json", "authorization": KEY}  # as an agent sends its key
        async with self.session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as answer:
            async for _ in answer.content.iter_any():
                arrivals.append(time.perf_counter() - sent)
        return arrivals, time.perf_counter() - sent


Samples = dict[str, list[list[float]]]  # way → per round, the samples


async def in_turn(
    client: Client, urls: dict[str, str], body: bytes, requests: int, rounds: int, paced: bool = False
) -> tuple[Samples, Samples]:
    """One stream at a time, each way in turn, the order rotating: first bytes (or, paced, each chunk's lateness
    against the pace) and whole answers."""
    ways = list(urls)
    first: Samples = {way: [] for way in ways}
    whole: Samples = {way: [] for way in ways}
    for _ in range(rounds):
        for way in ways:
            first[way].append([])
            whole[way].append([])
        for n in range(requests):
            for k in range(len(ways)):
                way = ways[(n + k) % len(ways)]
                arrivals, end = await client.one(way, urls[way], body)
                if paced:
                    first[way][-1] += [at - arrivals[0] - i * PACE for i, at in enumerate(arrivals)][1:]
                else:
                    first[way][-1].append(arrivals[0])
                    whole[way][-1].append(end)
    return first, whole


async def together(
    client: Client, urls: dict[str, str], streams: int, each: int, rounds: int
) -> tuple[Samples, dict[str, list[float]]]:
    """`streams` clients at once, `each` requests apiece, one way at a time, the order rotating per round (and a
    burst first, unmeasured, to open the connections): first bytes, and requests per second per round."""
    ways = list(urls)
    first: Samples = {way: [] for way in ways}
    rates: dict[str, list[float]] = {way: [] for way in ways}

    async def burst(way: str, seen: list[float]) -> float:
        async def stream() -> None:
            for _ in range(each):
                arrivals, _ = await client.one(way, urls[way], PLAIN)
                seen.append(arrivals[0])

        began = time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(streams)))
        return streams * each / (time.perf_counter() - began)

    for way in ways:
        await burst(way, [])
    for r in range(rounds):
        for k in range(len(ways)):
            way = ways[(r + k) % len(ways)]
            first[way].append([])
            rates[way].append(await burst(way, first[way][-1]))
    return first, rates


def quantiles(values: list[float]) -> tuple[float, float]:
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return cut[49], cut[98]


def pooled(found: Samples) -> dict[str, tuple[float, float]]:
    return {way: quantiles([value for round_ in rounds for value in round_]) for way, rounds in found.items()}


def slow(found: Samples) -> dict[str, int]:
    return {way: sum(value > SLOW for round_ in rounds for value in round_) for way, rounds in found.items()}


def report(title: str, found: Samples, counted: bool = True) -> None:
    """p50 and p99 per way (the rounds' p99 beside), each against direct and the hop; first bytes over SLOW."""
    figures, late = pooled(found), slow(found)
    count = sum(len(round_) for round_ in found["direct"])
    print(f"\n{title}  ({count} each way, {len(found['direct'])} rounds; ms)")
    print(f"  {'':14}{'p50':>8}{'p99':>8}{'rounds p99':>16}{'+direct':>16}{'+hop':>16}", end="")
    print(f"{'>50ms':>7}" if counted else "")
    for way, (p50, p99) in figures.items():
        spread = [quantiles(round_)[1] * 1e3 for round_ in found[way]]
        direct = f"{(p50 - figures['direct'][0]) * 1e3:+.2f}/{(p99 - figures['direct'][1]) * 1e3:+.2f}"
        hop = f"{(p50 - figures['hop'][0]) * 1e3:+.2f}/{(p99 - figures['hop'][1]) * 1e3:+.2f}"
        line = f"  {way:14}{p50 * 1e3:8.2f}{p99 * 1e3:8.2f}{f'{min(spread):.1f}–{max(spread):.1f}':>16}"
        print(f"{line}{direct:>16}{hop:>16}", end="")
        print(f"{late[way]:7d}" if counted else "")


def report_rates(streams: int, first: Samples, rates: dict[str, list[float]]) -> dict[str, float]:
    """Requests per second per way (the median round's), against the hop's; first bytes."""
    figures, late = pooled(first), slow(first)
    median = {way: statistics.median(values) for way, values in rates.items()}
    print(f"\n{streams} concurrent streams  ({len(rates['direct'])} rounds; first byte in ms)")
    print(f"  {'':14}{'req/s':>8}{'÷ hop':>8}{'fb p50':>9}{'fb p99':>9}{'>50ms':>7}")
    for way, rate in median.items():
        p50, p99 = figures[way]
        print(f"  {way:14}{rate:8.0f}{rate / median['hop']:8.2f}{p50 * 1e3:9.1f}{p99 * 1e3:9.1f}{late[way]:7d}")
    return median


def filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (`ext4`, `tmpfs`), from the mount table."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    found = max((point for point in mounts if str(path).startswith(point[0])), key=lambda point: len(point[0]))
    return found[1]


def data_folder(given: str | None) -> Path:
    """Where the watch writes its sessions: a new folder on the real disk (under the working directory if the
    temporary folder is a tmpfs)."""
    if given:
        return Path(tempfile.mkdtemp(prefix="hotloop-passthrough-", dir=given))
    base = Path(tempfile.gettempdir())
    return Path(
        tempfile.mkdtemp(prefix="hotloop-passthrough-", dir=Path.cwd() if filesystem(base) == "tmpfs" else base)
    )


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute) for iteration")
    parser.add_argument("--rounds", type=int, help="rounds of every measure (default 5; quick 2)")
    parser.add_argument("--requests", type=int, help="one-at-a-time requests each way per round (default 200)")
    parser.add_argument("--no-uvloop", action="store_true", help="leave out the ways on uvloop")
    parser.add_argument("--data", metavar="DIR", help="write the watch's sessions under DIR (default: a temp folder)")
    parser.add_argument("--baseline", metavar="DIR", help="add the watch of the copy of hotloop's tree in DIR")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    requests = args.requests or (20 if args.quick else 200)
    # Per round: requests of ~100 KB and paced ones each way; each of 32 streams' requests, and each of 256's.
    big, paced, each = (8, 3, {32: 2, 256: 1}) if args.quick else (requests // 2, 10, {32: 24, 256: 3})
    multiprocessing.set_start_method("spawn")
    folder = data_folder(args.data)
    uv = UVLOOP and not args.no_uvloop
    sims = Process(simulators)
    servers = {
        "relay": Process(relays, sims.urls),
        "hop": Process(hops, sims.urls, False),
        "hop/raw": Process(hops, sims.urls, False, True),
        "watch": Process(watches, sims.urls, False, str(folder)),
    }
    if args.baseline:
        servers["watch/base"] = Process(watches, sims.urls, False, str(folder), args.baseline)
    if uv:
        servers["hop/uvloop"] = Process(hops, sims.urls, True)
        servers["watch/uvloop"] = Process(watches, sims.urls, True, str(folder))
    instant = {"direct": sims.urls[0], **{way: process.urls[0] for way, process in servers.items()}}
    slowed = {"direct": sims.urls[1], **{way: process.urls[1] for way, process in servers.items()}}

    async def measure() -> tuple[Client, dict[str, Samples], dict[int, dict[str, list[float]]]]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
            client = Client(session)
            found: dict[str, Samples] = {}
            # Warm-up: connections opened, code paths run, and the watch's first deferred work done (its session
            # summary is written at most once a second, and its first write loads the price tables).
            await in_turn(client, instant, PLAIN, 10, 1)
            await in_turn(client, instant, BIG, 2, 1)
            await asyncio.sleep(1.5)
            await in_turn(client, instant, PLAIN, 5, 1)
            for process in servers.values():
                process.mark()
            client.served.clear()
            found["plain"], found["whole"] = await in_turn(client, instant, PLAIN, requests, rounds)
            found["big"], _ = await in_turn(client, instant, BIG, big, rounds)
            found["paced"], _ = await in_turn(client, slowed, PLAIN, paced, rounds, paced=True)
            rates: dict[int, dict[str, list[float]]] = {}
            for streams in (32, 256):
                found[f"c{streams}"], per_round = await together(client, instant, streams, each[streams], rounds)
                rates[streams] = per_round
            return client, found, rates

    print(f"sessions written to {folder} ({filesystem(folder)}); load {os.getloadavg()[0]:.2f} at the start")
    client, found, per_round = asyncio.run(measure())
    busy = {way: process.stop() for way, process in servers.items()}
    sims.stop()
    shutil.rmtree(folder, ignore_errors=True)
    report("first byte, plain request (zero-latency simulator)", found["plain"])
    report(f"first byte, {len(BIG) // 1024} KB request", found["big"])
    report("whole answer, plain request (64 tokens)", found["whole"], counted=False)
    report(f"each later chunk, lateness against a {PACE * 1e3:g} ms pace", found["paced"], counted=False)
    rates = {streams: report_rates(streams, found[f"c{streams}"], per_round[streams]) for streams in (32, 256)}
    cpu = {way: (busy[way].user + busy[way].system) / client.served[way] for way in servers}
    print("\nCPU per request (the process's CPU time over the run ÷ the requests it served; ms), its user and system")
    print("time, and the process's context switches per request")
    for way, seconds in cpu.items():
        user, system, switches = (figure / client.served[way] for figure in busy[way])
        print(
            f"  {way:14}{seconds * 1e3:8.3f}{seconds / cpu['hop']:8.2f}× the hop's"
            f"   user {user * 1e3:.3f}  system {system * 1e3:.3f}  switches {switches:.2f}"
        )
    print(f"\ntargets (the watch against the hop){'; and on uvloop, against the hop on uvloop' if uv else ''}")
    for watch, hop in (("watch", "hop"), ("watch/uvloop", "hop/uvloop")) if uv else (("watch", "hop"),):
        for kind in ("plain", "big"):
            added = (pooled(found[kind])[watch][1] - pooled(found[kind])[hop][1]) * 1e3
            print(f"  {watch}: first byte p99 within 2 ms of the hop's, {kind}: {added:+.2f} ms  {verdict(added <= 2)}")
        ratio = rates[32][watch] / rates[32][hop]
        print(f"  {watch}: throughput at 32 streams ≥ 0.9 of the hop's: {ratio:.2f}  {verdict(ratio >= 0.9)}")
        times = cpu[watch] / cpu[hop]
        print(f"  {watch}: CPU per request ≤ 1.5× the hop's: {times:.2f}×  {verdict(times <= 1.5)}")
        # One stream at a time: with 32 or 256 at once every way, direct too, queues past 50 ms (their tables).
        late = {key: (slow(found[key])[watch], slow(found[key])[hop]) for key in ("plain", "big")}
        said = ", ".join(f"{key} {mine} vs {theirs}" for key, (mine, theirs) in late.items())
        met = all(mine <= theirs for mine, theirs in late.values())
        print(f"  {watch}: no first byte over 50 ms the hop doesn't have, one stream: {said}  {verdict(met)}")
    lean = cpu["hop/raw"] / cpu["hop"]
    print(f"  the hop on the watch's upstream client, not aiohttp's, spent {lean:.2f}× the hop's CPU")
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
