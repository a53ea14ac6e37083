"""Identical read-only calls in one session reuse the earlier result for a while.

A call is identical when its tool and its arguments, as JSON with sorted keys, are. Only
tools flagged `read_only` and not `volatile` are remembered, for `ttl` seconds; any call of a
tool that is not read-only forgets everything, since it may have changed what they would say.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hotloop.agent.tools.registry import CallKey, Tool, call_key


class Memo:
    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self.hits = 0
        self._results: dict[CallKey, tuple[float, str]] = {}

    def get(self, tool: Tool | None, arguments: str) -> str | None:
        key = self._key(tool, arguments)
        if key is None or key not in self._results:
            return None
        stored, result = self._results[key]
        if self.clock() - stored > self.ttl:
            del self._results[key]
            return None
        self.hits += 1
        return result

    def put(self, tool: Tool | None, arguments: str, result: str) -> None:
        key = self._key(tool, arguments)
        if key is not None:
            self._results[key] = (self.clock(), result)

    def clear(self) -> None:
        self._results.clear()

    def _key(self, tool: Tool | None, arguments: str) -> CallKey | None:
        if self.ttl <= 0 or tool is None or not tool.read_only or tool.volatile:
            return None
        return call_key(tool.name, arguments)
