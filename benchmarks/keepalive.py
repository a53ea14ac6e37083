"""The adaptive keep-alive against no keep-alive, fixed intervals and the oracle, on pause traces (5-minute cache).

Each trace is a list of pauses (seconds from the prefix's last use to the next request), priced for a 20,000-token
prefix on Claude Sonnet 4.5 (a ping: its cache read, 10 uncached tokens and 1 output token; a miss: the re-write less
the read). Policies: `none` (let it expire), `keepalive-Nm` (a ping every N minutes for as long as the pause lasts, as
the plugins do), `adaptive` (agent/keepalive.py, learning as the trace goes, seeded), `oracle` (per pause, the cheaper
of the pings that bridge it and the re-write). "at its misses" is each fixed interval capped at the fewest pings per
pause (at least one) that miss no more often than the adaptive one, the cap chosen knowing the whole trace. "bound"
is the best single number of pings for every pause, also chosen knowing the whole trace, over the oracle: on pauses
drawn from one distribution no online plan does better in expectation, so where it is over 1.1 the oracle target
can't be met. The adversarial trace puts each pause just past the plan of a keep-alive with other dice (the same
learner, another seed); "no dice" is the learner that always takes its cheapest plan, on a trace built against it.

Targets: adaptive ≤ 1.1× oracle, ≤ 1.05× none, ≤ every fixed interval at its misses.

    python benchmarks/keepalive.py [--pauses 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from hotloop.agent.cache_lifetime import LIFETIME
from hotloop.agent.events import ResponseFinished, StepStarted
from hotloop.agent.keepalive import MARGIN, KeepAlive, PingCosts, oracle_cost, plan_cost
from hotloop.sessions.imports.claude_code import read_transcript
from hotloop.sessions.imports.codex import read_rollout
from hotloop.sessions.store import read_session

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
LIFE = LIFETIME["5m"]
INTERVALS = (1.0, 2.0, 4.0, 4.5)  # minutes, as the plugins' settings go
PREFIX = 20_000
MODEL, SERVER = "claude-sonnet-4-5", "https://api.anthropic.com"
RATIO_ORACLE, RATIO_NONE = 1.1, 1.05
ADVERSARIAL = "adversarial: just past another's plan"

# Reply gaps as published (27% of 1,967 over 5 minutes, Claude Code issue #74075): log-normal, 75 s median.
_REPLY = NormalDist(math.log(75), math.log(LIFE / 75) / NormalDist().inv_cdf(0.73))


def _think(rng: random.Random) -> float:
    return rng.lognormvariate(math.log(4), 1.0)  # a tool's run or the model's own time between steps


def _reply(rng: random.Random) -> float:
    return math.exp(_REPLY.inv_cdf(rng.random()))


def _pareto_reply(rng: random.Random) -> float:
    if rng.random() < 0.27:
        return LIFE / math.pow(1 - rng.random(), 1 / 1.1)  # past 5 minutes: a Pareto tail (α 1.1)
    return math.exp(_REPLY.inv_cdf(rng.random() * 0.73))  # the published shape, under 5 minutes


FAMILIES: dict[str, Callable[[random.Random], float]] = {
    "published mix": lambda rng: _think(rng) if rng.random() < 0.6 else _reply(rng),
    "reply gaps": _reply,
    "reply gaps, Pareto tail": _pareto_reply,
    "just past the lifetime": lambda rng: rng.uniform(LIFE + 0.5, LIFE + 30),
    "all short": lambda rng: min(rng.lognormvariate(math.log(20), 1.0), LIFE - MARGIN - 1),
    "bimodal (20 s / 30 min)": lambda rng: (
        _think(rng) * 5 if rng.random() < 0.5 else rng.lognormvariate(math.log(1800), 0.4)
    ),
    "all long (1-3 h)": lambda rng: rng.uniform(3600, 3 * 3600),
}
NO_DICE = f"{ADVERSARIAL}, no dice"
RECORDED = "recorded (tests/fixtures)"
TRACES = (*FAMILIES, ADVERSARIAL, NO_DICE, RECORDED)


def generated(family: str, count: int, seed: int) -> list[float]:
    """`count` pauses of a family, the same for the same seed."""
    rng = random.Random(f"{family}:{seed}")
    return [FAMILIES[family](rng) for _ in range(count)]


def adversarial(count: int, seed: int, costs: PingCosts, slack: float | None = None) -> list[float]:
    """Each pause 1 s past the last ping's reach of a keep-alive learning the same pauses with its own dice: what an
    adversary who knows the algorithm but not its seed does."""
    keep = _keepalive(costs, seed + 1_000, slack)
    pauses: list[float] = []
    for _ in range(count):
        plan = keep.plan(LIFE)
        pauses.append((plan[-1] if plan else 0.0) + LIFE + 1)
        keep.observe_pause(pauses[-1])
    return pauses


def recorded() -> list[float]:
    """The pauses of the recorded sessions in tests/fixtures: imported transcripts, a watched log and a trace."""
    pauses: list[float] = []
    problems: list[str] = []
    imported = read_transcript(FIXTURES / "imports" / "claude_code_2.1.332_two_runs.jsonl", problems)
    imported += read_rollout(FIXTURES / "imports" / "codex_0.171.0_two_runs.jsonl", problems)
    for conversation in imported:
        steps = [step for turn in conversation.turns for step in turn.steps]
        pauses += [b.started - a.ended for a, b in itertools.pairwise(steps) if a.ended and b.started]
    for log in (
        FIXTURES / "watched" / "claude_code_2.1.332_watched.jsonl",
        FIXTURES / "traces" / "sim_three_turns.jsonl",
    ):
        ended: float | None = None
        for event in read_session(log).events:
            if isinstance(event, StepStarted) and ended is not None:
                pauses.append(event.ts - ended)
            elif isinstance(event, ResponseFinished):
                ended = event.ts
    return [max(pause, 0.0) for pause in pauses]


@dataclass
class Tally:
    cost: float = 0.0
    pings: int = 0
    misses: int = 0

    def add(self, priced: tuple[float, int, bool]) -> None:
        self.cost += priced[0]
        self.pings += priced[1]
        self.misses += priced[2]


def fixed(pauses: list[float], minutes: float, costs: PingCosts, cap: int | None = None) -> Tally:
    """A ping every `minutes` while the pause lasts, at most `cap` of them."""
    tally = Tally()
    for pause in pauses:
        count = math.ceil(pause / (minutes * 60)) - 1  # the pings that go out before the pause ends
        count = count if cap is None else min(cap, count)
        tally.add(plan_cost([minutes * 60 * k for k in range(1, count + 1)], pause, LIFE, costs))
    return tally


def at_misses(pauses: list[float], minutes: float, costs: PingCosts, misses: int) -> Tally:
    """The fixed interval capped at the fewest pings per pause (at least one) that miss at most `misses` times."""
    low, high = 1, max((math.ceil(pause / (minutes * 60)) for pause in pauses), default=1)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fixed(pauses, minutes, costs, middle).misses <= misses else (middle + 1, high)
    return fixed(pauses, minutes, costs, low)


def _keepalive(costs: PingCosts, seed: int, slack: float | None) -> KeepAlive:
    rng = random.Random(seed)
    return KeepAlive(costs, rng=rng) if slack is None else KeepAlive(costs, rng=rng, slack=slack)


def adaptive(pauses: list[float], costs: PingCosts, seed: int, slack: float | None = None) -> Tally:
    """The keep-alive planning each pause from the ones before it."""
    keep, tally = _keepalive(costs, seed, slack), Tally()
    for pause in pauses:
        tally.add(plan_cost(keep.plan(LIFE), pause, LIFE, costs))
        keep.observe_pause(pause)
    return tally


def best_plan(pauses: list[float], costs: PingCosts) -> float:
    """The cheapest one number of pings for every pause, chosen knowing them all."""
    step = LIFE - MARGIN
    return min(
        sum(plan_cost([step * k for k in range(1, n + 1)], pause, LIFE, costs)[0] for pause in pauses)
        for n in range(40)
    )


@dataclass
class Row:
    family: str
    pauses: int
    none: Tally
    fixed: dict[float, Tally]
    matched: dict[float, Tally]
    adaptive: Tally
    oracle: float
    best: float

    def met(self) -> dict[str, bool]:
        """Each target: against the oracle, against no keep-alive, against the fixed intervals at the same misses."""
        slack = 1e-9 * max(self.none.cost, 1.0)  # sums of floats
        return {
            "oracle": self.adaptive.cost <= RATIO_ORACLE * self.oracle + slack,
            "none": self.adaptive.cost <= RATIO_NONE * self.none.cost + slack,
            "fixed": all(self.adaptive.cost <= tally.cost + slack for tally in self.matched.values()),
        }


def measure(family: str, pauses: list[float], costs: PingCosts, seed: int, slack: float | None = None) -> Row:
    """Every policy's cost on one trace."""
    mine = adaptive(pauses, costs, seed, slack)
    return Row(
        family,
        len(pauses),
        fixed(pauses, 1.0, costs, 0),
        {minutes: fixed(pauses, minutes, costs) for minutes in INTERVALS},
        {minutes: at_misses(pauses, minutes, costs, mine.misses) for minutes in INTERVALS},
        mine,
        sum(oracle_cost(pause, LIFE, costs) for pause in pauses),
        best_plan(pauses, costs),
    )


