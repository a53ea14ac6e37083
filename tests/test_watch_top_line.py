"""The watch app's top line narrowed: the parts it gives up, in their order, and the figures it never gives up."""

from __future__ import annotations

from decimal import Decimal

from rich.cells import cell_len

from hotloop.agent.pricing import CostTotals
from hotloop.tui.widgets.watch_top_line import WatchTopLine, top_line

ADDRESS = "http://127.0.0.1:43817"
UPSTREAM = "anthropic (https://api.anthropic.com) and openai (https://api.openai.com)"


def _line(cost: CostTotals, width: int, upstream: str = UPSTREAM) -> str:
    line = WatchTopLine(ADDRESS, upstream)
    line.count(1_200, 14_031, cost)
    return top_line(line.address, line.upstream, line.figures, width)


def test_narrowed_the_line_gives_up_the_upstream_then_the_word_then_the_unpriced_count_then_the_address() -> None:
    """A partly priced traffic on the hosted APIs, at each width from 200 down to 30: the forms come in the
    docstring's order and no other, each the widest that fits, and the counts and dollars are in every one."""
    cost = CostTotals(known=Decimal("12.3456"), priced=14_029, unknown=2)
    figures = "1,200 conversations · 14,031 requests · "
    forms = [
        f"watching {ADDRESS}  │  {figures}$12.35 + 2 steps price unknown  │  → {UPSTREAM}",
        f"watching {ADDRESS}  │  {figures}$12.35 + 2 steps price unknown",
        f"{ADDRESS}  │  {figures}$12.35 + 2 steps price unknown",
        f"{ADDRESS}  │  {figures}≥$12.35",
        f"{figures}≥$12.35",
    ]
    seen = [_line(cost, width) for width in range(200, 29, -1)]
    assert list(dict.fromkeys(seen)) == forms
    for width, line in zip(range(200, 29, -1), seen, strict=True):
        assert cell_len(line) <= width or line == forms[-1]
    assert _line(cost, 78) == forms[3]  # 80 columns, less the padding: the dollars and both counts, and the address


def test_no_price_at_all_is_said_and_never_a_dollar_figure() -> None:
    """Steps without a price are `price unknown`, in every form down to the narrowest, never `$0`; a fully priced
    traffic keeps its whole figure (nothing to shorten)."""
    for width in (160, 78, 50):
        line = _line(CostTotals(unknown=3), width)
        assert line.endswith("14,031 requests · price unknown") and "$" not in line
    assert _line(CostTotals(known=Decimal("0.0421"), priced=3, estimated=True), 78).endswith("· ~$0.0421")


def test_before_any_request_the_line_is_where_to_point_agents() -> None:
    """Nothing counted yet: the address and the upstream, and no figure at all; narrowed, the word and the upstream
    go, the address stays."""
    assert top_line(ADDRESS, "sim (http://127.0.0.1:8000)", None, 0) == (
        f"watching {ADDRESS}  │  → sim (http://127.0.0.1:8000)"
    )
    assert top_line(ADDRESS, UPSTREAM, None, 30) == ADDRESS


def test_a_hostile_upstream_name_is_drawn_inert() -> None:
    """A provider's name from the config with a clipboard-writing escape (OSC 52) in it: drawn with visible stand-ins,
    as the status bar draws a provider's name, so nothing reaches the terminal as a control."""
    line = _line(CostTotals(unknown=1), 0, upstream="gpu\x1b]52;c;aGk=\x07box (http://gpu:8000)")
    assert line.endswith("→ gpu␛]52;c;aGk=␇box (http://gpu:8000)") and "\x1b" not in line and "\x07" not in line
