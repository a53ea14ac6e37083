"""A keep-alive for a hosted API's prompt cache that pays for itself: whether, and when, to ping during a pause.

A ping (the cached prefix, a one-word turn, one output token) costs a cache read of the prefix and renews its
lifetime; letting the prefix expire costs a re-write when the pause ends (Anthropic: 1.25× the input price for a
5-minute cache, 2× for a 1-hour one, against 0.1× for a read). That is rent or buy: each ping rents one more
lifetime, a miss buys. Knowing nothing of the pause, pinging up to the break-even is 2-competitive and a randomized
threshold e/(e−1); knowing the distribution of the pauses, the cheapest plan is the number of pings whose expected
cost under it is lowest, and no online plan does better on pauses drawn from it. `KeepAlive` learns the distribution
from the conversation's own pauses (a published one stands in until enough of them outlast a ping's time), plans
the cheapest number of pings, draws at random among plans within `SLACK` of it (no one pause length then defeats it
every time), and never risks more than `TOLERANCE` over what no keep-alive would have paid, plus one re-write.

Interface (`hotloop whatif` replays it; a live pinger would call the same):
    costs = PingCosts.anthropic(prefix_tokens, "5m")                # input-token equivalents
    costs = PingCosts.priced(prefix_tokens, "5m", model, base_url)  # dollars from the price table; None without
    keep = KeepAlive(costs, budget=Budget(max_pings=12, per_day=2.0), rng=random.Random(7))
    keep.plan("5m")              # at a pause's start: [285.0, 570.0] or [] (don't ping)
    keep.observe_pause(612.0)    # at its end: learns it, and counts what the plan's pings and a miss cost
Every time is in seconds after the prefix's last use (a pause runs from then to the next request). Each offset of a
plan is a ping to send only if the pause still lasts then and the ping before it was answered: each lands `MARGIN`
before the prefix it renews would expire, never after. `plan_cost` and `oracle_cost` price a pause under a plan and
at best, for a replay.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

from hotloop.agent.cache_lifetime import LIFETIME, READ, WRITE
from hotloop.agent.pricing import Ttl, price_step
from hotloop.providers.events import UsageLedger

MARGIN = 15.0  # a ping must reach the server and be read while the prefix still lives
PING_EXTRA = 10  # uncached tokens a ping sends after the prefix: a one-word user turn and its framing
SLACK = 0.02  # plans this close to the cheapest (by expected cost) are drawn at random
TOLERANCE = 0.05  # the most the keep-alive may cost over no keep-alive, beyond one re-write to learn with
MEMORY = 2048  # pauses remembered: about one heavy user's month
ENOUGH = 32  # pauses past a ping's time before the prior is dropped; it fades out linearly until then
PRIOR_WEIGHT = 16.0  # the prior counts as this many such pauses at first

# The prior: reply gaps as published for one user (27% of 1,967 over 5 minutes, Claude Code issue #74075), as a
# log-normal with a 90 s median, in 256 quantiles.
_PRIOR_MEDIAN = 90.0
_PRIOR_OVER_5M = 0.27
_sigma = math.log(LIFETIME["5m"] / _PRIOR_MEDIAN) / NormalDist().inv_cdf(1 - _PRIOR_OVER_5M)
PRIOR: tuple[float, ...] = tuple(
    _PRIOR_MEDIAN * math.exp(_sigma * NormalDist().inv_cdf((i + 0.5) / 256)) for i in range(256)
)


@dataclass(frozen=True)
class PingCosts:
    """What a ping costs and what a miss costs beyond a read, in one unit (dollars or input-token equivalents)."""

    rewrite: float  # the prefix written again after it expired, less the read it would otherwise have been
    ping: float

    @classmethod
    def anthropic(
        cls, prefix: int, lifetime: Ttl, input_price: float = 1.0, output_price: float | None = None
    ) -> PingCosts:
        """Anthropic's multipliers at `input_price` a token (1: input-token equivalents); the ping's one output
        token at `output_price` (None: as an input token, a few tokens' worth against a prefix of 1,024 or more)."""
        out = input_price if output_price is None else output_price
        rewrite = float(WRITE[lifetime] - READ) * prefix * input_price
        return cls(rewrite, float(READ) * prefix * input_price + PING_EXTRA * input_price + out)

    @classmethod
    def priced(cls, prefix: int, lifetime: Ttl, model: str, base_url: str, at: float | None = None) -> PingCosts | None:
        """In dollars at `model`'s prices on the server at `base_url` (the price table's); None without a price."""
        whole = prefix + PING_EXTRA
        ping = UsageLedger(whole, cache_read=prefix, cache_write=0, uncached=PING_EXTRA, output=1, cache_write_1h=0)
        hour = prefix if lifetime == "1h" else 0
        miss = UsageLedger(whole, cache_read=0, cache_write=prefix, uncached=PING_EXTRA, output=1, cache_write_1h=hour)
        costs = [price_step(usage, model, base_url, at=at, write_ttl=lifetime) for usage in (ping, miss)]
        if any(cost is None or cost.source != "price table" for cost in costs):
            return None
        ping_cost, miss_cost = (float(cost.total) for cost in costs if cost is not None)
        return cls(
            miss_cost - ping_cost, ping_cost
        )  # the same extra tokens and output: only the prefix's price differs


@dataclass(frozen=True)
class Budget:
    """The most a keep-alive may spend: pings in one pause, and (in the costs' unit) in a day."""

    max_pings: int = 24
    per_day: float | None = None


def oracle_cost(pause: float, lifetime: float, costs: PingCosts, margin: float = MARGIN) -> float:
    """The least a pause can cost knowing its length: nothing within the lifetime, else pings or a re-write."""
    return min(costs.rewrite, costs.ping * pings_to_bridge(pause, lifetime, margin))


def pings_to_bridge(pause: float, lifetime: float, margin: float = MARGIN) -> int:
    """How many pings, each `margin` before expiry, keep a prefix alive through `pause`."""
    if pause <= lifetime:
        return 0
    step = lifetime - margin
    return math.ceil((pause - lifetime) / step) if step > 0 else 10**9  # no ping lands in time: none bridges it


def plan_cost(plan: list[float], pause: float, lifetime: float, costs: PingCosts) -> tuple[float, int, bool]:
    """What `plan` costs on a pause of `pause` seconds: (cost, pings sent, whether the prefix expired)."""
    sent = sum(offset < pause for offset in plan)
    alive_until = (plan[sent - 1] if sent else 0.0) + lifetime
    missed = pause > alive_until
    return sent * costs.ping + (costs.rewrite if missed else 0.0), sent, missed


@dataclass(frozen=True)
class _Planned:
    """The plan in force: what it was priced at, for counting what it spent when its pause ends."""

    offsets: list[float]
    lifetime: float
    costs: PingCosts
    day: int | None


class KeepAlive:
    """One conversation's keep-alive: learns its pauses, plans each one's pings."""

    def __init__(
        self,
        costs: PingCosts,
        *,
        budget: Budget | None = None,
        rng: random.Random | None = None,
        margin: float = MARGIN,
        slack: float = SLACK,
        prior: Iterable[float] = PRIOR,
    ) -> None:
        self.costs = costs
        self.budget = budget or Budget()
        self.margin = margin
        self.slack = slack
        self._rng = rng or random.Random()
        self._prior = sorted(prior)
        self._recent: deque[float] = deque(maxlen=MEMORY)
        self._sorted: list[float] = []
        self._planned: _Planned | None = None
        self._spent: tuple[int | None, float] = (None, 0.0)  # a day's pings
        self.paid = 0.0  # pings and misses so far, under the plans
        self.unpinged = 0.0  # what the same pauses would have cost with no keep-alive

    def observe_pause(self, seconds: float) -> None:
        """A pause ended `seconds` after the prefix's last use: learn it, and count what its plan spent."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        planned, self._planned = self._planned, None
        if planned is not None:
            cost, sent, _ = plan_cost(planned.offsets, seconds, planned.lifetime, planned.costs)
            day, spent = self._spent
            self._spent = (planned.day, (spent if day == planned.day else 0.0) + sent * planned.costs.ping)
            self.paid += cost
            self.unpinged += planned.costs.rewrite if seconds > planned.lifetime else 0.0
        if len(self._recent) == self._recent.maxlen:
            del self._sorted[bisect_right(self._sorted, self._recent[0]) - 1]
        self._recent.append(seconds)
        insort(self._sorted, seconds)

    def plan(self, lifetime: Ttl | float, costs: PingCosts | None = None, *, at: float | None = None) -> list[float]:
        """At a pause's start: the offsets at which to ping if it still lasts, [] for none.

        `costs` are this pause's (the prefix grows), the keep-alive's own by default; `at` (seconds since the epoch)
        is the pause's start, for the daily budget (without it, the budget is one day's for the keep-alive's life).
        """
        life = LIFETIME[lifetime] if isinstance(lifetime, str) else float(lifetime)
        costs = costs or self.costs
        step = life - self.margin
        day = int(at // 86_400) if at is not None and math.isfinite(at) else None
        sane = all(math.isfinite(value) and value > 0 for value in (step, life, costs.ping, costs.rewrite))
        cap = self._affordable(costs, day) if sane else 0
        count = 0
        if cap > 0:
            expected = self._expected(life, step, cap, costs)
            near = [n for n, cost in enumerate(expected) if cost <= min(expected) * (1 + self.slack)]
            count = near[0] if len(near) == 1 else self._rng.choice(near)
        offsets = [step * k for k in range(1, count + 1)]
        self._planned = _Planned(offsets, life, costs, day)
        return offsets

    def _affordable(self, costs: PingCosts, day: int | None) -> int:
        """The most pings this pause may send: the budget's, the day's left, and what keeps the keep-alive within
        `TOLERANCE` of no keep-alive (a pause's pings can cost that much more than letting the prefix go)."""
        allowed = (1 + TOLERANCE) * self.unpinged + costs.rewrite - self.paid
        cap = min(max(self.budget.max_pings, 0), max(int(allowed // costs.ping), 0))
        if self.budget.per_day is None:
            return cap
        spent_day, spent = self._spent
        left = self.budget.per_day - (spent if spent_day == day else 0.0)
        return min(cap, max(int(left // costs.ping), 0))

    def _expected(self, life: float, step: float, cap: int, costs: PingCosts) -> list[float]:
        """Expected cost of sending 0, 1, … pings, up to `cap` or the last that could still go out, over the pauses
        that outlast the first ping's time (the shorter ones cost every plan nothing)."""
        seen = self._outlasting(self._sorted, step)
        weight = PRIOR_WEIGHT * max(0.0, 1 - seen / ENOUGH)
        prior_base = self._outlasting(self._prior, step)
        if not prior_base:
            weight = 0.0

        def lasting(seconds: float) -> float:
            prior = weight * self._outlasting(self._prior, seconds) / prior_base if weight else 0.0
            return (prior + self._outlasting(self._sorted, seconds)) / (weight + seen) if weight + seen else 0.0

        expected = [costs.rewrite * lasting(life)]
        pinged = 0.0
        for n in range(1, cap + 1):
            going = lasting(step * n)
            if going <= 0:
                break
            pinged += costs.ping * going
            expected.append(pinged + costs.rewrite * lasting(step * n + life))
        return expected

    @staticmethod
    def _outlasting(ordered: list[float], seconds: float) -> int:
        return len(ordered) - bisect_right(ordered, seconds)