def _ratio(value: float, base: float) -> str:
    if base == 0:
        return "1.00" if value == 0 else "∞"
    return f"{value / base:.2f}"


def trace(name: str, count: int, seed: int, costs: PingCosts) -> tuple[list[float], float | None]:
    """A trace's pauses, and the slack of the keep-alive it is measured with (None: the keep-alive's own)."""
    if name in FAMILIES:
        return generated(name, count, seed), None
    if name == NO_DICE:
        return adversarial(count, seed, costs, 0.0), 0.0
    return (adversarial(count, seed, costs), None) if name == ADVERSARIAL else (recorded(), None)


def measured(name: str, count: int, seed: int, costs: PingCosts) -> Row:
    pauses, slack = trace(name, count, seed, costs)
    return measure(name, pauses, costs, seed, slack)


def rows(count: int, seed: int, costs: PingCosts) -> list[Row]:
    """Every trace's row, the recorded sessions' last."""
    return [measured(name, count, seed, costs) for name in TRACES]


def readme_costs() -> PingCosts:
    """The README's: a 20,000-token prefix at Claude Sonnet 4.5's prices."""
    return PingCosts.priced(PREFIX, "5m", MODEL, SERVER) or PingCosts.anthropic(PREFIX, "5m")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pauses", type=int, default=2000, help="pauses per generated trace (default: 2000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    costs = readme_costs()
    print(f"a ping ${costs.ping:.4f}; a miss ${costs.rewrite:.4f} over a read ({PREFIX:,}-token prefix, {MODEL})\n")
    table = rows(args.pauses, args.seed, costs)
    print("| trace | pauses | none | " + " | ".join(f"keepalive-{m:g}m" for m in INTERVALS) + " | adaptive | oracle |")
    print("|---" * (len(INTERVALS) + 5) + "|")
    for row in table:
        cells = " | ".join(f"${row.fixed[m].cost:.2f}" for m in INTERVALS)
        print(
            f"| {row.family} | {row.pauses} | ${row.none.cost:.2f} | {cells} | ${row.adaptive.cost:.2f} | "
            f"${row.oracle:.2f} |"
        )
    print()
    print(
        "| trace | ÷ oracle (≤ 1.1; bound) | ÷ none (≤ 1.05) | misses: adaptive / none | pings | "
        + " | ".join(f"{m:g}m at its misses" for m in INTERVALS)
        + " | targets |"
    )
    print("|---" * (len(INTERVALS) + 6) + "|")
    for row in table:
        cells = " | ".join(f"${row.matched[m].cost:.2f} ({row.matched[m].misses})" for m in INTERVALS)
        targets = " ".join(f"{name} {'✓' if ok else '✗'}" for name, ok in row.met().items())
        print(
            f"| {row.family} | {_ratio(row.adaptive.cost, row.oracle)}; {_ratio(row.best, row.oracle)} | "
            f"{_ratio(row.adaptive.cost, row.none.cost)} | {row.adaptive.misses} / {row.none.misses} | "
            f"{row.adaptive.pings} | {cells} | {targets} |"
        )


if __name__ == "__main__":
    main()
