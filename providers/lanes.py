"""Priority lanes: interactive requests go at once; background ones (titles, summaries) give way.

A background request starts only while no interactive request is in flight, and at most
`max_background` run together. An interactive request that starts preempts the background
ones in flight: they are cancelled, which closes their connections so the server frees their
slots, and they start again at the next quiet moment. A retry is cheap: the server's prefix
cache still holds the prompt it had begun on.

With lanes off, background requests go out as they come, with no cap: the baseline the
benchmark compares against.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

T = TypeVar("T")

BACKGROUND_PRIORITY = 10  # interactive requests send none: vLLM's default, 0, is the most urgent


class Lanes:
    def __init__(self, enabled: bool = True, max_background: int = 1) -> None:
        self.enabled = enabled
        self.max_background = max_background
        self.preemptions = 0
        self._interactive = 0
        self._background: set[asyncio.Task[object]] = set()
        self._preempted: set[asyncio.Task[object]] = set()
        self._changed = asyncio.Event()

    @property
    def busy(self) -> bool:
        """Whether an interactive request is in flight."""
        return self._interactive > 0

    @asynccontextmanager
    async def interactive(self) -> AsyncIterator[None]:
        """Around one interactive request."""
        self._interactive += 1
        if self.enabled:
            for task in self._background - self._preempted:
                self._preempted.add(task)
                task.cancel()
        try:
            yield
        finally:
            self._interactive -= 1
            self._changed.set()

    async def background(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` (one request) in the background lane, again from the start if it is preempted."""
        while True:
            await self._quiet()
            task: asyncio.Task[T] = asyncio.ensure_future(work())
            self._background.add(task)
            try:
                return await task
            except asyncio.CancelledError:
                if task not in self._preempted:
                    raise
                self.preemptions += 1
            finally:
                self._background.discard(task)
                self._preempted.discard(task)
                self._changed.set()

    async def _quiet(self) -> None:
        while self.enabled and (self._interactive or len(self._background) >= self.max_background):
            self._changed.clear()
            await self._changed.wait()
