"""Policies priced over conversations, and the model checked against what the log says the server did.

Dollars are the price table's (`price_step`), request by request at its time, as the session's own steps are priced;
traffic the table has no price for (the simulator's, a gateway's) is priced as `--as-model` names, else its tokens
are counted and its dollars are unknown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from hotloop.agent.cache_lifetime import TTL_NAMES
from hotloop.agent.figures import counted
from hotloop.agent.keepalive import PingCosts
from hotloop.agent.pricing import price_step
from hotloop.providers.events import UsageLedger
from hotloop.providers.transport import ANTHROPIC_URL, OPENAI_URL
from hotloop.sessions.whatif.cache import FOREVER, Plan, Rates, Served, Server, held_after, replay, server_for
from hotloop.sessions.whatif.policies import Adaptive, FixedInterval, OneHour, Recorded, oracle
from hotloop.sessions.whatif.trace import Conversation, Kind, Request, kind_of

INTERVALS = (4.5,)  # minutes: the plugins' usual ping, just inside Anthropic's 5-minute lifetime
_MULTIPLIERS = Rates(Decimal(1), Decimal("0.1"), {"5m": Decimal("1.25"), "1h": Decimal(2)}, Decimal(5))
_SAMPLE = 100_000  # tokens of each kind priced for a rate: under the 200k-token tier some models bill above
# The vendors' own APIs by genai-prices' provider id: their URL and the cache they keep; any other serves OpenAI's.
_VENDORS: dict[str, tuple[str, Kind]] = {"anthropic": (ANTHROPIC_URL, "anthropic"), "openai": (OPENAI_URL, "openai")}


@dataclass
class PolicyTotal:
    """A policy's tokens and dollars over every conversation; `usd` None when some request had no price."""

    policy: str
    usd: Decimal | None = Decimal(0)
    cache_read: int = 0
    cache_write: int = 0
    uncached: int = 0
    output: int = 0
    requests: int = 0
    pings: int = 0
    spent: list[tuple[float, Decimal]] = field(default_factory=list)  # (time, dollars) of each priced request or ping

    def add(self, served: Served, usd: Decimal | None) -> None:
        self.cache_read += served.read
        self.cache_write += served.write
        self.uncached += served.uncached
        self.output += served.output
        self.requests += served.request is not None
        self.pings += served.request is None
        self.usd = None if self.usd is None or usd is None else self.usd + usd
        if usd is not None:
            self.spent.append((served.at, usd))

    def curve(self) -> list[tuple[float, Decimal]]:
        """Dollars so far against time, over every conversation."""
        total, points = Decimal(0), []
        for at, usd in sorted(self.spent):
            total += usd
            points.append((at, total))
        return points

    def as_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "usd": None if self.usd is None else float(self.usd),
            "tokens": {
                "cache_read": self.cache_read,
                "cache_write": self.cache_write,
                "uncached": self.uncached,
                "output": self.output,
            },
            "requests": self.requests,
            "pings": self.pings,
        }


@dataclass(frozen=True)
class Pricing:
    """What a conversation is priced as: a model on a server the table knows, or nothing."""

    model: str
    base_url: str
    hourly: float | None = None  # a self-hosted server's `cost_per_hour`: its requests priced by model time

    def usd(self, served: Served) -> Decimal | None:
        usage = UsageLedger(
            served.prompt,
            cache_read=served.read,
            cache_write=served.write,
            uncached=served.uncached,
            output=served.output,
            cache_write_1h=served.write_1h,
        )
        seconds = served.request.end - served.request.start if served.request is not None else 0.0
        cost = price_step(usage, self.model, self.base_url, at=served.at, cost_per_hour=self.hourly, seconds=seconds)
        return cost.total if cost is not None and cost.source != "provider" else None

    def rates(self, at: float) -> Rates:
        """Each kind of token's price at `at`; Anthropic's multipliers in input-token equivalents without a price."""
        one = Served(at, 0, 0, 0, _SAMPLE, 0, None)
        base = self.usd(one)
        if base is None:
            return _MULTIPLIERS
        write = {
            ttl: self.usd(replace(one, uncached=0, write=_SAMPLE, write_1h=_SAMPLE * (ttl == "1h")))
            for ttl in ("5m", "1h")
        }
        read, output = (
            self.usd(replace(one, uncached=0, read=_SAMPLE)),
            self.usd(replace(one, uncached=0, output=_SAMPLE)),
        )
        if read is None or output is None or write["5m"] is None or write["1h"] is None:
            return _MULTIPLIERS
        return Rates(
            base / _SAMPLE,
            read / _SAMPLE,
            {"5m": write["5m"] / _SAMPLE, "1h": write["1h"] / _SAMPLE},
            output / _SAMPLE,
        )


def priced_as(conversation: Conversation, as_model: str | None) -> list[tuple[Pricing, Server, list[Request]]]:
    """The pricing, the cache model and the requests of `conversation`, as itself or as `as_model` would serve it.
    As itself, each provider and model it switched between is its own cache: its requests, its server's model."""
    if as_model is None:
        served = []
        for _, model, url, hourly, requests in conversation.served_by():
            # What the log says was cached had the server's minimum applied already: none to apply again.
            server = server_for(kind_of(requests, url), model)
            served.append(
                (Pricing(model, url, hourly), replace(server, minimum=0) if server.marked else server, requests)
            )
        return served
    url, kind = _server_of(as_model)
    requests = conversation.requests
    if kind != conversation.kind:  # its cacheable part is then the whole prompt: a breakpoint at its end, as hotloop's
        requests = [replace(request, cacheable=request.prompt, ttl=None) for request in requests]
    return [(Pricing(as_model, url), server_for(kind, as_model), requests)]


