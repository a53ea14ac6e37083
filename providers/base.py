"""What the agent needs from a provider, whatever its wire protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from hotloop.providers.conversation import ChatRequest
from hotloop.providers.events import ModelEvent


class Provider(Protocol):
    name: str
    model: str
    protocol: str  # "openai" or "anthropic"

    @property
    def base_url(self) -> str: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Send one request and yield its model events; raise ProviderError on failure."""
        ...

    async def list_models(self) -> list[str]:
        """The models the server serves; raise ProviderError on failure."""
        ...

    async def aclose(self) -> None: ...
