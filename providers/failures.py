"""How a request failed, in one line a user can act on, and whether and when to send it again.

hotloop retries failed requests itself (the SDK's own retries are off) so that each retry is
said: `429 from openai: retrying in 12 s (2 of 3)`, with the wait the server asked for in
`retry-after`, capped.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING

from hotloop.nesting import LIMIT, where_too_deep
from hotloop.providers.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    ProviderError,
    RequestRejected,
    Stalled,
    StreamInterrupted,
    UnknownModel,
)
from hotloop.providers.server_fixes import fix_for

if TYPE_CHECKING:
    import httpx2

MAX_RETRY_WAIT = 60.0  # seconds: a longer `retry-after` is cut to this, and said
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx, unless the server says the request itself is bad
# A 5xx whose message blames the request (llama.cpp answers 500 to arguments it can't parse), or names a launch flag
# the server lacks, fails the same way again.
_BAD_REQUEST = re.compile(r"\b(?:fail(?:ed)? to parse|invalid|malformed|bad request)\b", re.IGNORECASE)


def error_detail(error: Exception) -> str:
    """The server's own message from an SDK error, if it sent one."""
    body = getattr(error, "body", None)
    if isinstance(body, str) and where_too_deep(body) is not None:
        # The SDK's parser ran out of stack on it and kept the text: a wall of brackets, not a message.
        return f"an error body nested deeper than {LIMIT} levels"
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
    return text.splitlines()[-1].strip() if text else type(root).__name__


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
            return ConnectionFailed(f"{where} timed out", retryable=True)
        return ConnectionFailed(f"cannot reach {where}: {root_cause(error)}", retryable=True)
    if isinstance(error, sdk.AuthenticationError):
        return AuthenticationFailed(f"{where} rejected the API key (401): {detail}", status=401)
    if isinstance(error, sdk.NotFoundError) and available is not None:
        return UnknownModel(f"unknown model {model!r} at {where}{await available()}", status=404)
    if isinstance(error, sdk.APIStatusError):
        status = error.status_code
        blamed = _BAD_REQUEST.search(detail) or fix_for(None, status, detail)  # a launch flag missing fails again
        retryable = status in RETRY_STATUSES or (status >= 500 and not blamed)
        return RequestRejected(
            f"{where} answered {status}: {detail}",
            status=status,
            retry_after=retry_after(error.response.headers),
            retryable=retryable,
        )
    return StreamInterrupted(f"{where} failed: {detail}")


def retry_after(headers: httpx2.Headers) -> float | None:
    """The wait a server asked for: `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    try:
        if (millis := headers.get("retry-after-ms")) is not None:
            return max(float(millis) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            import email.utils  # an HTTP date is rare: not worth ~3 ms of every start

            when = email.utils.parsedate_to_datetime(value)
            return max(when.timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def backoff(attempt: int, asked: float | None) -> float:
    """Seconds before retry `attempt` (1, 2, …): what the server asked, capped, else 0.5 s doubling up to 8 s."""
    if asked is not None:
        return min(asked, MAX_RETRY_WAIT)
    return float(min(0.5 * 2 ** (attempt - 1), 8.0) * random.uniform(0.75, 1.0))


def retry_line(error: ProviderError, provider: str, wait: float, attempt: int, attempts: int) -> str:
    """e.g. `429 from openai: retrying in 12 s (2 of 3)`; a capped wait says what the server asked."""
    what = str(error.status) if error.status else "no answer" if isinstance(error, Stalled) else "connection failed"
    asked = error.retry_after
    capped = f", not the {asked:.0f} s it asked for" if asked is not None and asked > MAX_RETRY_WAIT else ""
    shown = f"{wait:.1f}" if wait < 10 else f"{wait:.0f}"
    return f"{what} from {provider}: retrying in {shown} s{capped} ({attempt} of {attempts})"
