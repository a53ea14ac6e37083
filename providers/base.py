"""What the agent needs from a provider, whatever its wire protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from hotloop.providers.conversation import ChatRequest
from hotloop.providers.events import ModelEvent

if TYPE_CHECKING:
    from hotloop.providers.vllm import ServerInfo


class Provider(Protocol):
    name: str
    model: str
    protocol: str  # "openai" or "anthropic"

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

    def connect_paid(self, since: float) -> float:
        """Seconds of connecting that a request sent at `since` (perf_counter) waited for."""
        ...

    async def aclose(self) -> None: ...
