"""Self-hosted servers behind the OpenAI-compatible provider: vLLM first, SGLang, llama.cpp and Ollama too.

`discover` asks the server what it is and what it serves (`/v1/models` with each model's
context size, `/health`, `/metrics`; llama.cpp's `/props`, Ollama's `/api/version` and
`/api/ps`), through the provider's own SDK client. `scrape` reads `/metrics` for the server
panel. `MissingDetails` notices a server that never says how many prompt tokens came from its
cache, and what to start it with so that it does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hotloop.providers.errors import ProviderError
from hotloop.providers.server_fixes import template_fix
from hotloop.providers.server_metrics import MetricsSample, parse_metrics

if TYPE_CHECKING:
    from hotloop.providers.anthropic import AnthropicProvider
    from hotloop.providers.base import Provider
    from hotloop.providers.openai_chat import OpenAIChatProvider
    from hotloop.providers.openai_responses import OpenAIResponsesProvider

# `owned_by` in /v1/models names the server family.
_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp", "library": "ollama", "ollama": "ollama"}
LABELS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llama.cpp": "llama.cpp",
    "ollama": "Ollama",
    "openai-compatible": "server",
}
SIMULATOR_LABEL = "hotloop's simulator"
SIMULATOR_VERSION = (
    "hotloop-sim"  # how the simulator's /version starts: it speaks vLLM's dialect, so /v1/models can't tell
)
_DETAILS_FLAGS = {
    "vllm": "start vLLM with --enable-prompt-tokens-details (and keep prefix caching on)",
    "sglang": "start SGLang with --enable-cache-report",
}


@dataclass(frozen=True)
class ServedModel:
    id: str
    # Tokens one request may hold: `max_model_len` (vLLM, SGLang), a llama.cpp slot's `n_ctx`, Ollama's loaded context.
    context: int | None = None


@dataclass(frozen=True)
class ServerInfo:
    kind: str  # vllm | sglang | llama.cpp | ollama | openai-compatible
    models: tuple[ServedModel, ...]
    healthy: bool | None  # None: the server has no /health
    has_metrics: bool
    problem: str | None = None  # a launch flag it lacks for agent work, said once at the first request
    simulated: bool = False  # hotloop's own simulator, in vLLM's dialect (`kind` stays "vllm")

    @property
    def label(self) -> str:
        """The server's name as the panel shows it."""
        return SIMULATOR_LABEL if self.simulated else LABELS.get(self.kind, "server")

    @property
    def takes_priority(self) -> bool:
        """vLLM reads a request's `priority` (and rejects it unless started with priority scheduling)."""
        return self.kind == "vllm"

    def served(self, model: str) -> ServedModel | None:
        """The listed model a request for `model` reaches, if any."""
        served = next((m for m in self.models if m.id == model), None)
        if served is None and self.kind == "llama.cpp" and len(self.models) == 1:
            return self.models[0]  # one llama-server answers every model name with the model it loaded
        return served

    def max_model_len(self, model: str) -> int | None:
        """The context size of the model a request for `model` reaches, if the server says."""
        served = self.served(model)
        return served.context if served is not None else None


async def discover(provider: OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider) -> ServerInfo:
    """What the server at the provider's base URL is; a ProviderError if it does not answer /v1/models."""
    listing = await provider.fetch_json(provider.base_url + "/models")
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        raise ProviderError(f"{provider.name} ({provider.base_url}) answered /models with no model list")
    models = tuple(_card_model(card) for card in cards if isinstance(card, dict) and isinstance(card.get("id"), str))
    owners = {card.get("owned_by") for card in cards if isinstance(card, dict)}
    kind = next((_OWNERS[o] for o in owners if isinstance(o, str) and o in _OWNERS), "openai-compatible")
    root = server_root(provider.base_url)
    healthy = await _answers(provider, root + "/health")
    metrics = await _metrics_text(provider, root)
    if kind == "openai-compatible" and metrics is not None:
        kind = "sglang" if "sglang:" in metrics else "vllm" if "vllm:" in metrics else kind
    if kind == "openai-compatible" and await _answers(provider, root + "/api/version"):
        kind = "ollama"
    props = _dict(await _json(provider, root + "/props")) if kind == "llama.cpp" else {}
    models = await _with_contexts(provider, root, kind, models, props)
    simulated = kind == "vllm" and str(_dict(await _json(provider, root + "/version")).get("version")).startswith(
        SIMULATOR_VERSION
    )
    return ServerInfo(kind, models, healthy, metrics is not None, template_fix(props), simulated)


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


def _card_model(card: dict[str, Any]) -> ServedModel:
    meta = card.get("meta")  # llama.cpp's: the server's whole context, `n_ctx`
    whole = _tokens(meta.get("n_ctx")) if isinstance(meta, dict) else None
    return ServedModel(card["id"], _tokens(card.get("max_model_len")) or whole)


def _tokens(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _with_contexts(
    provider: OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider,
    root: str,
    kind: str,
    models: tuple[ServedModel, ...],
    props: dict[str, Any],
) -> tuple[ServedModel, ...]:
    """The context sizes /v1/models leaves out or overstates: llama.cpp's per slot, Ollama's of loaded models."""
    if kind == "llama.cpp" and len(models) == 1:
        slot = _slot_context(props)
        return (replace(models[0], context=slot),) if slot else models
    if kind == "ollama":
        loaded = _loaded_contexts(await _json(provider, root + "/api/ps"))
        return tuple(replace(model, context=loaded.get(model.id, model.context)) for model in models)
    return models


def _slot_context(props: object) -> int | None:
    """A llama.cpp slot's `n_ctx`: `meta.n_ctx` is the whole KV cache, which N slots share unless it is unified."""
    settings = _dict(props).get("default_generation_settings")
    return _tokens(_dict(settings).get("n_ctx"))


def _loaded_contexts(listing: object) -> dict[str, int]:
    """Ollama's /api/ps: each loaded model's name → the context it was loaded with (a model not loaded has none)."""
    loaded = _dict(listing).get("models")
    contexts: dict[str, int] = {}
    for entry in loaded if isinstance(loaded, list) else ():
        context = _tokens(_dict(entry).get("context_length"))
        names = (_dict(entry).get("name"), _dict(entry).get("model"))
        contexts.update({name: context for name in names if isinstance(name, str) and context})
    return contexts


async def _json(provider: OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider, url: str) -> object:
    try:
        return await provider.fetch_json(url)
    except ProviderError:
        return None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


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
