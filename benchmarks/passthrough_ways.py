"""The ways `benchmarks/passthrough.py` and `passthrough_instructions.py` compare, each served from a process of its
own: the simulator, a TCP relay, a bare aiohttp hop (and one on the watch's upstream client) and the watch (on
asyncio's loop or uvloop's), each process reporting the CPU it spent serving (`Busy`)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import multiprocessing
import resource
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple

import aiohttp
from aiohttp import web

PACE = 0.002
UVLOOP = importlib.util.find_spec("uvloop") is not None
_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
)
Start = Callable[[], Awaitable[tuple[list[str], Callable[[], Awaitable[None]]]]]


class Busy(NamedTuple):
    """What a process spent serving: CPU seconds in user space and in the kernel, and its context switches."""

    user: float
    system: float
    switches: int


def _serve(pipe: Connection, start: Start, uv: bool = False) -> None:
    """Start servers on this process's loop and send their URLs; on the word mark, start counting CPU time (the
    warm-up done), and on the word stop, send back what the process spent serving since (`Busy`)."""

    async def main() -> None:
        urls, stop = await start()
        pipe.send(urls)
        ready = resource.getrusage(resource.RUSAGE_SELF)
        while await asyncio.get_running_loop().run_in_executor(None, pipe.recv) == "mark":
            ready = resource.getrusage(resource.RUSAGE_SELF)
        done = resource.getrusage(resource.RUSAGE_SELF)
        await stop()
        switches = done.ru_nvcsw + done.ru_nivcsw - ready.ru_nvcsw - ready.ru_nivcsw
        pipe.send(Busy(done.ru_utime - ready.ru_utime, done.ru_stime - ready.ru_stime, switches))

    if uv:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())


def simulators(pipe: Connection) -> None:
    from hotloop.sim.embedded import start as serve
    from hotloop.sim.engine import NO_LATENCY, SimConfig
    from hotloop.sim.server import SimServer

    async def start() -> tuple[list[str], Callable[[], Awaitable[None]]]:
        instant = SimServer(SimConfig().with_latency(**vars(NO_LATENCY)))
        paced = SimServer(SimConfig().with_latency(ttft=0.0, prefill_per_token=0.0, decode_per_token=PACE))
        runners = [await serve(server) for server in (instant, paced)]

        async def stop() -> None:
            for runner, _ in runners:
                await runner.cleanup()

        return [f"http://127.0.0.1:{port}" for _, port in runners], stop

    _serve(pipe, start)


def relays(pipe: Connection, upstreams: list[str]) -> None:
    """Bytes copied both ways between each client connection and one of its own to the upstream, nothing read."""

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while block := await source.read(65536):
                sink.write(block)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            sink.close()

    async def start() -> tuple[list[str], Callable[[], Awaitable[None]]]:
        servers = []
        relaying: set[asyncio.Task[object]] = set()  # the kept-alive connections' copies, ended at the stop
        for upstream in upstreams:
            host, port = upstream.removeprefix("http://").split(":")

            async def relay(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str = host, port: str = port
            ) -> None:
                theirs, ours = await asyncio.open_connection(host, int(port))
                copies = asyncio.ensure_future(asyncio.gather(copy(reader, ours), copy(theirs, writer)))
                relaying.add(copies)
                copies.add_done_callback(relaying.discard)
                with contextlib.suppress(asyncio.CancelledError):
                    await copies

            servers.append(await asyncio.start_server(relay, "127.0.0.1", 0, backlog=1024))

        async def stop() -> None:
            for server in servers:
                server.close()
            for copies in list(relaying):
                copies.cancel()
            await asyncio.gather(*relaying, return_exceptions=True)

        return [f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}" for server in servers], stop

    _serve(pipe, start)


async def start_hops(upstreams: list[str], raw: bool = False) -> tuple[list[str], Callable[[], Awaitable[None]]]:
    """A bare pass-through to each upstream: the request forwarded, the answer streamed back block by block, nothing
    read; their URLs, and what stops them. `raw`: its upstream reached by the watch's own client (HTTP/1.1 on asyncio's
    transports, `hotloop.watch.upstream_client`), not aiohttp's."""
    lean = None
    if raw:  # the plain hop imports nothing of hotloop
        from hotloop.watch.upstream_client import UpstreamClient

        lean = UpstreamClient()
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
            if lean is not None:
                async with await lean.request(request.method, upstream, request.path_qs, headers, body) as answer:
                    return await _relayed(request, answer.status, answer.reason, answer.headers, answer.blocks())
            async with client.request(
                request.method, upstream + request.path_qs, data=body, headers=headers, allow_redirects=False
            ) as answered:
                blocks = answered.content.iter_any()
                return await _relayed(request, answered.status, answered.reason or "", answered.headers, blocks)

        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", hop)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")

    async def stop() -> None:
        for runner in runners:
            await runner.cleanup()
        if lean is not None:
            await lean.close()
        await client.close()

    return urls, stop


async def _relayed(
    request: web.Request, status: int, reason: str, headers: Mapping[str, str], blocks: AsyncIterator[bytes]
) -> web.StreamResponse:
    """The upstream's answer streamed back to the client block by block, its per-connection headers left out."""
    response = web.StreamResponse(status=status, reason=reason)
    for name, value in headers.items():
        if name.lower() not in _HOP or name.lower() == "content-length":
            response.headers.add(name, value)
    await response.prepare(request)
    async for block in blocks:
        await response.write(block)
    await response.write_eof()
    return response


def hops(pipe: Connection, upstreams: list[str], uv: bool, raw: bool = False) -> None:
    _serve(pipe, lambda: start_hops(upstreams, raw), uv)


async def start_watches(upstreams: list[str], folder: str) -> tuple[list[str], Callable[[], Awaitable[None]]]:
    """`hotloop watch` on each upstream, its sessions in a new folder under `folder`; their URLs, and what stops them."""
    from hotloop.watch import Watch, upstream_at

    where = Path(tempfile.mkdtemp(prefix="watch-", dir=folder))
    served = [
        Watch(upstream_at(upstream, "sim"), lambda conversation, event: None, folder=where, workspace=where)
        for upstream in upstreams
    ]
    urls = [await watch.start() for watch in served]

    async def stop() -> None:
        for watch in served:
            await watch.aclose()

    return urls, stop


def watches(pipe: Connection, upstreams: list[str], uv: bool, folder: str, tree: str = "") -> None:
    """`hotloop watch` on each upstream; `tree`: a copy of hotloop's tree to import it from instead."""
    if tree:
        parent = Path(tempfile.mkdtemp(prefix="tree-", dir=folder))  # removed with the sessions
        (parent / "hotloop").symlink_to(Path(tree).resolve())
        sys.path.insert(0, str(parent))  # ahead of the installed package's finder
    _serve(pipe, lambda: start_watches(upstreams, folder), uv)


class Process:
    def __init__(self, target: Callable[..., None], *args: object) -> None:
        self._pipe, theirs = multiprocessing.Pipe()
        self._process = multiprocessing.Process(target=target, args=(theirs, *args), daemon=True)
        self._process.start()
        self.urls: list[str] = self._pipe.recv()

    def mark(self) -> None:
        self._pipe.send("mark")

    def stop(self) -> Busy:
        """What it spent serving."""
        self._pipe.send("stop")
        busy: Busy = self._pipe.recv()
        self._process.join(timeout=30)
        return busy
