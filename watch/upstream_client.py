"""The watch's HTTP/1.1 client to its upstream: asyncio's transports, llhttp's parser (httptools), and a pool of
kept-alive connections per upstream.

Not aiohttp's client: a bare hop forwarding with it spent ~0.23 of its CPU a request there; the same hop on
this client spends 0.77× its CPU (`hop/raw` in `benchmarks/passthrough.py`). This one does what a pass-through
needs and no more: the request goes as the client sent it (its headers but the per-connection ones, its body
as bytes or as it arrives), and the answer comes back as blocks, as they arrive, undecoded: no cookies, no
redirects, no decompression, no proxy. The framing is llhttp's (Node's parser, strict): a malformed answer, a head past
`MAX_HEAD` or a connection closed before the answer's end is an `UpstreamFault`, one line. A slow client slows
the upstream: the connection stops reading while `HELD` bytes wait to be taken.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

CONNECT_TIMEOUT = 10.0  # seconds to open a connection; an answer takes as long as it takes
MAX_HEAD = 64 * 1024  # bytes of an answer's status line and headers
HELD = 256 * 1024  # bytes of an answer held for a client that hasn't taken them, before the upstream is paused
# Seconds a connection waits in the pool, as aiohttp's: a server that closes one idle longer (nginx and aiohttp at 75 s)
# can't close it just as a request goes out on it, which would fail that request.
IDLE = 15.0
_BODILESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"})  # no body: no Content-Length either


class UpstreamFault(Exception):
    """The upstream failed a request it was sent: `str(fault)` says how, in one line."""


class _Origin:
    """Where a base URL's requests go: its connection's address, its `Host`, and the path before theirs."""

    def __init__(self, base: str) -> None:
        url = URL(base)
        if url.scheme not in ("http", "https") or not url.raw_host:
            raise UpstreamFault(f"{base} is not an http:// or https:// URL")
        self.tls = url.scheme == "https"
        self.host, self.port = url.raw_host, url.port or (443 if self.tls else 80)
        named = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = named if url.is_default_port() else f"{named}:{self.port}"
        self.prefix = url.raw_path.rstrip("/")


class _Answer:
    """One request's answer as its connection receives it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, head_only: bool) -> None:
        self.head_only = head_only
        self.status = 0
        self.reason = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.head: asyncio.Future[None] = loop.create_future()
        self.blocks: collections.deque[bytes] = collections.deque()
        self.held = 0
        self.ended = False
        self.fault: UpstreamFault | None = None
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """A connection to the upstream, one answer at a time; llhttp's callbacks fill the answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.answer: _Answer | None = None
        self.closed = False
        self.reusable = False
        self._parser = httptools.HttpResponseParser(self)
        self._head_size = 0
        self._interim = False
        self._framed = False
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without being asyncio's class

    def send(self, answer: _Answer, data: bytes) -> None:
        assert self.transport is not None
        self.answer, self._head_size, self.reusable = answer, 0, False
        if self.closed:  # closed since it was taken from the pool: no answer will come on it
            self._fail("it closed the connection before the answer's end")
            return
        self.transport.write(data)

    async def drained(self) -> None:
        if self._writable is not None:
            await self._writable

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None or answer.ended or answer.fault is not None:
            self.close()  # bytes no request asked for: the connection can't be trusted with another
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("it switched protocols, which a pass-through of HTTP answers doesn't")
        except httptools.HttpParserError as error:
            self._fail(f"its answer is not HTTP/1.1 ({str(error).strip() or type(error).__name__})")
        else:
            # Counted while the head is incomplete: a block that ends it may bring the body's start with it.
            if not answer.head.done():
                self._head_size += len(data)
                if self._head_size > MAX_HEAD:
                    self._fail(f"its answer's head is longer than {MAX_HEAD:,} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()
        answer = self.answer
        if answer is None or answer.ended or answer.fault is not None:
            return
        if answer.head.done() and not self._framed:  # an answer of no stated length ends with its connection
            answer.ended = True
            answer.wake()
        else:
            self._fail("it closed the connection before the answer's end")

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, why: str) -> None:
        answer = self.answer
        if answer is not None and not answer.ended and answer.fault is None:
            answer.fault = UpstreamFault(why)
            if not answer.head.done():
                answer.head.set_exception(answer.fault)
            answer.wake()
        self.close()

    # llhttp's callbacks, in the order of the answer

    def on_status(self, status: bytes) -> None:
        answer = self.answer
        assert answer is not None
        if answer.ended:  # raised through llhttp: bytes after the answer's end fail it (`data_received`)
            raise UpstreamFault("it sent more than one answer")
        answer.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.answer is not None
        self.answer.fields.append((name, value))

    def on_headers_complete(self) -> None:
        answer = self.answer
        assert answer is not None
        status = self._parser.get_status_code()
        if status < 200:  # an interim answer (103 Early Hints): the answer follows it
            self._interim = True
            answer.reason, answer.fields = b"", []
            return
        answer.status = status
        self._framed = any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in answer.fields)
        answer.head.set_result(None)
        if answer.head_only:  # llhttp can't be told a HEAD's answer has no body: this connection goes no further
            answer.ended = True
            self.close()

    def on_body(self, body: bytes) -> None:
        answer = self.answer
        assert answer is not None and self.transport is not None
        answer.blocks.append(body)
        answer.held += len(body)
        if answer.held > HELD:
            self.transport.pause_reading()
        answer.wake()

    def on_message_complete(self) -> None:
        answer = self.answer
        assert answer is not None
        if self._interim:
            self._interim = False
            return
        answer.ended = True
        self.reusable = self._parser.should_keep_alive()
        answer.wake()


class UpstreamAnswer:
    """An answer's status, reason and headers, and its body as blocks (`blocks`); leaving it (`async with`) gives
    its connection back to the pool if the answer was read to its end, else closes it."""

    def __init__(
        self,
        client: UpstreamClient,
        key: tuple[bool, str, int],
        connection: _Connection,
        sending: asyncio.Future[None] | None,
    ) -> None:
        """`sending`: the body still on its way, where it streams."""
        answer = connection.answer
        assert answer is not None
        self.status = answer.status
        self.reason = answer.reason.decode("latin-1")
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in answer.fields:
            headers.add(name.decode("latin-1"), value.decode("utf-8", "surrogateescape"))
        self.headers = CIMultiDictProxy(headers)
        self._client, self._key, self._connection, self._answer, self._sending = (
            client,
            key,
            connection,
            answer,
            sending,
        )

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    def at_eof(self) -> bool:
        return self._answer.ended and not self._answer.blocks

    async def blocks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: all that has arrived, each time; an `UpstreamFault` where it broke off."""
        answer, connection = self._answer, self._connection
        loop = asyncio.get_running_loop()
        while True:
            if answer.blocks:
                block = answer.blocks.popleft() if len(answer.blocks) == 1 else b"".join(answer.blocks)
                answer.blocks.clear()
                if answer.held > HELD and connection.transport is not None and not connection.closed:
                    connection.transport.resume_reading()
                answer.held = 0
                yield block
            elif answer.fault is not None:
                raise answer.fault
            elif answer.ended:
                return
            else:
                answer.waiter = loop.create_future()
                await answer.waiter

    async def __aenter__(self) -> UpstreamAnswer:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        connection, sending = self._connection, self._sending
        whole = self._answer.ended and not self._answer.blocks and (sending is None or _sent(sending))
        if sending is not None and not sending.done():
            sending.cancel()
        if whole and connection.reusable and not connection.closed:
            self._client._keep(self._key, connection)
        else:
            connection.close()


