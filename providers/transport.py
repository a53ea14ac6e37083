"""What both wire protocols share: the SDK client around a streamed request, reading
server-sent events, and turning SDK failures into one line."""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING

from hotloop.providers.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    ProviderError,
    RequestRejected,
    StreamInterrupted,
    UnknownModel,
)

if TYPE_CHECKING:
    import httpx2

    from hotloop.providers.vllm import ServerInfo


async def server_sent_data(response: httpx2.Response) -> AsyncGenerator[bytes, None]:
    """The `data` of each server-sent event in an HTTP response, as bytes (multi-line data joined by newlines).

    Working on bytes skips text decoding and line objects: msgspec decodes JSON from bytes
    directly. A last event not ended by a blank line is still delivered.
    """
    pending = b""
    data: list[bytes] = []
    async for block in response.aiter_bytes():
        *lines, pending = (pending + block).split(b"\n")
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    if pending.startswith(b"data:"):
        data.append(pending[6:] if pending.startswith(b"data: ") else pending[5:])
    if data:
        yield b"\n".join(data)


def error_detail(error: Exception) -> str:
    """The server's own message from an SDK error, if it sent one."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str):
            return message
    message = getattr(error, "message", None)
    return message if isinstance(message, str) and message else str(error) or type(error).__name__


def root_exception(error: BaseException) -> BaseException:
    while (cause := error.__cause__ or error.__context__) is not None:
        error = cause
    return error


def root_cause(error: BaseException) -> str:
    root = root_exception(error)
    text = str(root).strip()
    return text.splitlines()[-1] if text else type(root).__name__


async def explain(
    error: Exception, sdk: ModuleType, where: str, model: str, available: Callable[[], Awaitable[str]] | None
) -> ProviderError:
    """One line a user can act on, for an error raised by the `openai` or `anthropic` SDK (`sdk`)."""
    detail = error_detail(error)
    if isinstance(error, sdk.APIConnectionError):
        # The aiohttp transport reports a refused connection as a connect timeout; the root cause tells.
        root = root_exception(error)
        if isinstance(error, sdk.APITimeoutError) and not (
            isinstance(root, OSError) and not isinstance(root, TimeoutError)
        ):
            return ConnectionFailed(f"{where} timed out")
        return ConnectionFailed(f"cannot reach {where}: {root_cause(error)}")
    if isinstance(error, sdk.AuthenticationError):
        return AuthenticationFailed(f"{where} rejected the API key (401): {detail}")
    if isinstance(error, sdk.NotFoundError) and available is not None:
        return UnknownModel(f"unknown model {model!r} at {where}{await available()}")
    if isinstance(error, sdk.APIStatusError):
        return RequestRejected(f"{where} answered {error.status_code}: {detail}")
    return StreamInterrupted(f"{where} failed: {detail}")


class SdkProvider:
    """A provider on an official SDK's client: it posts request bytes to `path` and reads the event stream.

    `sdk` names the SDK module (`openai` or `anthropic`) and `client_class` its async client.
    """

    sdk: str
    client_class: str
    path: str

    def __init__(
        self, name: str, model: str, location: str | None, base_url: str | None, api_key: str | None, max_retries: int
    ) -> None:
        import httpx2

        sdk = importlib.import_module(self.sdk)
        self.name = name
        self.model = model
        self._location = location
        # The first request to the server opens the connection: when it went out and came back (perf_counter).
        self.warm: tuple[float, float | None] | None = None
        # What discovery found, for a self-hosted server (only OpenAI-compatible servers are asked).
        self.server: ServerInfo | None = None
        # Gateways, vLLM, Ollama and the simulator take any key; the SDKs refuse to send a request without one.
        # The SDKs' aiohttp transport costs 30–50% less CPU per request than their default (benchmarks/transport.py).
        self._client = getattr(sdk, self.client_class)(
            api_key=api_key or "no-key",
            base_url=base_url,
            max_retries=max_retries,
            timeout=httpx2.Timeout(600.0, connect=10.0),
            http_client=sdk.DefaultAioHttpClient(),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    async def server_events(self, body: bytes) -> AsyncGenerator[bytes, None]:
        """Send `body`; yield the `data` of each event. Close it with `contextlib.aclosing`."""
        import httpx2

        sdk = importlib.import_module(self.sdk)
        try:
            response = await self._client.post(self.path, content=body, cast_to=httpx2.Response, stream=True)
        except sdk.APIError as error:
            raise await self._explain(error) from None
        try:
            async for data in server_sent_data(response):
                yield data
        except httpx2.TransportError as error:
            raise StreamInterrupted(f"{self._where()} stream broke off: {root_cause(error)}") from None
        finally:
            await response.aclose()

    async def fetch(self, url: str) -> tuple[int, str]:
        """GET any URL on the provider's server through the SDK's client: its status and text."""
        import httpx2

        sdk = importlib.import_module(self.sdk)
        first = self.warm is None
        if first:
            self.warm = (time.perf_counter(), None)
        try:
            response = await self._client.get(url, cast_to=httpx2.Response, options={"max_retries": 0})
        except sdk.APIStatusError as error:
            return error.status_code, ""
        except sdk.APIError as error:
            raise await self._explain(error, listing=True) from None
        finally:
            if first and self.warm is not None:
                self.warm = (self.warm[0], time.perf_counter())
        return response.status_code, response.text

    def connect_paid(self, since: float) -> float:
        """Seconds of connecting a request sent at `since` paid itself: the warm-up's time, if it was still out."""
        if self.warm is None or self.warm[1] is None or self.warm[1] <= since:
            return 0.0
        return self.warm[1] - self.warm[0]

    async def fetch_json(self, url: str) -> object:
        """GET a JSON document; a ProviderError if the server does not send one."""
        import json

        status, text = await self.fetch(url)
        try:
            if status == 200:
                return json.loads(text)
        except ValueError:
            pass
        raise ProviderError(f"{self._where()} answered {url} with {status}, not JSON")

    async def list_models(self) -> list[str]:
        """The models the server serves, in its own order (vLLM lists the base model first)."""
        sdk = importlib.import_module(self.sdk)
        try:
            return [model.id async for model in self._client.models.list()]
        except sdk.APIError as error:
            raise await self._explain(error, listing=True) from None

    async def aclose(self) -> None:
        await self._client.close()

    def _where(self) -> str:
        return f"{self.name} ({self._location or self.base_url})"

    async def _explain(self, error: Exception, listing: bool = False) -> ProviderError:
        sdk = importlib.import_module(self.sdk)
        return await explain(error, sdk, self._where(), self.model, None if listing else self._available_models)

    async def _available_models(self) -> str:
        try:
            models = await self.list_models()
        except ProviderError:  # the listing only decorates an error message
            return ""
        return f" (available: {', '.join(sorted(models))})" if models else ""
