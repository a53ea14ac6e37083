"""What `hotloop watch` adds to a request's latency: the simulator directly, through a bare Python hop, and
through the watch, interleaved in one run.

Three ways to the same simulator, taken in turn request by request (the order rotating, so a
burst of load elsewhere on the machine falls on all three alike):

- direct: the client to the simulator;
- floor: through a bare aiohttp hop that forwards the request and streams the answer back and
  does nothing else (the same server and client session settings as the watch): what any
  pass-through in Python costs, the floor the watch can't go under;
- through: through the watch, which also reads, parses and logs its copy of every answer.

1. First byte: the simulator at zero latency; request sent → the answer body's first byte; and
   the whole answer (its end reaching the client, which an agent waits for before going on).
2. Per chunk: the simulator paced at PACE seconds a token (each chunk its own write); for each
   chunk k, its lateness against the pace (arrival_k − arrival_0 − k × PACE).

The simulator, the hop and the watch each run in a process of their own, as an agent, hotloop and
a model server would (threads in one process would share the GIL and add its 5 ms switch interval
to whichever waits). Every client keeps its connection alive, and so do the hop and the watch
towards the simulator: the simulator counts the connections it served, printed at the end (one
per way in, per simulator). The first WARMUP requests each way are discarded; then ROUNDS rounds
of REQUESTS each way, pooled for p50/p99, with the spread of the rounds' p99 beside.

    python benchmarks/passthrough.py [--requests N] [--rounds R] [--paced-requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

PACE = 0.002
WARMUP = 50
BODY = (
    b'{"model":"sim-balanced","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,'
    b'"messages":[{"role":"user","content":"say hello"}]}'
)
WAYS = ("direct", "floor", "through")
_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
)


def _serve(pipe: Connection, start: Callable[[], Awaitable[tuple[list[str], Callable[[], Awaitable[object]]]]]) -> None:
    """Start servers on this process's loop, send their URLs, and on the word stop, send back what `stop` returns and
    the CPU seconds the process spent serving."""

    async def main() -> None:
        urls, stop = await start()
        pipe.send(urls)
        ready = time.process_time()
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        busy = time.process_time() - ready
        pipe.send((await stop(), busy))

    asyncio.run(main())


def simulators(pipe: Connection) -> None:
    from hotloop.sim.embedded import start as serve
    from hotloop.sim.engine import NO_LATENCY, SimConfig
    from hotloop.sim.server import SimServer

    peers: list[set[object]] = [set(), set()]

    class Counted:
        """The simulator's app, noting each connection a request came on: keep-alive shows as one per client."""

        def __init__(self, server: SimServer, seen: set[object]) -> None:
            self._server, self._seen = server, seen

        def app(self) -> web.Application:
            app = self._server.app()

            @web.middleware
            async def note(request: web.Request, handler: Handler) -> web.StreamResponse:
                self._seen.add(request.transport.get_extra_info("peername") if request.transport else None)
                return await handler(request)

            app.middlewares.append(note)
            return app

    async def start() -> tuple[list[str], Callable[[], Awaitable[object]]]:
        instant = SimServer(SimConfig().with_latency(**vars(NO_LATENCY)))
        paced = SimServer(SimConfig().with_latency(ttft=0.0, prefill_per_token=0.0, decode_per_token=PACE))
        runners = [await serve(Counted(server, seen)) for server, seen in ((instant, peers[0]), (paced, peers[1]))]

        async def stop() -> object:
            for runner, _ in runners:
                await runner.cleanup()
            return [len(seen) for seen in peers]

        return [f"http://127.0.0.1:{port}" for _, port in runners], stop

    _serve(pipe, start)


def floor_hops(pipe: Connection, upstreams: list[str]) -> None:
    """A bare pass-through: the request forwarded, the answer streamed back block by block, nothing read."""

    async def start() -> tuple[list[str], Callable[[], Awaitable[object]]]:
        client = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            connector=aiohttp.TCPConnector(limit=0),
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        )
        runners, urls = [], []
        for upstream in upstreams:

            async def hop(request: web.Request, upstream: str = upstream) -> web.StreamResponse:
                body = await request.read()
                headers = {name: value for name, value in request.headers.items() if name.lower() not in _HOP}
                async with client.request(
                    request.method, upstream + request.path_qs, data=body, headers=headers, allow_redirects=False
                ) as answer:
                    response = web.StreamResponse(status=answer.status, reason=answer.reason)
                    for name, value in answer.headers.items():
                        if name.lower() not in _HOP or name.lower() == "content-length":
                            response.headers.add(name, value)
                    await response.prepare(request)
                    async for block in answer.content.iter_any():
                        await response.write(block)
                    await response.write_eof()
                return response

            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", hop)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")

        async def stop() -> object:
            for runner in runners:
                await runner.cleanup()
            await client.close()
            return None

        return urls, stop

    _serve(pipe, start)


def watches(pipe: Connection, upstreams: list[str]) -> None:
    from hotloop.watch import Watch, upstream_at

    async def start() -> tuple[list[str], Callable[[], Awaitable[object]]]:
        folder = Path(tempfile.mkdtemp(prefix="hotloop-passthrough-"))
        served = [
            Watch(upstream_at(upstream, "sim"), lambda conversation, event: None, folder=folder, workspace=folder)
            for upstream in upstreams
        ]
        urls = [await watch.start() for watch in served]

        async def stop() -> object:
            for watch in served:
                await watch.aclose()
            return None

        return urls, stop

    _serve(pipe, start)


