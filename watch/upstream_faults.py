"""An upstream's fault as the watch's one line: why a request failed, what a refusal said."""

from __future__ import annotations

import aiohttp
import msgspec
from aiohttp.http_exceptions import HttpProcessingError

from hotloop.nesting import decoded


def cause_of(error: BaseException) -> str:
    """Why the upstream failed a request, in one line: aiohttp's exception read for what it means."""
    if isinstance(error, TimeoutError):
        return "timed out connecting"
    cause = error.__cause__ or error
    if isinstance(error, aiohttp.ClientPayloadError) and isinstance(cause, HttpProcessingError):
        return "it closed the connection before the answer's end"
    message = getattr(cause, "message", None)  # aiohttp's own errors: their str() starts with a status code
    text = message if isinstance(message, str) and message else str(cause) or type(cause).__name__
    return text.strip().split("\n", 1)[0][:200]


def refusal_said(body: bytes) -> str:
    """A refusal's message: the JSON error's `message` if it has one, else the start of the body."""
    try:
        document = decoded(msgspec.json.decode, body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return body[:200].decode(errors="replace").strip() or "(no body)"
    error = document.get("error") if isinstance(document, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return str(message)[:200] if message else body[:200].decode(errors="replace")
