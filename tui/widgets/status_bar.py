"""`StatusBar`: provider · model · tier, the session's totals, and its cache-hit rate."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.figures import SessionTotals, short_model
from hotloop.agent.text import inert


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    provider: reactive[str] = reactive("")
    model: reactive[str] = reactive("")
    tier: reactive[str | None] = reactive(None)
    state: reactive[str] = reactive("connecting…")
    totals: reactive[SessionTotals] = reactive(SessionTotals, always_update=True)

    def render(self) -> Text:
        """`● ready  │  sim · sim-balanced · balanced  │  prompt 1,927 · out 143 · cache hit 92%`."""
        line = Text()
        line.append(f"● {self.state}", "" if self.state == "ready" else "bold")
        line.append("  │  ", "dim")
        if self.provider:
            line.append(inert(self.provider), "bold")
            line.append(inert(f" · {short_model(self.model)}"))  # a server's name for it
            if self.tier:
                line.append(inert(f" · {self.tier}"), "italic")
            line.append("  │  ", "dim")
        totals = self.totals
        line.append(f"prompt {totals.prompt:,} · out {totals.output:,} · cache hit ")
        hit = totals.cache_hit
        line.append(f"{hit:.0%}" if hit is not None else "not reported", "" if hit is not None else "dim")
        if totals.unreported:
            line.append(f" · {totals.unreported} without usage", "dim")
        return line