class Process:
    def __init__(self, target: Callable[..., None], *args: object) -> None:
        self._pipe, theirs = multiprocessing.Pipe()
        self._process = multiprocessing.Process(target=target, args=(theirs, *args), daemon=True)
        self._process.start()
        self.urls: list[str] = self._pipe.recv()

    def stop(self) -> tuple[object, float]:
        self._pipe.send("stop")
        said: tuple[object, float] = self._pipe.recv()
        self._process.join(timeout=10)
        return said


async def one(session: aiohttp.ClientSession, url: str) -> tuple[list[float], float]:
    """Seconds from sending to each block's arrival, and to the answer's end."""
    sent = time.perf_counter()
    arrivals = []
    async with session.post(f"{url}/v1/chat/completions", data=BODY, headers={"content-type": "application/json"}) as r:
        async for _ in r.content.iter_any():
            arrivals.append(time.perf_counter() - sent)
    return arrivals, time.perf_counter() - sent


Samples = dict[str, list[list[float]]]  # way → per round, the samples


async def measure(urls: dict[str, str], requests: int, rounds: int, paced: bool) -> tuple[Samples, Samples, int]:
    first: Samples = {way: [] for way in WAYS}
    whole: Samples = {way: [] for way in WAYS}
    created = 0

    async def counted(*_: object) -> None:
        nonlocal created
        created += 1

    tracing = aiohttp.TraceConfig()
    tracing.on_connection_create_end.append(counted)
    async with aiohttp.ClientSession(trace_configs=[tracing]) as session:
        for n in range(WARMUP):
            await one(session, urls[WAYS[n % len(WAYS)]])
        for _ in range(rounds):
            for way in WAYS:
                first[way].append([])
                whole[way].append([])
            for n in range(requests):
                for k in range(len(WAYS)):
                    way = WAYS[(n + k) % len(WAYS)]
                    arrivals, end = await one(session, urls[way])
                    if paced:
                        first[way][-1] += [at - arrivals[0] - k * PACE for k, at in enumerate(arrivals)][1:]
                    else:
                        first[way][-1].append(arrivals[0])
                        whole[way][-1].append(end)
    return first, whole, created


def quantiles(values: list[float]) -> tuple[float, float]:
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return cut[49], cut[98]


def report(title: str, found: Samples) -> None:
    pooled = {way: quantiles([value for round_ in found[way] for value in round_]) for way in WAYS}
    spread = {way: [quantiles(round_)[1] for round_ in found[way]] for way in WAYS}
    count = sum(len(round_) for round_ in found["direct"])
    print(f"{title}  ({count} samples each way, {len(found['direct'])} rounds; ms)")
    print(f"  {'':10}{'p50':>8}{'p99':>8}   rounds' p99")
    for way in WAYS:
        p50, p99 = pooled[way]
        print(f"  {way:10}{p50 * 1e3:8.3f}{p99 * 1e3:8.3f}   {min(spread[way]) * 1e3:.3f}–{max(spread[way]) * 1e3:.3f}")
    for name, minus, plus in (
        ("added", "direct", "through"),
        ("floor", "direct", "floor"),
        ("over floor", "floor", "through"),
    ):
        p50, p99 = (pooled[plus][i] - pooled[minus][i] for i in (0, 1))
        print(f"  {name:10}{p50 * 1e3:+8.3f}{p99 * 1e3:+8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=300, help="first-byte requests each way, per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paced-requests", type=int, default=20, help="paced requests each way, per round")
    args = parser.parse_args()
    multiprocessing.set_start_method("spawn")
    sims = Process(simulators)
    hops = Process(floor_hops, sims.urls)
    watch = Process(watches, sims.urls)
    instant = dict(zip(WAYS, (sims.urls[0], hops.urls[0], watch.urls[0]), strict=True))
    paced = dict(zip(WAYS, (sims.urls[1], hops.urls[1], watch.urls[1]), strict=True))
    first, whole, created = asyncio.run(measure(instant, args.requests, args.rounds, False))
    report("first byte (zero-latency simulator)", first)
    report("whole answer (64 tokens, zero latency)", whole)
    chunks, _, paced_created = asyncio.run(measure(paced, args.paced_requests, args.rounds, True))
    report(f"per chunk, lateness against a {PACE * 1000:g} ms pace", chunks)
    _, watch_cpu = watch.stop()
    _, hop_cpu = hops.stop()
    served, _ = sims.stop()
    # Wall-clock figures on a shared machine carry its scheduling; CPU time per request is the work itself.
    each = 2 * (WARMUP // len(WAYS)) + args.rounds * (args.requests + args.paced_requests)
    print(f"CPU per request (a 64-token streamed answer): floor {hop_cpu / each * 1e3:.3f} ms, ", end="")
    print(
        f"through {watch_cpu / each * 1e3:.3f} ms (the watch reads, parses and logs its copy after each block is sent)"
    )
    print(f"connections: the client opened {created + paced_created} (one per way in, per simulator: 6);", end=" ")
    print(f"the simulators served {served} (the client, the hop, the watch: 3 each)")


if __name__ == "__main__":
    main()
