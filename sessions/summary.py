"""A session's summary, kept beside its log so that listing sessions never reads whole logs.

The log's writer thread saves `<log name>.summary.json` after a turn end or a title, at most once a second,
and at close: the log's size it covers, the turns, their prompts, the tokens used, their dollars and the model the
last step ran on. Keeping it costs the log O(1) a turn (`Sidecar`: each prompt is encoded once, as it comes). A
reader takes the summary and scans only what the log gained since (the last second, a turn in flight, or a process
killed mid-turn); a log without a summary is scanned whole.

A step's usage that no request can have (a negative count, more than `MAX_STEP_TOKENS`) is never summed:
`believable` marks it unknown, here and wherever a log is read back, and a summary file whose totals such
steps can't add up to is set aside and the log scanned again.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from contextlib import nullcontext
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import msgspec

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    OwnRequest,
    ProviderSwitched,
    ResponseFinished,
    SessionTitled,
    SideOf,
    SideRequest,
    StepFinished,
    StepStarted,
    TurnStarted,
)
from hotloop.agent.pricing import CostTotals, StepPricer
from hotloop.providers.events import UsageLedger
from hotloop.sessions.files import NotAFile, open_file
from hotloop.sessions.titles import headline

if TYPE_CHECKING:
    from hotloop.sessions.log import SessionHeader

TITLE_LENGTH = 60
# Tokens one request can't exceed: a thousand times the largest context window offered (1M), output included.
MAX_STEP_TOKENS = 10**9
# Dollars one request can't cost: MAX_STEP_TOKENS at $100 per million, above any price list.
MAX_STEP_DOLLARS = 100_000
# The encoder writes the tag first, so a line's kind can be told from its first bytes.
_TURN_PREFIX = b'{"type":"turn_started"'
_STEP_PREFIX = b'{"type":"step_finished"'
_TITLE_PREFIX = b'{"type":"session_titled"'
_COMPACTED_PREFIX = b'{"type":"compacted"'
_SIDE_PREFIX = b'{"type":"side_request"'
_SIDE_OF_PREFIX = b'{"type":"side_of"'
_STARTED_PREFIX = b'{"type":"step_started"'
_SWITCHED_PREFIX = b'{"type":"provider_switched"'
_HEADER_PREFIX = b'{"type":"session",'
_SUMMARY_LIMIT = 2**28  # a summary holds every prompt of its session: past this, the log is scanned instead


class _Used(msgspec.Struct, gc=False):
    """The part of a `step_started` line a summary keeps: its fingerprint is left undecoded."""

    provider: str
    model: str


class _Server(msgspec.Struct, gc=False):
    """The part of a header or a `provider_switched` line a summary keeps: which server a provider is."""

    provider: str
    base_url: str = ""
    cost_per_hour: float | None = None


class _Header(_Server, gc=False):
    """A header's part: its server, and for a fork when it was made."""

    started: float = 0.0
    parent: str = ""


def implausible(usage: UsageLedger | None) -> str | None:
    """What a step's usage claims that no request has (a negative or impossibly large count or price), if anything."""
    if usage is None or usage.distrust is not None:
        return None
    figures = {
        "prompt": usage.prompt_total,
        "cache read": usage.cache_read,
        "cache write": usage.cache_write,
        "uncached input": usage.uncached,
        "output": usage.output,
        "reasoning": usage.reasoning,
        "1-hour cache write": usage.cache_write_1h,
    }
    for part in usage.parts:
        figures |= {f"{part.kind[:40]} {name}": getattr(part, name) for name in ("uncached", "cache_read", "output")}
    for name, value in figures.items():
        if value is not None and not 0 <= value <= MAX_STEP_TOKENS:
            return f"{name} {value:,} in one request"  # the first: the figures derived from it say it again
    cost = usage.reported_cost
    if cost is not None and not (math.isfinite(cost) and 0 <= cost <= MAX_STEP_DOLLARS):
        return f"cost ${cost:,} for one request"
    return None


Used = TypeVar("Used", bound=StepFinished | ResponseFinished | Compacted | SideRequest)


def believable(event: Used) -> Used:
    """`event`, its usage marked unknown (`distrust`, as a server's impossible figures are) if no request has it."""
    claim = implausible(event.usage)
    return event if claim is None else msgspec.structs.replace(event, usage=UsageLedger(distrust=claim))


def own_spending_since(header: SessionHeader) -> float:
    """When the session's own spending starts: a fork's log begins with its parent's steps, the parent's spend."""
    return header.started if header.parent else 0.0


_turn = msgspec.json.Decoder(TurnStarted)
_server = msgspec.json.Decoder(_Server)
_header = msgspec.json.Decoder(_Header)
_step = msgspec.json.Decoder(StepFinished)
_compacted = msgspec.json.Decoder(Compacted)
_side = msgspec.json.Decoder(SideRequest)
_side_of = msgspec.json.Decoder(SideOf)
_titled = msgspec.json.Decoder(SessionTitled)
_used = msgspec.json.Decoder(_Used)


