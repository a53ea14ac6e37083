"""Speculative prefetch: run the read-only calls the model will most likely ask for next, while it thinks.

The predictor learns, over the session and from the workspace's earlier session logs, which calls
followed which context: a turn's prompt, or the set of calls of the step before. A call (tool and
exact arguments) that followed the same context at least 80% of the time is predicted. Only tools
flagged both `read_only` and `prefetch` are ever run ahead, at most `MAX_GUESSES` of them a step,
the most confident first, and none the memo already answers. When the model then asks for a
predicted call, it gets the prefetched result, or waits for the prefetch still running;
predictions it never asks for are cancelled and counted as misses, and nothing they returned
reaches the conversation. Each step that prefetched says so in one line: `prefetched 3, used 2`.

No guess is a network call the user didn't allow. The built-in prefetchable tools (`read_file`,
`list_dir`, `grep`) read the local workspace only; an MCP tool is prefetchable only when the
config trusts its server's read-only hints (`trust_hints`, see `agent/tools/mcp.py`), and then
the call is one the user allowed: it would run unasked anyway, the model asking for it or not.
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
# The most guesses in flight a step. The widest step of the research task in benchmarks/agent_latency.py asks for
# 3 calls at once (three searches, then three fetches); 4 covers such a step with one to spare, while a context that
# learned many calls can't start a dozen reads on a 2-core machine. A wrong guess so costs at most 4 local read-only
# calls a step, each cancelled when the step ends: the benchmark's "defaults, wrong guesses" row measures that cost.
MAX_GUESSES = 4


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
        """The calls that followed `context` often enough, the most often first (ties: in the order first seen)."""
        seen = self._seen[context]
        followed = self._followed.get(context, Counter())
        return [call for call, count in followed.most_common() if seen and count / seen >= THRESHOLD]


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
    started: int = 0  # guesses run ahead
    hits: int = 0
    misses: int = 0
    saved: float = 0.0  # seconds the calls had already run when the model asked for them
    guesses: dict[CallKey, _Guess] = field(default_factory=dict)


@dataclass(frozen=True)
class StepPrefetch:
    """What prefetching did in one step: guesses run ahead, how many the model used, the tool time they saved."""

    prefetched: int
    used: int
    ahead: float

    def line(self) -> str:
        return f"prefetched {self.prefetched}, used {self.used} · {self.ahead:.2f} s of tool time done ahead"


class Prefetcher:
    def __init__(
        self,
        tools: ToolRegistry,
        run: Callable[[Tool, CallKey], Awaitable[str]],
        predictor: Predictor | None = None,
        limit: int = MAX_GUESSES,
    ) -> None:
        """`predictor`: one learned already (a session's, shared by its agents), else a new one."""
        self.tools = tools
        self.predictor = predictor if predictor is not None else Predictor()
        self.stats = PrefetchStats()
        self.limit = limit
        self._run = run
        self._mark = (0, 0, 0.0)  # the stats when the step began: (started, hits, saved)

    def start(self, context: Hashable, skip: Callable[[CallKey], bool] | None = None) -> None:
        """A step begins: run ahead the calls predicted for `context` that may run ahead, at most `limit` at once.

        `skip`: calls not worth running ahead (the memo has their result).
        """
        self._mark = (self.stats.started, self.stats.hits, self.stats.saved)
        for key in self.predictor.predict(context):
            if len(self.stats.guesses) >= self.limit:
                break
            tool = self.tools.get(key[0])
            if tool is None or not (tool.read_only and tool.prefetch) or key in self.stats.guesses:
                continue
            if skip is not None and skip(key):
                continue
            guess = _Guess(asyncio.ensure_future(self._run(tool, key)), time.perf_counter())
            guess.task.add_done_callback(guess.end)
            self.stats.guesses[key] = guess
            self.stats.started += 1

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

    def settle(self) -> StepPrefetch:
        """A step ends: cancel the guesses it didn't use; what it prefetched and used."""
        self.discard()
        started, hits, saved = self._mark
        self._mark = (self.stats.started, self.stats.hits, self.stats.saved)
        return StepPrefetch(self.stats.started - started, self.stats.hits - hits, self.stats.saved - saved)