class UpstreamClient:
    """Requests to upstreams, on connections kept alive between them (`close` closes those)."""

    def __init__(self) -> None:
        self._origins: dict[str, _Origin] = {}
        self._idle: dict[tuple[bool, str, int], list[tuple[_Connection, float]]] = {}  # and when each goes
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        base: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | AsyncIterator[bytes] | None,
    ) -> UpstreamAnswer:
        """`method` on `path` (with its query) under the base URL `base`, once its answer's head has come. Raises
        `UpstreamFault` for an answer that isn't one, `OSError` or `TimeoutError` for an upstream out of reach."""
        origin = self._origins.get(base) or self._origins.setdefault(base, _Origin(base))
        key = (origin.tls, origin.host, origin.port)
        connection = await self._connection(origin, key)
        head = [f"{method} {origin.prefix}{path} HTTP/1.1", f"Host: {origin.host_header}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        chunked = False
        if isinstance(body, bytes):
            head.append(f"Content-Length: {len(body)}")
        elif body is None:
            if method not in _BODILESS:
                head.append("Content-Length: 0")
        elif "content-length" not in {name.lower() for name in headers}:
            chunked = True
            head.append("Transfer-Encoding: chunked")
        sent = "\r\n".join(head).encode("utf-8", "surrogateescape") + b"\r\n\r\n"
        answer = _Answer(asyncio.get_running_loop(), method == "HEAD")
        connection.send(answer, sent + body if isinstance(body, bytes) else sent)
        sending = None
        if body is not None and not isinstance(body, bytes):
            sending = asyncio.ensure_future(_send_body(connection, body, chunked))
        try:
            await answer.head
        except BaseException:
            if sending is not None and not _sent(sending):
                sending.cancel()
            connection.close()
            raise
        return UpstreamAnswer(self, key, connection, sending)

    def _keep(self, key: tuple[bool, str, int], connection: _Connection) -> None:
        """`connection`, its answer read whole, for the next request to `key` within `IDLE` seconds."""
        connection.answer = None
        self._idle.setdefault(key, []).append((connection, time.monotonic() + IDLE))

    async def _connection(self, origin: _Origin, key: tuple[bool, str, int]) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            connection, goes = idle.pop()
            if goes < time.monotonic() or connection.closed:
                connection.close()
            elif connection.transport is not None and not connection.transport.is_closing():
                return connection
        if origin.tls and self._tls is None:
            self._tls = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(CONNECT_TIMEOUT):
            _, connection = await loop.create_connection(
                _Connection,
                origin.host,
                origin.port,
                ssl=self._tls if origin.tls else None,
                server_hostname=origin.host if origin.tls else None,
            )
        return connection

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection, _ in idle:
                connection.close()
        self._idle.clear()


def _sent(sending: asyncio.Future[None]) -> bool:
    """Whether a streamed body went whole (a client that left mid-body fails it: the connection is done)."""
    return sending.done() and not sending.cancelled() and sending.exception() is None


async def _send_body(connection: _Connection, body: AsyncIterator[bytes], chunked: bool) -> None:
    """A body that streams, sent as it arrives: in chunks where its length wasn't said."""
    async for block in body:
        if connection.closed or connection.transport is None:
            return
        if block:
            connection.transport.write(b"%x\r\n%b\r\n" % (len(block), block) if chunked else block)
            await connection.drained()
    if chunked and not connection.closed and connection.transport is not None:
        connection.transport.write(b"0\r\n\r\n")
