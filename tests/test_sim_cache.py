"""The simulator's prefix cache follows vLLM's rules."""

from __future__ import annotations

from hotloop.providers.sim.cache import PrefixCache, block_hashes
from hotloop.providers.sim.tokenizer import encode, pieces


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_only_full_blocks_are_hashed_and_each_chains_its_parent() -> None:
    assert len(block_hashes(tokens(47))) == 2
    a = block_hashes(tokens(32))
    b = block_hashes([999] + tokens(31, 1))
    # Same second block content, different first block: the chained hash differs.
    assert a[1] != b[1] and tokens(32)[16:] == ([999] + tokens(31, 1))[16:]


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
