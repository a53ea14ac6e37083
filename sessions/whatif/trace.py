"""A session log read as the requests of its conversation: when each went out, its prompt, what of it the provider
could cache, its output, and whether its prefix continues the request before it.

The log is streamed a line at a time: a long session's events are never all in memory. A line that isn't an event
is skipped, and a usage no request has is read as unknown, as `sessions.store` reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

import msgspec

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    ProviderSwitched,
    ResponseFinished,
    SideRequest,
    StepStarted,
    TurnStarted,
    decode,
)
from hotloop.agent.fingerprint import Fingerprint
from hotloop.agent.pricing import Ttl
from hotloop.nesting import TooDeep
from hotloop.providers.events import UsageLedger
from hotloop.sessions.files import open_file
from hotloop.sessions.log import SessionHeader
from hotloop.sessions.store import read_header
from hotloop.sessions.summary import implausible

Kind = Literal["anthropic", "openai", "lru"]
_NAMES = ("turn_started", "step_started", "response_finished", "side_request", "compacted", "provider_switched")
_WANTED = tuple(f'{{"type":"{name}"'.encode() for name in _NAMES)
_LAST = 253_402_300_800.0  # 10000-01-01: the first second a date can't hold
_HOSTED_OPENAI = ("api.openai.com", "openrouter.ai", "api.deepseek.com", "api.x.ai")


@dataclass(frozen=True)
class Request:
    """One request of a conversation, as logged. `cacheable` is the prompt's part the provider can cache (Anthropic:
    up to its last breakpoint, read + written; elsewhere the whole prompt); `broke` says where its prefix breaks from
    the request before (another system prompt, tool set or model, a compaction, a shorter history)."""

    number: int  # 1-based, in the conversation's order
    start: float
    end: float
    prompt: int
    cacheable: int
    output: int
    usage: UsageLedger
    ttl: Ttl | None  # the lifetime its writes were billed at (Anthropic's split); None: it wrote none, or no split
    what: str  # "step 3.2", "pre-warm", "compaction"
    broke: str = ""  # what broke its prefix from the one before: "the tools", "a compaction"…; "" where it goes on
    keeps: int = 0  # where it broke, the tokens known the same all the same (the static prefix a pre-warm measured)
    opens_turn: bool = False  # the first request of a turn: the pause before it was the user's, not a tool's
    provider: str = ""  # the provider and model that served it: a session that switched has more than one cache
    model: str = ""
    beside: bool = False  # a side request (a pre-warm, a ping): its own ask is no part of the conversation
    shares: int | None = None  # a side request's tokens the next request starts with too; None: unknown (an old log)

    @property
    def continues(self) -> bool:
        return not self.broke


@dataclass
class Conversation:
    """A session's requests, the server that answered them, and what it is priced as."""

    session: str
    header: SessionHeader
    requests: list[Request]
    skipped: int = 0  # lines that weren't events, or usage no request has
    switched: dict[str, ProviderSwitched] = field(default_factory=dict)  # by provider: where a switch moved to

    @property
    def kind(self) -> Kind:
        return kind_of(self.requests, self.header.base_url)

    def served_by(self) -> list[tuple[str, str, str, float | None, list[Request]]]:
        """Each provider and model that served requests: its server's URL, its hourly price, its requests in order."""
        groups: dict[tuple[str, str], list[Request]] = {}
        for request in self.requests:
            groups.setdefault((request.provider, request.model), []).append(request)
        header = self.header
        served = []
        for (provider, model), requests in groups.items():
            moved = self.switched.get(provider)
            if moved is None or not provider or provider == header.provider:
                url, hourly = header.base_url, header.cost_per_hour
            else:
                url, hourly = moved.base_url, moved.cost_per_hour
            served.append((provider, model or header.model, url, hourly, requests))
        return served


def kind_of(requests: list[Request], base_url: str) -> Kind:
    """The cache the server keeps: Anthropic's breakpoints (its writes are split by lifetime), a hosted OpenAI-style
    automatic prefix cache, or a self-hosted server's LRU (the simulator's OpenAI side is vLLM's)."""
    if any(request.usage.cache_write_1h is not None for request in requests):
        return "anthropic"
    if any(host in base_url for host in _HOSTED_OPENAI):
        return "openai"
    return "lru"


