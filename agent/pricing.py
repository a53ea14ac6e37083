"""What a step cost in dollars: the provider's own figure, a price table's, or an estimate from GPU time.

The table is `genai-prices` (github.com/pydantic/genai-prices), maintained and bundled with the
package: it is read offline, never fetched (its `UpdatePrices` is opt-in and hotloop never starts
it). A model is priced only on a server the table knows by URL (api.openai.com, api.anthropic.com,
openrouter.ai…): the same model name on a self-hosted server costs what its GPU costs, not what a
cloud charges. A step without a price is `None`, shown as "price unknown", never as $0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import msgspec

from hotloop.agent.events import (
    AgentEvent,
    OwnRequest,
    ProviderSwitched,
    ResponseFinished,
    StepFinished,
    StepStarted,
)
from hotloop.providers.events import UsageLedger

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, ModelPrice, Provider, TieredPrices

PRICE_UNKNOWN = "price unknown"
Source = Literal["price table", "provider", "estimate"]
Ttl = Literal["5m", "1h"]
_MILLION = 1_000_000

# The table's price keys for each kind of token, the most specific first: a model without its own
# cache-read price bills those tokens as input, which is what genai-prices does too.
_RATES = {
    "uncached": ("input_mtok",),
    "cache_read": ("cache_read_mtok", "input_mtok"),
    "cache_write_5m": ("cache_write_5m_mtok", "cache_write_mtok", "input_mtok"),
    "cache_write_1h": ("cache_write_1h_mtok", "cache_write_mtok", "input_mtok"),
    "output": ("output_mtok",),
}
# Providers whose `completion_tokens` leave the reasoning tokens out, billed on top (xAI: genai-prices' own
# extractor adds them to the output).
_REASONING_APART = frozenset({"x-ai"})


@dataclass(frozen=True)
class Cost:
    """One step's dollars and where they come from.

    The parts by kind of token are set for a price-table cost whose parts add up to its total;
    `reasoning` only when the model bills reasoning apart from output. `priced_as` names the
    table's provider and model the step was priced as, e.g. `anthropic claude-sonnet-4-0`.
    """

    total: Decimal
    source: Source
    uncached: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write_5m: Decimal | None = None
    cache_write_1h: Decimal | None = None
    output: Decimal | None = None
    reasoning: Decimal | None = None
    priced_as: str = ""

    def parts(self) -> dict[str, Decimal]:
        """The parts that cost something, by kind: `{"uncached": …, "output": …}`."""
        return {
            part.name: value
            for part in fields(self)
            if part.name != "total" and isinstance(value := getattr(self, part.name), Decimal) and value
        }


def price_step(
    usage: UsageLedger | None,
    model: str,
    base_url: str,
    *,
    at: float | None = None,
    cost_per_hour: float | None = None,
    seconds: float | None = None,
    write_ttl: Ttl = "5m",
) -> Cost | None:
    """What one step cost, or None if that isn't known.

    The provider's own figure wins; then `cost_per_hour` (a self-hosted server's GPUs) times the
    step's `seconds` of model time, an estimate; then the price table, at the prices of the step's
    time `at` (seconds since the epoch). `write_ttl` is the lifetime cache writes are billed at when
    the provider did not split them by lifetime.
    """
    if usage is not None and usage.reported_cost is not None:
        return Cost(_decimal(usage.reported_cost), "provider")
    if cost_per_hour is not None and seconds is not None:
        return Cost(_decimal(cost_per_hour) * _decimal(seconds) / 3600, "estimate")
    if usage is None or usage.prompt_total is None or usage.output is None or not base_url:
        return None
    found = _table_price(model, base_url, datetime.fromtimestamp(at, UTC) if at is not None else None)
    if found is None:
        return None
    return _priced_once(usage, _Prices(found[0]), found[1], found[2], write_ttl)


def warm() -> None:
    """Load the price table now (~40 ms once the SDKs are loaded), so the first step's price doesn't wait for it."""
    from genai_prices.data_snapshot import get_snapshot

    get_snapshot()


def known_window(model: str, base_url: str) -> int | None:
    """The context window the table lists for `model` on the server at `base_url` (a hosted API's); else None."""
    found = _table_model(model, base_url)
    return found[1].context_window if found is not None else None


def _table_price(model: str, base_url: str, when: datetime | None) -> tuple[ModelPrice, str, str] | None:
    """The table's prices for `model` on the server at `base_url`, its provider's id and its model's."""
    found = _table_model(model, base_url)
    if found is None:
        return None
    provider, info = found
    return info.get_prices(when or datetime.now(UTC)), provider.id, info.id


# Once per model and server: the search tries every provider's patterns (~18 µs for a model the table lacks, on this
# VM), and each step is priced by several readers.
@lru_cache(maxsize=256)
def _table_model(model: str, base_url: str) -> tuple[Provider, ModelInfo] | None:
    """The table's entry for `model` on the server at `base_url`; a server it doesn't know by URL has none."""
    from genai_prices.data_snapshot import get_snapshot  # 1.6 MB of prices, loaded only when first needed

    try:
        return get_snapshot().find_provider_model(model, None, None, base_url)
    except LookupError:
        return None


class _Prices:
    """A model's prices as a cache key: the table's own object, by identity (the table lives as long as the process)."""

    __slots__ = ("prices",)

    def __init__(self, prices: ModelPrice) -> None:
        self.prices = prices

    def __hash__(self) -> int:
        return id(self.prices)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Prices) and other.prices is self.prices