class Summary(msgspec.Struct, gc=False):
    """What listing and searching need. `size` is how many bytes of the log it covers."""

    size: int = 0
    turns: int = 0
    tokens: int | None = None  # prompt + output over the steps that reported usage
    # Steps (and compactions) whose usage is unknown, a cancel before the server counted it the common one: the
    # session used at least `tokens`. 0 in summaries older than this count, which can't say.
    unmeasured: int = 0
    prompts: list[str] = msgspec.field(default_factory=list)
    titled: str | None = None  # written by the helper tier after the first turn
    # The provider and model of the last step; None in summaries older than these fields, or before a step.
    provider: str | None = None
    model: str | None = None
    # The dollars of the priced steps (a decimal, as text), how many steps had a price and how many
    # none, and each provider's server, to price by. A summary older than these has `costed` False.
    cost: str = "0"
    priced: int = 0
    unpriced: int = 0
    servers: dict[str, str] = msgspec.field(default_factory=dict)
    costed: bool = False
    hourly: dict[str, float] = msgspec.field(default_factory=dict)  # a self-hosted server's cost_per_hour
    # A fork's log starts with its parent's turns, stamped with their own times: the steps before the
    # fork was made are the parent's spend, counted in the parent's summary, not again in the fork's.
    own_since: float = 0.0
    side_of: str = ""  # a watched conversation found to be a side request after its header was written

    @property
    def costs(self) -> CostTotals | None:
        """The session's dollars so far, None if this summary is older than its cost."""
        if not self.costed:
            return None
        return CostTotals(known=Decimal(self.cost), priced=self.priced, unknown=self.unpriced)

    @property
    def title(self) -> str:
        """The helper tier's title; until there is one, the first line of the user's own words in the first prompt."""
        if self.titled:
            return self.titled
        return headline(self.prompts[0] if self.prompts else "", TITLE_LENGTH)

    def observe(self, event: AgentEvent) -> None:
        """What `event` changes in the summary. Looked up by type: most of a log's events (a step's deltas and
        figures) change nothing in it."""
        kept = _KEPT.get(type(event))
        if kept is not None:
            kept(self, event)

    def _turn(self, event: TurnStarted) -> None:
        self.turns += 1
        self.prompts.append(event.prompt)

    def _step(self, event: StepStarted) -> None:
        self.provider, self.model = event.provider, event.model

    def _side_of(self, event: SideOf) -> None:
        self.side_of = event.parent

    def _titled(self, event: SessionTitled) -> None:
        self.titled = event.title

    def _switched(self, event: ProviderSwitched) -> None:
        self.learn(event.provider, event.base_url, event.cost_per_hour)

    def _spent(self, event: StepFinished | Compacted | SideRequest) -> None:
        if event.ts < self.own_since:
            return
        event = believable(event)
        usage = event.usage
        if usage is not None and usage.prompt_total is not None:
            self.tokens = (self.tokens or 0) + usage.prompt_total + (usage.output or 0)
        elif not isinstance(event, SideRequest):  # as the status bar counts: a side request is never a step
            self.unmeasured += 1
        self._price(event)

    def learn(self, provider: str, base_url: str, cost_per_hour: float | None = None) -> None:
        """`provider` is the server at `base_url` (a log older than base URLs says none), at `cost_per_hour`."""
        if base_url:
            self.servers[provider] = base_url
        if cost_per_hour is not None:
            self.hourly[provider] = cost_per_hour

    def _price(self, step: StepFinished | OwnRequest) -> None:
        if isinstance(step, StepFinished):
            provider, model = self.provider, self.model
        else:
            provider, model = step.provider, step.model
        provider, model = provider or "", model or ""
        cost = StepPricer(self.servers, self.hourly).price(step, provider, model)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost, self.priced = str(Decimal(self.cost) + cost.total), self.priced + 1

    def scan(self, data: bytes) -> None:
        """Take in whole lines of a log; only the lines a summary keeps something of are decoded, a torn one skipped."""
        for raw in data.splitlines():
            # A byte that isn't UTF-8 costs a replacement character, not the line.
            line = raw if raw.isascii() else raw.decode("utf-8", errors="replace").encode()
            try:
                if line.startswith(_TURN_PREFIX):
                    self.observe(_turn.decode(line))
                elif line.startswith(_STEP_PREFIX):
                    self.observe(_step.decode(line))
                elif line.startswith(_STARTED_PREFIX):
                    used = _used.decode(line)
                    self.provider, self.model = used.provider, used.model
                elif line.startswith(_COMPACTED_PREFIX):
                    self.observe(_compacted.decode(line))
                elif line.startswith(_SIDE_OF_PREFIX):
                    self.observe(_side_of.decode(line))
                elif line.startswith(_SIDE_PREFIX):
                    self.observe(_side.decode(line))
                elif line.startswith(_TITLE_PREFIX):
                    self.observe(_titled.decode(line))
                elif line.startswith(_SWITCHED_PREFIX):
                    server = _server.decode(line)
                    self.learn(server.provider, server.base_url, server.cost_per_hour)
                elif line.startswith(_HEADER_PREFIX):
                    header = _header.decode(line)
                    self.learn(header.provider, header.base_url, header.cost_per_hour)
                    if header.parent:
                        self.own_since = header.started
            except (msgspec.DecodeError, RecursionError):  # torn, or nested past the stack: no figures to keep
                continue
        self.size += len(data)


