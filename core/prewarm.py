"""Pre-warming: the conversation's static prefix sent ahead, so the first real step reads it from the cache.

At session start (while the user types the first prompt), after a switch, and after an idle gap that outlived
the provider's cache lifetime, the prefix a step will start with (system prompt, tools, and a resumed
conversation's history) goes out as a side request with a one-token answer, in the background: on vLLM at low
priority. The first real step then prefills only the prompt.

- **The answer's cap is 1.** Anthropic documents `max_tokens: 0` for this, but only without streaming (and hotloop's
  providers stream); the simulator refuses 0 as the API long did. One token costs one output token and is the
  same request everywhere (vLLM, llama.cpp, SGLang, the simulator, Anthropic).
- **It never delays a turn.** The user's request goes out at once (interactive requests wait for no background
  one), and a pre-warm still running is cancelled, the choice that was never slower than no pre-warm
  (`benchmarks/agent_latency.py --prewarm-only`): a prompt sent while the pre-warm was at the server read the
  prefix either way (0.28× the TTFT, left or cancelled; the simulator counts a prompt's blocks cached once it
  is scheduled), and one that raced out with the pre-warm came 1.12–1.16× later with the pre-warm left to
  finish, 1.00× with it cancelled. A start's or a switch's pre-warm waits `DELAY` first, so a prompt sent at once
  meets none.
- **Only where it pays.** A server someone runs (or the simulator) is paid by the hour: prefilling early costs
  nothing a step wouldn't. A hosted API bills it: on Anthropic the pre-warm writes the prefix at 1.25× input and
  the first step then reads it at 0.1×, where without it the first step writes it at 1.25×, so every pre-warm
  costs 0.1× the prefix more (and a whole write if the user never sends); on OpenAI it prefills it uncached. So
  `auto` sends none to a hosted API, and says what one would have cost.
- **It is a side request.** Its line, with its usage, goes to the session log as a notice marked "pre-warm", not
  to the live transcript, which stays the conversation's; `Prewarmer.spent` counts it apart from the session's
  steps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

import msgspec

from hotloop.agent.events import AgentEvent, Notice
from hotloop.config import CacheSettings, Config, Target
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import Usage, UsageLedger

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider

Why = Literal["start", "switch", "idle"]
# The user turn the pre-warm ends with: its own few tokens are all the first step doesn't find cached.
ASK = "."
CHARS_PER_TOKEN = 4  # a rough count, for the estimate a hosted API's verdict shows
ANTHROPIC_LIFETIME = {"5m": 300.0, "1h": 3600.0}
# Seconds a start's or a switch's pre-warm waits before it goes: a prompt sent sooner can't be helped (the step
# prefills the prefix itself either way, measured), and the pre-warm it would cancel is a request for nothing.
DELAY = 1.0


@dataclass(frozen=True)
class Verdict:
    """Whether to pre-warm this provider, why (shown), and how long its cache keeps a prefix (None: no fixed time)."""

    send: bool
    why: str
    lifetime: float | None


def verdict(settings: CacheSettings, provider: Provider, prefix_tokens: int, write_ttl: str = "5m") -> Verdict:
    """What `[cache] prewarm` means for `provider` with a prefix of about `prefix_tokens` tokens."""
    anthropic = provider.protocol == "anthropic"
    # Anthropic's cache, the API's and the simulator's Anthropic side alike, forgets a prefix after its TTL; a
    # self-hosted OpenAI-compatible server keeps one until it needs the room, which no timer can predict.
    lifetime = ANTHROPIC_LIFETIME.get(write_ttl, 300.0) if anthropic else None
    if settings.prewarm == "off":
        return Verdict(False, "pre-warm off ([cache] prewarm)", lifetime)
    if not provider.official:
        return Verdict(True, "pre-warm: a server someone runs prefills it early at no extra cost", lifetime)
    from hotloop.agent.pricing import money  # the price table loads only for a hosted API

    extra = extra_cost(provider, prefix_tokens)
    cost = f"~{money(extra)} more per start" if extra is not None else "an unknown price"
    how = "writes it at 1.25× input, then the first step reads it at 0.1×" if anthropic else "prefills it uncached"
    return Verdict(False, f"pre-warm off on {provider.name}: a hosted API {how}: {cost}, no saving", lifetime)


def extra_cost(provider: Provider, prefix_tokens: int) -> Decimal | None:
    """What pre-warming a hosted API costs beyond not doing it: the pre-warm plus a warm first step, less a cold one.

    The pre-warm puts the prefix in the cache as the cold first step would have (a write on Anthropic, an uncached
    prefill on OpenAI), so the difference is the warm step's read of it and the pre-warm's one output token.
    """
    from hotloop.agent.pricing import price_step

    # The warm step's read of the prefix, priced with the pre-warm's one output token on it.
    warm = UsageLedger(prefix_tokens, cache_read=prefix_tokens, cache_write=0, uncached=0, output=1)
    cost = price_step(warm, provider.model, provider.base_url)
    return cost.total if cost is not None else None


@dataclass
class Spent:
    """The pre-warms sent so far and what they used: side requests, counted apart from the session's steps."""

    requests: int = 0
    prompt: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    dollars: Decimal = Decimal(0)

    def add(self, usage: UsageLedger | None, cost: Decimal | None) -> None:
        self.requests += 1
        if usage is None:
            return
        self.prompt += usage.prompt_total or 0
        self.cache_read += usage.cache_read or 0
        self.cache_write += usage.cache_write or 0
        self.output += usage.output or 0
        self.dollars += cost or 0


