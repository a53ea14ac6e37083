"""`hotloop whatif`'s output: a table of policies, the requests the model couldn't reproduce, and a plot of each
policy's dollars over time (plotext) when stdout is a terminal; or the policies as JSON."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from itertools import cycle

from hotloop.agent.pricing import PRICE_UNKNOWN, money
from hotloop.agent.text import inert
from hotloop.sessions.whatif import PolicyTotal, check, compare
from hotloop.sessions.whatif.trace import Conversation

_COLORS = ("magenta", "cyan", "green", "yellow", "blue", "red")
_COLUMNS = ("policy", "usd", "cache_read", "cache_write", "uncached", "output", "requests", "pings")


def show(conversations: Sequence[Conversation], as_model: str | None, as_json: bool, problems: Sequence[str]) -> int:
    totals = compare(conversations, as_model)
    skipped = [
        f"{c.session}: {c.skipped:,} unreadable {'lines or requests' if c.skipped > 1 else 'line or request'}"
        " without figures skipped"
        for c in conversations
        if c.skipped
    ]
    for problem in [*problems, *skipped]:
        print(f"hotloop: warning: {inert(problem)}", file=sys.stderr)
    if as_json:
        print(json.dumps({"policies": [total.as_json() for total in totals]}))
        return 0
    print(table(totals))
    lines = [mismatch.line for conversation in conversations for mismatch in check(conversation)]
    if lines:
        print("\nwhere the model doesn't reproduce the log:")
        print("\n".join(f"  {inert(line)}" for line in lines))
    if sys.stdout.isatty() and any(len(total.spent) > 1 for total in totals):
        print(plot(totals, *shutil.get_terminal_size()))
    return 0


def table(totals: Sequence[PolicyTotal]) -> str:
    rows = [list(_COLUMNS)] + [
        [
            total.policy,
            PRICE_UNKNOWN if total.usd is None else money(total.usd),
            *(f"{value:,}" for value in (total.cache_read, total.cache_write, total.uncached, total.output)),
            f"{total.requests:,}",
            f"{total.pings:,}",
        ]
        for total in totals
    ]
    widths = [max(len(row[n]) for row in rows) for n in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if n == 0 else cell.rjust(width)
            for n, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def plot(totals: Sequence[PolicyTotal], columns: int, lines: int) -> str:
    """Each policy's dollars so far against the hours since the first request, in braille."""
    import plotext

    curves = [(total.policy, curve) for total in totals if (curve := total.curve())]
    start = min(curve[0][0] for _, curve in curves)
    plotext.clear_figure()
    plotext.plotsize(min(columns, 100), max(min(lines // 2, 20), 8))
    plotext.theme("clear")
    for (policy, curve), color in zip(curves, cycle(_COLORS), strict=False):
        hours = [(at - start) / 3600 for at, _ in curve]
        plotext.plot(hours, [float(usd) for _, usd in curve], label=policy, marker="braille", color=color)
    plotext.xlabel("hours since the first request")
    plotext.ylabel("$")
    return str(plotext.build())
