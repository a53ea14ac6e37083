"""Folding the agent's event stream into transcript items.

The fold reads the stream through a `Projection` (the same records the exports and the
waterfall read) and turns each step into items as it closes. The same rules serve a live
session (the transcript also shows the step in flight with widgets) and a saved one (read
from its log, with no widgets at all).
"""

from __future__ import annotations

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    Notice,
    OwnRequest,
    ProviderSwitched,
    SideRequest,
    StepFinished,
    StepStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import counted, side_request_summary
from hotloop.agent.pricing import StepPricer, dollars
from hotloop.agent.switching import describe_switch
from hotloop.providers.events import TextDelta
from hotloop.sessions.projection import BROKEN_OFF, FINAL, CallRecord, Projection, StepRecord
from hotloop.tui.items import AnswerItem, CompactionItem, Item, NoticeItem, ToolCallsItem, UsageItem, UserItem


class TranscriptFold:
    """The step in flight (`open`), and the items each finished step becomes."""

    def __init__(self, pricer: StepPricer | None = None) -> None:
        """`pricer` puts each step's dollars on its usage strip; without one, none are said."""
        self.projection = Projection(keep=False)
        self.pricer = pricer
        self._stopped = 0  # calls a step cut short stopped: its turn's notice counts them

    @property
    def open(self) -> StepRecord | None:
        return self.projection.step

    def apply(self, event: AgentEvent) -> list[tuple[Item, int]]:
        """Record `event`; return the items it completes, each with the blank lines to put before it."""
        before = self.projection.step
        self.projection.apply(event)
        if self.pricer is not None:
            self.pricer.learn(event)
        if isinstance(event, TurnStarted):
            # A turn that starts while a step is open: the log lost the end of the last turn.
            return [*self._close(before, None), (UserItem(event.prompt), 1)]
        if isinstance(event, StepFinished):
            return self._close(before, event)
        if isinstance(event, TurnFinished):
            return self._turn_finished(before, event)
        if isinstance(event, StepStarted) and before is not None:
            return self._close(before, None)
        if isinstance(event, Notice):
            return [(NoticeItem(event.level, event.message), 1)]
        if isinstance(event, ProviderSwitched):
            return [(NoticeItem("info", describe_switch(event)), 1)]
        if isinstance(event, Compacted):
            return [(CompactionItem(event, self._cost(event)), 1)]
        if isinstance(event, SideRequest):
            cost = self._cost(event)
            return [(NoticeItem("info", side_request_summary(event) + (f" · {cost}" if cost else "")), 1)]
        return []

    def apply_all(self, events: list[AgentEvent]) -> list[tuple[Item, int]]:
        """`apply` for a whole log. Text deltas, nine events in ten, take a short path."""
        items: list[tuple[Item, int]] = []
        for event in events:
            step = self.projection.step
            if step is not None and type(event) is TextDelta:
                step.text.append(event.text)
            else:
                items += self.apply(event)
        return items

    def flush(self) -> list[tuple[Item, int]]:
        """The step in progress as items, cut short: for a log that ends mid-turn."""
        step, self.projection.step = self.projection.step, None
        return self._close(step, None)

    @property
    def calls(self) -> list[CallRecord]:
        return list(self.open.calls.values()) if self.open is not None else []

    def call(self, call_id: str) -> CallRecord:
        """The open step's call `call_id` (a call outside any step gets a record of its own)."""
        return self.open.call(call_id) if self.open is not None else CallRecord(call_id, "")

    def _turn_finished(self, step: StepRecord | None, event: TurnFinished) -> list[tuple[Item, int]]:
        if event.reason not in BROKEN_OFF:
            return []
        stopped = sum(call.status not in FINAL for call in step.calls.values()) if step is not None else self._stopped
        items = self._close(step, None)
        if event.reason == "cancelled":
            calls = f"; {counted(stopped, 'unfinished tool call')} got a cancelled result" if stopped else ""
            items.append((NoticeItem("warning", f"turn cancelled{calls}"), 1))
        return items

    def _cost(self, event: StepFinished | OwnRequest) -> str | None:
        """What a step cost, for its strip; None without a price (the status bar's total says
        `price unknown` once, rather than every strip)."""
        cost = None if self.pricer is None else self.pricer.cost(event)
        return None if cost is None else dollars(cost)

    def _close(self, step: StepRecord | None, finished: StepFinished | None) -> list[tuple[Item, int]]:
        """A step as items; `finished=None` for a step that was cut short."""
        if step is None:
            return []
        items: list[tuple[Item, int]] = []
        text, reasoning = "".join(step.text), "".join(step.reasoning)
        if text or reasoning:
            # A step cancelled after its answer ended (in its tools) has a whole answer; before, a cut one.
            cut = finished is None or (bool(finished.cut) and step.response is None)
            items.append((AnswerItem(text, reasoning, interrupted=cut), 1))
        for used in step.server_tools:
            items.append((NoticeItem("info", f"⚙ {used.name} ran on the provider's side: {used.arguments}"), 1))
        calls = list(step.calls.values())
        self._stopped = sum(call.status not in FINAL or call.status == "cancelled" for call in calls)
        if calls:
            for call in calls:
                if call.status not in FINAL:
                    call.status = "cancelled"
            durations = [call.duration or 0.0 for call in calls]
            wall = finished.tool_wall if finished is not None else max(durations)
            total = finished.tool_sum if finished is not None else sum(durations)
            items.append((ToolCallsItem(calls, wall, total), 1))
        if finished is not None:
            items.append((UsageItem(finished, self._cost(finished), _streamed(step, finished)), 0))
        return items


def _streamed(step: StepRecord, finished: StepFinished) -> int | None:
    """What a step cancelled before the server's count streamed, at 4 characters a token; None if it was counted."""
    if not finished.cut or (finished.usage is not None and finished.usage.output is not None):
        return None
    written = [*step.text, *step.reasoning, *(call.arguments for call in step.calls.values())]
    return -(-sum(map(len, written)) // 4)
