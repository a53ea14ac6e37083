"""Speculative prefetch: run the read-only calls the model will most likely ask for next, while it thinks.

The predictor learns, over the session, which calls followed which context: a turn's prompt,
or the set of calls of the step before. A call (tool and exact arguments) that followed the
same context at least 80% of the time is predicted. Only tools flagged both `read_only` and
`prefetch` are ever run ahead. When the model then asks for a predicted call, it gets the
prefetched result, or waits for the prefetch still running; predictions it never asks for
are cancelled and counted as misses, and nothing they returned reaches the conversation.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field

from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, ToolStarted, TurnStarted
from hotloop.agent.tools.registry import CallKey, Tool, ToolRegistry, call_key

THRESHOLD = 0.8


class Predictor:
    def __init__(self) -> None:
        self._seen: Counter[Hashable] = Counter()
        self._followed: dict[Hashable, Counter[CallKey]] = {}

    def learn_from(self, events: Iterable[AgentEvent]) -> None:
        """Learn what a logged session did: each turn's prompt, then each step's calls."""
        context: Hashable = None
        calls: list[CallKey] = []
        for event in events:
            if isinstance(event, TurnStarted):
                context = ("prompt", event.prompt)
            elif isinstance(event, StepStarted):
                calls = []
            elif isinstance(event, ToolStarted) and (key := call_key(event.name, event.arguments)) is not None:
                calls.append(key)
            elif isinstance(event, StepFinished) and context is not None:
                self.learn(context, calls)
                context = frozenset(calls)

    def learn(self, context: Hashable, calls: list[CallKey]) -> None:
        self._seen[context] += 1
        self._followed.setdefault(context, Counter()).update(set(calls))

    def predict(self, context: Hashable) -> list[CallKey]:
        seen = self._seen[context]
        followed = self._followed.get(context, Counter())
        return [call for call, count in followed.items() if seen and count / seen >= THRESHOLD]


@dataclass
class _Guess:
    task: asyncio.Task[str]
    started: float
    ended: float | None = None

    def end(self, _task: asyncio.Task[str]) -> None:
        """Done callback of `task`: when the prefetch ended, however it ended."""
        self.ended = time.perf_counter()


@dataclass
class PrefetchStats:
    hits: int = 0
    misses: int = 0
    saved: float = 0.0  # seconds the calls had already run when the model asked for them
    guesses: dict[CallKey, _Guess] = field(default_factory=dict)


class Prefetcher:
    def __init__(self, tools: ToolRegistry, run: Callable[[Tool, CallKey], Awaitable[str]]) -> None:
        self.tools = tools
        self.predictor = Predictor()
        self.stats = PrefetchStats()
        self._run = run

    def start(self, context: Hashable) -> None:
        """Run ahead the calls predicted for `context` that may run ahead."""
        for key in self.predictor.predict(context):
            tool = self.tools.get(key[0])
            if tool is None or not (tool.read_only and tool.prefetch) or key in self.stats.guesses:
                continue
            guess = _Guess(asyncio.ensure_future(self._run(tool, key)), time.perf_counter())
            guess.task.add_done_callback(guess.end)
            self.stats.guesses[key] = guess

    def take(self, key: CallKey | None) -> tuple[asyncio.Task[str], float] | None:
        """The prefetch of a call the model just made, if there is one (a hit), and how long it has run."""
        guess = self.stats.guesses.pop(key, None) if key is not None else None
        if guess is None:
            return None
        ahead = (guess.ended or time.perf_counter()) - guess.started
        self.stats.hits += 1
        self.stats.saved += ahead
        return guess.task, ahead

    def discard(self) -> int:
        """Cancel the predictions nobody asked for; how many there were."""
        wrong = list(self.stats.guesses.values())
        self.stats.guesses.clear()
        for guess in wrong:
            guess.task.cancel()
        self.stats.misses += len(wrong)
        return len(wrong)