def read_conversation(path: Path) -> Conversation:
    """The requests `path`'s log holds, read a line at a time; a SessionError if it isn't a session log."""
    header, size = read_header(path)
    lineage = _Lineage(header.provider, header.model)
    switched: dict[str, ProviderSwitched] = {}
    started: StepStarted | None = None
    with open_file(path) as file:
        file.seek(size)
        for event in _events(file):
            if event is None:
                lineage.skipped += 1
            elif isinstance(event, TurnStarted):
                lineage.turn_began = True
            elif isinstance(event, StepStarted):
                started = event
            elif isinstance(event, ResponseFinished) and started is not None:
                lineage.step(started, event)
                started = None
            elif isinstance(event, SideRequest | Compacted):
                lineage.beside(event)
            elif isinstance(event, ProviderSwitched):
                switched[event.provider] = event
    return Conversation(header.id, header, lineage.requests, lineage.skipped, switched)


class _Lineage:
    """The requests so far and how each one's prefix follows from the one before."""

    def __init__(self, provider: str, model: str) -> None:
        self.serving = (provider, model)  # who served the last request: a compaction's usage doesn't name it
        self.requests: list[Request] = []
        self.skipped = 0  # lines that weren't events, requests without figures
        self.turn_began = False
        self._last: Fingerprint | None = None
        self._compacted = False  # what follows goes on from a summary: the history is new
        self._static = 0  # the system prompt and tools, as a pre-warm (which sends just them) measured them

    def step(self, started: StepStarted, response: ResponseFinished) -> None:
        now = started.fingerprint
        broke = "a compaction" if self._compacted else _broke(self._last, now)
        keeps = self._static if broke in ("a compaction", "a shorter history") else 0
        what = f"step {response.turn}.{response.step}"
        self.serving = (started.provider, started.model)
        if self._add(response.usage, started.ts, response.ts, what, broke, keeps, opens_turn=self.turn_began):
            self._last, self._compacted, self.turn_began = now or self._last, False, False

    def beside(self, event: SideRequest | Compacted) -> None:
        """A pre-warm (the static prefix alone), a compaction (the conversation and an instruction) or another side
        request, in the conversation's cache all the same."""
        start = event.ts - event.model_time
        if isinstance(event, SideRequest):
            self.serving = (event.provider, event.model)
        if isinstance(event, Compacted):
            self._compacted = self._add(event.usage, start, event.ts, "compaction") or self._compacted
        elif (
            self._add(event.usage, start, event.ts, event.kind, beside=True, shares=event.shared)
            and event.kind == "pre-warm"
        ):
            last = self.requests[-1]
            self._static = last.cacheable if last.shares is None else min(last.shares, last.cacheable)

    def _add(
        self,
        usage: UsageLedger | None,
        start: float,
        end: float,
        what: str,
        broke: str = "",
        keeps: int = 0,
        opens_turn: bool = False,
        beside: bool = False,
        shares: int | None = None,
    ) -> bool:
        """Adds the request if its usage says enough to replay it, at a time a date can hold."""
        if usage is None or implausible(usage) is not None or usage.prompt_total is None or usage.output is None:
            self.skipped += 1
            return False
        if not (0 <= start < _LAST and 0 <= end < _LAST):
            self.skipped += 1  # a time no clock gives (or past what a date can hold): priced at no date
            return False
        if shares is not None:
            shares = min(max(shares, 0), usage.prompt_total)  # a log's figure, whatever it says: within the prompt
        read, written = usage.cache_read or 0, usage.cache_write or 0
        split = usage.cache_write_1h is not None
        cacheable = read + written if split else usage.prompt_total
        ttl: Ttl | None = ("1h" if usage.cache_write_1h else "5m") if split and written else None
        number = len(self.requests) + 1
        self.requests.append(
            Request(
                number,
                start,
                end,
                usage.prompt_total,
                cacheable,
                usage.output,
                usage,
                ttl,
                what,
                broke,
                keeps,
                opens_turn,
                *self.serving,
                beside,
                shares,
            )
        )
        return True


def _events(file: BinaryIO) -> Iterator[AgentEvent | None]:
    """Each line's event a replay needs, or None for a line that isn't an event. The rest (the streamed text, most of
    a log) is passed over undecoded: hotloop writes an event's type first."""
    for line in file:
        if not line.strip() or (line.startswith(b'{"type":"') and not line.startswith(_WANTED)):
            continue
        try:
            yield decode(line if line.isascii() else line.decode("utf-8", errors="replace").encode())
        except (msgspec.DecodeError, TooDeep):
            yield None


def _broke(before: Fingerprint | None, now: Fingerprint | None) -> str:
    """What in `now`'s prefix differs from `before`'s ("" where it goes on from it). Without fingerprints (an import
    whose transcript holds no request) the conversation is taken as one line."""
    if before is None or now is None:
        return ""
    if before.model != now.model:
        return "the model"
    if before.tools != now.tools:
        return "the tools"
    if (before.system, before.instructions) != (now.system, now.instructions):
        return "the system prompt"
    return "a shorter history" if now.messages < before.messages else ""
