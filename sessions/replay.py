"""Replaying a session: its events again, at the pace they were recorded.

A replay is the log redrawn. It never calls a provider or runs a tool. The time between
events is kept, scaled by the speed, except the user's idle time before a turn, which is
cut to a second. A replay can pause, change speed, and jump from step to step.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from hotloop.agent.events import AgentEvent, StepStarted, TurnStarted

IDLE_GAP = 1.0
MIN_SPEED, MAX_SPEED = 0.25, 64.0
BURST = 256  # events delivered back to back before the screen gets a turn


class Timeline:
    """A session's events, when each is due in replay seconds, and where each step starts."""

    def __init__(self, events: list[AgentEvent]) -> None:
        self.events = events
        self.due: list[float] = []
        self.step_starts = [n for n, event in enumerate(events) if isinstance(event, StepStarted)]
        elapsed, previous = 0.0, events[0].ts if events else 0.0
        for event in events:
            gap = max(event.ts - previous, 0.0)
            elapsed += min(gap, IDLE_GAP) if isinstance(event, TurnStarted) else gap
            self.due.append(elapsed)
            previous = event.ts

    def __len__(self) -> int:
        return len(self.events)

    def steps_before(self, position: int) -> int:
        """How many steps have started before event `position`."""
        return sum(1 for start in self.step_starts if start < position)

    def next_step(self, position: int) -> int:
        """Where the first step after `position` starts; the end if there is none."""
        return next((start for start in self.step_starts if start > position), len(self.events))

    def previous_step(self, position: int) -> int:
        """Where the step before the one in progress at `position` starts; the beginning if there is none."""
        started = [start for start in self.step_starts if start < position]
        return started[-2] if len(started) >= 2 else 0


@dataclass(frozen=True)
class Jump:
    """Events to draw at once to reach a new position; `restart` means clear the screen first."""

    restart: bool
    events: list[AgentEvent]


class Replay:
    """Delivers a timeline's events when they are due, and takes the player's commands."""

    def __init__(self, events: list[AgentEvent], speed: float = 1.0, now: Callable[[], float] = time.monotonic) -> None:
        self.timeline = Timeline(events)
        self.speed = min(max(speed, MIN_SPEED), MAX_SPEED)
        self.position = 0
        self.paused = False
        self._now = now
        self._at = 0.0  # replay seconds at the anchor
        self._anchor = now()
        self._changed = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.position >= len(self.timeline)

    def elapsed(self) -> float:
        """Replay seconds since the start: still while paused."""
        if self.paused or self.done:
            return self._at
        return self._at + (self._now() - self._anchor) * self.speed

    def recorded_time(self) -> float:
        """The wall-clock time of the recording that the replay is showing, for timers and spinners."""
        timeline = self.timeline
        if not timeline.events:
            return 0.0
        last = min(max(self.position - 1, 0), len(timeline) - 1)
        return timeline.events[last].ts + max(self.elapsed() - timeline.due[last], 0.0)

    def toggle_pause(self) -> None:
        self._reanchor()
        self.paused = not self.paused
        self._changed.set()

    def set_speed(self, speed: float) -> None:
        self._reanchor()
        self.speed = min(max(speed, MIN_SPEED), MAX_SPEED)
        self._changed.set()

    def jump(self, target: int) -> Jump:
        """Move to event `target`: the events to draw at once, from the start if going back."""
        target = min(max(target, 0), len(self.timeline))
        restart = target < self.position
        skipped = self.timeline.events[0 if restart else self.position : target]
        self.position = target
        self._at = self.timeline.due[target] if target < len(self.timeline) else self.elapsed()
        self._anchor = self._now()
        self._changed.set()
        return Jump(restart, skipped)

    def _reanchor(self) -> None:
        self._at, self._anchor = self.elapsed(), self._now()

    async def play(self, deliver: Callable[[AgentEvent], None]) -> None:
        """Deliver every event when it is due, until the end; commands take effect at once."""
        self._anchor = self._now()  # the time before playing starts (the screen appearing) is not the recording's
        while not self.done:
            self._changed.clear()
            if self.paused:
                await self._changed.wait()
                continue
            wait = (self.timeline.due[self.position] - self.elapsed()) / self.speed
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                continue
            self._deliver_due(deliver)
            await asyncio.sleep(0)
        self._at = self.timeline.due[-1] if self.timeline.due else 0.0

    def _deliver_due(self, deliver: Callable[[AgentEvent], None]) -> None:
        now, timeline = self.elapsed(), self.timeline
        for _ in range(BURST):
            if self.done or timeline.due[self.position] > now:
                return
            deliver(timeline.events[self.position])
            self.position += 1


async def paced(events: list[AgentEvent], speed: float) -> AsyncIterator[AgentEvent]:
    """The events at their recorded pace scaled by `speed`; all at once when `speed` is 0."""
    if speed <= 0:
        for event in events:
            yield event
        return
    timeline = Timeline(events)
    started = time.monotonic()
    for due, event in zip(timeline.due, events, strict=True):
        wait = started + due / speed - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        yield event
