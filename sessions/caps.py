"""What a session log keeps of a call's arguments and streamed output.

A model can write a call 20 MB long, and a tool can stream megabytes; the log would hold them
three times over (the fragments, the whole call, the call as started), and a fragment of a few
characters costs a line of a hundred bytes. So the log keeps a call's first `MAX_ARGUMENTS`
characters, with a note of its size, and of its streamed fragments (which only a replay
reads) the first `STREAMED_ARGUMENTS`. That is no loss to resume: a call longer than
`MAX_ARGUMENTS` is never run nor sent back (`agent/step.py`), so the rebuilt conversation is
the same whether the log holds all of it or not.
"""

from __future__ import annotations

import msgspec

from hotloop.agent.events import AgentEvent, ToolOutput, ToolStarted
from hotloop.agent.step import MAX_ARGUMENTS
from hotloop.providers.events import ToolCallArgsDelta, ToolCallReady

STREAMED_ARGUMENTS = 10_000  # characters of a call's streamed fragments the log keeps, for a replay to show
_CAPPED = frozenset({ToolCallArgsDelta, ToolOutput, ToolCallReady, ToolStarted})


def _note(size: int) -> str:
    return f"… [{size:,} characters in all; the rest is not logged]"


class LogCaps:
    """Caps, per call, what the log keeps of its arguments and output."""

    def __init__(self) -> None:
        self._streamed: dict[tuple[str, str], int] = {}  # (kind, call id) → characters seen

    def capped(self, event: AgentEvent) -> AgentEvent | None:
        """`event` as the log keeps it; None when nothing of it is kept (past the limit of its stream)."""
        if type(event) not in _CAPPED:  # most events; an `isinstance` of a union that fails costs ~0.2 µs
            return event
        if isinstance(event, ToolCallArgsDelta | ToolOutput):
            return self._streamed_part(event)
        if isinstance(event, ToolCallReady | ToolStarted) and len(event.arguments) > MAX_ARGUMENTS:
            arguments = event.arguments[:MAX_ARGUMENTS] + _note(len(event.arguments))
            return msgspec.structs.replace(event, arguments=arguments)
        return event

    def _streamed_part(self, event: ToolCallArgsDelta | ToolOutput) -> AgentEvent | None:
        text = event.fragment if isinstance(event, ToolCallArgsDelta) else event.text
        key = (type(event).__name__, event.call_id)
        limit = STREAMED_ARGUMENTS if isinstance(event, ToolCallArgsDelta) else MAX_ARGUMENTS
        seen = self._streamed.get(key, 0)
        self._streamed[key] = seen + len(text)
        if seen + len(text) <= limit:
            return event
        if seen > limit:
            return None
        kept = text[: limit - seen] + "… [the rest is not logged]"
        if isinstance(event, ToolCallArgsDelta):
            return msgspec.structs.replace(event, fragment=kept)
        return msgspec.structs.replace(event, text=kept)
