"""The simulator's prefix cache follows vLLM's rules."""

from __future__ import annotations

from hotloop.sim.cache import CacheBlock, PrefixCache, block_hashes
from hotloop.sim.tokenizer import encode, pieces


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_only_full_blocks_are_hashed_and_each_chains_its_parent() -> None:
    assert len(block_hashes(tokens(47))) == 2
    a = block_hashes(tokens(32))
    b = block_hashes([999, *tokens(31, 1)])
    # Same second block content, different first block: the chained hash differs.
    assert a[1] != b[1] and tokens(32)[16:] == ([999, *tokens(31, 1)])[16:]


def test_hit_is_capped_below_the_prompt_length_and_rounded_to_blocks() -> None:
    cache = PrefixCache()
    prompt = tokens(64)
    cache.insert(block_hashes(prompt))
    # 64 tokens all cached, but the last token is always recomputed: 63 → 3 whole blocks.
    assert cache.lookup(block_hashes(prompt), len(prompt)) == 48
    longer = tokens(70)
    assert cache.lookup(block_hashes(longer), len(longer)) == 64
    assert cache.queries == 134 and cache.hits == 112


def test_a_changed_block_stops_the_hit_there() -> None:
    cache = PrefixCache()
    cache.insert(block_hashes(tokens(80)))
    changed = tokens(80)
    changed[40] = -1
    assert cache.lookup(block_hashes(changed), 80) == 32


def test_lru_evicts_the_oldest_request_and_its_tail_first() -> None:
    cache = PrefixCache(capacity_blocks=4)
    old = block_hashes(tokens(48))  # 3 blocks
    cache.insert(old)
    cache.insert(block_hashes(tokens(32, 1000)))  # 2 more: one of the old blocks must go
    assert len(cache) == 4
    # The old request's last block went first, so its first two blocks still hit.
    assert cache.lookup(old, 49) == 32


def test_tokenizer_is_lossless_deterministic_and_bpe_sized() -> None:
    text = 'def main():\n    print("hello, world")  # 12345\n<|im_end|>\n'
    assert "".join(pieces(text)) == text
    assert encode(text) == encode(text[:]) and "<|im_end|>" in pieces(text)
    prose = "Prefix caching keeps the static part of every request warm across steps. " * 20
    assert 3.0 < len(prose) / len(encode(prose)) < 6.0


def blocks(count: int, size: int = 100, marks: dict[int, float] | None = None) -> list[CacheBlock]:
    """`count` distinct content blocks of `size` tokens; `marks` puts a breakpoint (TTL) on some."""
    marks = marks or {}
    return [CacheBlock(size, n, marks.get(n)) for n in range(count)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breakpoints_write_up_to_the_last_one_and_read_back_at_block_boundaries() -> None:
    from hotloop.sim.cache import BreakpointCache

    cache = BreakpointCache(min_tokens=250)
    first = cache.use(blocks(10, marks={2: 300.0, 5: 300.0}))
    # Nothing after the last breakpoint is written: blocks 6..9 stay uncached input.
    assert (first.read, first.write) == (0, 600)
    # A longer conversation with its breakpoint moved to the end reads the old prefix and writes the rest.
    longer = cache.use(blocks(12, marks={11: 300.0}))
    assert (longer.read, longer.write) == (600, 600)


def test_a_prefix_below_the_minimum_is_neither_written_nor_read() -> None:
    from hotloop.sim.cache import BreakpointCache

    cache = BreakpointCache(min_tokens=1024)
    assert cache.use(blocks(5, marks={4: 300.0})).write == 0
    assert cache.use(blocks(5, marks={4: 300.0})).read == 0
    # The short breakpoint's tokens are written by the next one that is long enough.
    use = cache.use(blocks(12, marks={4: 300.0, 11: 300.0}))
    assert (use.read, use.write) == (0, 1200)


def test_lookback_stops_twenty_blocks_before_a_breakpoint() -> None:
    from hotloop.sim.cache import BreakpointCache

    cache = BreakpointCache(min_tokens=1)
    cache.use(blocks(3, marks={2: 300.0}))
    assert cache.use(blocks(23, marks={22: 300.0})).read == 300  # block 2 is 20 blocks back: found
    cache.clear()
    cache.use(blocks(3, marks={2: 300.0}))
    assert cache.use(blocks(24, marks={23: 300.0})).read == 0  # 21 blocks back: out of reach
    cache.clear()
    cache.use(blocks(3, marks={2: 300.0}))
    # A second breakpoint on the older message brings it back in reach, which is why hotloop places one there.
    assert cache.use(blocks(24, marks={2: 300.0, 23: 300.0})).read == 300


def test_entries_live_for_their_ttl_from_their_last_use() -> None:
    from hotloop.sim.cache import BreakpointCache

    clock = Clock()
    cache = BreakpointCache(min_tokens=1, clock=clock)
    cache.use(blocks(4, marks={3: 300.0}))
    clock.now = 299.0
    assert cache.use(blocks(4, marks={3: 300.0})).read == 400  # a read refreshes the 5-minute TTL...
    clock.now = 598.0
    assert cache.use(blocks(4, marks={3: 300.0})).read == 400
    clock.now = 899.0
    assert cache.use(blocks(4, marks={3: 300.0})).read == 0  # ...and 5 minutes idle expire it
    hour = cache.use(blocks(6, marks={5: 3600.0}))
    assert hour.write_1h == 600 - 400 and hour.read == 400
