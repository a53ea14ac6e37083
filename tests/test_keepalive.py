"""The adaptive keep-alive (`agent/keepalive.py`): its targets on seeded pause traces, its safety and its budget.

The traces are `benchmarks/keepalive.py`'s (generated from the published distributions, adversarial ones, and the
recorded sessions' pauses in tests/fixtures): the figures the README quotes. Costs are properties of the algorithm on
a given trace, not of timing.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from hotloop.agent.cache_lifetime import LIFETIME, input_price
from hotloop.agent.keepalive import (
    MARGIN,
    TOLERANCE,
    Budget,
    KeepAlive,
    PingCosts,
    oracle_cost,
    pings_to_bridge,
    plan_cost,
)
from hotloop.agent.pricing import Ttl, price_step
from hotloop.benchmarks import keepalive as bench
from hotloop.providers.events import UsageLedger

COSTS = PingCosts.anthropic(20_000, "5m")
FIVE = LIFETIME["5m"]
# Pauses drawn from one heavy-tailed distribution: no online plan gets within 1.1× of the oracle on them (the bound,
# the best single plan chosen knowing the whole trace, is 1.3-1.4×), so there the target is the bound.
HEAVY_TAILED = ("published mix", "reply gaps", "reply gaps, Pareto tail")


@pytest.mark.parametrize("name", bench.TRACES)
def test_on_every_benchmark_trace_it_beats_no_keepalive_and_every_fixed_interval_and_nears_the_oracle(
    name: str,
) -> None:
    """On each trace `benchmarks/keepalive.py` prices for the README (2,000 generated pauses, the size of the published
    sample; the adversarial ones; the recorded sessions') the keep-alive costs at most 1.05× none, no more than any
    fixed interval capped to miss no more often, and at most 1.1× the oracle, or (on heavy tails, where no online plan
    can) within 5% of the best plan chosen knowing the trace. The one exception is no keep-alive of hotloop's: the
    learner without its dice on a trace built against itself, which only its guard holds (1.05× none and a
    re-write)."""
    costs = bench.readme_costs()
    row = bench.measured(name, 2000, 1, costs)
    met = row.met()
    if name == bench.NO_DICE:
        assert not met["fixed"] and row.adaptive.misses == row.pauses
        assert row.none.cost < row.adaptive.cost <= (1 + TOLERANCE) * row.none.cost + costs.rewrite
        return
    assert met["none"] and met["fixed"], (name, row)
    if name in HEAVY_TAILED:
        assert row.best > 1.1 * row.oracle  # the target is out of any online plan's reach here
        assert row.adaptive.cost <= 1.05 * row.best
    else:
        assert met["oracle"], (name, row)


def test_the_recorded_sessions_pauses_cost_nothing_and_send_no_ping() -> None:
    """The pauses of the recorded sessions (imported Claude Code and Codex transcripts, a watched log, a trace) all
    end within the lifetime: the keep-alive sends nothing, as the oracle."""
    pauses = bench.recorded()
    assert len(pauses) >= 10
    row = bench.measure("recorded", pauses, COSTS, 1)
    assert (row.adaptive.cost, row.adaptive.pings, row.oracle) == (0, 0, 0)


def test_dice_defeat_an_adversary_who_knows_the_algorithm_but_not_the_seed() -> None:
    """Each pause just past the plan of a copy of the keep-alive: against its own copy (no dice) it loses up to its
    guard, 1.05× none plus one re-write; with other dice the trace costs it at most 1.1× the oracle."""
    pauses = bench.adversarial(400, 1, COSTS, 0.0)
    exposed = bench.measure("no dice", pauses, COSTS, 1, 0.0)
    assert exposed.adaptive.cost > 5 * exposed.oracle
    assert exposed.adaptive.cost <= (1 + TOLERANCE) * exposed.none.cost + COSTS.rewrite + 1e-6
    hidden = bench.measure("dice", bench.adversarial(400, 1, COSTS), COSTS, 1)
    assert hidden.adaptive.cost <= 1.1 * hidden.oracle


@pytest.mark.parametrize("lifetime", ["5m", "1h", 40.0, MARGIN + 1])
def test_no_ping_is_planned_after_the_prefix_it_renews_has_expired(lifetime: Ttl | float) -> None:
    """Whatever it learned, each ping lands before the prefix renewed by the one before it (or the request) expires."""
    life = LIFETIME[lifetime] if isinstance(lifetime, str) else lifetime
    rng = random.Random(3)
    keep = KeepAlive(COSTS, rng=random.Random(4))
    for _ in range(300):
        plan = keep.plan(lifetime)
        reach = 0.0
        for offset in plan:
            assert reach < offset < reach + life - MARGIN / 2
            reach = offset
        keep.observe_pause(rng.choice([5.0, life * 0.9, life * 1.5, life * rng.uniform(1, 30)]))


def test_a_lifetime_no_longer_than_the_margin_is_never_pinged() -> None:
    """A ping could not land in time: the plan is empty however long the pauses run."""
    keep = KeepAlive(COSTS)
    for _ in range(50):
        keep.observe_pause(MARGIN * 3)
    assert keep.plan(MARGIN) == []


def test_the_pings_per_pause_are_capped_by_the_budget() -> None:
    """Pauses worth bridging with up to 8 pings get no more pings than `max_pings`."""
    pauses = [FIVE + k * (FIVE - MARGIN) - 10 for k in range(1, 9)] * 10  # bridged by 1 … 8 pings
    capped = KeepAlive(COSTS, budget=Budget(max_pings=3), rng=random.Random(1))
    unlimited = KeepAlive(COSTS, rng=random.Random(1))
    for pause in pauses:
        capped.observe_pause(pause)
        unlimited.observe_pause(pause)
    assert len(capped.plan("5m")) == 3
    assert len(unlimited.plan("5m")) == pings_to_bridge(max(pauses), FIVE) == 8


def test_a_days_spending_stays_within_the_daily_budget_and_the_next_day_starts_afresh() -> None:
    """With room for 5 pings a day and pauses that each need 2, the fifth ping is the day's last; the next day has
    its own."""
    keep = KeepAlive(COSTS, budget=Budget(per_day=COSTS.ping * 5), rng=random.Random(1))
    pause = FIVE + 2 * (FIVE - MARGIN) - 2 * MARGIN  # needs 2 pings, ends before a third would go out
    day = 86_400.0 * 20_000
    sent = []
    for number in range(5):
        plan = keep.plan("5m", at=day + number * 3600)
        sent.append(plan_cost(plan, pause, FIVE, COSTS)[1])
        keep.observe_pause(pause)
    assert sent == [2, 2, 1, 0, 0]
    assert plan_cost(keep.plan("5m", at=day + 86_400), pause, FIVE, COSTS)[1] == 2


def test_after_long_pauses_it_stops_pinging_a_five_minute_cache() -> None:
    """Fresh, the published prior says ping; after pauses of 2-3 hours (past the break-even) it lets the prefix go."""
    keep = KeepAlive(COSTS, rng=random.Random(2))
    assert keep.plan("5m")
    rng = random.Random(5)
    for _ in range(60):
        keep.plan("5m")
        keep.observe_pause(rng.uniform(7200, 10_800))
    assert keep.plan("5m") == []


def test_after_short_pauses_no_ping_goes_out() -> None:
    """Pauses that end before the cache would expire are never pinged, from the first one on."""
    keep, rng = KeepAlive(COSTS, rng=random.Random(2)), random.Random(6)
    sent = 0
    for _ in range(300):
        plan = keep.plan("5m")
        pause = rng.uniform(1, FIVE - MARGIN - 1)
        sent += plan_cost(plan, pause, FIVE, COSTS)[1]
        keep.observe_pause(pause)
    assert sent == 0


def test_after_pauses_just_past_the_lifetime_it_pings_once() -> None:
    """Pauses of 5-5.5 minutes: one ping each bridges them, far cheaper than the re-write."""
    keep, rng = KeepAlive(COSTS, rng=random.Random(2)), random.Random(7)
    for _ in range(40):
        keep.plan("5m")
        keep.observe_pause(rng.uniform(FIVE + 1, FIVE + 30))
    assert keep.plan("5m") == [FIVE - MARGIN]


def test_the_same_seed_plans_the_same_and_hostile_pauses_are_ignored() -> None:
    """Plans depend only on the pauses and the seed; a NaN, infinite or negative pause teaches nothing."""
    first, second = KeepAlive(COSTS, rng=random.Random(9)), KeepAlive(COSTS, rng=random.Random(9))
    for pause in bench.generated("reply gaps", 200, 2):
        assert first.plan("5m") == second.plan("5m")
        first.observe_pause(pause)
        second.observe_pause(pause)
    for hostile in (float("nan"), float("inf"), -5.0):
        first.observe_pause(hostile)
    assert [first.plan(life) for life in ("5m", "1h")] == [second.plan(life) for life in ("5m", "1h")]


def test_nonsense_lifetimes_costs_and_clocks_plan_no_ping_and_raise_nothing() -> None:
    """A NaN, infinite or negative lifetime or cost, or a NaN clock, is planned as no ping (or as no day)."""
    keep, twin = KeepAlive(COSTS, rng=random.Random(3)), KeepAlive(COSTS, rng=random.Random(3))
    for lifetime in (float("nan"), float("inf"), -300.0, 0.0):
        assert keep.plan(lifetime) == []
    for costs in (PingCosts(float("nan"), 1.0), PingCosts(23_000.0, float("inf")), PingCosts(-1.0, 2.0)):
        assert keep.plan("5m", costs) == []
    clocked = keep.plan("5m", at=float("nan"))
    assert clocked and clocked == twin.plan("5m")


def test_anthropics_multipliers_give_a_ping_and_a_miss_in_input_token_equivalents() -> None:
    """A ping reads the prefix (0.1×) and sends 10 tokens and 1 output; a miss writes it (1.25× or 2×) less a read."""
    assert PingCosts.anthropic(20_000, "5m") == PingCosts(rewrite=23_000.0, ping=2_011.0)
    assert PingCosts.anthropic(20_000, "1h", input_price=2.0, output_price=10.0) == PingCosts(76_000.0, 4_030.0)


def test_priced_costs_are_the_price_tables_and_none_on_a_server_without_prices() -> None:
    """In dollars from the price table, equal to the multipliers at the model's own input and output prices."""
    model, server = "claude-sonnet-4-5", "https://api.anthropic.com"
    per_input = input_price(model, server)(Decimal(100_000))  # under the long-context tier (200,000 tokens)
    output = price_step(UsageLedger(0, cache_read=0, cache_write=0, uncached=0, output=100_000), model, server)
    assert per_input is not None and output is not None
    priced = PingCosts.priced(20_000, "5m", model, server)
    expected = PingCosts.anthropic(20_000, "5m", float(per_input) / 1e5, float(output.total) / 1e5)
    assert priced is not None
    assert priced.ping == pytest.approx(expected.ping) and priced.rewrite == pytest.approx(expected.rewrite)
    assert PingCosts.priced(20_000, "5m", model, "http://127.0.0.1:8000/v1") is None


def test_the_oracle_pays_the_cheaper_of_bridging_and_rewriting() -> None:
    """Within the lifetime nothing; past it, one ping per lifetime less the margin, until a re-write is cheaper."""
    assert oracle_cost(FIVE, FIVE, COSTS) == 0
    assert oracle_cost(FIVE + 1, FIVE, COSTS) == COSTS.ping
    assert oracle_cost(FIVE + 2 * (FIVE - MARGIN), FIVE, COSTS) == 2 * COSTS.ping
    assert oracle_cost(10 * 3600, FIVE, COSTS) == COSTS.rewrite
