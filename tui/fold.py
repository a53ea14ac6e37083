"""Folding the agent's event stream into transcript items.

The same rules serve a live session (the transcript also shows the step in flight with
widgets) and a saved one (read from its log, with no widgets at all).
"""

from __future__ import annotations

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ProviderSwitched,
    StepFinished,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.switching import describe_switch
from hotloop.providers.events import (
    ReasoningDelta,
    ServerToolUsed,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
)
from hotloop.tui.items import AnswerItem, Item, NoticeItem, ToolCall, ToolCallsItem, UsageItem, UserItem

FINAL = ("ok", "error", "cancelled")


class TranscriptFold:
    """What the step in flight has produced so far, and the items each finished step becomes."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[str, ToolCall] = {}
        self.server_tools: list[ServerToolUsed] = []

    def apply(self, event: AgentEvent) -> list[tuple[Item, int]]:
        """Record `event`; return the items it completes, each with the blank lines to put before it."""
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallStarted):
            self.calls[event.call_id] = ToolCall(event.call_id, event.name)
        elif isinstance(event, ToolCallArgsDelta):
            self.call(event.call_id).arguments += event.fragment
        elif isinstance(event, ToolCallReady):
            call = self.call(event.call_id)
            call.name, call.arguments = event.name, event.arguments
        elif isinstance(event, ToolStarted):
            call = self.call(event.call_id)
            call.status, call.started = "running", event.ts
        elif isinstance(event, ToolOutput):
            self.call(event.call_id).output.append(event.text)
        elif isinstance(event, ToolFinished):
            call = self.call(event.call_id)
            call.status, call.duration, call.result = event.status, event.duration, event.result
            call.reused = event.reused
        elif isinstance(event, ServerToolUsed):
            self.server_tools.append(event)
        elif isinstance(event, TurnStarted):
            return [(UserItem(event.prompt), 1)]
        elif isinstance(event, StepFinished):
            return self._close(event)
        elif isinstance(event, TurnFinished):
            return self._turn_finished(event)
        elif isinstance(event, Notice):
            return [(NoticeItem(event.level, event.message), 1)]
        elif isinstance(event, ProviderSwitched):
            return [(NoticeItem("info", describe_switch(event)), 1)]
        return []

    def apply_all(self, events: list[AgentEvent]) -> list[tuple[Item, int]]:
        """`apply` for a whole log. Text deltas, nine events in ten, take a short path."""
        items: list[tuple[Item, int]] = []
        text = self.text
        for event in events:
            if type(event) is TextDelta:
                text.append(event.text)
            else:
                items += self.apply(event)
                text = self.text  # closing a step starts a new list
        return items

    def flush(self) -> list[tuple[Item, int]]:
        """The step in progress as items, cut short: for a log that ends mid-turn."""
        if not (self.text or self.reasoning or self.calls or self.server_tools):
            return []
        return self._close(None)

    def call(self, call_id: str) -> ToolCall:
        if call_id not in self.calls:
            self.calls[call_id] = ToolCall(call_id, "")
        return self.calls[call_id]

    def _turn_finished(self, event: TurnFinished) -> list[tuple[Item, int]]:
        if event.reason not in ("cancelled", "error", "interrupted"):
            return []
        stopped = sum(call.status not in FINAL for call in self.calls.values())
        items = self._close(None)
        if event.reason == "cancelled":
            calls = f"; {stopped} unfinished tool call{'s' if stopped != 1 else ''} got a cancelled result" if stopped else ""
            items.append((NoticeItem("warning", f"turn cancelled{calls}"), 1))
        return items

    def _close(self, step: StepFinished | None) -> list[tuple[Item, int]]:
        """The finished step as items; `step=None` for a step that was cut short."""
        items: list[tuple[Item, int]] = []
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        if text or reasoning:
            items.append((AnswerItem(text, reasoning, interrupted=step is None), 1))
        for used in self.server_tools:
            items.append((NoticeItem("info", f"⚙ {used.name} ran on the provider's side: {used.arguments}"), 1))
        calls = list(self.calls.values())
        if calls:
            for call in calls:
                if call.status not in FINAL:
                    call.status = "cancelled"
            durations = [call.duration or 0.0 for call in calls]
            wall = step.tool_wall if step is not None else max(durations)
            total = step.tool_sum if step is not None else sum(durations)
            items.append((ToolCallsItem(calls, wall, total), 1))
        if step is not None:
            items.append((UsageItem(step), 0))
        self.text, self.reasoning, self.calls, self.server_tools = [], [], {}, []
        return items
