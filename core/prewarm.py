"""Pre-warming: the conversation's static prefix sent ahead, so the first real step reads it from the cache.

At session start (while the user types the first prompt), after a switch, and after an idle gap that outlived
the provider's cache lifetime, the prefix a step will start with (system prompt, tools, and a resumed
conversation's history) goes out as a side request with the shortest answer the API takes, in the background: on
vLLM at low priority. The first real step then prefills only the prompt.

- **The answer's cap is 1, or the API's least.** Anthropic documents `max_tokens: 0` for this, but only without
  streaming (and hotloop's providers stream); the simulator refuses 0 as the API long did. One token costs one output
  token (vLLM, llama.cpp, SGLang, Anthropic, Chat Completions). The Responses API refuses a `max_output_tokens` below
  16, as the simulator does: the provider raises the cap to its least (`min_cap`).
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
- **It is a side request.** A `SideRequest` event, with its usage: the transcript shows it as a line of its own
  (`pre-warm (start, side request) · … · prompt 12,030 (…) · out 1 · 0.46 s`), the status bar's totals count its
  tokens and dollars (not as a step, and not in the hit rate, which it would skew with the write it was sent to
  make), the log keeps it with the tokens it shares with the next step (`shared`, for `hotloop whatif`) and the
  session's summary prices it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

import msgspec

from hotloop.agent.cache_lifetime import LIFETIME, TTL_NAMES, CacheRhythm, compare_lifetimes, input_price
from hotloop.agent.events import AgentEvent, Notice, SideRequest
from hotloop.agent.pricing import Ttl
from hotloop.config import CacheSettings, Config, ProviderSettings, Target
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import Usage, UsageLedger

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider

Why = Literal["start", "switch", "idle"]
# The user turn the pre-warm ends with: its own few tokens are all the first step doesn't find cached. A word, not
# punctuation, which a tokenizer may merge with what follows it (the simulator's does), so its turn's length is known.
ASK = "ok"
# The tokens a chat template gives that turn past a user turn's opening, which the next step's turn opens with too:
# the ask, the turn's end, the answer's opening: ChatML's `ok`, `<|im_end|>`, `\n`, `<|im_start|>`, `assistant`, `\n`,
# and `assistant` in two in the simulator's tokenizer. A real ChatML or Llama 3 template has one fewer: there
# `whatif`, which replays the next step's read from what is left, can read a block short one time in 16.
ASK_TURN = 7
CHARS_PER_TOKEN = 4  # a rough count, for the estimate a hosted API's verdict shows
# Seconds a start's or a switch's pre-warm waits before it goes: a prompt sent sooner can't be helped (the step
# prefills the prefix itself either way, measured), and the pre-warm it would cancel is a request for nothing.
DELAY = 1.0


@dataclass(frozen=True)
class Verdict:
    """Whether to pre-warm this provider, why (shown), and how long its cache keeps a prefix (None: no fixed time)."""

    send: bool
    why: str
    lifetime: float | None


def verdict(settings: CacheSettings, provider: Provider, prefix_tokens: int, write_ttl: Ttl = "5m") -> Verdict:
    """What `[cache] prewarm` means for `provider` with a prefix of about `prefix_tokens` tokens."""
    timed = bool(provider.protocol.traits.cache.lifetimes)
    # Anthropic's cache, the API's and the simulator's Anthropic side alike, forgets a prefix after its TTL; a
    # self-hosted OpenAI-compatible server keeps one until it needs the room, which no timer can predict.
    lifetime = LIFETIME[write_ttl] if timed else None
    if settings.prewarm == "off":
        return Verdict(False, "pre-warm off ([cache] prewarm)", lifetime)
    if not provider.official:
        return Verdict(True, "pre-warm: a server someone runs prefills it early at no extra cost", lifetime)
    from hotloop.agent.pricing import money  # the price table loads only for a hosted API

    extra = extra_cost(provider, prefix_tokens)
    cost = f"~{money(extra)} more per start" if extra is not None else "an unknown price"
    how = "writes it at 1.25× input, then the first step reads it at 0.1×" if timed else "prefills it uncached"
    return Verdict(False, f"pre-warm off on {provider.name}: a hosted API {how}: {cost}, no saving", lifetime)


def extra_cost(provider: Provider, prefix_tokens: int) -> Decimal | None:
    """What pre-warming a hosted API costs beyond not doing it: the pre-warm plus a warm first step, less a cold one.

    The pre-warm puts the prefix in the cache as the cold first step would have (a write on Anthropic, an uncached
    prefill on OpenAI), so the difference is the warm step's read of it and the pre-warm's answer (its cap at most).
    """
    from hotloop.agent.pricing import price_step

    answer = provider.cap(ChatRequest(system="", tools=(), messages=(), max_tokens=1)) or 1
    warm = UsageLedger(prefix_tokens, cache_read=prefix_tokens, cache_write=0, uncached=0, output=answer)
    cost = price_step(warm, provider.model, provider.base_url)
    return cost.total if cost is not None else None


def prewarm_request(agent: Agent) -> ChatRequest:
    """The request that warms `agent`'s next step: its prefix as the step will send it, and a one-token answer (the
    provider raises the cap to its API's least)."""
    return ChatRequest(
        system=agent.system,
        tools=agent.tools.specs(),
        messages=(*agent.messages, UserMessage(ASK)),
        max_tokens=1,
        cache_key=agent.cache_key,
        background=True,  # vLLM's low-priority lane: a real request that arrives is scheduled first
        warms=True,
    )


