"""The keep-alive for watched agents: the pass-through pings upstream in a conversation's pauses.

The watch holds each conversation's last request as sent (its body and the client's headers, its key among them:
kept in memory only, never logged). When its answer has ended, a pause begins: the policy (`agent/keepalive.py`)
plans the offsets, after that request went out, at which to ping if the pause still lasts. A ping is that request
again with the answer's cap at 1 (`max_tokens`, stream as the client sent it), the prefix the next request starts
with, read from the cache and its lifetime renewed; it goes in the conversation's log as a side request
(`SideRequest`, kind "keep-alive": counted, priced, shown). None follows one that failed, and none is planned past
the lifetime. The agent's next request cancels the ping in flight and ends the pause the policy learns. Only the
Anthropic protocol's cache forgets a prefix after a known time; a request with thinking on isn't pinged (its cap
must exceed the thinking budget). The bookkeeping runs once a request, never per streamed block.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from hotloop.agent.events import Notice, SideRequest
from hotloop.agent.pause_pings import Pause, PauseScheduler
from hotloop.agent.pricing import Ttl
from hotloop.config import KeepaliveSettings
from hotloop.watch.conversation import Conversation
from hotloop.watch.lineage import Lineage
from hotloop.watch.reading import ResponseReader
from hotloop.watch.upstream_client import UpstreamClient, UpstreamFault
from hotloop.watch.wire import WatchedRequest

_ONE_HOUR = re.compile(rb'"ttl"\s*:\s*"1h"')
CHARS_PER_TOKEN = 4  # a prefix's size when the answer didn't say it
TIMEOUT = 120.0  # seconds: a ping the upstream holds longer is let go


@dataclass(frozen=True)
class Held:
    """A conversation's last request as it went upstream: where, with which headers, and its body."""

    base: str  # the upstream's URL
    path: str  # the request's path and query under it
    headers: Mapping[str, str]
    body: bytes
    request: WatchedRequest


class WatchKeepAlive(PauseScheduler):
    """Every watched conversation's pauses and pings."""

    def __init__(
        self,
        settings: KeepaliveSettings,
        client: Callable[[], UpstreamClient | None],
        lineage: Lineage,
    ) -> None:
        super().__init__(time.perf_counter)
        self.settings = settings
        self._client = client
        self._lineage = lineage
        self._pauses: dict[str, Pause] = {}  # by conversation id

    def arrived(self, request: WatchedRequest) -> None:
        """A request of the agent's is on its way: the pause of the conversation it continues ends, its ping with it."""
        if not self._pauses:  # the usual case, at no cost
            return
        segments = request.segments
        key, tools = request.session_key, bool(segments.tools)
        placed = self._lineage.place(key, segments.system, segments.messages, segments.roles, tools, request.client)
        self._end(placed.continues, self.clock())

    def answered(self, conversation: Conversation, reader: ResponseReader, held: Held, start: float) -> None:
        """`held`'s answer has ended (it went out at `start`): plan the pause's pings and send them while it lasts."""
        conversation_id = conversation.info.id
        self._end(conversation_id, None)
        request, usage = held.request, reader.step.usage
        if self.settings.mode == "off" or not reader.step.finish_reason or reader.problem:
            return  # no keep-alive, or an answer cut short: not a pause of the agent's
        if not request.protocol.traits.cache.lifetimes or b'"thinking"' in held.body:
            return
        ttl: Ttl = "1h" if _ONE_HOUR.search(held.body) else "5m"
        tokens = (usage.prompt_total if usage is not None else None) or len(held.body) // CHARS_PER_TOKEN
        base_url = conversation.info.base_url
        pause, offsets = self.plan(self.settings, conversation_id, ttl, tokens, request.model, base_url, start)
        self._pauses[conversation_id] = pause
        if offsets and (body := _capped(held.body)) is not None:
            self.send(pause, offsets, lambda: self._ping(pause, conversation, held, body))

    def pinging(self, conversation_id: str) -> asyncio.Task[None] | None:
        """The task sending the pings of `conversation_id`'s pause going on, if it has one."""
        pause = self._pauses.get(conversation_id)
        return pause.task if pause is not None else None

    def _end(self, conversation_id: str, now: float | None) -> None:
        """The pause ends: its ping in flight cancelled (said), and its length learned (`now`: a request came)."""
        pause = self._pauses.pop(conversation_id, None)
        if pause is not None:
            pause.end(now)

    async def _ping(self, pause: Pause, conversation: Conversation, held: Held, body: bytes) -> bool:
        """One ping, said in the conversation's log; whether it was answered."""
        client = self._client()
        if client is None:
            return False
        request, info = held.request, conversation.info
        started = self.clock()
        reader: ResponseReader | None = None

        def said(outcome: Literal["answered", "cancelled", "failed"], error: str = "") -> None:
            usage = reader.step.usage if reader is not None and outcome != "cancelled" else None
            conversation.emit(
                SideRequest(
                    kind="keep-alive",
                    why="pause",
                    provider=info.provider,
                    model=request.model,
                    usage=usage,
                    model_time=self.clock() - started,
                    outcome=outcome,
                    error=error,
                    # The held request starts the next one; a cache of breakpoints keeps what the ping read or wrote.
                    shared=(usage.cache_read or 0) + (usage.cache_write or 0) if usage is not None else None,
                )
            )

        try:
            async with asyncio.timeout(TIMEOUT):
                answer = await client.request("POST", held.base, held.path, held.headers, body)
                async with answer:
                    if not 200 <= answer.status < 300:
                        said("failed", f"{info.provider} answered {answer.status} to the keep-alive's ping")
                        return False
                    where = f"{info.provider} ({info.base_url})"
                    streamed = answer.content_type == "text/event-stream"
                    encoding = answer.headers.get("content-encoding", "")
                    reader = ResponseReader(request.protocol, request.model, where, started, streamed, encoding, 1)
                    async for block in answer.blocks():
                        reader.feed(block, self.clock())
                    reader.end(self.clock())
        except (TimeoutError, UpstreamFault, OSError) as error:
            said("failed", f"the keep-alive's ping to {info.provider} failed: {type(error).__name__}")
            return False
        except asyncio.CancelledError:
            if pause.preempted:
                said("cancelled")
            raise
        if reader.problem:
            conversation.emit(Notice(level="warning", message=f"keep-alive: {reader.problem}"))
        said("answered")
        return reader.step.usage is not None

    async def aclose(self) -> None:
        tasks = [pause.task for pause in self._pauses.values() if pause.task is not None]
        self._pauses.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _capped(body: bytes) -> bytes | None:
    """The request with the answer's cap at 1: the same prefix, the least answer."""
    try:
        document = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    document["max_tokens"] = 1
    return msgspec.json.encode(document)