# genai-prices' `calc_price` costs ~0.1 ms a call (3× that on a loaded machine) and every step is priced by several
# readers (the log's summary, the status bar or printer, the spans, the cache's savings): each of its figures once.
@lru_cache(maxsize=1024)
def _priced_once(usage: UsageLedger, prices: _Prices, provider: str, model: str, write_ttl: Ttl) -> Cost | None:
    return _priced(usage, prices.prices, provider, model, write_ttl)


def _priced(usage: UsageLedger, prices: ModelPrice, provider: str, model: str, write_ttl: Ttl) -> Cost | None:
    from genai_prices import Usage
    from genai_prices.types import calc_unit_price

    prompt, output = usage.prompt_total or 0, usage.output or 0
    if provider in _REASONING_APART:
        output += usage.reasoning or 0
    read, written = usage.cache_read or 0, usage.cache_write or 0
    hour = usage.cache_write_1h if usage.cache_write_1h is not None else (written if write_ttl == "1h" else 0)
    counts = {
        "uncached": prompt - read - written,  # a prompt whose cache split wasn't reported is billed as uncached
        "cache_read": read,
        "cache_write_5m": written - hour,
        "cache_write_1h": hour,
        "output": output,
    }
    reasoning_rate = prices.output_reasoning_mtok
    if reasoning_rate is not None and usage.reasoning:
        counts["output"] -= usage.reasoning  # reasoning is part of the output, billed at its own rate here
    if min(counts.values()) < 0:
        return None  # figures that don't add up can't be priced (the ledger's check lets no such prompt through)
    parts = {
        kind: calc_unit_price(_rate(prices, _RATES[kind]), count, prompt, _MILLION) for kind, count in counts.items()
    }
    if reasoning_rate is not None:
        parts["reasoning"] = calc_unit_price(reasoning_rate, usage.reasoning or 0, prompt, _MILLION)
    billed = Usage(
        input_tokens=prompt,
        cache_read_tokens=read,
        cache_write_tokens=written,
        cache_write_5m_tokens=written - hour,
        cache_write_1h_tokens=hour,
        output_tokens=output,
        output_reasoning_tokens=usage.reasoning or 0,
    )
    total = prices.calc_price(billed)["total_price"]
    priced_as = f"{provider} {model}"
    # The table's own total is the figure; the parts are shown only when they add up to it (a
    # per-request fee or a price by modality would not be among them).
    if sum(parts.values()) != total:
        return Cost(total, "price table", priced_as=priced_as)
    return Cost(
        total,
        "price table",
        uncached=parts["uncached"],
        cache_read=parts["cache_read"],
        cache_write_5m=parts["cache_write_5m"],
        cache_write_1h=parts["cache_write_1h"],
        output=parts["output"],
        reasoning=parts.get("reasoning"),
        priced_as=priced_as,
    )


def _rate(prices: ModelPrice, keys: tuple[str, ...]) -> Decimal | TieredPrices | None:
    return next((rate for key in keys if (rate := getattr(prices, key)) is not None), None)


def _decimal(value: float) -> Decimal:
    """A float as the decimal it was written as (0.1 → 0.1, not 0.1000000000000000055…)."""
    return Decimal(repr(value))


def money(value: Decimal) -> str:
    """`$0.0123` under a dollar, `$12.34` from one, `<$0.0001` for a trace."""
    if 0 < value < Decimal("0.0001"):
        return "<$0.0001"
    places = Decimal("0.0001") if value < 1 else Decimal("0.01")
    return f"${value.quantize(places, ROUND_HALF_UP):,}"  # half up, as money is rounded (Decimal's own is half even)


def dollars(cost: Cost | None) -> str:
    """`$0.0123`, `$0.0123 (provider's figure)`, `~$0.0200 (estimate)` or `price unknown`."""
    if cost is None:
        return PRICE_UNKNOWN
    if cost.source == "estimate":
        return f"~{money(cost.total)} (estimate)"
    if cost.source == "provider":
        return f"{money(cost.total)} (provider's figure)"
    return money(cost.total)


