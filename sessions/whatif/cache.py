"""The provider's cache as a model: fed a conversation's requests, it says what each reads, writes and leaves
uncached under a policy, with the pings the policy sends in the pauses between them.

The model holds one prefix per conversation: the last request's cacheable part (Anthropic: up to its last breakpoint;
an OpenAI-style server: its whole prompt; a self-hosted server keeps the generated tokens too, as vLLM does). A
request whose prefix goes on from the one before reads what is held, if the pause since its last use didn't outlive
the lifetime (a read refreshes it), and writes the rest of its cacheable part. Reads come in the server's units:
Anthropic reads to a breakpoint, OpenAI in 128-token blocks from 1,024, vLLM and the simulator in 16-token blocks, at
most the prompt less one token. A ping is a request of the held prefix and one output token: a read while the prefix
lives, a re-write once it is gone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from hotloop.agent.cache_lifetime import LIFETIME
from hotloop.agent.keepalive import PING_EXTRA
from hotloop.agent.pricing import Ttl
from hotloop.providers.protocols import Cache, Wire
from hotloop.sessions.whatif.trace import Kind, Request

FOREVER = math.inf
# Pings stop a day into a pause: a day of them costs more than re-writing any prefix (Anthropic: 24 a day at 0.1× on
# a 1-hour cache against a 2× write), and a log whose clock jumps a million years can't ask for a billion pings.
PING_SPAN = 86_400.0


@dataclass(frozen=True)
class Server:
    """How a provider caches: its read unit, the shortest prefix it caches, how long an unused prefix lives."""

    kind: Kind
    cache: Cache = Wire.OPENAI_CHAT.traits.cache  # how its protocol asks for the cache (a self-hosted server's too)
    block: int = 1
    minimum: int = 0
    lifetime: dict[Ttl, float] = field(default_factory=lambda: dict(LIFETIME))
    keeps_output: bool = False

    @property
    def marked(self) -> bool:
        """A request marks what is cached (breakpoints): it reads up to its mark and writes the rest, billed."""
        return self.cache.breakpoints > 0

    def life(self, ttl: Ttl) -> float:
        return self.lifetime.get(ttl, self.lifetime["5m"])


def server_for(kind: Kind, model: str = "") -> Server:
    """Anthropic's breakpoints (minimum cacheable length by model), OpenAI's automatic prefix cache (retained about
    5 minutes idle), or a self-hosted LRU server (nothing expires with time; only other traffic evicts)."""
    if kind == "lru":
        return Server("lru", block=16, lifetime={"5m": FOREVER}, keeps_output=True)
    cache = Wire(kind).traits.cache
    if cache.breakpoints:
        return Server(kind, cache, minimum=anthropic_minimum(model))
    return Server(kind, cache, block=128, minimum=1024, lifetime={"5m": 300.0})


def anthropic_minimum(model: str) -> int:
    """The shortest prefix Anthropic caches for `model` (docs: prompt caching, "Cache limitations")."""
    if any(name in model for name in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if "haiku-3" in model or "3-haiku" in model or "3-5-haiku" in model:
        return 2048
    return 1024


@dataclass(frozen=True)
class Served:
    """A request or a ping as the model serves it: tokens read, written (and of those, for an hour), uncached."""

    at: float
    read: int
    write: int
    write_1h: int
    uncached: int
    output: int
    request: Request | None  # None: a ping

    @property
    def prompt(self) -> int:
        return self.read + self.write + self.uncached


class Plan(Protocol):
    """A cache policy: the lifetime each request writes for, and when to ping in the pause after a request."""

    name: str

    def ttl(self, index: int, request: Request) -> Ttl: ...

    def pings(self, index: int, pause: float, lifetime: float, held: int) -> Sequence[float]:
        """Offsets (s) after the last use of the `held` tokens request `index` left, in a pause of `pause` s."""
        ...


def reach(server: Server, before: Request | None, request: Request) -> int:
    """How much of `request`'s prefix the request before it held: none where the prefix broke; of a side request's,
    what it shares with the conversation (not its own ask), where the log says."""
    if before is None:
        return 0
    held = held_after(server, before)
    if before.beside and before.shares is not None:
        held = min(held, before.shares)
    return held if request.continues else min(request.keeps, held)


def held_after(server: Server, request: Request) -> int:
    return request.cacheable + (request.output if server.keeps_output else 0)


def serve(server: Server, request: Request, shared: int, held: int, ttl: Ttl) -> Served:
    """`request` served with `held` tokens alive in the cache, `shared` of its prefix the same as theirs."""
    cacheable = request.cacheable if request.cacheable >= server.minimum else 0
    most = min(shared, held, cacheable if server.marked else request.prompt - 1)
    read = max(most, 0) // server.block * server.block
    if read < server.minimum:
        read = 0
    write = cacheable - read if server.marked else 0
    return Served(
        request.start, read, write, write if ttl == "1h" else 0, request.prompt - read - write, request.output, request
    )


def ping(server: Server, at: float, held: int, alive: bool, ttl: Ttl) -> Served:
    """The held prefix, a one-word turn after it and one output token: a read while the prefix lives."""
    cached = held // server.block * server.block if held >= server.minimum else 0
    read = cached if alive else 0
    write = cached if not alive and server.marked else 0
    return Served(at, read, write, write if ttl == "1h" else 0, held - read - write + PING_EXTRA, 1, None)


def replay(server: Server, requests: Sequence[Request], plan: Plan) -> list[Served]:
    """Every request and ping of the conversation under `plan`, in time order."""
    served: list[Served] = []
    held, last_use = 0, -FOREVER
    held_ttl: Ttl = "5m"
    before: Request | None = None
    for index, request in enumerate(requests):
        if before is not None and held:
            life = server.life(held_ttl)
            pause = max(request.start - last_use, 0.0)
            if life < FOREVER:
                start = last_use
                for offset in plan.pings(index - 1, pause, life, held):
                    at = start + offset
                    if not 0 < offset <= PING_SPAN or at >= request.start:
                        continue
                    served.append(ping(server, at, held, at - last_use <= life, held_ttl))
                    last_use = at
        ttl = plan.ttl(index, request)
        alive = before is not None and request.start - last_use <= server.life(held_ttl)
        served.append(serve(server, request, reach(server, before, request), held if alive else 0, ttl))
        held, last_use, held_ttl, before = held_after(server, request), request.end, ttl, request
    return served


@dataclass(frozen=True)
class Rates:
    """Dollars (or input-token equivalents) a token: what the oracle weighs a ping against a re-write with."""

    uncached: Decimal
    read: Decimal
    write: dict[Ttl, Decimal]
    output: Decimal

    def cost(self, served: Served) -> Decimal:
        return (
            served.uncached * self.uncached
            + served.read * self.read
            + (served.write - served.write_1h) * self.write["5m"]
            + served.write_1h * self.write["1h"]
            + served.output * self.output
        )
