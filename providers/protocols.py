"""Each wire protocol as one typed object (`Wire`) and what it is (`Traits`): the one place that knows.

The rest of hotloop asks a protocol's traits (`wire.traits.per_delta`) rather than comparing its name.
A member's value is the name hotloop has always written for it (spans, lines), so nothing written reads differently.
Imports nothing, so the config and the watch can load it without an SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

Ttl = Literal["5m", "1h"]
Reported = Literal["cache_read", "cache_write", "reasoning"]


class Wire(StrEnum):
    ANTHROPIC = "anthropic"  # Messages
    OPENAI_CHAT = "openai"  # Chat Completions, as every OpenAI-compatible server speaks it
    OPENAI_RESPONSES = "openai-responses"

    @property
    def traits(self) -> Traits:
        return _TRAITS[self]


@dataclass(frozen=True)
class Cache:
    """How the protocol's prompt cache is asked for."""

    # Marks (`cache_control`) a request may carry, each ending a cached prefix; 0: the server caches any prefix
    # it has seen on its own (OpenAI, vLLM's automatic prefix caching).
    breakpoints: int
    # The write lifetimes a mark may ask for, the default first; (): the server keeps a prefix until it needs the
    # room, which no timer can predict.
    lifetimes: tuple[Ttl, ...]
    keyed: bool  # a request may name its cache (`prompt_cache_key`), for OpenAI's routing to one cache shard


@dataclass(frozen=True)
class Traits:
    sdk: Literal["openai", "anthropic"]  # the official SDK it is spoken through
    path: str  # where requests are posted on a server's root
    cache: Cache
    # The decode rate is counted in streamed deltas (a token a delta), else from the reported output count:
    # Anthropic sends several tokens a delta (`StepAccumulator.decode_tps`).
    per_delta: bool
    cap_fields: tuple[str, ...]  # the request fields that cap the answer, the newer name first
    min_cap: int  # the least cap the API takes
    cap_required: bool  # a request must carry a cap (else OpenAI's own API caps each model itself)
    reports: frozenset[Reported]  # what its usage counts besides input and output (a gateway may add more)
    thinking_budget: bool  # extended thinking has a budget that the cap must exceed


_TRAITS = {
    Wire.ANTHROPIC: Traits(
        sdk="anthropic",
        path="/v1/messages",
        cache=Cache(breakpoints=4, lifetimes=("5m", "1h"), keyed=False),
        per_delta=False,
        cap_fields=("max_tokens",),
        min_cap=1,
        cap_required=True,
        reports=frozenset({"cache_read", "cache_write"}),
        thinking_budget=True,
    ),
    Wire.OPENAI_CHAT: Traits(
        sdk="openai",
        path="/v1/chat/completions",
        cache=Cache(breakpoints=0, lifetimes=(), keyed=True),
        per_delta=True,
        # OpenAI's own clients send the newer name; hotloop sends `max_tokens`, which every compatible server reads.
        cap_fields=("max_completion_tokens", "max_tokens"),
        min_cap=1,
        cap_required=False,
        reports=frozenset({"cache_read", "reasoning"}),
        thinking_budget=False,
    ),
    Wire.OPENAI_RESPONSES: Traits(
        sdk="openai",
        path="/v1/responses",
        cache=Cache(breakpoints=0, lifetimes=(), keyed=True),
        per_delta=True,
        cap_fields=("max_output_tokens",),
        # OpenAI: "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16"
        min_cap=16,
        cap_required=False,
        reports=frozenset({"cache_read", "reasoning"}),
        thinking_budget=False,
    ),
}

BY_PATH = {wire.traits.path: wire for wire in Wire}  # a request's path on a server's root: the protocol it speaks