_PART_NAMES = {
    "uncached": "uncached",
    "cache_read": "cache read",
    "cache_write_5m": "write 5m",
    "cache_write_1h": "write 1h",
    "output": "out",
    "reasoning": "reasoning",
}


def breakdown(cost: Cost | None) -> str:
    """`$0.0225 (uncached $0.0060 · cache read $0.0015 · write 5m $0.0075 · write 1h $0.0060 · out $0.0015)`."""
    parts = " · ".join(f"{_PART_NAMES[kind]} {money(value)}" for kind, value in cost.parts().items()) if cost else ""
    return f"{dollars(cost)} ({parts})" if parts else dollars(cost)


@dataclass
class CostTotals:
    """Dollars over a session's steps: the sum of the known costs, and how many steps had no price."""

    known: Decimal = Decimal(0)
    priced: int = 0
    unknown: int = 0
    estimated: bool = False  # some of the sum is an estimate from GPU time

    def add(self, cost: Cost | None) -> None:
        if cost is None:
            self.unknown += 1
            return
        self.known += cost.total
        self.priced += 1
        self.estimated = self.estimated or cost.source == "estimate"

    def __str__(self) -> str:
        """`$0.4210`, `~$1.20`, `$0.4210 + 2 steps price unknown`, or `price unknown` when no step had a price."""
        if not self.priced:
            return PRICE_UNKNOWN if self.unknown else money(self.known)
        said = f"{'~' if self.estimated else ''}{money(self.known)}"
        if not self.unknown:
            return said
        return f"{said} + {self.unknown} step{'' if self.unknown == 1 else 's'} {PRICE_UNKNOWN}"

    def short(self) -> str:
        """As `str`, in a column or a tight line: `≥~$0.4210` when some steps had no price."""
        if not self.priced or not self.unknown:
            return str(self)
        return f"≥{'~' if self.estimated else ''}{money(self.known)}"


@dataclass
class StepPricer:
    """Prices the finished steps of an event stream.

    `servers` maps a provider's name to its base URL, and `hourly` to its `cost_per_hour`; a
    `ProviderSwitched` event teaches the server of the provider switched to, and `StepStarted`
    which provider and model answer the steps that follow.
    """

    servers: dict[str, str] = field(default_factory=dict)
    hourly: dict[str, float] = field(default_factory=dict)
    write_ttl: Mapping[str, Ttl] = field(default_factory=dict)
    using: tuple[str, str] = ("", "")

    def learn(self, event: AgentEvent) -> None:
        if isinstance(event, StepStarted):
            self.using = (event.provider, event.model)
        elif isinstance(event, ProviderSwitched):
            if event.base_url:
                self.servers[event.provider] = event.base_url
            if event.cost_per_hour is not None:
                self.hourly[event.provider] = event.cost_per_hour

    def cost(self, step: StepFinished | OwnRequest) -> Cost | None:
        """A step's cost, priced as the provider and model of the last `StepStarted`; a compaction or a side request
        as its own."""
        if not isinstance(step, StepFinished):
            return self.price(step, step.provider, step.model)
        return self.price(step, *self.using)

    def saved_by_cache(self, step: ResponseFinished | StepFinished, provider: str, model: str) -> Decimal | None:
        """Dollars the step's cache reads saved, against its prompt priced whole as uncached input.

        Cache writes are priced as input in that comparison too, so a write premium can make it
        negative. None without a price-table price on both sides (an estimate from GPU time, or a
        provider's own figure, has no per-token rates to compare).
        """
        usage = step.usage
        if usage is None or not usage.cache_read or usage.prompt_total is None:
            return None
        whole = msgspec.structs.replace(
            usage, uncached=usage.prompt_total, cache_read=0, cache_write=0, cache_write_1h=0, reported_cost=None
        )
        actual = self.price(step, provider, model)
        uncached = self.price(msgspec.structs.replace(step, usage=whole), provider, model)
        if actual is None or uncached is None or actual.source != "price table" or uncached.source != "price table":
            return None
        return uncached.total - actual.total

    def price(self, step: ResponseFinished | StepFinished | OwnRequest, provider: str, model: str) -> Cost | None:
        """A step's cost, from its response when it was cut short before it finished (the model was paid)."""
        return price_step(
            step.usage,
            model,
            self.servers.get(provider, ""),
            at=step.ts,
            cost_per_hour=self.hourly.get(provider),
            seconds=step.model_time,
            write_ttl=self.write_ttl.get(provider, "5m"),
        )
