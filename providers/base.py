"""What the agent needs from a provider, whatever its wire protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from hotloop.providers.conversation import ChatRequest, Message
from hotloop.providers.events import ModelEvent
from hotloop.providers.protocols import Wire

if TYPE_CHECKING:
    from hotloop.providers.transport import RequestTimeout
    from hotloop.providers.vllm import ServerInfo

# The answer's cap when the config names none, on every protocol (Anthropic requires one): a model that never
# stops writes until the context is full otherwise. 8,192 holds any tool call or file an agent step writes,
# and is an eighth of a 64k window; a server whose window is smaller gets a quarter of it (`output_cap`).
DEFAULT_MAX_TOKENS = 8192


def output_cap(configured: int | None, window: int | None) -> int:
    """The cap a request goes with: the configured one, else the default, within a quarter of a small window.

    vLLM and SGLang refuse a request whose prompt and cap together pass the window, so the default
    leaves three quarters of it to the prompt; a configured cap is the user's, sent as said.
    """
    if configured is not None:
        return configured
    return min(DEFAULT_MAX_TOKENS, window // 4) if window else DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class ProviderOptions:
    """What every provider takes, whatever its protocol: its name and model, and how its server is reached."""

    name: str
    model: str = ""
    base_url: str | None = None
    api_key: str | None = None
    max_retries: int = 2
    timeout: RequestTimeout | None = None
    location: str | None = None  # how lines name a server with no URL of its own: "the embedded simulator"
    # Every request of a session carries its key in this header, for a router that keeps a session on the
    # replica holding its cache (vLLM's production-stack router reads it with --session-key).
    affinity_header: str | None = None
    cache_min_tokens: int | None = None  # the shortest prompt the server caches: a shorter one is not a miss


class Provider(Protocol):
    name: str
    model: str
    protocol: Wire

    @property
    def cache_ttl(self) -> Literal["5m", "1h"]:
        """The lifetime the next request's cache writes ask for: only Anthropic's breakpoints say one."""
        ...

    @property
    def official(self) -> bool:
        """The vendor's own hosted API (billed per token), not a server someone runs."""
        ...

    @property
    def base_url(self) -> str: ...

    @property
    def where(self) -> str:
        """How a line names this provider, e.g. `local (http://host:8000/v1)`."""
        ...

    @property
    def server(self) -> ServerInfo | None:
        """What a self-hosted server said of itself when discovered; None for hosted APIs and mute servers."""
        ...

    def cap(self, request: ChatRequest) -> int | None:
        """The answer's cap `request` is sent with; None when the API's own limit applies."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Send one request and yield its model events; raise ProviderError on failure."""
        ...

    async def list_models(self) -> list[str]:
        """The models the server serves; raise ProviderError on failure."""
        ...

    async def fetch(self, url: str) -> tuple[int, str]:
        """GET any URL on the provider's server over its own connections: the status and text.

        An error status is an answer; a ProviderError means no answer came.
        """
        ...

    def prune(self, keep: Sequence[Message]) -> None:
        """Forget the bytes rendered for messages not in `keep` (a new conversation, a compaction)."""
        ...

    def connect_paid(self, since: float) -> float:
        """Seconds of connecting that a request sent at `since` (perf_counter) waited for."""
        ...

    async def aclose(self) -> None: ...
