"""`StatusBar`: provider · model · tier, the session's totals, its cache-hit rate and how full its context is."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.figures import SessionTotals, context_use, counted, short_model
from hotloop.agent.text import inert

SEPARATOR = "  │  "
# What the status bar keeps, most wanted first: an item is left out only when it doesn't fit beside those before
# it. The state and the cache figure always stay; what answers comes before the totals (what a glance at an
# 80-column terminal looks for); a partly priced cost is said whole (`$0.0094 + 2 steps price unknown`) where that
# still fits after the tier, else as `≥$0.0094`; the count of pre-warms in the totals comes last.
KEPT = ("state", "cache", "context", "provider", "model", "totals", "cost", "tier", "unpriced", "side")
# An item shown only beside the one it qualifies.
BESIDE = {"model": "provider", "tier": "model", "unpriced": "cost", "side": "totals"}
# The room the state is measured at: what fits beside `● ready` fits beside `● running` and `● step 100`, so no
# item comes and goes as a turn runs (a /compact's or a switch's longer state may take one for its moment).
STATE_ROOM = len("● step 100")
CONTEXT_WARNING = 0.8  # of the window: the meter turns to a warning


def _side(totals: SessionTotals) -> str:
    """The side requests in the totals, by kind: `1 pre-warm, 2 keep-alive pings`."""
    kinds = ((totals.side_requests - totals.pings, "pre-warm"), (totals.pings, "keep-alive ping"))
    return ", ".join(counted(count, kind) for count, kind in kinds if count)


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
        """`● ready  │  sim · sim-balanced · balanced  │  prompt 1,927 · out 143 · cache hit 92%`, as fits."""
        return fitted(self.parts(), self.content_size.width)

    def parts(self) -> dict[str, Text]:
        """The line's parts by name; an empty one is left out of the line."""
        totals = self.totals
        at_least = "≥" if totals.unreported else ""  # a step's usage is unknown: its tokens aren't in the sums
        known = totals.prompt or totals.output or not totals.unreported
        counts = Text(
            f"prompt {at_least}{totals.prompt:,} · out {at_least}{totals.output:,}" if known else "usage unknown"
        )
        side = f"incl. {_side(totals)}" if totals.side_requests else ""
        cache = Text("cache hit ")
        hit = totals.cache_hit
        if hit is None:
            cache.append("not reported", "dim")
        else:
            cache.append(f"{hit:.0%}")
            if totals.cache_unknown:
                cache.append(f" · {counted(totals.cache_unknown, 'step')} unknown", "dim")
        cost = totals.cost
        style = "" if cost.priced else "dim"
        return {
            "state": Text(f"● {self.state}", "" if self.state == "ready" else "bold"),
            "provider": Text(inert(self.provider), "bold"),
            "model": Text(inert(short_model(self.model)) if self.provider else ""),  # a server's name for it
            "tier": Text(inert(self.tier) if self.provider and self.tier else "", "italic"),
            "totals": counts,
            "side": Text(side, "dim"),
            "cost": Text(cost.short() if totals.steps else "", style),
            "unpriced": Text(str(cost) if totals.steps and str(cost) != cost.short() else "", style),
            "cache": cache,
            "context": self._context_meter(),
        }

    def show_detail(self, lifetime: str | None) -> None:
        """The cost's detail, as a tooltip: what the totals count, and on Anthropic the cache lifetime and why."""
        totals = self.totals
        side = f" and {_side(totals)} (side requests)" if totals.side_requests else ""
        lines = [f"{counted(totals.steps, 'step')}{side}: {totals.cost}"]
        if totals.unreported:
            lines.append(
                f"{counted(totals.unreported, 'step')} without usage (cancelled before the server counted it, or "
                "never reported): not in the totals, hence ≥"
            )
        if lifetime is not None:
            lines.append(lifetime)
        self.tooltip = Text("\n".join(lines))  # not markup: "[providers]" is text

    def _context_meter(self) -> Text:
        if self.context is None:
            return Text()
        used, window = self.context
        meter = context_use(used, window, self.context_estimated)
        return Text(meter, "bold yellow" if used >= CONTEXT_WARNING * window else "")


def fitted(parts: dict[str, Text], width: int) -> Text:
    """The line of `parts` for `width` cells (0: unknown yet, all of them).

    Each item in `KEPT`'s order is kept if the line still fits with it, so an item that doesn't fit takes nothing
    else with it; where even the state and the cache figure don't fit, the line is cropped.
    """
    state = parts["state"]
    measured = {"state": Text(state.plain.ljust(STATE_ROOM))}
    kept: dict[str, Text] = {"state": state}
    for name in KEPT[1:]:
        part = parts[name]
        if not part.plain or BESIDE.get(name, "state") not in kept:
            continue
        if name == "unpriced":  # the cost said whole, in the short form's place
            name = "cost"
        tried = {**measured, name: part}
        if not width or name == "cache" or _joined(tried).cell_len <= width:
            measured, kept = tried, {**kept, name: part}
    return _joined(kept)


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

    groups = [group("state"), group("provider", "model", "tier"), group("totals", "side", "cost", "cache", "context")]
    return joined([part for part in groups if part.plain], Text(SEPARATOR, "dim"))
