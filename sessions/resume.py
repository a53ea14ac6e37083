"""Rebuilding a conversation from its log, exactly as the agent held it.

The agent's history follows from its events: a turn's prompt and context, each step's
answer and calls (built by the loop's own `StepAccumulator`), the results in call order. A
step cut short keeps its partial answer, marked interrupted, and each complete call keeps
the result it got, or a `cancelled` one, as the agent does live. So a resumed conversation
sends the same bytes as the original would have, and the provider's cache can still hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hotloop.agent.compaction import compacted_messages
from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    Notice,
    ProviderSwitched,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.step import StepAccumulator
from hotloop.agent.switching import CacheWarmth
from hotloop.providers.conversation import Message, ToolResultMessage, UserMessage, repaired
from hotloop.providers.events import ModelEvent


@dataclass
class _Step:
    response: StepAccumulator = field(default_factory=StepAccumulator)
    answered: bool = False  # the response finished; the tools may still be running
    results: dict[str, ToolResultMessage] = field(default_factory=dict)

    def results_in_call_order(self) -> list[ToolResultMessage]:
        return [self.results[call.id] for call in self.response.calls if call.id in self.results]


@dataclass
class Conversation:
    """What an agent needs to go on: its history, where it was, and which caches saw what."""

    messages: list[Message] = field(default_factory=list)
    turns: int = 0
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None  # the server of the last switch, if the session switched
    warmth: CacheWarmth = field(default_factory=CacheWarmth)
    open_turn: TurnStarted | None = None  # a turn the log never finished (the process was killed)
    open_turn_steps: int = 0


def rebuild(events: list[AgentEvent]) -> Conversation:
    builder = _Builder()
    for event in events:
        builder.take(event)
    return builder.finish()


class _Builder:
    def __init__(self) -> None:
        self.conversation = Conversation()
        self.step: _Step | None = None
        self._checked = 0  # messages already repaired: history only grows, so only the rest needs a look

    def take(self, event: AgentEvent) -> None:
        step, conversation = self.step, self.conversation
        if isinstance(event, ModelEvent) and step is not None:
            step.response.take(event)
        elif isinstance(event, ToolFinished) and step is not None:
            step.results[event.call_id] = ToolResultMessage(
                event.call_id, event.name, event.result, event.status != "ok"
            )
        elif isinstance(event, StepStarted):
            self._step_started(event)
        elif isinstance(event, ResponseFinished) and step is not None:
            step.answered = True
            conversation.messages.append(step.response.message())
            conversation.warmth.record(conversation.provider or "", conversation.model or "", event.usage)
        elif isinstance(event, StepFinished):
            self._close_step()
        elif isinstance(event, TurnStarted):
            self._close_step()
            conversation.turns = event.turn
            conversation.open_turn, conversation.open_turn_steps = event, 0
            conversation.messages.append(UserMessage(event.prompt + event.context))
        elif isinstance(event, TurnFinished):
            self._close_step()
            conversation.open_turn = None
        elif isinstance(event, ProviderSwitched):
            conversation.provider, conversation.model = event.provider, event.model
            conversation.base_url = event.base_url
        elif isinstance(event, Compacted):
            self._close_step()
            conversation.messages, self._checked = compacted_messages(event.summary), 0

    def _step_started(self, event: StepStarted) -> None:
        self._close_step()
        conversation = self.conversation
        # The agent repairs its history before every request; so does the rebuild, silently.
        conversation.messages[self._checked :] = repaired(conversation.messages[self._checked :])[0]
        self._checked = len(conversation.messages)
        conversation.provider, conversation.model = event.provider, event.model
        conversation.open_turn_steps += 1
        self.step = _Step()

    def _close_step(self) -> None:
        """End the step in progress as the agent would have: finished, or cut short."""
        step, self.step = self.step, None
        if step is None:
            return
        messages = self.conversation.messages
        if step.answered:
            messages.extend(step.results_in_call_order())
        else:
            messages.extend(step.response.cut_short(step.results))

    def finish(self) -> Conversation:
        self._close_step()
        return self.conversation


def closing_events(conversation: Conversation, events: list[AgentEvent]) -> list[AgentEvent]:
    """For a log whose last turn never ended (hotloop was killed): a notice, and the turn's end."""
    turn = conversation.open_turn
    if turn is None:
        return []
    return [
        Notice(
            level="warning",
            message="the last turn stopped when hotloop did; its partial answer is kept, marked interrupted",
        ),
        TurnFinished(
            turn=turn.turn, reason="interrupted", steps=conversation.open_turn_steps, wall=events[-1].ts - turn.ts
        ),
    ]
