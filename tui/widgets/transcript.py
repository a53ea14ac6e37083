"""`Transcript`: the conversation, drawn from the agent's event stream.

Finished steps live in one `HistoryView`. The step in flight has live widgets: the
streaming answer, the tool panes and the usage strip. `TranscriptFold` turns each finished
step into history items, drawn by the same renderers as the live widgets, so nothing jumps.

The transcript follows the stream whenever the view is at the bottom. Scrolling up by any means (keys,
wheel, scrollbar, the history's cursor) stops following, and "↓ new output" shows while more arrives
below; a prompt sent, End (ctrl+end) or scrolling back to the bottom follows again. The transcript
itself never takes the focus: Tab goes from the prompt straight to the history's items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Offset, Region
from textual.reactive import var
from textual.widgets import Static

from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.tools.edit import is_diff
from hotloop.providers.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallReady, ToolCallStarted
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import AnswerItem
from hotloop.tui.render import Palette, RenderContext
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.new_output import NewOutput
from hotloop.tui.widgets.streaming_text import StreamingText
from hotloop.tui.widgets.tool_panes import ToolPanes
from hotloop.tui.widgets.usage_strip import UsageStrip

WELCOME = (
    "Ask for anything. Each step shows where its time and tokens went: cache read, uncached prefill, "
    "output, time to first token and decode speed. A step's tool calls run side by side.\n\n"
    "ctrl+p providers, models and tiers · F1 keys and commands · ctrl+b saved sessions"
)


class Transcript(VerticalScroll, can_focus=False):
    DEFAULT_CSS = """
    Transcript {
        layers: default marker;
        height: 1fr;
        padding: 0 1;
        /* Always there: lines are pre-rendered for a width, which a scrollbar appearing would change. */
        overflow-y: scroll;
        scrollbar-background: $background;
        scrollbar-background-hover: $background;
        scrollbar-background-active: $background;
    }
    /* The live step's widgets sit in the transcript itself: a container around them cost ~1 ms a frame. */
    Transcript > HistoryView { margin-bottom: 1; }
    Transcript #reasoning { color: $text-muted; height: auto; }
    Transcript #welcome { color: $text-muted; padding: 1 0; }
    Transcript.-started #welcome { display: none; }
    Transcript #reasoning.-idle { display: none; }
    """

    def __init__(
        self,
        clock: Callable[[], float],
        palette: Callable[[], Palette],
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self.clock = clock
        self.palette = palette
        # Kept, not queried: `apply` runs per token, and a query costs ~10 µs. Made here, so they
        # exist from the start: a mounted transcript's children may not be mounted yet.
        self._answer = StreamingText(self.context, id="answer")
        self._panes = ToolPanes(clock, id="panes")
        self._usage = UsageStrip(clock, palette, id="usage")
        self.fold = TranscriptFold()
        self._handlers: dict[type, Callable[..., None]] = {
            TurnStarted: self._turn_started,
            StepStarted: self._step_started,
            ReasoningDelta: self._reasoning_delta,
            TextDelta: self._text_delta,
            ToolCallStarted: self._tool_call_started,
            ToolCallArgsDelta: self._tool_call_args_delta,
            ToolCallReady: self._tool_call_ready,
            ResponseFinished: self._response_finished,
            ApprovalAsked: self._approval,
            ApprovalDecided: self._approval,
            ToolStarted: self._tool_started,
            ToolOutput: self._tool_output,
            ToolFinished: self._tool_finished,
            StepFinished: self._step_or_turn_finished,
            TurnFinished: self._step_or_turn_finished,
        }

    following: var[bool] = var(True)

    def compose(self) -> ComposeResult:
        yield NewOutput(id="new-output")
        yield Static(WELCOME, id="welcome")
        yield HistoryView(self.context, id="history")
        yield Static(id="reasoning", classes="-idle")
        yield self._answer
        yield self._panes
        yield self._usage

    def on_mount(self) -> None:
        self.anchor()

    # -- following ---------------------------------------------------------------------

    def follow(self) -> None:
        """Go to the bottom and stay there as the transcript grows."""
        self.following = True
        self.anchor()

    def page_up(self) -> None:
        self.scroll_page_up(animate=False)

    def page_down(self) -> None:
        self.scroll_page_down(animate=False)

    def scroll_to_start(self) -> None:
        self.scroll_home(animate=False)

    def watch_following(self, following: bool) -> None:
        if following:
            self.query_one(NewOutput).remove_class("-shown")

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            self.following = True
        elif new_value < old_value:
            self.following = False
            self.release_anchor()

    def scroll_to_region(self, region: Region, **options: Any) -> Offset:
        # Textual shows a widget that takes the focus from its top; the history is taller than the view,
        # so that would jump to the first turn. The history shows its own cursor's line instead.
        if region.height > self.scrollable_content_region.height:
            return Offset()
        return super().scroll_to_region(region, **options)

    def on_new_output_pressed(self, message: NewOutput.Pressed) -> None:
        message.stop()
        self.follow()

    def context(self, width: int) -> RenderContext:
        return RenderContext(self.app.console, width, self.palette())

    @property
    def history(self) -> HistoryView:
        return self.query_one(HistoryView)

    @property
    def answer(self) -> StreamingText:
        return self._answer

    @property
    def panes(self) -> ToolPanes:
        return self._panes

    @property
    def usage(self) -> UsageStrip:
        return self._usage

    def rerender(self) -> None:
        """Draw everything again, for a new theme."""
        self.history.rerender()
        self.answer.rerender()

    def clear(self) -> None:
        self.fold = TranscriptFold()
        self._reset_live()
        self.history.clear()
        self.remove_class("-started")

    def fast_forward(self, events: list[AgentEvent], finished: bool = False) -> None:
        """Draw `events` at once, straight into the history: a saved session, or a replay's jump.

        With `finished`, a step the events leave open is drawn too, as cut short.
        """
        self._reset_live()
        items = self.fold.apply_all(events)
        if finished:
            items += self.fold.flush()
        if items:
            self.add_class("-started")
            self.history.extend(items)

    # -- events --------------------------------------------------------------------------

    def apply(self, event: AgentEvent) -> None:
        """Show one event of the agent's stream."""
        if not self.following:
            self.query_one(NewOutput).add_class("-shown")
        if isinstance(event, (StepFinished, TurnFinished)):
            self.answer.flush(everything=True)
        for item, gap in self.fold.apply(event):
            if isinstance(item, AnswerItem):
                self._hand_over(item)
            self.history.add(item, gap)
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _turn_started(self, event: TurnStarted) -> None:
        self.add_class("-started")

    def _step_started(self, event: StepStarted) -> None:
        self.usage.start(event)

    def _reasoning_delta(self, event: ReasoningDelta) -> None:
        self.usage.token(event.ts)
        words = len("".join(self.fold.open.reasoning).split()) if self.fold.open is not None else 0
        reasoning = self.query_one("#reasoning", Static)
        reasoning.set_class(False, "-idle")
        reasoning.update(Text(f"▸ reasoning · {words:,} words…"))

    def _text_delta(self, event: TextDelta) -> None:
        self.answer.write(event.text)
        self.usage.token(event.ts)

    def _tool_call_started(self, event: ToolCallStarted) -> None:
        self.panes.add(self.fold.call(event.call_id))
        self.usage.token(event.ts)

    def _tool_call_args_delta(self, event: ToolCallArgsDelta) -> None:
        self._sync_pane(event.call_id)
        self.usage.token(event.ts)

    def _tool_call_ready(self, event: ToolCallReady) -> None:
        if self.panes.pane(event.call_id) is None:
            self.panes.add(self.fold.call(event.call_id))
        self._sync_pane(event.call_id)

    def _response_finished(self, event: ResponseFinished) -> None:
        self.answer.flush(everything=True)
        self.usage.response(event)

    def _approval(self, event: ApprovalAsked | ApprovalDecided) -> None:
        if is_diff(event.preview):
            self.panes.show_diffs()
        self._sync_pane(event.call_id)

    def _tool_started(self, event: ToolStarted) -> None:
        self._sync_pane(event.call_id)
        self.usage.tools(self._running_tools())

    def _tool_output(self, event: ToolOutput) -> None:
        self._sync_pane(event.call_id)

    def _tool_finished(self, event: ToolFinished) -> None:
        self._sync_pane(event.call_id)
        self.usage.tools(self._running_tools())

    def _step_or_turn_finished(self, event: StepFinished | TurnFinished) -> None:
        # The fold has already moved what finished into the history.
        self._reset_live()

    def _hand_over(self, item: AnswerItem) -> None:
        """Give the finished answer the lines the live view already rendered, so it isn't rendered twice."""
        context, lines = self.answer.lines
        if context is not None and self.answer.source == item.text:
            item.rendered_text[(context.width, context.palette)] = lines

    def _sync_pane(self, call_id: str) -> None:
        pane = self.panes.pane(call_id)
        if pane is not None:
            pane.sync()

    def _running_tools(self) -> int:
        return sum(call.status == "running" for call in self.fold.calls)

    def _reset_live(self) -> None:
        self.query_one("#reasoning", Static).add_class("-idle")
        self.answer.reset()
        self.panes.clear()
        self.usage.clear()
