"""Self-hosted servers behind the OpenAI-compatible provider: vLLM first, SGLang, llama.cpp and Ollama too.

`discover` asks the server what it is and what it serves (`/v1/models` with each model's
`max_model_len`, `/health`, `/metrics`), through the provider's own SDK client. `scrape`
reads `/metrics` for the server panel. `MissingDetails` notices a server that never says
how many prompt tokens came from its cache, and what to start it with so that it does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hotloop.providers.errors import ProviderError
from hotloop.providers.server_metrics import MetricsSample, parse_metrics

if TYPE_CHECKING:
    from hotloop.providers.base import Provider
    from hotloop.providers.openai_chat import OpenAIChatProvider

# `owned_by` in /v1/models names the server family.
_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp", "library": "ollama", "ollama": "ollama"}
LABELS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llama.cpp": "llama.cpp",
    "ollama": "Ollama",
    "openai-compatible": "server",
}
_DETAILS_FLAGS = {
    "vllm": "start vLLM with --enable-prompt-tokens-details (and keep prefix caching on)",
    "sglang": "start SGLang with --enable-cache-report",
}


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None = None


@dataclass(frozen=True)
class ServerInfo:
    kind: str  # vllm | sglang | llama.cpp | ollama | openai-compatible
    models: tuple[ServedModel, ...]
    healthy: bool | None  # None: the server has no /health
    has_metrics: bool

    @property
    def label(self) -> str:
        return LABELS.get(self.kind, "server")

    @property
    def takes_priority(self) -> bool:
        """vLLM reads a request's `priority` (and rejects it unless started with priority scheduling)."""
        return self.kind == "vllm"

    def max_model_len(self, model: str) -> int | None:
        return next((m.max_model_len for m in self.models if m.id == model), None)


async def discover(provider: OpenAIChatProvider) -> ServerInfo:
    """What the server at the provider's base URL is; a ProviderError if it does not answer /v1/models."""
    listing = await provider.fetch_json(provider.base_url + "/models")
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        raise ProviderError(f"{provider.name} ({provider.base_url}) answered /models with no model list")
    models = tuple(_served(card) for card in cards if isinstance(card, dict) and isinstance(card.get("id"), str))
    owners = {card.get("owned_by") for card in cards if isinstance(card, dict)}
    kind = next((_OWNERS[o] for o in owners if isinstance(o, str) and o in _OWNERS), "openai-compatible")
    root = server_root(provider.base_url)
    healthy = await _answers(provider, root + "/health")
    metrics = await _metrics_text(provider, root)
    if kind == "openai-compatible" and metrics is not None:
        kind = "sglang" if "sglang:" in metrics else "vllm" if "vllm:" in metrics else kind
    if kind == "openai-compatible" and await _answers(provider, root + "/api/version"):
        kind = "ollama"
    return ServerInfo(kind, models, healthy, metrics is not None)


async def scrape(provider: Provider) -> MetricsSample | None:
    """One reading of the server's /metrics; None if it has none or sent something unreadable."""
    text = await _metrics_text(provider, server_root(provider.base_url))
    if text is None:
        return None
    try:
        return parse_metrics(text, time.monotonic())
    except ValueError:
        return None


def server_root(base_url: str) -> str:
    """`http://host:8000/v1` → `http://host:8000`: where /health and /metrics live."""
    return base_url.rstrip("/").removesuffix("/v1")


def _served(card: dict[str, Any]) -> ServedModel:
    length = card.get("max_model_len")
    return ServedModel(card["id"], length if isinstance(length, int) and not isinstance(length, bool) else None)


async def _answers(provider: Provider, url: str) -> bool | None:
    try:
        status, _ = await provider.fetch(url)
    except ProviderError:
        return None
    return status == 200


async def _metrics_text(provider: Provider, root: str) -> str | None:
    try:
        status, body = await provider.fetch(root + "/metrics")
    except ProviderError:
        return None
    return body if status == 200 and body.lstrip().startswith("#") else None


class MissingDetails:
    """Says once when usage never carries `prompt_tokens_details` though prompts repeat their predecessor.

    A miss also leaves the details out (vLLM sends them only when something was cached), so
    one silent step proves nothing. Two steps that each extend the previous prompt, and both
    without details, do: vLLM caches every full block it computes.
    """

    EXPECTED_HITS = 2
    MIN_PREFIX_TOKENS = 32  # two 16-token blocks: enough that a repeat must hit

    def __init__(self) -> None:
        self.seen = False
        self.said = False
        self._silent = 0
        self._previous: tuple[bytes, int] | None = None

    def check(self, body: bytes, usage: dict[str, Any] | None, kind: str | None) -> str | None:
        """After each response: the hint to show, the first time there is reason to."""
        if usage is None or self.seen or self.said:
            return None
        if isinstance(usage.get("prompt_tokens_details"), dict):
            self.seen = True
            return None
        previous, self._previous = self._previous, (body, _prompt_tokens(usage))
        if previous is not None and previous[1] >= self.MIN_PREFIX_TOKENS and body.startswith(previous[0][:-2]):
            self._silent += 1
        if self._silent < self.EXPECTED_HITS:
            return None
        self.said = True
        return _hint(kind or "openai-compatible")


def _prompt_tokens(usage: dict[str, Any]) -> int:
    value = usage.get("prompt_tokens")
    return value if isinstance(value, int) else 0


def _hint(kind: str) -> str:
    label = LABELS.get(kind, "this server")
    if kind in _DETAILS_FLAGS:
        return (
            f"{label} reports no cached-token counts, so cache reads show as not reported: "
            f"{_DETAILS_FLAGS[kind]} to see them"
        )
    if kind == "ollama":
        return "Ollama does not report cached tokens, so cache reads show as not reported"
    return (
        "this server reports no cached-token counts (usage.prompt_tokens_details), so cache reads show as not reported"
    )
