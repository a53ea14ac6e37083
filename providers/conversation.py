"""hotloop's own, provider-neutral form of a conversation and of one request.

History is stored once, in these types, and each provider module renders it into its wire
format. Messages are immutable: a message, once sent, renders to the same bytes forever,
which is what keeps a provider's prefix cache warm from step to step.
"""

from __future__ import annotations

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


class AssistantMessage(msgspec.Struct, frozen=True, gc=False, tag="assistant"):
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    interrupted: bool = False


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
