"""What every wire protocol shares: the SDK client around a streamed request (`posting.py` posts it, retries it
and times it; `sse.py` reads its events, `failures.py` turns SDK failures into one line), and the server's GETs.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Annotated, Generic, Literal, TypeVar

import msgspec

from hotloop.nesting import LIMIT, TooDeep, decoded
from hotloop.providers.base import output_cap
from hotloop.providers.conversation import ChatRequest, Message
from hotloop.providers.errors import ProviderError, RequestRejected
from hotloop.providers.events import ModelEvent, ProviderWarning, StreamStarted
from hotloop.providers.failures import explain
from hotloop.providers.posting import Poster
from hotloop.providers.protocols import Wire
from hotloop.providers.server_fixes import room_left
from hotloop.providers.tls import tls_context

if TYPE_CHECKING:
    from hotloop.providers.base import ProviderOptions
    from hotloop.providers.vllm import ServerInfo

Rendered = TypeVar("Rendered")  # what a protocol renders a message into, kept for the next request
CONNECT_TIMEOUT = 10.0
MASK = "[redacted]"
OPENAI_URL = "https://api.openai.com"
ANTHROPIC_URL = "https://api.anthropic.com"


Seconds = Annotated[float, msgspec.Meta(gt=0, extra={"problem": "must be positive"})]


class RequestTimeout(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Seconds a request may wait for its first byte, and then between two chunks of its stream.

    The one timeout type: the config's `request_timeout` table, `--timeout` and the provider all hold it.
    """

    first_byte: Seconds = 60.0
    idle: Seconds = 60.0


