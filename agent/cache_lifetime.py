"""Anthropic's cache lifetime, chosen from the user's own rhythm: 5-minute or 1-hour writes, priced both ways.

Anthropic keeps a cached prefix 5 minutes after its last use, or 1 hour, and bills the write at 1.25× or 2× the
input price; a read costs 0.1× either way (docs: prompt caching, "Pricing" and "1-hour cache duration"). Which
is cheaper depends on the pauses: a user who reads an answer for 6 minutes pays the whole prefix again with
5-minute writes, and only the 0.75× more of each write with 1-hour ones.

`CacheRhythm` takes a session's events as they come (or from its log) and keeps, per request (a step, a
compaction's summary, a pre-warm), its cacheable prompt (tokens read plus written) and the idle time before it.
Only a server that bills its writes by lifetime counts: one that splits them so (Anthropic's `cache_creation`);
OpenAI's, Codex's, llama.cpp's and opencode's usages have no lifetime to price, and a session that wrote nothing
to the cache has no choice to make.
It then prices the session both ways under one model of the cache, the same for both: a request reads what the
request before it had cached unless the pause between them outlived the lifetime, and writes the rest. The
cheaper lifetime is the choice for the writes to come (5 minutes on a tie: no pause has argued for more);
both totals, in dollars where the model has a price, are what the waterfall and the status bar say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from hotloop.agent.events import AgentEvent, Compacted, ResponseFinished, SideRequest, StepStarted, TurnStarted
from hotloop.agent.figures import counted
from hotloop.agent.pricing import Ttl, money, price_step
from hotloop.providers.events import UsageLedger

LIFETIME: dict[Ttl, float] = {"5m": 300.0, "1h": 3600.0}
WRITE: dict[Ttl, Decimal] = {"5m": Decimal("1.25"), "1h": Decimal(2)}  # × the input price
READ = Decimal("0.1")
TTL_NAMES: dict[Ttl, str] = {"5m": "5-minute", "1h": "1-hour"}


@dataclass(frozen=True)
class Use:
    """One request's cacheable prompt, and how long the cache sat idle before it (None: the session's first)."""

    cacheable: int
    gap: float | None
    after_pause: bool  # the first request of a turn: the gap is the user's, not a tool's


@dataclass(frozen=True)
class Choice:
    """The lifetime for the writes to come, why, and what each would have cost the session so far."""

    ttl: Ttl
    why: str
    cost: dict[Ttl, Decimal]  # input-token equivalents: tokens × Anthropic's multiplier, priced as input


class CacheRhythm:
    """A session's cache uses and the pauses between them, from its events; `choice()` prices both lifetimes."""

    def __init__(self) -> None:
        self.uses: list[Use] = []
        self._started: float | None = None  # the request in flight: when it went out
        self._turn_began = False
        self._last_end: float | None = None
        self._used: tuple[str, str] = ("", "")
        self.wrote: Ttl = "5m"  # the lifetime the session's last write was billed at
        self.written = 0  # cache tokens the session's requests wrote

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, TurnStarted):
            self._turn_began = True
        elif isinstance(event, StepStarted):
            self._started, self._used = event.ts, (event.provider, event.model)
        elif isinstance(event, ResponseFinished) and self._started is not None:
            self._add(event.usage, self._started, event.ts)
            self._started = None
        elif isinstance(event, Compacted | SideRequest):
            self._add(event.usage, event.ts - event.model_time, event.ts)

    @property
    def using(self) -> tuple[str, str]:
        """The provider and model of the last step: the one the session's dollars are priced as."""
        return self._used

    def _add(self, usage: UsageLedger | None, start: float, end: float) -> None:
        if usage is None or usage.cache_read is None or usage.cache_write is None or usage.cache_write_1h is None:
            return  # a server that doesn't split its writes by lifetime bills none (OpenAI's, vLLM's, llama.cpp's)
        gap = None if self._last_end is None else max(start - self._last_end, 0.0)
        self.uses.append(Use(usage.cache_read + usage.cache_write, gap, self._turn_began))
        if usage.cache_write:
            self.wrote = "1h" if usage.cache_write_1h else "5m"
            self.written += usage.cache_write
        self._turn_began = False
        self._last_end = end

    def cost(self, ttl: Ttl) -> Decimal:
        """The session's cached prompts under `ttl` writes, in input-token equivalents."""
        total, held = Decimal(0), 0
        for use in self.uses:
            kept = 0 if use.gap is None or use.gap > LIFETIME[ttl] else min(held, use.cacheable)
            total += kept * READ + (use.cacheable - kept) * WRITE[ttl]
            held = use.cacheable
        return total

    def choice(self) -> Choice | None:
        """The cheaper lifetime so far and why; None before a request wrote to a cache billed by lifetime."""
        if not self.written:
            return None
        cost: dict[Ttl, Decimal] = {"5m": self.cost("5m"), "1h": self.cost("1h")}
        pauses = [use.gap for use in self.uses if use.after_pause and use.gap is not None]
        long = sum(gap > LIFETIME["5m"] for gap in pauses)
        if cost["1h"] < cost["5m"]:
            return Choice("1h", f"{long} of your {counted(len(pauses), 'pause')} outlived 5 minutes", cost)
        if not pauses:
            return Choice("5m", "no pause between turns yet", cost)
        some = f"only {long} of your {counted(len(pauses), 'pause')}" if long else "no pause"
        return Choice("5m", f"{some} outlived 5 minutes, the longest {_minutes(max(pauses))}", cost)


def compare_lifetimes(rhythm: CacheRhythm, price: Callable[[Decimal], Decimal | None]) -> str | None:
    """`1-hour writes would have saved $0.4100 this session (2 of your 3 pauses outlived 5 minutes)`; None without a
    request that reported its writes. `price` turns input-token equivalents into dollars, None without a price."""
    choice = rhythm.choice()
    if choice is None:
        return None
    other: Ttl = "1h" if rhythm.wrote == "5m" else "5m"
    difference = choice.cost[rhythm.wrote] - choice.cost[other]
    dollars = price(abs(difference))
    amount = money(dollars) if dollars is not None else f"≈ {abs(difference):,.0f} input tokens' worth"
    name = TTL_NAMES[other]
    if not difference:
        return f"{name} writes would have cost the same this session ({choice.why})"
    said = f"saved {amount}" if difference > 0 else f"cost {amount} more"
    return f"{name} writes would have {said} this session ({choice.why})"


def input_price(model: str, base_url: str) -> Callable[[Decimal], Decimal | None]:
    """Input-token equivalents in dollars at `model`'s input price on the server at `base_url` (None: no price)."""

    def price(equivalents: Decimal) -> Decimal | None:
        tokens = int(equivalents)
        cost = price_step(UsageLedger(tokens, cache_read=0, cache_write=0, uncached=tokens, output=0), model, base_url)
        return cost.total if cost is not None and cost.source == "price table" else None

    return price


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
