"""vLLM-style automatic prefix caching.

The prompt is cut into blocks of 16 tokens. Each full block's hash chains its parent's, so
a block hits only if everything before it is identical too. Partial blocks are never
cached. Evictable blocks leave in LRU order; a finished request's blocks are queued tail
first, so a prompt's last blocks are evicted before its first ones, as in vLLM.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK_SIZE = 16


def block_hashes(tokens: Sequence[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained hashes of the full blocks of `tokens`."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, *tokens[start : start + block_size]))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """An LRU set of block hashes with vLLM's hit accounting."""

    def __init__(self, capacity_blocks: int = 16_384, block_size: int = BLOCK_SIZE) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Cached tokens for a prompt of `num_tokens` whose full blocks hash to `hashes`.

        The last prompt token is always recomputed to get logits, so the hit is capped at
        `num_tokens - 1`, rounded down to whole blocks.
        """
        max_blocks = max(num_tokens - 1, 0) // self.block_size
        matched = 0
        for block_hash in hashes[:max_blocks]:
            if block_hash not in self._blocks:
                break
            matched += 1
        cached = matched * self.block_size
        self.queries += num_tokens
        self.hits += cached
        return cached

    def insert(self, hashes: Sequence[int]) -> None:
        """Record a request's blocks as computed; the earliest blocks become the most recent."""
        for block_hash in reversed(hashes):
            self._blocks[block_hash] = None
            self._blocks.move_to_end(block_hash)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