class SdkProvider(Generic[Rendered]):
    """A provider on an official SDK's client: it posts request bytes to `path` and reads the event stream.

    `protocol` says which SDK (its `traits.sdk`) and `client_class` names its async client. Each
    message is rendered once, its bytes kept (`_rendered`) and sent again by every later request
    of the conversation, so a request is the previous one plus what was added, byte for byte.
    """

    client_class: str
    path: str
    hosted_url: str  # the vendor's own API
    protocol: Wire

    @property
    def cache_ttl(self) -> Literal["5m", "1h"]:
        return "5m"

    def __init__(self, options: ProviderOptions, max_tokens: int | None = None) -> None:
        import httpx2

        self.sdk, self.min_cap = self.protocol.traits.sdk, self.protocol.traits.min_cap
        sdk = importlib.import_module(self.sdk)
        self.name = options.name
        self.model = options.model
        self._location = options.location
        self._api_key = options.api_key
        self.max_retries = options.max_retries
        self.timeout = options.timeout or RequestTimeout()
        self.affinity_header = options.affinity_header
        self._cache_min_tokens = options.cache_min_tokens
        self.max_tokens = max_tokens  # the configured cap on the answer; None: the default
        self._rendered: dict[Message, Rendered] = {}
        # The first request to the server opens the connection: when it went out and came back (perf_counter).
        self.warm: tuple[float, float | None] | None = None
        # What discovery found, for a self-hosted server (hosted APIs are not asked).
        self.server: ServerInfo | None = None
        # Gateways, vLLM, Ollama and the simulator take any key; the SDKs refuse to send a request without one.
        # The SDKs' aiohttp transport costs 30–50% less CPU per request than their default (benchmarks/transport.py).
        # hotloop retries and times requests itself (`posting.py`); the SDK's limits are a backstop.
        backstop = 2 * max(self.timeout.first_byte, self.timeout.idle)
        self._client = getattr(sdk, self.client_class)(
            api_key=options.api_key or "no-key",
            base_url=options.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(backstop, connect=CONNECT_TIMEOUT),
            http_client=sdk.DefaultAioHttpClient(verify=tls_context()),
        )
        # A stream's reads are timed by the poster's watchdog; the SDK's read limit would set a timer every block.
        streamed = httpx2.Timeout(backstop, connect=CONNECT_TIMEOUT, read=None)
        self.poster = Poster(
            sdk, self.name, self.path, self.timeout, streamed, self.max_retries, self.affinity_header, self._explain
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    @property
    def official(self) -> bool:
        """The vendor's own hosted API (billed per token), not a server someone runs."""
        return self.base_url.startswith(self.hosted_url)

    def cap(self, request: ChatRequest) -> int | None:
        """The answer's cap `request` is sent with: its own, the configured one, else the default; never below
        `min_cap` (a pre-warm asks for 1 token, which the Responses API refuses).

        None on OpenAI's own API unless configured: it caps each model itself, and a reasoning
        model's thinking counts against a cap, which would cut it short. Anthropic requires one.
        """
        if request.max_tokens is not None:
            return max(request.max_tokens, self.min_cap)
        if self.max_tokens is None and self.official and not self.protocol.traits.cap_required:
            return None
        window = self.server.max_model_len(self.model) if self.server is not None else None
        return max(output_cap(self.max_tokens, window), self.min_cap)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """`_stream`'s events. A server that refused the cap for want of room in its window (vLLM and SGLang say
        how much is left, by their own count) is asked again capped there; any other refusal goes to `_refused`."""
        while True:
            try:
                async with aclosing(self._stream(request)) as events:
                    async for event in events:
                        yield event
                return
            except RequestRejected as rejected:
                room, cap = room_left(str(rejected)), self.cap(request)
                # Room below the API's least cap: asking again would be refused again.
                if room is not None and cap is not None and cap > room >= self.min_cap:
                    request = msgspec.structs.replace(request, max_tokens=room)
                    line = f"{self.where} has room for {room:,} more tokens in its window: the answer is capped there"
                    yield ProviderWarning(line)
                else:
                    request = self._refused(request, rejected)

    def _stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        raise NotImplementedError  # each protocol reads its own events

    def _refused(self, request: ChatRequest, rejected: RequestRejected) -> ChatRequest:
        """The request to send again after `rejected`; or the error to raise, which a protocol may know a fix for."""
        raise rejected

    @property
    def kept(self) -> int:
        """How many messages' bytes are kept for the requests to come."""
        return len(self._rendered)

    def prune(self, keep: Sequence[Message]) -> None:
        """Forget the bytes of messages not in `keep`: a conversation ended or compacted sends them no more."""
        kept = set(keep)
        self._rendered = {message: rendered for message, rendered in self._rendered.items() if message in kept}

    def stream_data(
        self, body: bytes, session_key: str | None = None
    ) -> AsyncGenerator[bytes | ProviderWarning | StreamStarted, None]:
        """`body` posted on this provider's client (`Poster.data`): the data of each event, and warnings."""
        return self.poster.data(self._client, self.where, body, session_key)

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
                return decoded(json.loads, text)
        except TooDeep as deep:
            raise ProviderError(f"{self.where} answered {url} with JSON {deep}") from None
        except ValueError:
            pass
        raise ProviderError(f"{self.where} answered {url} with {status}, not JSON")

    async def list_models(self) -> list[str]:
        """The models the server serves, in its own order (vLLM lists the base model first)."""
        sdk = importlib.import_module(self.sdk)
        try:
            return [model.id async for model in self._client.models.list()]
        except sdk.APIError as error:
            raise await self._explain(error, listing=True) from None
        except RecursionError:  # the SDK's parser, out of stack
            raise ProviderError(f"{self.where} answered /models with JSON nested deeper than {LIMIT} levels") from None

    async def aclose(self) -> None:
        await self._client.close()

    @property
    def where(self) -> str:
        """How a line names this provider: `sim (the embedded simulator)`, `local (http://host:8000/v1)`."""
        return f"{self.name} ({self._location or self.base_url})"

    async def _explain(self, error: Exception, listing: bool = False) -> ProviderError:
        sdk = importlib.import_module(self.sdk)
        explained = await explain(error, sdk, self.where, self.model, None if listing else self._available_models)
        # A server may echo the request's headers into its error, the key among them.
        explained.args = (self.masked(str(explained)),)
        return explained

    def masked(self, text: str) -> str:
        """`text` without this provider's key in it."""
        key = self._api_key
        return text.replace(key, MASK) if key and len(key) >= 4 else text

    async def _available_models(self) -> str:
        try:
            models = await self.list_models()
        except ProviderError:  # the listing only decorates an error message
            return ""
        return f" (available: {', '.join(sorted(models))})" if models else ""
