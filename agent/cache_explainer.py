"""Why a step read less from the provider's cache than its unchanged prefix should have given.

Every request is fingerprinted by segment: the system prompt, the project instructions at its
end (AGENTS.md), each tool schema, each message. A request hotloop didn't build (`hotloop watch`
reads other agents' traffic) is fingerprinted from its wire segments (`WireSegments`), and its
verdict adds the byte at which the two request bodies diverged.
The fingerprint goes into the session log with its step. When a step's cache read falls short
of what the previous request left in the cache (allowing for block granularity and the last
token a server always recomputes), the explainer compares the two requests and names the first
segment that changed (an instruction file by name), or another cause: a switch of provider or model, an expired entry
(Anthropic's TTL), a compaction (the history was replaced by its summary), or an eviction (nothing changed,
yet it missed). A prompt below the
provider's cache minimum is never cached, so neither it nor the step after it is a miss.
A tool list whose new descriptions the registry holds back (`ToolSpecs.held`) causes no miss; the first step
that carries it says so once, and the miss that `/mcp accept` then causes is named as the accepted change.
Where the server says why it missed (Anthropic's cache diagnostics, on `DiagnosedUsage`), its word follows
hotloop's verdict, and the note says when the two disagree on what changed. Where a vLLM server keeps KV
residency histograms (`--kv-cache-metrics`) and the caller passes each step's reading (`Residency`), a miss
after which the server evicted blocks says how long they had been resident: the server's figure, beside hotloop's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from hotloop.agent.fingerprint import Fingerprint
from hotloop.agent.instructions import split
from hotloop.agent.tools.registry import HeldTools, ToolSpecs
from hotloop.providers.anthropic import DiagnosedUsage
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from hotloop.providers.events import UsageLedger

if TYPE_CHECKING:
    from hotloop.providers.server_metrics import Residency

BLOCK = 16
# Block rounding, the recomputed last token and Anthropic's generation prompt fit in two blocks.
SLACK_TOKENS = 2 * BLOCK
ANTHROPIC_TTL = 300.0
ONE_HOUR = 3600.0
_encode = msgspec.msgpack.Encoder().encode


def cache_block(server_kind: str | None, figures_by: str) -> int:
    """The tokens a server caches by: llama.cpp keeps a prefix token by token, vLLM in blocks of 16."""
    return 1 if "llama.cpp" in (server_kind, figures_by) else BLOCK


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class WireSegments(msgspec.Struct, frozen=True):
    """A request as another client sent it, by segment: each segment's bytes as it would be compared (a cache
    marker, which is not content, left out), the message roles, and the body as sent."""

    system: str
    tools: Mapping[str, bytes]
    messages: Sequence[bytes]
    roles: Sequence[str]
    body: bytes


class _Sent(msgspec.Struct, frozen=True):
    """A fingerprinted request, with what naming its changes needs."""

    fingerprint: Fingerprint
    system: str
    digests: list[str]
    sent: float
    roles: Sequence[str] | None = None  # a wire request's; hotloop's own are read from its messages
    body: bytes = b""  # a wire request's, to say where two bodies diverged
    held: tuple[HeldTools, ...] = ()  # tool descriptions the registry keeps out of this request
    accepted: tuple[HeldTools, ...] = ()  # held-back descriptions this request sends for the first time


class CacheReads:
    """A step's cache read, as far as it is known, by the provider and model that answered it.

    vLLM (and the simulator, speaking as it) leaves the figure out of a total miss, so once a
    provider and model have reported a read in this session, a step they answer without one read
    nothing; until then, a missing figure is unknown.
    """

    def __init__(self) -> None:
        self._reporting: set[tuple[str, str]] = set()

    def read(self, usage: UsageLedger | None, using: tuple[str, str]) -> int | None:
        """The tokens read from the cache: as reported, 0 if left out by a server that reports reads, else None."""
        if usage is None:
            return None
        if usage.cache_read is not None:
            self._reporting.add(using)
            return usage.cache_read
        return 0 if usage.prompt_total is not None and self.reports(using) else None

    def reports(self, using: tuple[str, str]) -> bool:
        """Whether this provider and model have reported a cache read in this session."""
        return using in self._reporting


class CacheExplainer:
    """Keeps the previous request of a conversation and explains the next step's shortfall, if any."""

    def __init__(self) -> None:
        self._digests: dict[Message, str] = {}
        self._tool_digests: tuple[tuple[ToolSpec, ...], dict[str, str]] = ((), {})  # the registry reuses its tuple
        self._wire_digests: dict[str | bytes, str] = {}  # the last watched request's segments, each with its digest
        self._previous: _Sent | None = None
        self._current: _Sent | None = None
        self._previous_usage: UsageLedger | None = None
        self._reads = CacheReads()
        self._compacted = False  # the conversation was replaced by its summary since the last request
        self._named_held: set[HeldTools] = set()  # each held-back change is named once
        self._residency: Residency | None = None  # the server's reading at the last step
        self._lifetime = ANTHROPIC_TTL

    def compacted(self) -> None:
        """The conversation was compacted: the next request's miss past the static prefix is that, not a fault."""
        self._compacted = True

    def fingerprint(self, request: ChatRequest, provider: str, model: str, now: float) -> Fingerprint:
        """Fingerprint the request about to be sent; the last one becomes the previous."""
        digests = [self._message_digest(message) for message in request.messages]
        base, sections = split(request.system)
        fingerprint = Fingerprint(
            provider=provider,
            model=model,
            system=_digest(base.encode()),
            tools=self._tools_digest(request.tools),
            messages=len(digests),
            history=_digest("".join(digests).encode()),
            instructions=_digest("".join(sections.values()).encode()) if sections else "",
        )
        tools = request.tools
        held, accepted = (tools.held, tools.accepted) if isinstance(tools, ToolSpecs) else ((), ())
        sent = _Sent(fingerprint, request.system, digests, now, held=held, accepted=accepted)
        self._previous, self._current = self._current, sent
        return fingerprint

    def fingerprint_wire(self, request: WireSegments, provider: str, model: str, now: float) -> Fingerprint:
        """Fingerprint a request another client sent, from its segments; the last one becomes the previous."""
        # An agent sends its system prompt, tools and history again each step: a segment the last request had is
        # looked up, not hashed again (blake2b took ~0.28 ms for a 100 KB system prompt on this VM; the watch's
        # lineage has already hashed the messages and the system prompt with Python's cached hash, which the
        # lookup reuses).
        known = self._wire_digests
        seen: dict[str | bytes, str] = {}
        segments: list[str | bytes] = [request.system, *request.tools.values(), *request.messages]
        for segment in segments:
            seen[segment] = known.get(segment) or _digest(segment.encode() if isinstance(segment, str) else segment)
        self._wire_digests = seen
        digests = [seen[message] for message in request.messages]
        fingerprint = Fingerprint(
            provider=provider,
            model=model,
            system=seen[request.system],
            tools={name: seen[spec] for name, spec in request.tools.items()},
            messages=len(digests),
            history=_digest("".join(digests).encode()),
        )
        sent = _Sent(fingerprint, request.system, digests, now, request.roles, request.body)
        self._previous, self._current = self._current, sent
        return fingerprint

    def explain(
        self,
        usage: UsageLedger | None,
        messages: list[Message],
        anthropic: bool,
        block: int = BLOCK,
        residency: Residency | None = None,
    ) -> str:
        """`cache miss: … (N tokens re-prefilled)` when this step read less than the unchanged prefix; else "".

        `block` is the server's caching granularity: vLLM's 16 tokens (only whole blocks are cached),
        1 for llama.cpp, which keeps the common prefix token by token: N is then what it recomputed.
        `residency` is the server's KV residency reading scraped after this step's request, if it has one.
        A tool-list change held back since the last note is named after it, once.
        """
        miss = self._miss(usage, messages, anthropic, block)
        server = self._server_word(usage, bool(miss))
        evicted = self._evicted(residency, bool(miss))
        fresh = [held for held in self._current.held if held not in self._named_held] if self._current else []
        self._named_held.update(fresh)
        return "; ".join([part for part in (miss, server, evicted) if part] + [_held(held) for held in fresh])

    def _evicted(self, residency: Residency | None, missed: bool) -> str:
        """How long the blocks the server evicted since the last step had been resident, by its histograms."""
        before, self._residency = self._residency, residency
        if not missed or residency is None or before is None:
            return ""
        from hotloop.providers.server_metrics import duration  # only for a server that reports residency

        evicted = residency.since(before)
        # vLLM samples the blocks it times: none sampled says nothing about the miss, so nothing is said.
        if evicted is None or not evicted.count or evicted.lifetime is None:
            return ""
        blocks = f"{evicted.count:,} sampled block{'s' if evicted.count != 1 else ''}"
        idle = f", idle {duration(evicted.idle)} before eviction" if evicted.idle is not None else ""
        return (
            f"evicted after {duration(evicted.lifetime)} resident"
            f" (server's figure; median of {blocks} evicted since the last step{idle})"
        )

    def _server_word(self, usage: UsageLedger | None, missed: bool) -> str:
        """The server's own reason (Anthropic's `cache_miss_reason`), and whether it disagrees with hotloop's."""
        if not isinstance(usage, DiagnosedUsage) or (not usage.miss_reason and not missed):
            return ""
        tokens = f", {usage.missed:,} tokens" if usage.missed is not None else ""
        said = f"Anthropic's diagnostics: {usage.miss_reason or 'nothing changed'}{tokens}"
        changed = self._changed_part()
        structural = usage.miss_reason.endswith("_changed") or not usage.miss_reason
        if structural and changed != usage.miss_reason:
            mine = changed.replace("_", " ") if changed else "nothing changed"
            return f"{said} (hotloop's comparison disagrees: {mine})"
        return said

    def _changed_part(self) -> str:
        """What changed between the last two requests, in the server's terms and its prefix order (tools first)."""
        if self._previous is None or self._current is None:
            return ""
        before, now = self._previous.fingerprint, self._current.fingerprint
        if (before.provider, before.model) != (now.provider, now.model):
            return "model_changed"
        if before.tools != now.tools:
            return "tools_changed"
        if (before.system, before.instructions) != (now.system, now.instructions):
            return "system_changed"
        old, new = self._previous.digests, self._current.digests
        return "messages_changed" if new[: len(old)] != old else ""

    def _miss(self, usage: UsageLedger | None, messages: list[Message], anthropic: bool, block: int) -> str:
        previous_usage, self._previous_usage = self._previous_usage, usage
        compacted, self._compacted = self._compacted, False
        current = self._current.fingerprint if self._current is not None else None
        using = (current.provider, current.model) if current is not None else ("", "")
        read = self._reads.read(usage, using)
        if self._previous is None or usage is None or usage.prompt_total is None or read is None:
            return ""
        if previous_usage is None or previous_usage.prompt_total is None:
            return ""
        # Below the minimum nothing is written: such a step read nothing, and left nothing for the next to read.
        if usage.below_cache_min is not None or previous_usage.below_cache_min is not None:
            return ""
        if previous_usage.cache_write:  # a prefix is kept for the lifetime its last write asked (Anthropic's 5m or 1h)
            self._lifetime = ONE_HOUR if previous_usage.cache_write_1h else ANTHROPIC_TTL
        expected = min(previous_usage.prompt_total, usage.prompt_total) // block * block
        if previous_usage.cache_write is not None:
            # A server that reports writes (Anthropic) holds only what the previous step read and wrote.
            expected = min(expected, (previous_usage.cache_read or 0) + previous_usage.cache_write)
        missed = expected - read
        if missed <= SLACK_TOKENS:
            return ""
        return f"cache miss: {self._cause(messages, anthropic, compacted, read)} ({missed:,} tokens re-prefilled)"

    def _cause(self, messages: list[Message], anthropic: bool, compacted: bool, read: int) -> str:
        assert self._previous is not None and self._current is not None
        cause = self._segment(messages, anthropic, compacted, read)
        before, now = self._previous.body, self._current.body
        return f"{cause}; the request differs from byte {_diverged(before, now):,}" if before and now else cause

    def _segment(self, messages: list[Message], anthropic: bool, compacted: bool, read: int) -> str:
        assert self._previous is not None and self._current is not None
        previous, current = self._previous, self._current
        before, now = previous.fingerprint, current.fingerprint
        static = (before.provider, before.model, before.system, before.instructions, before.tools)
        if compacted and static == (now.provider, now.model, now.system, now.instructions, now.tools):
            if anthropic and not read:
                # Anthropic writes a prefix only at a breakpoint, and only from the model's cache minimum: the
                # system prompt and tools alone are below it, so no entry ends before the summary.
                return (
                    "the conversation was compacted into its summary, which is new to the cache, and nothing before "
                    "it was cached: the system prompt and tools alone are below the model's cache minimum"
                )
            return "the conversation was compacted into its summary, which is new to the cache (as expected)"
        if (before.provider, before.model) != (now.provider, now.model):
            return f"switched from {before.provider} · {before.model}, whose cache this was"
        if before.system != now.system:
            return f"system prompt changed at line {_first_changed_line(previous.system, current.system)}"
        if before.instructions != now.instructions:
            return _instructions_changed(previous.system, current.system)
        changed_tool = _first_changed_tool(before.tools, now.tools)
        if changed_tool and current.accepted:
            servers = " and ".join(sorted({held.server for held in current.accepted}))
            return f"{changed_tool}: the held-back tool descriptions of {servers}, sent by /mcp accept"
        if changed_tool:
            return changed_tool
        for index, (old, new) in enumerate(zip(previous.digests, current.digests, strict=False)):
            if old != new:
                if current.roles is not None:
                    role = current.roles[index]
                else:
                    role = _role(messages[index]) if index < len(messages) else "message"
                return f"message {index + 1} ({role}) changed"
        if anthropic and current.sent - previous.sent > self._lifetime:
            elapsed = current.sent - previous.sent
            ttl = "1 h" if self._lifetime == ONE_HOUR else "5 min"
            return f"the cached prefix expired ({elapsed:,.0f} s since the last request; the TTL is {ttl})"
        return "evicted: nothing changed, yet the server no longer had the prefix"

    def _tools_digest(self, tools: tuple[ToolSpec, ...]) -> dict[str, str]:
        if tools is not self._tool_digests[0]:
            self._tool_digests = (tools, {tool.name: _digest(_encode(tool)) for tool in tools})
        return self._tool_digests[1]

    def _message_digest(self, message: Message) -> str:
        digest = self._digests.get(message)
        if digest is None:
            digest = self._digests[message] = _digest(_encode(message))
        return digest


