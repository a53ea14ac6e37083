"""Messages as Anthropic content blocks, and blocks as its turns: the Messages API's own shape of a conversation."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hotloop.nesting import decoded
from hotloop.providers.conversation import AssistantMessage, Message, ToolResultMessage, UserMessage, portable_call_id


def render_blocks(message: Message) -> list[dict[str, Any]]:
    """The content blocks of one message; an assistant message may have none worth sending."""
    if isinstance(message, UserMessage):
        return [{"type": "text", "text": message.content}] if message.content.strip() else []
    if isinstance(message, ToolResultMessage):
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": portable_call_id(message.call_id)}
        if message.content:
            block["content"] = message.content
        if message.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    for thinking in message.thinking:
        if thinking.redacted:
            blocks.append({"type": "redacted_thinking", "data": thinking.redacted})
        elif thinking.signature:
            blocks.append({"type": "thinking", "thinking": thinking.text, "signature": thinking.signature})
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": portable_call_id(call.id), "name": call.name, "input": _input(call.arguments)}
        )
    return blocks


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object Anthropic requires; text that isn't one was already answered with an error."""
    try:
        value = decoded(json.loads, arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def merged_turns(rendered: Iterable[tuple[Message, list[bytes]]]) -> list[tuple[str, list[bytes], int]]:
    """Messages as Anthropic turns: same-role neighbours merged, tool results first in their user turn.

    Each turn is `(role, blocks, number of leading tool_result blocks)`.
    """
    turns: list[tuple[str, list[bytes], int]] = []
    for message, blocks in rendered:
        if not blocks:
            continue
        role = "assistant" if isinstance(message, AssistantMessage) else "user"
        is_result = isinstance(message, ToolResultMessage)
        if turns and turns[-1][0] == role:
            _, merged, results = turns[-1]
            merged = list(merged)
            if is_result:
                merged[results:results] = blocks
                results += len(blocks)
            else:
                merged.extend(blocks)
            turns[-1] = (role, merged, results)
        else:
            turns.append((role, list(blocks), len(blocks) if is_result else 0))
    return turns
