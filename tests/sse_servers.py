"""Servers that stream server-sent events as recorded or crafted, over loopback, and a request streamed through a
provider against one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from hotloop.providers.base import Provider
from hotloop.providers.conversation import ChatRequest
from hotloop.providers.events import ModelEvent

from support import serving


def sse_events(path: Path) -> list[bytes]:
    """A recorded stream cut into its server-sent events, each with its blank line, to write one by one as sent."""
    return [block + b"\n\n" for block in path.read_bytes().split(b"\n\n") if block.strip()]


def streaming(
    answer: Callable[[int], tuple[list[bytes], float]], first_sent: asyncio.Event | None = None
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A route's handler: the n-th request (from 0) gets `answer(n)`'s events, one write each, all but the first held
    back its seconds (as llama.cpp holds a tool call's first fragment); `first_sent` is set once a first one is out."""
    answered = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal answered
        events, hold = answer(answered)
        answered += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n, event in enumerate(events):
            await response.write(event)
            if n == 0 and first_sent is not None:
                first_sent.set()
            if n == 0 and hold:
                await asyncio.sleep(hold)  # real time between the first byte and the rest is the point
        await response.write_eof()
        return response

    return handler


async def serve_events(events: list[bytes], route: str, hold: float = 0.0) -> AsyncIterator[str]:
    """A one-route server that streams `events` at `route` (the rest `hold` seconds after the first), and yields its
    `/v1` base URL."""
    app = web.Application()
    app.router.add_post(route, streaming(lambda _: (events, hold)))
    async with serving(app) as url:
        yield url


async def streamed(
    events: list[bytes], route: str, open_provider: Callable[[str], Provider], request: ChatRequest
) -> list[ModelEvent]:
    """`request` streamed by the provider `open_provider` makes for the base URL of a server answering `events` at
    `route`."""
    async for base_url in serve_events(events, route):
        provider = open_provider(base_url)
        try:
            return [event async for event in provider.stream(request)]
        finally:
            await provider.aclose()
    raise AssertionError("server did not start")