class Prewarmer:
    """A session's pre-warms: one in flight at most, and the timer of the next after an idle gap."""

    def __init__(
        self, config: Callable[[], Config], runtime: Callable[[], Runtime | None], emit: Callable[[AgentEvent], None]
    ) -> None:
        """`config` and `runtime` are the session's as they are now: both change as it opens, resumes and switches."""
        self._config = config
        self._runtime = runtime
        self.emit = emit  # the session log's: a pre-warm is not the conversation's
        self.delay = DELAY
        self.spent = Spent()
        self.task: asyncio.Task[None] | None = None
        self._idle: asyncio.Task[None] | None = None
        self._told: set[str] = set()  # providers whose "no pre-warm here" was said: once is enough
        self._preempted = False  # the running pre-warm was cancelled for a turn, not by close()

    def start(self, agent: Agent, why: Why) -> asyncio.Task[None] | None:
        """Send `agent`'s static prefix ahead in the background, if the verdict says so; the task, if one went."""
        config, runtime, provider = self._config(), self._runtime(), agent.provider
        settings = config.providers.get(provider.name)
        if settings is None or runtime is None:
            return None
        request = ChatRequest(
            system=agent.system,
            tools=agent.tools.specs(),
            messages=(*agent.messages, UserMessage(ASK)),
            max_tokens=1,
            cache_key=agent.cache_key,
            background=True,  # vLLM's low-priority lane: a real request that arrives is scheduled first
        )
        tokens = len(msgspec.json.encode(request)) // CHARS_PER_TOKEN
        judged = verdict(config.cache, provider, tokens, settings.cache_ttl)
        minimum = settings.cache_min_tokens or (config.sim.cache_min_tokens if settings.is_simulator else 1024)
        if judged.send and provider.protocol == "anthropic" and tokens < minimum:
            # Anthropic caches nothing shorter: the pre-warm would write nothing for the first step to read.
            judged = Verdict(False, f"pre-warm off: the prefix (~{tokens:,} tokens) is below the cache minimum", None)
        if judged.send and settings.thinking_budget and provider.protocol == "anthropic":
            # Thinking needs `max_tokens` above its budget: a pre-warm would be a whole answer's worth of thought.
            judged = Verdict(False, "pre-warm off: a thinking budget needs an answer longer than one token", None)
        if not judged.send:
            # A hosted API's verdict carries the estimate, said once per provider; the other reasons aren't news.
            if config.cache.prewarm != "off" and provider.official and provider.name not in self._told:
                self._told.add(provider.name)
                self.emit(Notice(level="info", message=judged.why))
            return None
        self.cancel_idle()
        previous = self.task
        self.task = asyncio.create_task(self._send(runtime, Target(settings, provider.model), request, why, previous))
        return self.task

    def turn_started(self) -> None:
        """The user's request goes out now: no idle timer, and no pre-warm beside it (it slowed the step, measured)."""
        self.cancel_idle()
        if self.task is not None and not self.task.done():
            self._preempted = True
            self.task.cancel()

    def after_turn(self, agent: Agent, lifetime: float | None = None) -> None:
        """Pre-warm again once the cache has forgotten the prefix, if no turn comes first (Anthropic's TTL)."""
        self.cancel_idle()
        config = self._config()
        settings = config.providers.get(agent.provider.name)
        if lifetime is None and settings is not None:
            lifetime = verdict(config.cache, agent.provider, 0, settings.cache_ttl).lifetime
        if lifetime is None or config.cache.prewarm == "off":
            return

        async def later() -> None:
            await asyncio.sleep(lifetime)
            self.start(agent, "idle")

        self._idle = asyncio.create_task(later())

    def cancel_idle(self) -> None:
        if self._idle is not None and not self._idle.done() and self._idle is not asyncio.current_task():
            self._idle.cancel()
        self._idle = None

    async def close(self) -> None:
        """Stop the timer and the pre-warm in flight (done with the clients before they close)."""
        self.cancel_idle()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _send(
        self, runtime: Runtime, target: Target, request: ChatRequest, why: Why, previous: asyncio.Task[None] | None
    ) -> None:
        from hotloop.agent.pricing import price_step

        if previous is not None and not previous.done():
            previous.cancel()  # the prefix it was warming is no longer the one the next step sends
        if why != "idle":
            await asyncio.sleep(self.delay)
        provider = await runtime.helper(target)  # its own instance: the main agent's model never changes
        started = time.perf_counter()
        usage: UsageLedger | None = None
        try:  # a cancel before this point sent nothing: it is neither counted nor said
            async for event in provider.stream(request):
                if isinstance(event, Usage):
                    usage = event.ledger
        except ProviderError as error:
            self.emit(Notice(level="warning", message=f"pre-warm (side request) failed: {error}"))
            return
        except asyncio.CancelledError:
            if self._preempted:
                self._preempted = False
                self.spent.add(None, None)  # it reached the server and may be billed in part: its usage unknown
                self.emit(Notice(level="info", message=f"pre-warm ({why}, side request) cancelled: a prompt went out"))
            raise
        seconds = time.perf_counter() - started
        cost = price_step(usage, provider.model, provider.base_url) if provider.official else None
        self.spent.add(usage, cost.total if cost is not None else None)
        self.emit(Notice(level="info", message=_line(why, provider, usage, seconds, cost.total if cost else None)))


def _line(why: Why, provider: Provider, usage: UsageLedger | None, seconds: float, cost: Decimal | None) -> str:
    """The pre-warm as the log and the transcript show it: a side request with its usage."""
    if usage is None:
        figures = "usage not reported"
    else:
        parts = [f"{usage.prompt_total:,} prompt tokens" if usage.prompt_total is not None else "prompt not reported"]
        if usage.cache_read is not None:
            parts.append(f"{usage.cache_read:,} cached")
        if usage.cache_write:
            parts.append(f"{usage.cache_write:,} written")
        if usage.output is not None:
            parts.append(f"{usage.output:,} output")
        figures = ", ".join(parts)
    from hotloop.agent.pricing import money

    priced = f", {money(cost)}" if cost is not None else ""
    return f"pre-warm ({why}, side request): {provider.name} {provider.model}, {figures}, {seconds:.2f} s{priced}"
