"""What a switch of provider or model costs: the prompt the new one must prefill uncached.

Prompt caches belong to one provider and one model. Switching means the next request's
whole prompt is new to that cache, except for whatever it cached when this conversation
last used it, or a pre-warm sent it since (by the server's own count of what it read and wrote).
The conversation's size is estimated from the last reported usage.
"""

from __future__ import annotations

from hotloop.agent.events import ProviderSwitched, SideRequest
from hotloop.agent.figures import short_model
from hotloop.providers.events import UsageLedger


class CacheWarmth:
    """How much of the conversation each provider and model has seen, by the usage they reported."""

    def __init__(self) -> None:
        self.context: int | None = 0
        self._seen: dict[tuple[str, str], int] = {}

    def record(self, provider: str, model: str, usage: UsageLedger | None) -> None:
        """A step's usage: its prompt plus its answer is what the next request starts with."""
        if usage is None or usage.prompt_total is None:
            self.context = None
            return
        self.context = usage.prompt_total + (usage.output or 0)
        self._seen[(provider, model)] = self.context

    def prewarmed(self, side: SideRequest) -> None:
        """A pre-warm answered: its server holds what it read and wrote (Anthropic caches up to a marker; a
        server that doesn't count writes, vLLM's kind, caches the whole prompt it computed)."""
        usage = side.usage
        if side.outcome != "answered" or usage is None or usage.prompt_total is None:
            return
        held = usage.prompt_total if usage.cache_write is None else (usage.cache_read or 0) + usage.cache_write
        key = (side.provider, side.model)
        self._seen[key] = max(self._seen.get(key, 0), held)

    def cost(self, provider: str, model: str) -> tuple[int | None, int | None]:
        """`(conversation tokens, of which cold for this provider and model)`; None when unknown."""
        if self.context is None:
            return None, None
        return self.context, max(self.context - self._seen.get((provider, model), 0), 0)


def describe_cost(context: int | None, cold: int | None) -> str:
    """e.g. `~3,412 prompt tokens to prefill uncached (its cache is cold for this conversation)`."""
    if context is None or cold is None:
        return "prompt size unknown until a provider reports usage"
    if context == 0:
        return "nothing to prefill yet"
    if cold == 0:
        return f"none of the ~{context:,} prompt tokens is new to its cache, if the cache still holds them"
    if cold == context:
        return f"~{cold:,} prompt tokens to prefill uncached (its cache is cold for this conversation)"
    return f"~{cold:,} of ~{context:,} prompt tokens to prefill uncached (the rest may still be cached from earlier)"


def describe_switch(event: ProviderSwitched) -> str:
    """e.g. `switched sim · sim-fast → sim-anthropic · sim-fast: ~3,412 prompt tokens to prefill uncached (…)`."""
    before = f"{event.previous_provider} · {short_model(event.previous_model)}"
    after = f"{event.provider} · {short_model(event.model)}"
    return f"switched {before} → {after}: {describe_cost(event.context_tokens, event.cold_tokens)}"
