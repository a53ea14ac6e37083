"""A log's step events folded back into steps: the one place a reader pairs `StepStarted`, `ResponseFinished`,
the tool events and `StepFinished` (`agent/recorder.py` writes them in that order).

Incremental, for a live reader (`StepFold.add` hands back each step as it ends), or over a whole log (`folded`).
A step a log leaves open (a process killed mid-step, a log cut short) ends at the next step's start or the log's
end, with what it got: a reader asks its `usage` and `answered` whichever events it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from hotloop.agent.events import AgentEvent, ResponseFinished, StepFinished, StepStarted, ToolFinished
from hotloop.providers.events import UsageLedger


@dataclass
class FoldedStep:
    """One step as its events tell it; each event None until the log holds it."""

    turn: int
    step: int
    started: StepStarted | None = None
    response: ResponseFinished | None = None
    tools: list[ToolFinished] = field(default_factory=list)
    finished: StepFinished | None = None

    @property
    def usage(self) -> UsageLedger | None:
        said = self.response or self.finished
        return said.usage if said is not None else None

    @property
    def answered(self) -> float | None:
        """When the answer ended: its `ResponseFinished`, else the step's end less its tools (a step cancelled
        mid-stream logs no response)."""
        if self.response is not None:
            return self.response.ts
        return self.finished.ts - self.finished.tool_wall if self.finished is not None else None


class StepFold:
    """Steps from events as they come."""

    def __init__(self) -> None:
        self.open: FoldedStep | None = None

    def add(self, event: AgentEvent) -> list[FoldedStep]:
        """Take `event`; the steps it ends: its own at its `StepFinished`, one left open at another's events."""
        if isinstance(event, StepStarted):
            ended = self.close()
            self.open = FoldedStep(event.turn, event.step, started=event)
            return ended
        if isinstance(event, ToolFinished):
            if self.open is not None:
                self.open.tools.append(event)
            return []
        if not isinstance(event, ResponseFinished | StepFinished):
            return []
        ended = []
        if self.open is None or (self.open.turn, self.open.step) != (event.turn, event.step):
            ended = self.close()
            self.open = FoldedStep(event.turn, event.step)  # its start is not in the log
        if isinstance(event, ResponseFinished):
            self.open.response = event
            return ended
        self.open.finished = event
        return ended + self.close()

    def close(self) -> list[FoldedStep]:
        """The log ended: the step it left open, if any."""
        left, self.open = self.open, None
        return [left] if left is not None else []


def folded(events: Iterable[AgentEvent]) -> Iterator[FoldedStep]:
    """Every step of `events`, in order."""
    fold = StepFold()
    for event in events:
        yield from fold.add(event)
    yield from fold.close()
