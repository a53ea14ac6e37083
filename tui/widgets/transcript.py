"""`Transcript`: the conversation, drawn from the agent's event stream.

Everything scrolls in one line-API widget, the `HistoryView`: finished steps as items, and under
them the step in flight — its reasoning, the streaming answer, the tool panes and the usage
strip — as lines the transcript renders and hands to the view as they change. `TranscriptFold`
turns each finished step into history items, drawn by the same renderers as the live lines, so
nothing jumps. A frame is then one widget's changed lines, not a re-layout of a widget per part.

The transcript follows the stream whenever the view is at the bottom. Scrolling up by any means (keys,
wheel, scrollbar, the history's cursor) stops following, and "↓ new output" shows while more arrives
below; a prompt sent, End (ctrl+end) or scrolling back to the bottom follows again. The transcript
itself never takes the focus: Tab goes from the prompt straight to the history's items.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

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
from hotloop.agent.pricing import StepPricer
from hotloop.agent.tools.edit import is_diff
from hotloop.providers.events import (
    ReasoningDelta,
    StreamStarted,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
)
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import AnswerItem
from hotloop.tui.live_answer import MIN_DELAY, LiveAnswer
from hotloop.tui.live_panes import LivePanes
from hotloop.tui.live_usage import LiveUsage
from hotloop.tui.render import Palette, RenderContext
from hotloop.tui.widgets.history_view import LIVE_PARTS, HistoryView
from hotloop.tui.widgets.new_output import NewOutput

WELCOME = (
    "Ask for anything. Each step shows where its time and tokens went: cache read, uncached prefill, "
    "output, time to first token and decode speed. A step's tool calls run side by side.\n\n"
    "ctrl+p providers, models and tiers · F1 keys and commands · ctrl+b saved sessions"
)
# The live parts other than the answer (which has its own flush) are drawn again at most this often.
LIVE_INTERVAL = 1 / 30
TICK = 0.1  # the usage strip's waits and the panes' timers


class Transcript(Widget, can_focus=False):
    DEFAULT_CSS = "Transcript { height: 1fr; }"

    def __init__(
        self,
        clock: Callable[[], float],
        palette: Callable[[], Palette],
        pricer: Callable[[], StepPricer],
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self.clock = clock
        self.palette = palette
        self.pricer = pricer
        # Kept, not queried: `apply` runs per token, and a query costs ~10 µs. Made here, so they
        # exist from the start: a mounted transcript's children may not be mounted yet.
        self._marker = NewOutput(id="new-output")
        self._history = HistoryView(self.context, id="history")
        self._answer = LiveAnswer(self._live_context, self._show_answer, self.set_timer, self._rows_followed)
        self._panes = LivePanes(clock)
        self._usage = LiveUsage(clock)
        self._stale: set[str] = set()  # live parts to draw again
        self._usage_rows = 0  # the live usage strip's height, as last drawn
        self._drawing: Timer | None = None
        self._next_draw = 0.0
        self._ticker: Timer | None = None
        self.fold = TranscriptFold(pricer())
        self._handlers: dict[type, Callable[..., None]] = {
            TurnStarted: self._turn_started,
            StepStarted: self._step_started,
            StreamStarted: self._stream_started,
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

    def compose(self) -> ComposeResult:
        yield self._marker
        yield self._history

    def on_mount(self) -> None:
        self.watch(self._history, "following", self._following_changed, init=False)

    # -- following ---------------------------------------------------------------------

    @property
    def following(self) -> bool:
        return self._history.following

    def follow(self) -> None:
        """Go to the bottom and stay there as the transcript grows."""
        self._history.follow()

    def page_up(self) -> None:
        self._history.scroll_page_up(animate=False)

    def page_down(self) -> None:
        self._history.scroll_page_down(animate=False)

    def scroll_to_start(self) -> None:
        self._history.scroll_home(animate=False)

    def _following_changed(self, following: bool) -> None:
        if following:
            self._marker.remove_class("-shown")

    def on_new_output_pressed(self, message: NewOutput.Pressed) -> None:
        message.stop()
        self.follow()

    def context(self, width: int) -> RenderContext:
        return RenderContext(self.app.console, width, self.palette())

    def _rows_followed(self) -> int:
        return self._history.scrollable_content_region.height if self.following else 0

    def _live_context(self) -> RenderContext | None:
        width = self._history.width
        return self.context(width) if width else None

    @property
    def history(self) -> HistoryView:
        return self._history

    @property
    def answer(self) -> LiveAnswer:
        return self._answer

    @property
    def panes(self) -> LivePanes:
        return self._panes

    def rerender(self) -> None:
        """Draw everything again, for a new theme."""
        self._history.rerender()
        self._redraw_live()

    def on_resize(self) -> None:
        self._mark("panes")  # a bar above the prompt came or went: the panes fit the view's new height

    def on_history_view_width_changed(self, message: HistoryView.WidthChanged) -> None:
        message.stop()
        self._redraw_live()

    def _redraw_live(self) -> None:
        self._answer.rerender()
        self._stale.update(("welcome", "reasoning", "panes", "usage"))
        self._draw_live()

    @property
    def started(self) -> bool:
        """Whether the conversation has begun (the welcome text is gone)."""
        return self.has_class("-started")

    def _start(self, started: bool = True) -> None:
        self.set_class(started, "-started")
        self._stale.add("welcome")
        self._draw_live()

    def clear(self) -> None:
        self.fold = TranscriptFold(self.pricer())
        self._reset_live()
        self._history.clear()
        self._start(False)

    def fast_forward(self, events: list[AgentEvent], finished: bool = False) -> None:
        """Draw `events` at once, straight into the history: a saved session, or a replay's jump.

        With `finished`, a step the events leave open is drawn too, as cut short.
        """
        self._reset_live()
        items = self.fold.apply_all(events)
        if finished:
            items += self.fold.flush()
        if items:
            self._start()
            self._history.extend(items)

    # -- events --------------------------------------------------------------------------

    def apply(self, event: AgentEvent) -> None:
        """Show one event of the agent's stream."""
        if not self.following:
            self._marker.add_class("-shown")
        if isinstance(event, (StepFinished, TurnFinished)):
            self._answer.flush(everything=True)
        for item, gap in self.fold.apply(event):
            if isinstance(item, AnswerItem):
                self._hand_over(item)
            self._history.add(item, gap)
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _turn_started(self, event: TurnStarted) -> None:
        self._start()

    def _step_started(self, event: StepStarted) -> None:
        self._usage.start(event)
        if self._ticker is None:
            self._ticker = self.set_interval(TICK, self._tick)
        self._mark("usage")

    def _stream_started(self, event: StreamStarted) -> None:
        self._usage.first_byte(event.ts)
        self._mark("usage")

    def _reasoning_delta(self, event: ReasoningDelta) -> None:
        self._usage.token(event.ts)
        self._mark("reasoning")

    def _text_delta(self, event: TextDelta) -> None:
        self._answer.write(event.text)
        self._usage.token(event.ts)

    def _tool_call_started(self, event: ToolCallStarted) -> None:
        self._panes.add(self.fold.call(event.call_id))
        self._usage.token(event.ts)
        self._mark("panes")

    def _tool_call_args_delta(self, event: ToolCallArgsDelta) -> None:
        self._sync_pane(event.call_id)
        self._usage.token(event.ts)

    def _tool_call_ready(self, event: ToolCallReady) -> None:
        if self._panes.pane(event.call_id) is None:
            self._panes.add(self.fold.call(event.call_id))
        self._sync_pane(event.call_id)

    def _response_finished(self, event: ResponseFinished) -> None:
        self._answer.flush(everything=True)
        self._usage.response(event)
        self._mark("usage")

    def _approval(self, event: ApprovalAsked | ApprovalDecided) -> None:
        if is_diff(event.preview):
            self._panes.show_diffs()
        self._sync_pane(event.call_id)

    def _tool_started(self, event: ToolStarted) -> None:
        self._sync_pane(event.call_id)
        self._usage.tools(self._running_tools())
        self._mark("usage")

    def _tool_output(self, event: ToolOutput) -> None:
        self._sync_pane(event.call_id)

    def _tool_finished(self, event: ToolFinished) -> None:
        self._sync_pane(event.call_id)
        self._usage.tools(self._running_tools())
        self._mark("usage")

    def _step_or_turn_finished(self, event: StepFinished | TurnFinished) -> None:
        # The fold has already moved what finished into the history.
        self._reset_live()

    def _hand_over(self, item: AnswerItem) -> None:
        """Give the finished answer the lines the live view already rendered, so it isn't rendered twice."""
        context, lines = self._answer.lines
        if context is not None and self._answer.complete and self._answer.text == item.text:
            item.rendered_text[(context.width, context.palette)] = lines

    def _sync_pane(self, call_id: str) -> None:
        pane = self._panes.pane(call_id)
        if pane is not None:
            pane.sync()
            self._mark("panes")

    def _running_tools(self) -> int:
        return sum(call.status == "running" for call in self.fold.calls)

    def _reset_live(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self._answer.reset()
        self._panes.clear()
        self._usage.clear()
        self._stale.clear()
        for part in LIVE_PARTS:
            self._history.set_live(part, [])

    # -- drawing the step in flight ------------------------------------------------------

    def _show_answer(self, lines: list[Strip]) -> None:
        self._history.set_live("answer", lines)

    def _tick(self) -> None:
        self._stale.add("usage")
        if any(pane.status == "running" for pane in self._panes.panes.values()):
            self._stale.add("panes")  # their spinners and timers
        self._draw_live()

    def _mark(self, part: str) -> None:
        """Draw `part` again soon: at once after a pause, then at most every LIVE_INTERVAL."""
        self._stale.add(part)
        if self._drawing is None:
            delay = max(self._next_draw - time.perf_counter(), MIN_DELAY)
            self._drawing = self.set_timer(delay, self._draw_live)

    def _draw_live(self) -> None:
        if self._drawing is not None:
            self._drawing.stop()
            self._drawing = None
        self._next_draw = time.perf_counter() + LIVE_INTERVAL
        ctx = self._live_context()
        if ctx is None:
            return
        stale, self._stale = self._stale, set()
        if "welcome" in stale:
            welcome = ctx.lines(Text(WELCOME, ctx.palette.text_muted))
            self._history.set_lead([] if self.started else [Strip.blank(0), *welcome, Strip.blank(0)])
        if "reasoning" in stale:
            reasoning = "".join(self.fold.open.reasoning) if self.fold.open is not None else ""
            words = len(reasoning.split())
            line = Text(f"▸ reasoning · {words:,} words…", ctx.palette.text_muted)
            self._history.set_live("reasoning", ctx.lines(line) if reasoning else [])
        if "usage" in stale:
            usage = self._usage.text(ctx.palette)
            lines = ctx.lines(usage) if usage is not None else []
            self._usage_rows = len(lines)
            self._history.set_live("usage", lines)
        if "panes" in stale:
            # The panes share the view with the usage strip under them: a diff being approved shows whole.
            rows = self._history.scrollable_content_region.height - self._usage_rows
            self._history.set_live("panes", self._panes.lines(ctx, rows))
