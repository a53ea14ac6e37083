"""`StatusBar`: provider · model · tier, the session's totals, its cache-hit rate and how full its context is."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.figures import SessionTotals, context_use, counted, short_model
from hotloop.agent.text import inert

SEPARATOR = "  │  "
# What the status bar gives up as it narrows, first to last: the cost's count of unpriced steps (`≥$0.0094`
# stays), then whole parts, the totals before the provider and model (what answers is what a glance at an
# 80-column terminal looks for); the state and the cache figure always stay.
NARROWING = ("unpriced", "tier", "cost", "totals", "model", "provider", "context")
CONTEXT_WARNING = 0.8  # of the window: the meter turns to a warning


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    provider: reactive[str] = reactive("")
    model: reactive[str] = reactive("")
    tier: reactive[str | None] = reactive(None)
    state: reactive[str] = reactive("connecting…")
    totals: reactive[SessionTotals] = reactive(SessionTotals, always_update=True)
    context: reactive[tuple[int, int] | None] = reactive(None)  # tokens the conversation holds, of the window
    context_estimated: reactive[bool] = reactive(False)  # partly an estimate: a compaction's, until a step reports

    def render(self) -> Text:
        """`● ready  │  sim · sim-balanced · balanced  │  prompt 1,927 · out 143 · cache hit 92%`.

        Where the width is short, the tier goes first, then the cost, the prompt and output totals,
        the model and the provider: the state and the cache figure are what a glance looks for.
        """
        width = self.content_size.width
        for dropped in range(len(NARROWING) + 1):
            gone = NARROWING[:dropped]
            parts = self._parts(short_cost="unpriced" in gone)
            line = _joined({name: part for name, part in parts.items() if name not in gone})
            if not width or line.cell_len <= width:
                break
        return line  # where even the shortest doesn't fit, it is cropped

    def _parts(self, short_cost: bool = False) -> dict[str, Text]:
        """The line's parts by name; an empty one is left out of the line."""
        totals = self.totals
        counts = Text(f"prompt {totals.prompt:,} · out {totals.output:,}")
        if totals.unreported:
            counts.append(f" · {counted(totals.unreported, 'step')} without usage", "dim")
        if totals.side_requests:
            counts.append(f" · incl. {counted(totals.side_requests, 'pre-warm')}", "dim")
        cache = Text("cache hit ")
        hit = totals.cache_hit
        if hit is None:
            cache.append("not reported", "dim")
        else:
            cache.append(f"{hit:.0%}")
            if totals.cache_unknown:
                cache.append(f" · {counted(totals.cache_unknown, 'step')} unknown", "dim")
        return {
            "state": Text(f"● {self.state}", "" if self.state == "ready" else "bold"),
            "provider": Text(inert(self.provider), "bold"),
            "model": Text(inert(short_model(self.model)) if self.provider else ""),  # a server's name for it
            "tier": Text(inert(self.tier) if self.provider and self.tier else "", "italic"),
            "totals": counts,
            "cost": Text(
                (totals.cost.short() if short_cost else str(totals.cost)) if totals.steps else "",
                "" if totals.cost.priced else "dim",
            ),
            "cache": cache,
            "context": self._context_meter(),
        }

    def show_detail(self, lifetime: str | None) -> None:
        """The cost's detail, as a tooltip: what the totals count, and on Anthropic the cache lifetime and why."""
        totals = self.totals
        side = f" and {counted(totals.side_requests, 'pre-warm')} (side requests)" if totals.side_requests else ""
        lines = [f"{counted(totals.steps, 'step')}{side}: {totals.cost}"]
        if lifetime is not None:
            lines.append(lifetime)
        self.tooltip = Text("\n".join(lines))  # not markup: "[providers]" is text

    def _context_meter(self) -> Text:
        if self.context is None:
            return Text()
        used, window = self.context
        meter = context_use(used, window, self.context_estimated)
        return Text(meter, "bold yellow" if used >= CONTEXT_WARNING * window else "")


def _joined(parts: dict[str, Text]) -> Text:
    """`● ready  │  sim · model · tier  │  totals · cache`: a group's parts joined by dots, the groups by bars."""

    def joined(pieces: list[Text], separator: Text) -> Text:
        # Not `separator.join`: its result takes the separator's style as the style of the whole line.
        line = Text()
        for n, piece in enumerate(pieces):
            if n:
                line.append_text(separator)
            line.append_text(piece)
        return line

    def group(*names: str) -> Text:
        return joined([part for name in names if (part := parts.get(name, Text())).plain], Text(" · "))

    groups = [group("state"), group("provider", "model", "tier"), group("totals", "cost", "cache", "context")]
    return joined([part for part in groups if part.plain], Text(SEPARATOR, "dim"))
