"""The simulator's two prompt caches.

`PrefixCache` is vLLM's automatic prefix caching. The prompt is cut into blocks of 16
tokens. Each full block's hash chains its parent's, so a block hits only if everything
before it is identical too. Partial blocks are never cached. Evictable blocks leave in LRU
order; a finished request's blocks are queued tail first, so a prompt's last blocks are
evicted before its first ones, as in vLLM. Each block's stay is kept as vLLM's KV-cache metrics
keep it (birth, last use, its last four uses), and an evicted block's `Eviction` waits for the
metrics to `drain` it; unlike vLLM, which samples (`--kv-cache-metrics-sample`), every block is kept.

`BreakpointCache` is Anthropic's explicit caching. Only a prefix that ends at a
`cache_control` breakpoint is written, only if it is at least the minimum cacheable length,
and it lives for its TTL from its last use. A request reads the longest live prefix that
ends at a content-block boundary at, or up to 20 blocks before, one of its breakpoints.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

BLOCK_SIZE = 16


def block_hashes(tokens: Sequence[int], block_size: int = BLOCK_SIZE, root: int = 0) -> list[int]:
    """Chained hashes of the full blocks of `tokens`; `root` starts the chain (one per model: caches are per model)."""
    hashes: list[int] = []
    parent = root
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, *tokens[start : start + block_size]))
        hashes.append(parent)
    return hashes


@dataclass(frozen=True)
class Eviction:
    """An evicted block's stay, in seconds: birth to eviction, last use to eviction, and the gaps between uses."""

    lifetime: float
    idle: float
    reuse_gaps: tuple[float, ...]


class _Stay:
    """One block's birth and uses, as vLLM's `BlockMetricsState` (vllm/v1/core/kv_cache_metrics.py) keeps them."""

    __slots__ = ("born", "last", "uses")

    def __init__(self, now: float) -> None:
        self.born = self.last = now
        # vLLM keeps only the last four uses: its reuse gaps are those between them.
        self.uses: deque[float] = deque(maxlen=4)

    def used(self, now: float) -> None:
        self.last = now
        self.uses.append(now)

    def evicted(self, now: float) -> Eviction:
        uses = list(self.uses)
        return Eviction(now - self.born, now - self.last, tuple(b - a for a, b in pairwise(uses)))