def _diverged(before: bytes, now: bytes) -> int:
    """The first byte at which two bodies differ: halving the span with slice comparisons (memcmp), not a
    Python loop over up to megabytes."""
    low, high = 0, min(len(before), len(now))
    while low < high:
        middle = (low + high + 1) // 2
        if before[low:middle] == now[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _first_changed_line(before: str, now: str) -> int:
    old, new = before.splitlines(), now.splitlines()
    return next((n for n, (a, b) in enumerate(zip(old, new, strict=False), 1) if a != b), min(len(old), len(new)) + 1)


def _instructions_changed(before: str, now: str) -> str:
    """Which instruction files changed, and the first system prompt byte that differs."""
    old, new = split(before)[1], split(now)[1]
    files = [name for name in dict.fromkeys([*old, *new]) if old.get(name) != new.get(name)]
    encoded_before, encoded_now = before.encode(), now.encode()
    same = next(
        (n for n, (a, b) in enumerate(zip(encoded_before, encoded_now, strict=False)) if a != b),
        min(len(encoded_before), len(encoded_now)),
    )
    return f"{' and '.join(files)} changed since the last step: the system prompt differs from byte {same:,}"


def _first_changed_tool(before: dict[str, str], now: dict[str, str]) -> str:
    for name, digest in now.items():
        if name in before and before[name] != digest:
            return f'tool schema "{name}" changed'
    added, removed = sorted(set(now) - set(before)), sorted(set(before) - set(now))
    if added or removed:
        return "tools changed (" + ", ".join([*(f"+{n}" for n in added), *(f"−{n}" for n in removed)]) + ")"
    return ""


def _held(held: HeldTools) -> str:
    tools = ", ".join(held.names)
    return (
        f"tool descriptions changed on server {held.server} ({tools}): held back (≈{held.tokens:,} tokens kept cached);"
        " /mcp accept to send them"
    )


def _role(message: Message) -> str:
    if isinstance(message, UserMessage):
        return "user"
    if isinstance(message, AssistantMessage):
        return "assistant"
    return "tool result" if isinstance(message, ToolResultMessage) else "message"
