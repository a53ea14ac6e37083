"""One request's journey: its bytes posted through the SDK's client, posted again after a failure that may pass,
timed, and its stream read back as each event's data. A provider holds one `Poster`.

hotloop retries failed requests itself (the SDK's own retries are off) so that each retry is
said: `429 from openai: retrying in 12 s (2 of 3)`, with the wait the server asked for in
`retry-after`, capped. It times the request itself too: the time to the first byte and the
idle time between chunks each have a limit (`RequestTimeout`), and a server that stalls gets
one line naming the limit, not ten silent minutes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hotloop.providers.errors import ProviderError, Stalled, StreamInterrupted
from hotloop.providers.events import ProviderWarning, StreamStarted
from hotloop.providers.failures import backoff, retry_line, root_cause
from hotloop.providers.sse import SseSplitter, opens_answer, utf8

if TYPE_CHECKING:
    import httpx2

    from hotloop.providers.transport import RequestTimeout


class _Watchdog:
    """Cancels the task it runs in when nothing arrives for `limit` seconds.

    Feeding it is a float store per block read; its timer wakes once per `limit`, not per
    block, so the idle limit costs nothing measurable on a fast stream.
    """

    def __init__(self, limit: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.limit = limit
        self.fired = False
        self.last = self.loop.time()
        self._handle = self.loop.call_at(self.last + limit, self._check)

    def feed(self) -> None:
        self.last = self.loop.time()

    def rearm(self, limit: float) -> None:
        """A new limit, counted from now (the timer moves, in case the new limit ends before the old)."""
        self.limit = limit
        self.feed()
        self._handle.cancel()
        self._handle = self.loop.call_at(self.last + limit, self._check)

    def stop(self) -> None:
        self._handle.cancel()

    def caused(self) -> bool:
        """Whether a CancelledError came from this watchdog alone (and so may be turned into a Stalled error)."""
        return self.fired and self.task.uncancel() == 0

    def _check(self) -> None:
        due = self.last + self.limit
        if self.loop.time() >= due:
            self.fired = True
            self.task.cancel()
        else:
            self._handle = self.loop.call_at(due, self._check)


class Poster:
    """Posts request bytes to `path` and yields the stream's data, with a warning before each retry.

    `explain` turns an SDK failure into the provider's one line, its key masked.
    """

    def __init__(
        self,
        sdk: ModuleType,
        name: str,
        path: str,
        timeout: RequestTimeout,
        sdk_timeout: httpx2.Timeout,
        max_retries: int,
        affinity_header: str | None,
        explain: Callable[[Exception], Awaitable[ProviderError]],
    ) -> None:
        self.sdk = sdk
        self.name = name
        self.path = path
        self.timeout = timeout
        self.sdk_timeout = sdk_timeout
        self.max_retries = max_retries
        self.affinity_header = affinity_header
        self.explain = explain

    async def data(
        self, client: Any, where: str, body: bytes, session_key: str | None = None
    ) -> AsyncGenerator[bytes | ProviderWarning | StreamStarted, None]:
        """Send `body` on `client`, with `session_key` in the affinity header; yield the `data` of each event as
        valid UTF-8 (the first event with bytes that aren't says so once), `StreamStarted` before the answer's first
        content (`opens_answer`), and a warning before each retry.

        Close it with `contextlib.aclosing`. A request that fails before its stream starts is
        sent again, up to `max_retries` times, if its failure may pass (a 429, a 5xx that doesn't
        blame the request, a connection that failed, no first byte in time). The stream is read here, in one
        generator rather than a chain of them: every event of every stream pays for each level of a chain.
        """
        import httpx2

        watchdog = _Watchdog(self.timeout.first_byte)
        try:
            response = None
            for attempt in range(1, self.max_retries + 2):
                try:
                    watchdog.rearm(self.timeout.first_byte)
                    response = await self._post(client, where, body, watchdog, session_key)
                    break
                except ProviderError as error:
                    if not error.retryable or attempt > self.max_retries:
                        raise
                    wait = backoff(attempt, error.retry_after)
                    yield ProviderWarning(retry_line(error, self.name, wait, attempt + 1, self.max_retries + 1))
                    watchdog.rearm(wait + self.timeout.first_byte)
                    await asyncio.sleep(wait)
            assert response is not None
            watchdog.rearm(self.timeout.idle)
            chunks, started, mangled = 0, False, False
            # Without a content encoding the raw blocks are the bytes: one layer less for every block to pass.
            encoded = response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity")
            blocks = response.aiter_bytes() if encoded else response.aiter_raw()
            splitter, fed = SseSplitter(), watchdog.feed
            try:
                while True:
                    try:
                        block: bytes | None = await blocks.__anext__()
                    except StopAsyncIteration:
                        block = None
                    if block is not None:
                        fed()
                    for data in splitter.feed(block) if block is not None else splitter.end():
                        chunks += 1
                        if not started and opens_answer(data):
                            started = True
                            yield StreamStarted()
                        if not data.isascii():
                            data, replaced = utf8(data)
                            if replaced and not mangled:
                                mangled = True
                                yield ProviderWarning(f"{where} sent bytes that are not UTF-8; they show as �")
                        yield data
                    if block is None:
                        break
            except httpx2.TransportError as error:
                raise StreamInterrupted(f"{where} stream broke off: {root_cause(error)}") from None
            except asyncio.CancelledError:
                if not watchdog.caused():
                    raise
                raise StreamInterrupted(
                    f"{where} stalled: nothing for {self.timeout.idle:g} s after {chunks} chunks "
                    "(request_timeout.idle; raise it in the config, or with --timeout)"
                ) from None
            finally:
                await blocks.aclose()
                await response.aclose()
        finally:
            watchdog.stop()

    async def _post(
        self, client: Any, where: str, body: bytes, watchdog: _Watchdog, session_key: str | None
    ) -> httpx2.Response:
        """The request sent and its response headers read; a ProviderError, masked of the key, if it fails."""
        import httpx2

        headers = {self.affinity_header: session_key} if session_key and self.affinity_header else {}
        try:
            response: httpx2.Response = await client.post(
                self.path,
                content=body,
                cast_to=httpx2.Response,
                stream=True,
                options={"headers": headers, "timeout": self.sdk_timeout},
            )
            return response
        except self.sdk.APIError as error:
            raise await self.explain(error) from None
        except asyncio.CancelledError:
            if not watchdog.caused():
                raise
            limit = self.timeout.first_byte
            raise Stalled(
                f"{where} sent nothing for {limit:g} s (request_timeout.first_byte; raise it in the config, "
                "or with --timeout)",
                retryable=True,
            ) from None