_decode = msgspec.json.Decoder(Summary).decode
_encode = msgspec.json.Encoder().encode


def summary_path(log: Path) -> Path:
    return log.with_name(log.stem + ".summary.json")


def read_summary(log: Path, header_size: int, opened: BinaryIO | None = None) -> Summary:
    """The log's summary, brought up to date with whatever the log gained since it was written.

    `opened` is the log, already open for reading, if the caller has it.
    """
    summary: Summary | None
    try:
        with open_file(summary_path(log), _SUMMARY_LIMIT) as sidecar:
            summary = _decode(sidecar.read())
    except (OSError, NotAFile, msgspec.DecodeError, RecursionError):
        summary = None
    if summary is not None and not _adds_up(summary):
        summary = None  # not what this log's steps can sum to: it is scanned again
    with open_file(log) if opened is None else nullcontext(opened) as file:
        size = os.fstat(file.fileno()).st_size
        if summary is None or summary.size > size:  # none, or the log was replaced or cut: start over
            summary = Summary(costed=True)
            file.seek(0)
            summary.scan(file.read(header_size))  # the header: the server the session's provider is, to price by
        if summary.size < size:
            file.seek(summary.size)
            tail = file.read()
            # Only whole lines: a line still being written is taken in next time.
            summary.scan(tail[: tail.rfind(b"\n") + 1])
    return summary


def _adds_up(summary: Summary) -> bool:
    """Whether a summary read from disk holds totals its steps could sum to, each within a request's bounds."""
    steps = summary.priced + summary.unpriced
    try:
        cost = Decimal(summary.cost)
    except InvalidOperation:
        return False
    return (
        min(summary.size, summary.turns, summary.priced, summary.unpriced, summary.unmeasured) >= 0
        and summary.unmeasured <= steps
        and 0 <= (summary.tokens or 0) <= 2 * MAX_STEP_TOKENS * steps
        and cost.is_finite()
        and 0 <= cost <= MAX_STEP_DOLLARS * summary.priced
    )


def tokens_total(tokens: int | None, unmeasured: int) -> str:
    """A session's tokens: `18,968`; `≥18,968` when some step's usage is unknown; `–` when no step's is known."""
    return "–" if tokens is None else f"{'≥' if unmeasured else ''}{tokens:,}"


class _Saved(Summary, gc=False):
    """A summary as saved, its prompts already encoded."""

    prompts: msgspec.Raw = msgspec.Raw(b"[]")  # type: ignore[assignment]


# What `Summary.observe` keeps of each event it keeps something of.
_KEPT: dict[type, Callable[[Summary, Any], None]] = {
    TurnStarted: Summary._turn,
    StepStarted: Summary._step,
    SideOf: Summary._side_of,
    SessionTitled: Summary._titled,
    ProviderSwitched: Summary._switched,
    StepFinished: Summary._spent,
    Compacted: Summary._spent,
    SideRequest: Summary._spent,
}


class Sidecar:
    """A log's summary as the log keeps it: each prompt is encoded once, as it comes, so keeping the summary up to
    date costs the same at turn 2,000 as at turn 1; only a save copies the prompts."""

    def __init__(self, summary: Summary) -> None:
        self.summary = summary
        self._prompts = bytearray()
        self._encoded = 0  # how many of the summary's prompts `_prompts` holds
        self._catch_up()

    def observe(self, event: AgentEvent) -> None:
        self.summary.observe(event)
        if type(event) is TurnStarted:
            self._catch_up()

    def _catch_up(self) -> None:
        for prompt in self.summary.prompts[self._encoded :]:
            if self._prompts:
                self._prompts += b","
            self._prompts += _encode(prompt)
        self._encoded = len(self.summary.prompts)

    def encoded(self, size: int) -> bytes:
        """The summary file's bytes, covering `size` bytes of the log."""
        fields = msgspec.structs.asdict(self.summary)
        fields["size"] = size
        fields["prompts"] = msgspec.Raw(b"[" + self._prompts + b"]")
        return _encode(_Saved(**fields))