class Lifetimes:
    """The lifetime each provider's cache writes ask for, which a provider asks at every request (`Runtime` builds it
    with `of`): the configured one, or with `cache_ttl = "auto"` the one the session's pauses chose (`Prewarmer`)."""

    def __init__(self) -> None:
        self._chosen: dict[str, Ttl] = {}

    def of(self, settings: ProviderSettings) -> Ttl:
        if settings.cache_ttl == "auto":
            return self._chosen.get(settings.name, "5m")  # Anthropic's default until the pauses say otherwise
        return "1h" if settings.cache_ttl == "1h" else "5m"

    def choose(self, provider: str, ttl: Ttl) -> None:
        """Write for `ttl` from `provider`'s next request on (its helpers' too: a pre-warm writes for the steps)."""
        self._chosen[provider] = ttl


class Prewarmer:
    """A session's pre-warms: one in flight at most, and the timer of the next after an idle gap."""

    def __init__(
        self, config: Callable[[], Config], runtime: Callable[[], Runtime | None], emit: Callable[[AgentEvent], None]
    ) -> None:
        """`config` and `runtime` are the session's as they are now: both change as it opens, resumes and switches."""
        self._config = config
        self._runtime = runtime
        self.emit = emit
        self.delay = DELAY
        self.rhythm = CacheRhythm()  # the session's cache uses and pauses, from its events (Session.emit)
        self.task: asyncio.Task[None] | None = None
        self._idle: asyncio.Task[None] | None = None
        self._told: set[str] = set()  # providers whose "no pre-warm here" was said: once is enough
        self._preempted = False  # the running pre-warm was cancelled for a turn, not by close()

    def start(self, agent: Agent, why: Why) -> asyncio.Task[None] | None:
        """Send `agent`'s static prefix ahead in the background, if the verdict says so; the task, if one went.

        First, on Anthropic, the cache lifetime the session's pauses so far choose (`cache_ttl = "auto"`)."""
        config, runtime, provider = self._config(), self._runtime(), agent.provider
        settings = config.providers.get(provider.name)
        if settings is None or runtime is None:
            return None
        if settings.cache_ttl == "auto":  # a resumed session's pauses, or a provider switched to, choose at once
            self._choose_lifetime(runtime, provider)
        request = prewarm_request(agent)
        tokens = len(msgspec.json.encode(request)) // CHARS_PER_TOKEN
        judged = verdict(config.cache, provider, tokens, provider.cache_ttl)
        minimum = settings.cache_min_tokens or (config.sim.cache_min_tokens if settings.is_simulator else 1024)
        if judged.send and provider.protocol.traits.cache.breakpoints and tokens < minimum:
            # Anthropic caches nothing shorter: the pre-warm would write nothing for the first step to read.
            judged = Verdict(False, f"pre-warm off: the prefix (~{tokens:,} tokens) is below the cache minimum", None)
        if judged.send and settings.thinking_budget and provider.protocol.traits.thinking_budget:
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
        target = Target(settings, provider.model)
        self.task = asyncio.create_task(self._send(runtime, target, request, why, previous))
        return self.task

    def turn_started(self) -> None:
        """The user's request goes out now: no idle timer, and no pre-warm beside it (it slowed the step, measured)."""
        self.cancel_idle()
        if self.task is not None and not self.task.done():
            self._preempted = True
            self.task.cancel()

    def after_turn(self, agent: Agent, lifetime: float | None = None) -> None:
        """Choose the cache's lifetime from the pauses seen (`cache_ttl = "auto"`), then pre-warm again once the
        cache has forgotten the prefix, if no turn comes first (Anthropic's TTL)."""
        self.cancel_idle()
        config = self._config()
        settings = config.providers.get(agent.provider.name)
        runtime = self._runtime()
        if settings is not None and settings.cache_ttl == "auto" and runtime is not None:
            self._choose_lifetime(runtime, agent.provider)
        if lifetime is None and settings is not None:
            lifetime = verdict(config.cache, agent.provider, 0, agent.provider.cache_ttl).lifetime
        if lifetime is None or config.cache.prewarm == "off":
            return

        async def later() -> None:
            await asyncio.sleep(lifetime)
            self.start(agent, "idle")

        self._idle = asyncio.create_task(later())

    def _choose_lifetime(self, runtime: Runtime, provider: Provider) -> None:
        """Write for 1 hour from the next request on once the session's pauses make that cheaper, and back."""
        choice = self.rhythm.choice()
        if choice is not None and choice.ttl != provider.cache_ttl and provider.protocol.traits.cache.lifetimes:
            runtime.lifetimes.choose(provider.name, choice.ttl)
            said = f"cache lifetime: {TTL_NAMES[choice.ttl]} writes from the next request on: {choice.why}"
            self.emit(Notice(level="info", message=said))

    def lifetime_detail(self, provider: Provider) -> str | None:
        """Which lifetime the cache is written for, why, and what the other would have cost; None off Anthropic."""
        config = self._config()
        settings = config.providers.get(provider.name)
        if not provider.protocol.traits.cache.lifetimes or settings is None:
            return None
        ttl = provider.cache_ttl
        how = "chosen from your pauses" if settings.cache_ttl == "auto" else "as configured ([providers] cache_ttl)"
        said = f"cache writes: {TTL_NAMES[ttl]}, {how}"
        compared = compare_lifetimes(self.rhythm, input_price(provider.model, provider.base_url))
        return f"{said}; {compared}" if compared is not None else said

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
        self,
        runtime: Runtime,
        target: Target,
        request: ChatRequest,
        why: Why,
        previous: asyncio.Task[None] | None,
    ) -> None:
        if previous is not None and not previous.done():
            previous.cancel()  # the prefix it was warming is no longer the one the next step sends
        if why != "idle":
            await asyncio.sleep(self.delay)
        # Its own instance, so the main agent's model never changes; it writes for the lifetime the steps write for
        # (`Lifetimes`): a 5-minute pre-warm would expire under them.
        provider = await runtime.helper(target)
        await side_request(provider, request, "pre-warm", why, self.emit, self._taken)

    def _taken(self) -> bool:
        """Whether the pre-warm was cancelled for a turn (said), not by close(); the flag is spent."""
        taken, self._preempted = self._preempted, False
        return taken


