"""hotloop's own, provider-neutral form of a conversation and of one request.

History is stored once, in these types, and each provider module renders it into its wire
format. Messages are immutable: a message, once sent, renders to the same bytes forever,
which is what keeps a provider's prefix cache warm from step to step.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec


class ToolSpec(msgspec.Struct, frozen=True, gc=False):
    """A tool as offered to the model. `parameters` is a JSON schema with canonical key order."""

    name: str
    description: str
    parameters: dict[str, Any]


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """A call the model made. `arguments` is kept as the exact JSON text the model produced."""

    id: str
    name: str
    arguments: str


class UserMessage(msgspec.Struct, frozen=True, gc=False, tag="user"):
    content: str


class Thinking(msgspec.Struct, frozen=True, gc=False):
    """A reasoning block as the provider signed it (`signature`) or encrypted it (`redacted`).

    Anthropic requires these back, unchanged, with the tool results of the same turn.
    """

    text: str = ""
    signature: str = ""
    redacted: str = ""


class AssistantMessage(msgspec.Struct, frozen=True, gc=False, tag="assistant"):
    """`reasoning` is the reasoning text as people read it; `thinking` holds Anthropic's signed blocks,
    `reasoning_items` the Responses API's reasoning items (each the item's JSON as the API sent it).
    Each protocol sends back what it can carry and drops the rest."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    interrupted: bool = False
    thinking: tuple[Thinking, ...] = ()
    reasoning_items: tuple[str, ...] = ()


class ToolResultMessage(msgspec.Struct, frozen=True, gc=False, tag="tool_result"):
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = UserMessage | AssistantMessage | ToolResultMessage


class ChatRequest(msgspec.Struct, frozen=True, gc=False):
    """Everything a provider needs for one step, static part first."""

    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    max_tokens: int | None = None
    cache_key: str | None = None
    background: bool = False  # a title or summary: sent in the background lane, at low priority
    warms: bool = False  # a pre-warm or a ping: its last message, an ask no step sends, is left out of the cache


MISSING_RESULT = "error: no result was recorded for this call (it was cancelled or lost)"


def repaired(messages: list[Message]) -> tuple[list[Message], list[str]]:
    """The conversation with every tool call answered exactly once, and what had to change.

    Every provider rejects a call without its result, or a result without its call. A
    cancelled turn or a damaged history can leave either; a missing result becomes an error
    result, placed right after its call's message, and an orphan result is dropped.
    """
    fixed: list[Message] = []
    notes: list[str] = []
    awaiting: dict[str, ToolCall] = {}

    def answer_missing() -> None:
        for call in awaiting.values():
            fixed.append(ToolResultMessage(call.id, call.name, MISSING_RESULT, is_error=True))
            notes.append(f"added an error result for call {call.id} ({call.name}), which had none")
        awaiting.clear()

    for message in messages:
        if isinstance(message, ToolResultMessage):
            if awaiting.pop(message.call_id, None) is None:
                notes.append(f"dropped a result for call {message.call_id} ({message.name}), which no message made")
                continue
        else:
            answer_missing()
            if isinstance(message, AssistantMessage):
                awaiting = {call.id: call for call in message.tool_calls}
        fixed.append(message)
    answer_missing()
    return fixed, notes


_PORTABLE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


def portable_call_id(call_id: str) -> str:
    """A tool call id every provider accepts: the id itself when it is short and plain.

    Ids travel between providers when the user switches: OpenAI caps them at 40 characters
    (vLLM makes 46) and Anthropic allows only letters, digits, `_` and `-`. Others are
    replaced by a hash, the same one every time, so the request bytes stay stable.
    """
    if _PORTABLE_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.blake2b(call_id.encode(), digest_size=12).hexdigest()
