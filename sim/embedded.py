"""The simulator on a socket: `start` serves it on the caller's event loop (`hotloop sim serve`),
`EmbeddedServer` on a loopback port in a thread of its own (the runtime, tests and benchmarks).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Protocol, Self

from aiohttp import web

from hotloop.sim.engine import SimConfig
from hotloop.sim.server import SimServer


class Served(Protocol):
    """What `start` serves: a simulator, or a fleet of them behind a router."""

    def app(self) -> web.Application: ...


async def start(server: Served, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int]:
    """Bind and start serving; returns the runner and the bound port."""
    sock = socket.create_server((host, port), reuse_port=False)
    return await start_on(server.app(), sock), sock.getsockname()[1]


async def start_on(app: web.Application, sock: socket.socket) -> web.AppRunner:
    """Serve `app` on a listening socket; returns the runner, whose cleanup stops it."""
    # A client that disconnects cancels its request's handler, freeing its slot, as vLLM aborts such requests.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


class EmbeddedServer:
    """A served simulator on a loopback port, in a thread with its own event loop.

    Its own loop keeps the server's pacing independent of whatever the client's loop is
    busy with, as a real server in another process would be.
    """

    def __init__(self, served: Served) -> None:
        self._served = served
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's root: Anthropic clients add `/v1/messages` to it."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, which clients add `/chat/completions` to."""
        return f"{self.url}/v1"

    def start(self) -> Self:
        # In-process, the server's logs would land on the user's terminal; errors reach the client as HTTP 500.
        logging.getLogger("aiohttp").addHandler(logging.NullHandler())
        logging.getLogger("aiohttp").propagate = False
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                self._runner, self.port = loop.run_until_complete(start(self._served))
            except BaseException as error:  # reported to the starting thread
                failure.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="hotloop-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class EmbeddedSimulator(EmbeddedServer):
    """One simulator, embedded: `server` is the SimServer, for its recorded requests and engine."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.server = SimServer(config)
        super().__init__(self.server)