async def side_request(
    provider: Provider,
    request: ChatRequest,
    kind: str,
    why: str,
    emit: Callable[[AgentEvent], None],
    preempted: Callable[[], bool],
) -> bool:
    """Send `request` beside the conversation and say it as a `SideRequest`; whether it was answered.

    Cancelled before it went, nothing is said; cancelled for a turn (`preempted()`), it is said as "cancelled"."""
    started = time.perf_counter()
    usage: UsageLedger | None = None

    def sent(outcome: Literal["answered", "cancelled", "failed"], error: str = "") -> SideRequest:
        return SideRequest(
            kind=kind,
            why=why,
            provider=provider.name,
            model=provider.model,
            usage=usage,
            model_time=time.perf_counter() - started,
            outcome=outcome,
            error=error,
            shared=shared_prefix(usage, bool(provider.protocol.traits.cache.breakpoints)),
        )

    try:
        async for event in provider.stream(request):
            if isinstance(event, Usage):
                usage = event.ledger
    except ProviderError as error:
        emit(sent("failed", str(error)))
        return False
    except asyncio.CancelledError:
        if preempted():
            emit(sent("cancelled"))  # it reached the server and may be billed in part: its usage unknown
        raise
    emit(sent("answered"))
    return True


def shared_prefix(usage: UsageLedger | None, marked: bool) -> int | None:
    """Of a request that ends with the ask's turn, the tokens the conversation's next request starts with too: on a
    cache of breakpoints what it cached (its last breakpoint is before the ask), elsewhere all but the ask's turn."""
    if usage is None or usage.prompt_total is None:
        return None
    cached = (usage.cache_read or 0) + (usage.cache_write or 0)
    return cached if marked and cached else max(usage.prompt_total - ASK_TURN, 0)
