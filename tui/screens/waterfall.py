"""`WaterfallScreen`: where each turn's time went, drawn from the logged events (live or replayed)."""

from __future__ import annotations

from rich.console import Group
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from hotloop.agent.events import AgentEvent
from hotloop.agent.pricing import StepPricer
from hotloop.tui.render import inert_text


class WaterfallScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    WaterfallScreen { align: center middle; }
    WaterfallScreen > VerticalScroll {
        width: 95%; height: 90%; background: $panel; border: round $accent; padding: 0 1; scrollbar-gutter: stable;
    }
    """
    BINDINGS = [Binding("escape,f3,q", "app.pop_screen", "Close")]

    def __init__(self, events: list[AgentEvent], pricer: StepPricer | None = None) -> None:
        """`pricer` (a session's `header.pricer()`) puts what the cache saved in dollars."""
        super().__init__()
        self.events = events
        self.pricer = pricer
        self.plain = ""

    def compose(self) -> ComposeResult:
        from rich.text import Text

        from hotloop.sessions.waterfall import lifetime_line, prefill_cost, render, waterfalls

        # Inside the border, the padding and the scrollbar's gutter: lines drawn wider would wrap.
        width = max(self.app.size.width * 95 // 100 - 6, 40)
        cost = prefill_cost(self.events)
        # Prompts, model and tool names label the bars.
        drawn = [inert_text(render(turn, width, cost)) for turn in waterfalls(self.events, self.pricer)]
        if drawn and (lifetime := lifetime_line(self.events, self.pricer)) is not None:
            drawn.append(Text(lifetime, "bold"))
        self.plain = "\n".join(text.plain for text in drawn)  # what it says, for a test or a copy
        body = Group(*drawn) if drawn else "No turns yet."
        with VerticalScroll():
            yield Static(body, id="waterfall")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).scroll_end(animate=False)  # the newest turn first in view
