"""An upstream's fault as the watch's one line: why a request failed, what a refusal said."""

from __future__ import annotations

import msgspec

from hotloop.nesting import decoded


def cause_of(error: BaseException) -> str:
    """Why the upstream failed a request, in one line: the upstream client's fault as it says it, a socket's error
    without its number."""
    if isinstance(error, TimeoutError):
        return "timed out connecting"
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
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
