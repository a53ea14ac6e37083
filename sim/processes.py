"""`hotloop sim serve --processes P`: P simulators in P processes on one port, for the load one core can't stream.

Each process is a whole `SimServer` (its own prefix cache, batch and metrics) listening on the
same port with SO_REUSEPORT, so the kernel spreads connections over them by a hash of each
connection's addresses (a keep-alive connection stays on its process). A scrape of `/metrics`
on that port reaches one process only, so each process also serves its own metrics on a
loopback port of its own, and the one a scrape reaches reads all of them there and answers
with every process's series labelled `replica="N"`, as the in-process fleet labels its
replicas: summed over the label, a counter is exact once the requests are done, and a
process that doesn't answer makes the scrape a 503, never a partial sum.

The parent binds every socket before it starts a process (a taken port is its error, at once),
then only waits. The processes ignore SIGINT (Ctrl-C reaches the whole process group): they
stop when the parent closes their pipe, which its exit does too, so none outlives it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import socket
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import NoReturn

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from hotloop.sim.embedded import start_on
from hotloop.sim.engine import SimConfig
from hotloop.sim.fleet import LabelledMetrics
from hotloop.sim.server import SimServer

SCRAPE_SECONDS = 5.0  # a process's own /metrics, asked on loopback
STOP_SECONDS = 10.0  # for a process to finish after its pipe closes, before it is killed


class ReplicaStopped(RuntimeError):
    """A process ended while the others served: the message says which and how."""


def listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets listening on one port (picked if `port` is 0); OSError if anything holds it already.

    SO_REUSEPORT would let these join another server's group of the same user on that port: a
    plain bind first proves the port free.
    """
    with socket.create_server((host, port)) as probe:
        port = probe.getsockname()[1]
    return [socket.create_server((host, port), reuse_port=True) for _ in range(count)]


def serve(config: SimConfig, host: str, port: int, count: int, announce: Callable[[int], None]) -> None:
    """Serve `count` processes on `host`:`port` until SIGINT or SIGTERM; `announce` gets the port once they start.

    Raises OSError if the port is taken, ReplicaStopped if a process ends on its own (the others are stopped).
    """
    shared = listeners(host, port, count)
    port = shared[0].getsockname()[1]
    own = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    ports = [sock.getsockname()[1] for sock in own]
    context = multiprocessing.get_context("spawn")  # no copy of the parent's state, threads or loop
    pipes = [context.Pipe(duplex=False) for _ in range(count)]
    processes = [
        context.Process(
            target=_replica, args=(config, shared[n], own[n], ports, pipes[n][0]), name=f"hotloop-sim-{n}", daemon=True
        )
        for n in range(count)
    ]
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        # Ignored from birth (an ignored signal stays so through exec, and Python keeps it): a Ctrl-C that comes
        # while a process still imports must not print its traceback. The parent stops them.
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for process in processes:
                process.start()
        finally:
            signal.signal(signal.SIGINT, interrupt)
            for sock in (*shared, *own):
                sock.close()
            for reader, _ in pipes:
                reader.close()
        announce(port)
        ended = wait([process.sentinel for process in processes])
        stopped = next(n for n, process in enumerate(processes) if process.sentinel in ended)
        processes[stopped].join()
        raise ReplicaStopped(f"replica {stopped} stopped (exit code {processes[stopped].exitcode})")
    except KeyboardInterrupt:
        pass
    finally:
        # A group's signal (Ctrl-C, or `timeout`'s TERM) may come twice: once is enough to stop.
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _, writer in pipes:
            writer.close()  # each process sees its pipe end, and stops
        for process in (process for process in processes if process.pid is not None):
            process.join(STOP_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


def _replica(
    config: SimConfig, shared: socket.socket, own: socket.socket, ports: list[int], parent: Connection
) -> None:
    asyncio.run(_serve_replica(config, shared, own, ports, parent))


async def _serve_replica(
    config: SimConfig, shared: socket.socket, own: socket.socket, ports: list[int], parent: Connection
) -> None:
    server = SimServer(config)
    metrics = web.Application()
    metrics.router.add_get("/metrics", server.metrics)
    runners = [await start_on(server.app(metrics=Scraper(ports).metrics), shared), await start_on(metrics, own)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(parent.fileno(), stop.set)  # the parent writes nothing: readable means it closed or died
    try:
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


class Scraper:
    """`/metrics` on the shared port: every process's own, read on loopback and labelled with its number."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    async def metrics(self, request: web.Request) -> web.Response:
        async with ClientSession(timeout=ClientTimeout(total=SCRAPE_SECONDS)) as session:
            texts = await asyncio.gather(*(_scrape(session, port) for port in self.ports), return_exceptions=True)
        read = [text for text in texts if isinstance(text, str)]
        if len(read) < len(texts):
            n, failure = next((n, text) for n, text in enumerate(texts) if not isinstance(text, str))
            return web.Response(status=503, text=f"replica {n} did not answer its /metrics: {failure}\n")
        registry = CollectorRegistry()
        registry.register(LabelledMetrics([list(text_string_to_metric_families(text)) for text in read]))
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")


async def _scrape(session: ClientSession, port: int) -> str:
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            response.raise_for_status()
            return await response.text()
    except (ClientError, TimeoutError) as error:
        raise ConnectionError(str(error) or type(error).__name__) from None