def _server_of(model: str) -> tuple[str, Kind]:
    from genai_prices.data_snapshot import get_snapshot

    try:
        provider, _ = get_snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        return ("", "anthropic" if "claude" in model else "openai")
    return _VENDORS.get(provider.id) or (re.sub(r"\\(.)", r"\1", provider.api_pattern), "openai")


def policy_names(intervals: Sequence[float] = INTERVALS) -> list[str]:
    return ["recorded", "1h", *(FixedInterval(minutes).name for minutes in intervals), "keepalive", "oracle"]


def plans(server: Server, requests: Sequence[Request], pricing: Pricing, intervals: Sequence[float]) -> list[Plan]:
    """Every policy's plan for one conversation, in `policy_names` order."""
    at = requests[0].start

    def price(held: int) -> PingCosts | None:
        return PingCosts.priced(held, "5m", pricing.model, pricing.base_url, at) if pricing.base_url else None

    fixed = [FixedInterval(minutes) for minutes in intervals]
    return [Recorded(), OneHour(), *fixed, Adaptive(requests, price), oracle(server, requests, pricing.rates(at))]


def compare(
    conversations: Sequence[Conversation], as_model: str | None = None, intervals: Sequence[float] = INTERVALS
) -> list[PolicyTotal]:
    """Every policy's totals over `conversations`, in `policy_names` order."""
    totals = {name: PolicyTotal(name) for name in policy_names(intervals)}
    for conversation in conversations:
        for pricing, server, requests in priced_as(conversation, as_model):
            if not requests:
                continue
            for plan in plans(server, requests, pricing, intervals):
                for served in replay(server, requests, plan):
                    totals[plan.name].add(served, pricing.usd(served))
    return list(totals.values())


@dataclass(frozen=True)
class Mismatch:
    request: Request
    line: str


def check(conversation: Conversation) -> list[Mismatch]:
    """The requests whose logged cache figures the `recorded` replay doesn't reproduce within 1%, each with why. Only
    the figures the server reported are compared: one it left out is unknown, never 0."""
    found: list[Mismatch] = []
    served_by = priced_as(conversation, None)
    for pricing, server, requests in served_by:
        # Another provider of the session on the same server (its Chat and Responses endpoints) shares its cache.
        beside = next(
            (
                r[0].provider
                for p, _, r in served_by
                if r is not requests and p.base_url == pricing.base_url and r[0].start < requests[0].start
            ),
            "",
        )
        last_use: float | None = None
        held = 0
        before: Request | None = None
        for served in replay(server, requests, Recorded()):
            request = served.request
            if request is None:
                continue
            read, written = request.usage.cache_read, request.usage.cache_write
            pairs = [(served.read, read), (served.write, written)]
            if read is not None and written is not None:
                pairs.append((served.uncached, request.prompt - read - written))
            if not all(logged is None or _within(model, logged) for model, logged in pairs):
                idle = None if last_use is None else request.start - last_use
                said = (
                    f"{conversation.session} request {request.number} ({request.what}): the server"
                    f" {_figures(read, written)}, the model {_figures(served.read, served.write, read, written)}"
                )
                less = read is not None and read < served.read
                found.append(Mismatch(request, f"{said}: {_why(server, request, before, less, held, idle, beside)}"))
            last_use, held, before = request.end, held_after(server, request), request
    return found


def _figures(read: int | None, written: int | None, *reported: int | None) -> str:
    """What was read and written, of the figures the server reported (`reported`: the server's, for the model's)."""
    shown = reported or (read, written)
    parts = [
        f"{verb} {value:,}"
        for verb, value, known in zip(("read", "wrote"), (read, written), shown, strict=True)
        if value is not None and known is not None
    ]
    return " and ".join(parts)


def _within(model: int, logged: int) -> bool:
    return abs(model - logged) <= 0.01 * max(model, logged)


def _why(
    server: Server, request: Request, before: Request | None, less: bool, held: int, idle: float | None, beside: str
) -> str:
    life = server.life(request.ttl or "5m")
    if before is not None and before.beside and before.shares is None and request.continues:
        return f"how much of its prefix the {before.what} before it shared is not in the log (an older hotloop's)"
    if less and request.prompt < held:
        return f"its prompt shrank ({held:,} → {request.prompt:,} tokens) and no fingerprint says where it changed"
    if less and idle is not None:
        within = "" if life == FOREVER else f", within its {TTL_NAMES[request.ttl or '5m']} lifetime"
        return f"the prefix was idle {_seconds(idle)}{within}: an eviction no model predicts"
    if idle is None and beside:
        return f"the first over {request.provider}, yet it read a prefix: one the requests over {beside} left there"
    if idle is None:
        return "its server's first request in the session, yet it read a prefix: one another session left"
    if request.broke in ("a compaction", "a shorter history"):
        return f"after {request.broke} it read the system prompt and tools, whose length no pre-warm measured"
    if request.broke:
        return f"{request.broke} changed, yet the server read a prefix"
    if idle > life:
        return f"the server kept the prefix {_seconds(idle)} idle, past its lifetime"
    return "the server cached more of the prompt than the request before it held"


def _seconds(value: float) -> str:
    return counted(round(value), "second") if value < 120 else f"{value / 60:.0f} minutes"