class PrefixCache:
    """An LRU set of block hashes with vLLM's hit accounting, and each block's stay for the residency metrics."""

    def __init__(
        self, capacity_blocks: int = 16_384, block_size: int = BLOCK_SIZE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.clock = clock
        self._blocks: OrderedDict[int, _Stay] = OrderedDict()
        self._evicted: list[Eviction] = []
        self.queries = 0
        self.hits = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Cached tokens for a prompt of `num_tokens` whose full blocks hash to `hashes`.

        The last prompt token is always recomputed to get logits, so the hit is capped at
        `num_tokens - 1`, rounded down to whole blocks. Each block hit counts as a use.
        """
        cached = self.peek(hashes, num_tokens)
        self.queries += num_tokens
        self.hits += cached
        now = self.clock()
        for block_hash in hashes[: cached // self.block_size]:
            self._blocks[block_hash].used(now)
        return cached

    def peek(self, hashes: Sequence[int], num_tokens: int) -> int:
        """What `lookup` would find, neither counted nor changing anything."""
        max_blocks = max(num_tokens - 1, 0) // self.block_size
        matched = 0
        for block_hash in hashes[:max_blocks]:
            if block_hash not in self._blocks:
                break
            matched += 1
        return matched * self.block_size

    def insert(self, hashes: Sequence[int]) -> None:
        """Record a request's blocks as computed; the earliest blocks become the most recent."""
        now = self.clock()
        for block_hash in reversed(hashes):
            if block_hash in self._blocks:
                self._blocks.move_to_end(block_hash)
            else:
                self._blocks[block_hash] = _Stay(now)
        while len(self._blocks) > self.capacity_blocks:
            self._evicted.append(self._blocks.popitem(last=False)[1].evicted(now))
            self.evictions += 1

    def drain(self) -> list[Eviction]:
        """The evictions since the last drain, oldest first."""
        evicted, self._evicted = self._evicted, []
        return evicted

    def clear(self) -> None:
        # A reset is not an eviction: vLLM's collector forgets its blocks without observing them.
        self._blocks.clear()


@dataclass(frozen=True)
class CacheBlock:
    """One content block of an Anthropic prompt: its size, its content's hash, and its breakpoint's TTL."""

    tokens: int
    key: int
    ttl: float | None = None


@dataclass(frozen=True)
class CacheUse:
    """What one request read from the cache and wrote to it, in tokens, by TTL."""

    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


LOOKBACK_BLOCKS = 20
ONE_HOUR = 3600.0


class BreakpointCache:
    """Prefixes cached at breakpoints, each alive for its TTL since it was last written or read."""

    def __init__(
        self, min_tokens: int = 1024, capacity: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_tokens = min_tokens
        self.capacity = capacity
        self.clock = clock
        self._entries: OrderedDict[int, tuple[float, float]] = OrderedDict()  # prefix hash -> (expiry, ttl)

    def __len__(self) -> int:
        return len(self._entries)

    def use(self, blocks: Sequence[CacheBlock], root: int = 0) -> CacheUse:
        """Read the longest live prefix this request may read, and write what its breakpoints add."""
        prefixes, ends = _chained(blocks, root)
        marks = [n for n, block in enumerate(blocks) if block.ttl is not None]
        now = self.clock()
        hit = max((self._hit(prefixes, mark, now) for mark in marks), default=-1)
        read = ends[hit] if hit >= 0 else 0
        written = {300.0: 0, ONE_HOUR: 0}
        covered = read
        for mark in marks:
            if ends[mark] > covered and ends[mark] >= self.min_tokens:
                ttl = blocks[mark].ttl or 300.0
                written[ONE_HOUR if ttl >= ONE_HOUR else 300.0] += ends[mark] - covered
                self._store(prefixes[mark], ttl, now)
                covered = ends[mark]
        return CacheUse(read, written[300.0], written[ONE_HOUR])

    def readable(self, blocks: Sequence[CacheBlock], root: int = 0) -> int:
        """The tokens `use` would read now, refreshing nothing."""
        prefixes, ends = _chained(blocks, root)
        now = self.clock()
        marks = [n for n, block in enumerate(blocks) if block.ttl is not None]
        hit = max((self._hit(prefixes, mark, now, refresh=False) for mark in marks), default=-1)
        return ends[hit] if hit >= 0 else 0

    def _hit(self, prefixes: list[int], mark: int, now: float, refresh: bool = True) -> int:
        """The last block, from `mark` back through the lookback window, whose prefix is cached; -1 if none."""
        for n in range(mark, max(mark - LOOKBACK_BLOCKS - 1, -1), -1):
            entry = self._entries.get(prefixes[n])
            if entry is None:
                continue
            if entry[0] <= now:
                del self._entries[prefixes[n]]
                continue
            if refresh:
                self._store(prefixes[n], entry[1], now)  # a read refreshes the TTL
            return n
        return -1

    def _store(self, prefix: int, ttl: float, now: float) -> None:
        self._entries[prefix] = (now + ttl, ttl)
        self._entries.move_to_end(prefix)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


def _chained(blocks: Sequence[CacheBlock], root: int) -> tuple[list[int], list[int]]:
    """Each block's prefix hash (chained from `root`) and the prefix's length in tokens."""
    prefixes, ends, parent, total = [], [], root, 0
    for block in blocks:
        parent = hash((parent, block.key))
        total += block.tokens
        prefixes.append(parent)
        ends.append(total)
    return prefixes, ends
