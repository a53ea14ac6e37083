"""The policies `whatif` prices: the traffic as it was, 1-hour writes, fixed-interval pings as the keep-alive plugins
send them, hotloop's adaptive keep-alive, and the oracle, the cheapest replay of the model knowing every pause.

The oracle chooses, per request, the lifetime its writes are for, and per pause whether to bridge it with the fewest
pings that keep the prefix alive or let the next request write it again. What a request costs depends only on those
two choices and the one before it (the model holds the last request's prefix whatever was chosen), so a dynamic
programme over the requests, with the last lifetime as its state, finds the cheapest: no plan of lifetimes and pings
in the model costs less. Bridging is weighed only in pauses up to a day (`PING_SPAN`), where every policy's pings stop.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise

from hotloop.agent.keepalive import KeepAlive, PingCosts
from hotloop.agent.pricing import Ttl
from hotloop.sessions.whatif.cache import PING_SPAN, Rates, Server, held_after, ping, reach, serve
from hotloop.sessions.whatif.trace import Request


@dataclass
class Recorded:
    """The traffic as it was: each request writes for the lifetime its writes were billed at (the last one's when it
    wrote nothing), and nothing pings."""

    name: str = "recorded"
    _last: Ttl = "5m"

    def ttl(self, index: int, request: Request) -> Ttl:
        self._last = request.ttl or self._last
        return self._last

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        return ()


@dataclass
class OneHour:
    name: str = "1h"

    def ttl(self, index: int, request: Request) -> Ttl:
        return "1h"

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        return ()


@dataclass
class FixedInterval:
    """A ping every `minutes` through every pause, as the keep-alive plugins send them; writes for 5 minutes."""

    minutes: float
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"keepalive-{self.minutes:g}m"

    def ttl(self, index: int, request: Request) -> Ttl:
        return "5m"

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        step = self.minutes * 60
        return [step * n for n in range(1, int(min(pause, PING_SPAN) // step) + 1)]


class Adaptive:
    """hotloop's keep-alive (`agent/keepalive.py`): at the start of each of the user's pauses (before a turn) it plans
    from the pauses it has seen so far, then learns the pause once it ended; writes for 5 minutes. Seeded, so a replay
    draws the same plans."""

    name = "keepalive"

    def __init__(self, requests: Sequence[Request], price: Callable[[int], PingCosts | None], seed: int = 0) -> None:
        self._requests = requests
        self._price = price
        self._keep: KeepAlive | None = None
        self._rng = random.Random(seed)

    def ttl(self, index: int, request: Request) -> Ttl:
        return "5m"

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        if not self._requests[index + 1].opens_turn:
            return ()  # a tool's run between two steps: no pause of the user's
        costs = self._price(held) or PingCosts.anthropic(held, "5m")
        if self._keep is None:
            self._keep = KeepAlive(costs, rng=self._rng)
        plan = self._keep.plan(lifetime, costs)
        self._keep.observe_pause(pause)  # after the plan: it learns the pause only once it is over
        return plan


@dataclass
class Scripted:
    """A plan decided beforehand: a lifetime per request and the ping offsets of each pause."""

    ttls: list[Ttl]
    offsets: list[list[float]] = field(default_factory=list)
    name: str = "oracle"

    def ttl(self, index: int, request: Request) -> Ttl:
        return self.ttls[index]

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        return self.offsets[index] if index < len(self.offsets) else ()


def oracle(server: Server, requests: Sequence[Request], rates: Rates) -> Scripted:
    """The cheapest plan for `requests` on `server` at `rates`, knowing every pause."""
    ttls: list[Ttl] = list(server.cache.lifetimes) or ["5m"]
    if not requests:
        return Scripted([])
    # best[ttl]: the cheapest cost so far with the last request writing for `ttl`, and the plan that got there.
    best: dict[Ttl, tuple[Decimal, list[Ttl], list[list[float]]]] = {
        ttl: (rates.cost(serve(server, requests[0], 0, 0, ttl)), [ttl], []) for ttl in ttls
    }
    for before, request in pairwise(requests):
        shared, held = reach(server, before, request), held_after(server, before)
        pause = max(request.start - before.end, 0.0)
        options: dict[Ttl, tuple[Decimal, list[Ttl], list[list[float]]]] = {}
        for last, (spent, plan, offsets) in best.items():
            life = server.life(last)
            bridges: list[tuple[Decimal, list[float], bool]] = [(Decimal(0), [], pause <= life)]
            if life < pause <= PING_SPAN:
                pings = [life * n for n in range(1, math.ceil(pause / life))]
                one = rates.cost(ping(server, 0.0, held, True, last))
                bridges.append((one * len(pings), pings, True))
            for extra, pings_at, alive in bridges:
                for ttl in ttls:
                    cost = spent + extra + rates.cost(serve(server, request, shared, held if alive else 0, ttl))
                    if ttl not in options or cost < options[ttl][0]:
                        options[ttl] = (cost, [*plan, ttl], [*offsets, pings_at])
        best = options
    _, plan, offsets = min(best.values(), key=lambda option: option[0])
    return Scripted(plan, offsets)
