"""The pass-through: an aiohttp server on loopback that forwards every request to the upstream and streams the
answer back as it arrives, while hotloop reads a copy.

Byte for byte both ways: the request body is sent as received, with the client's own headers (its
key among them: forwarded, and masked in everything hotloop writes); the answer's status, headers and
body come back unchanged, compressed or not (the upstream client, `upstream_client.py`, doesn't inflate;
the reader inflates its own copy). Each block is written to the client before hotloop reads it, so reading
never delays a byte. The request is read while the upstream works on it; one bigger than `MAX_READ`, or of unknown
length, streams through as it arrives, and hotloop keeps at most `MAX_READ` bytes of it. Whatever goes
wrong (a body that isn't JSON or is nested past any parser, one too big to read, an upstream that
refuses or breaks off, a client that leaves mid-stream) is one line, and the pass-through goes on: an
upstream that drops the connection mid-answer has the client's connection closed the same way.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from hotloop.agent.events import Notice, SideOf
from hotloop.providers.protocols import Wire
from hotloop.providers.transport import ANTHROPIC_URL, OPENAI_URL
from hotloop.sessions.log import SessionLog
from hotloop.sessions.masking import Masker
from hotloop.sessions.titles import headline
from hotloop.watch.conversation import Conversation, ConversationInfo, Sink
from hotloop.watch.keepalive import Held, WatchKeepAlive
from hotloop.watch.lineage import Lineage
from hotloop.watch.reading import ResponseReader
from hotloop.watch.upstream_client import UpstreamAnswer, UpstreamClient, UpstreamFault
from hotloop.watch.upstream_faults import cause_of, refusal_said
from hotloop.watch.wire import PROTOCOLS, WatchedRequest, WireError, agent_of, read_request

# Per connection, not per message: never forwarded (RFC 9110 §7.6.1), nor the client's Host.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_AUTH = ("authorization", "x-api-key", "api-key")
_KEPT_ERROR = 4096  # bytes of a refusal's body kept to say what it was
# Bytes of a request body hotloop reads (Anthropic's own limit on a Messages request): a bigger one is forwarded as it
# arrives, unread, and costs the watch no more than its buffers. A conversation's explainer keeps its last two bodies.
MAX_READ = 32 * 1024 * 1024

if TYPE_CHECKING:
    from hotloop.config import KeepaliveSettings
    from hotloop.providers.server_metrics import Residency


@dataclass(frozen=True)
class Target:
    name: str  # the provider's name in the logs
    url: str  # the server's root: the request's path is appended


@dataclass(frozen=True)
class Upstream:
    """Where requests go: Anthropic Messages to one target, the OpenAI protocols to another."""

    anthropic: Target
    openai: Target
    cost_per_hour: float | None = None

    def __str__(self) -> str:
        """`anthropic (https://api.anthropic.com) and openai (https://api.openai.com)`, or the one server."""
        targets = dict.fromkeys(f"{target.name} ({target.url})" for target in (self.anthropic, self.openai))
        return " and ".join(targets)

    def of(self, path: str, headers: Mapping[str, str]) -> Target:
        anthropic = path.startswith("/v1/messages") or (path == "/v1/models" and "anthropic-version" in headers)
        return self.anthropic if anthropic else self.openai


HOSTED = Upstream(Target("anthropic", ANTHROPIC_URL), Target("openai", OPENAI_URL))


def upstream_at(url: str, name: str, cost_per_hour: float | None = None) -> Upstream:
    """Every protocol to one server; an OpenAI-style base URL (`…/v1`) is taken at its root."""
    target = Target(name, url.rstrip("/").removesuffix("/v1"))
    return Upstream(target, target, cost_per_hour)


class Watch:
    """The pass-through and the conversations it has seen.

    `sink(conversation_id, event)` gets every event in order, after the conversation's session log
    has it, every secret the watch knows masked in it; the id is "" for a line about the pass-through
    itself (a request it couldn't read, an upstream it couldn't reach). `conversations` holds each
    conversation's `ConversationInfo` from before its first event; its `parent` is set later, with a `SideOf`
    event, for one found to be a side request after it began. A frontend may set `sink` before `start`.
    With `keepalive` on, the conversations' caches are pinged in their pauses (`watch/keepalive.py`).
    """

    def __init__(
        self,
        upstream: Upstream,
        sink: Sink,
        *,
        folder: Path,
        workspace: Path,
        secrets: Sequence[str] = (),
        keepalive: KeepaliveSettings | None = None,
    ) -> None:
        self.upstream = upstream
        self.conversations: dict[str, ConversationInfo] = {}
        self.sink = sink
        self._folder = folder
        self._workspace = workspace
        self._masker = Masker(list(secrets))  # the config's secrets, and every key a client sends (`_learn`)
        self._seen: set[str] = set()  # the keys clients have sent
        self._open: dict[str, Conversation] = {}
        self._lineage = Lineage()
        self._runner: web.AppRunner | None = None
        self._client: UpstreamClient | None = None
        self.residency: Callable[[], Residency | None] = lambda: None  # the upstream's, where a frontend scrapes it
        self.keepalive = None if keepalive is None else WatchKeepAlive(keepalive, lambda: self._client, self._lineage)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on `host:port` (0: a free port); the pass-through's root URL, which Anthropic clients take as
        their base URL (OpenAI clients add `/v1`)."""
        # One pool, kept alive: a request after the first goes out on a warm connection, no handshake.
        self._client = UpstreamClient()
        app = web.Application(client_max_size=MAX_READ)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A client that leaves cancels its handler, which closes the upstream request.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.create_server((host, port))
        await web.SockSite(self._runner, sock).start()
        bound = sock.getsockname()
        return f"http://{bound[0]}:{bound[1]}"

    async def aclose(self) -> None:
        if self.keepalive is not None:
            await self.keepalive.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()
        for conversation in self._open.values():
            conversation.close()
        self._open.clear()

    def _masked(self, text: str) -> str:
        """`text` without any secret the watch knows: the config's, and every key a client has sent."""
        return self._masker.masked(text.encode()).decode()

    def _notice(self, message: str, level: str = "warning") -> None:
        self.sink("", Notice(level="error" if level == "error" else "warning", message=self._masked(message)))

    def _learn(self, headers: Mapping[str, str]) -> None:
        """The keys a request carries, masked from now on wherever hotloop writes."""
        keys = [value.removeprefix("Bearer ") for name in _AUTH if (value := headers.get(name))]
        if not keys or self._seen.issuperset(keys):
            return  # an agent sends its one key with every request: looked at once
        self._seen.update(keys)
        if self._masker.add(keys):
            for conversation in self._open.values():
                conversation.masker.add(keys)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        started, started_at = time.perf_counter(), time.time()
        assert self._client is not None
        self._learn(request.headers)
        target = self.upstream.of(request.path, request.headers)
        headers = {name: value for name, value in request.headers.items() if name.lower() not in _HOP}
        protocol = PROTOCOLS.get(request.path) if request.method == "POST" else None
        length = request.content_length
        reading: asyncio.Future[WatchedRequest | None] | None = None
        incoming: _Incoming | None = None
        data: bytes | AsyncIterator[bytes] | None
        body = b""
        if not request.body_exists or (length is not None and length <= MAX_READ):
            body = await request.read()
            data = body if request.body_exists else None  # a GET goes on without a body, as it came
            # Hotloop reads its copy once the request is on the wire: a large body parsed first would delay the
            # upstream by the parse. The reading is a task, which runs once the upstream client has written the
            # request and waits for the answer.
            reading = asyncio.ensure_future(self._read(protocol, request, body)) if protocol is not None else None
        else:
            incoming = _Incoming(request, keep=protocol is not None and length is None)
            data = incoming.blocks()
            if length is not None:
                headers["Content-Length"] = str(length)  # as the client framed it, not re-chunked
        try:
            # A redirect is the client's to follow (it would carry the key to wherever the upstream points).
            upstream = await self._client.request(request.method, target.url, request.path_qs, headers, data)
        except (TimeoutError, UpstreamFault, OSError) as error:
            line = f"cannot reach {target.name} ({target.url}): {cause_of(error)}"
            self._notice(line, "error")
            failure = {"type": "error", "error": {"type": "api_error", "message": f"hotloop watch: {line}"}}
            return web.json_response(failure, status=502)
        except asyncio.CancelledError:
            self._notice(f"the client left after {time.perf_counter() - started:.1f} s, before {target.name} answered")
            raise
        async with upstream:
            if incoming is not None and protocol is not None:
                watched = self._read_incoming(protocol, request, incoming)
            else:
                watched = await reading if reading is not None else None
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP or name.lower() == "content-length":
                    response.headers.add(name, value)
            await response.prepare(request)
            if watched is not None and 200 <= upstream.status < 300:
                encoding = upstream.headers.get("content-encoding", "")
                streamed = upstream.content_type == "text/event-stream"

                opened: list[tuple[Conversation, ResponseReader]] = []

                def opening() -> tuple[Conversation, ResponseReader]:
                    conversation = self._conversation(watched, request.headers, target)
                    conversation.begin(watched, started, started_at)
                    where = f"{target.name} ({target.url})"
                    reader = ResponseReader(
                        watched.protocol, watched.model, where, started, streamed, encoding, watched.cap
                    )
                    opened.append((conversation, reader))
                    return conversation, reader

                await self._relay(request, upstream, response, opening)
                if self.keepalive is not None and opened and body:
                    self.keepalive.answered(
                        *opened[0], Held(target.url, request.path_qs, headers, body, watched), started
                    )
            else:
                kept, broke = await self._relay_refusal(request, upstream, response)
                if broke:
                    self._notice(
                        f"{target.name} ({target.url}) broke off its answer to {request.path}: {broke}", "error"
                    )
                elif not 200 <= upstream.status < 400:
                    self._notice(f"{target.name} answered {upstream.status} to {request.path}: {refusal_said(kept)}")
        return response

    async def _read(self, protocol: Wire, request: web.Request, body: bytes) -> WatchedRequest | None:
        return self._read_now(protocol, request, body)

    def _read_now(self, protocol: Wire, request: web.Request, body: bytes) -> WatchedRequest | None:
        try:
            watched = read_request(protocol, body, request.headers)
        except WireError as error:
            self._notice(f"{request.method} {request.path}: {error}; forwarded unread")
            return None
        if self.keepalive is not None:
            self.keepalive.arrived(watched)  # its conversation's ping in flight is cancelled
        return watched

    def _read_incoming(self, protocol: Wire, request: web.Request, incoming: _Incoming) -> WatchedRequest | None:
        """A request streamed through: read if it ended within `MAX_READ` before the answer began."""
        size = max(request.content_length or 0, incoming.size)
        if size > MAX_READ:
            self._notice(
                f"{request.method} {request.path}: the request body is {size:,} bytes, more than the {MAX_READ:,} "
                "hotloop reads; forwarded unread"
            )
            return None
        if not incoming.whole:
            self._notice(f"{request.method} {request.path}: answered before its body had all arrived; forwarded unread")
            return None
        return self._read_now(protocol, request, b"".join(incoming.kept))

    async def _relay(
        self,
        request: web.Request,
        upstream: UpstreamAnswer,
        response: web.StreamResponse,
        opening: Callable[[], tuple[Conversation, ResponseReader]],
    ) -> None:
        """Each block to the client, then to the reader; the step finished however the stream ends.

        The conversation is found (its log made, for a new one) once the first block is on its way:
        the client never waits for hotloop's books.
        """
        watching = None
        ended = False
        try:
            async for block in upstream.blocks():
                arrived = time.perf_counter()
                if upstream.at_eof():  # the last block came with the stream's end: one write for both
                    ended = True
                    await response.write_eof(block)
                else:
                    await response.write(block)
                conversation, reader = watching = watching or opening()
                conversation.model_events(reader.feed(block, arrived))
        except asyncio.CancelledError:
            self._left(*(watching or opening()))
            raise
        except ConnectionResetError:
            self._left(*(watching or opening()))
            return
        except UpstreamFault as error:
            conversation, reader = watching or opening()
            reader.problem = reader.problem or f"{reader.where} broke off mid-stream: {cause_of(error)}"
            conversation.finish(reader)
            _hang_up(request)
            return
        conversation, reader = watching or opening()
        conversation.model_events(reader.end(time.perf_counter()))
        # The answer's end goes to the client before the step is finished (the cache verdict, the log's summary
        # rewritten): an agent waits for it before going on. A client that leaves at the very end had the whole answer.
        try:
            if not ended:
                await response.write_eof()
        except ConnectionResetError:
            pass
        finally:
            conversation.finish(reader)

    def _left(self, conversation: Conversation, reader: ResponseReader) -> None:
        if not reader.step.finish_reason:  # Codex hangs up once the answer has ended: nothing was lost then
            conversation.emit(Notice(level="warning", message="the client disconnected mid-stream"))
        conversation.finish(reader, cut="cancelled")

    async def _relay_refusal(
        self, request: web.Request, upstream: UpstreamAnswer, response: web.StreamResponse
    ) -> tuple[bytes, str]:
        """Pass an answer hotloop doesn't read (a refusal, a model listing, an unread request's) through; the start
        of its body, to say what a refusal was, and why the upstream broke off, if it did."""
        kept = b""
        try:
            async for block in upstream.blocks():
                await response.write(block)
                if len(kept) < _KEPT_ERROR:
                    kept += block[: _KEPT_ERROR - len(kept)]
            await response.write_eof()
        except UpstreamFault as error:
            _hang_up(request)
            return kept, cause_of(error)
        except ConnectionResetError:
            pass  # the client left: nothing more to say than what its cancellation says
        return kept, ""

    def _conversation(self, request: WatchedRequest, headers: Mapping[str, str], target: Target) -> Conversation:
        segments, key, tools = request.segments, request.session_key, bool(request.segments.tools)
        placed = self._lineage.place(key, segments.system, segments.messages, segments.roles, tools, request.client)
        conversation = self._open.get(placed.continues)
        if conversation is None:
            conversation = self._new(request, headers, target, placed.side_of)
            for adopted in placed.adopts:
                # Begun first, its log's header says it is a conversation of its own: the event corrects it.
                self.conversations[adopted].parent = conversation.info.id
                self._open[adopted].emit(SideOf(parent=conversation.info.id))
        self._lineage.record(
            conversation.info.id, key, segments.system, segments.messages, tools, placed, request.client
        )
        return conversation

    def _new(self, request: WatchedRequest, headers: Mapping[str, str], target: Target, side_of: str) -> Conversation:
        agent = self._masked(agent_of(headers.get("user-agent", "")))
        model = self._masked(request.model)
        log = SessionLog.create(
            self._folder,
            provider=target.name,
            model=model,
            workspace=self._workspace,
            base_url=self._masked(target.url),
            cost_per_hour=self.upstream.cost_per_hour,
            # No secrets of its own: every event is masked once, by the conversation, before the log has it.
            origin=f"watch:{agent}",
            side_of=side_of,
        )
        info = ConversationInfo(
            log.id,
            agent,
            f"watch:{agent}",
            side_of,
            self._masked(headline(request.prompt or "")),
            target.name,
            model,
            target.url,
            self.upstream.cost_per_hour,
            str(log.path),
        )
        self.conversations[log.id] = info
        conversation = self._open[log.id] = Conversation(
            info,
            log,
            lambda conversation, event: self.sink(conversation, event),
            lambda: self.residency(),
            Masker(self._masker.secrets),
        )
        return conversation


class _Incoming:
    """A request body sent on as it arrives; the first `MAX_READ` bytes kept when `keep`, for reading."""

    def __init__(self, request: web.Request, keep: bool) -> None:
        self._request = request
        self._keep = keep
        self.kept: list[bytes] = []
        self.size = 0
        self.whole = False  # all of it has arrived

    async def blocks(self) -> AsyncIterator[bytes]:
        async for block in self._request.content.iter_any():
            self.size += len(block)
            if self._keep and self.size <= MAX_READ:
                self.kept.append(block)
            else:
                self.kept.clear()  # too big to read: nothing of it is held
            yield block
        self.whole = True


def _hang_up(request: web.Request) -> None:
    """Close the client's connection mid-answer, as the upstream closed the watch's: the client sees the same cut
    (an unfinished chunked body, or fewer bytes than the Content-Length), and aiohttp finishes nothing after it."""
    if request.transport is not None:
        request.transport.close()
