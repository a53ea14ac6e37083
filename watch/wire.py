"""What a watched request says, read from its body: the protocol, the model, its segments for the cache
explainer, the prompt or tool results it ends with, and the session key an agent put in it.

A request body is whatever a client sent: it may be no JSON at all, JSON of any shape, or JSON nested
past any parser's stack. Anything this module can't read is a `WireError` with one line; the request
itself is forwarded regardless. The prompt and tool results are kept up to `KEPT_TEXT` characters each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from hotloop.agent.cache_explainer import WireSegments
from hotloop.providers.protocols import BY_PATH, Wire

PROTOCOLS = BY_PATH  # a POST's path: the protocol its body speaks
# Headers agents name their session by, most specific first: Claude Code, Codex (both spellings), hotloop's
# own affinity header, routers' conventions.
SESSION_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "conversation_id", "x-session-id")
_canonical = msgspec.json.Encoder(order="sorted").encode


NESTED = "the request body is JSON nested too deep to read"
KEPT_TEXT = 100_000  # characters of a prompt or a tool result the watch logs and shows: the request goes whole


class WireError(ValueError):
    """A request body hotloop can't read; `str(error)` says why, in one line."""


class ToolResult(msgspec.Struct, frozen=True):
    call_id: str
    content: str
    is_error: bool


class WatchedRequest(msgspec.Struct, frozen=True):
    """A request's reading: `prompt` is set when it ends with a new user prompt (a turn starts), `results` when it
    ends with tool results (the turn goes on)."""

    protocol: Wire
    model: str
    stream: bool
    segments: WireSegments
    prompt: str | None
    results: tuple[ToolResult, ...]
    session_key: str
    cap: int | None = None  # the output cap the client set: `max_tokens`, `max_completion_tokens`, `max_output_tokens`
    # Who sent it: its protocol and its user agent, hashed. Two agents asking the same first question are two
    # conversations, where the same agent asking it again is a retry. Not its key: an agent's token may be renewed.
    client: int = 0


def read_request(protocol: Wire, body: bytes, headers: Mapping[str, str]) -> WatchedRequest:
    # Not `nesting.decoded`: its bracket count costs ten times the decode on a long conversation's body, and every
    # request is read. A body nested past the decoder's or the reading's stack ends in a RecursionError, caught.
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        raise WireError(f"the request body is not JSON ({error})") from None
    except UnicodeDecodeError:
        raise WireError("the request body is not UTF-8") from None
    except RecursionError:
        raise WireError(NESTED) from None
    if not isinstance(document, dict):
        raise WireError(f"the request body is a JSON {type(document).__name__}, not an object")
    try:
        return _read(protocol, document, body, headers)
    except (TypeError, AttributeError, KeyError) as error:
        raise WireError(f"the request body has an unexpected shape ({error})") from None
    except RecursionError:  # nested within the decoder's reach, past the reading's (a cache marker's removal)
        raise WireError(NESTED) from None


def _read(protocol: Wire, document: dict[str, Any], body: bytes, headers: Mapping[str, str]) -> WatchedRequest:
    model = document.get("model")
    if not isinstance(model, str):
        raise WireError("the request names no model")
    if protocol is Wire.ANTHROPIC:
        system, tools, messages = _anthropic(document)
    elif protocol is Wire.OPENAI_CHAT:
        system, tools, messages = _chat(document)
    else:
        system, tools, messages = _responses(document)
    roles = [role for role, _ in messages]
    segments = WireSegments(
        system=system,
        tools={name: _canonical(_unmarked(spec)) for name, spec in tools},
        messages=[_canonical(_plain(_unmarked(message))) for _, message in messages],
        roles=roles,
        body=body,
    )
    prompt, results = _ending(protocol, messages)
    key, stream = _session_key(document, headers), document.get("stream") is True
    client = hash((protocol, headers.get("user-agent")))
    return WatchedRequest(protocol, model, stream, segments, prompt, results, key, _cap(protocol, document), client)


def _cap(protocol: Wire, document: dict[str, Any]) -> int | None:
    """The output cap the request sets, if a positive whole number."""
    for name in protocol.traits.cap_fields:
        value = document.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


Messages = list[tuple[str, Any]]  # (role, the message as sent)


def _anthropic(document: dict[str, Any]) -> tuple[str, list[tuple[str, Any]], Messages]:
    system = document.get("system") or ""
    if isinstance(system, list):
        system = "\n".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
    tools = [(str(tool.get("name", "")), tool) for tool in document.get("tools") or () if isinstance(tool, dict)]
    messages: Messages = []
    for message in document.get("messages") or ():
        role = str(message.get("role", ""))
        content = message.get("content")
        if role == "user" and isinstance(content, list) and any(_is_result(block) for block in content):
            role = "tool"
        messages.append((role, message))
    return str(system), tools, messages


def _chat(document: dict[str, Any]) -> tuple[str, list[tuple[str, Any]], Messages]:
    system: list[str] = []
    messages: Messages = []
    for message in document.get("messages") or ():
        role = str(message.get("role", ""))
        if role in ("system", "developer") and not messages:
            system.append(_text(message.get("content")))
        else:
            messages.append((role, message))
    tools = [
        (str((tool.get("function") or {}).get("name", tool.get("name", ""))), tool)
        for tool in document.get("tools") or ()
        if isinstance(tool, dict)
    ]
    return "\n".join(system), tools, messages


def _responses(document: dict[str, Any]) -> tuple[str, list[tuple[str, Any]], Messages]:
    given = document.get("input") or []
    items = [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else given
    messages: Messages = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role", ""))
        elif kind.endswith("_output"):  # function_call_output, custom_tool_call_output, …
            role = "tool"
        else:  # the model's own items: reasoning, function calls
            role = "assistant"
        messages.append((role, item))
    tools = [
        (str(tool.get("name") or tool.get("type", "")), tool)
        for tool in document.get("tools") or ()
        if isinstance(tool, dict)
    ]
    return str(document.get("instructions") or ""), tools, messages


def _is_result(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def _unmarked(value: Any) -> Any:
    """`value` without its cache markers: where a client puts `cache_control` moves between requests, and a marker
    is not content (the cache's prefix is the same with it anywhere)."""
    if isinstance(value, dict):
        return {key: _unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


def _plain(message: Any) -> Any:
    """`message` with content that is one bare text block as its text: the same tokens to the model and its cache,
    and Claude Code sends its mid-conversation system message as a block (marked for the cache) in one request and
    as a string in the next."""
    content = message.get("content") if isinstance(message, dict) else None
    block = content[0] if isinstance(content, list) and len(content) == 1 else None
    if isinstance(block, dict) and block.keys() == {"type", "text"} and block["type"] == "text":
        return {**message, "content": block["text"]}
    return message


def _text(content: Any) -> str:
    """A message's text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part)
    return ""


def _ending(protocol: Wire, messages: Messages) -> tuple[str | None, tuple[ToolResult, ...]]:
    """The prompt the request ends with, or the tool results it ends with."""
    results: list[ToolResult] = []
    for role, message in reversed(messages):
        if role == "tool":
            results[:0] = _results(protocol, message)
            continue
        if results:
            break
        if role in ("system", "developer"):
            continue  # context an agent adds after the prompt (Claude Code's mid-conversation system message)
        if role == "user":
            text = _item_text(message) if protocol is Wire.OPENAI_RESPONSES else _text(message.get("content"))
            return _kept(text), ()
        break
    return None, tuple(results)


def _kept(text: str) -> str:
    """What the watch keeps of a prompt or a tool result: a pasted file of 30 MB is not 30 MB of log and summary."""
    if len(text) <= KEPT_TEXT:
        return text
    return text[:KEPT_TEXT] + f"… [{len(text):,} characters in all; the rest is not logged]"


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return _text(content)


def _results(protocol: Wire, message: dict[str, Any]) -> list[ToolResult]:
    if protocol is Wire.OPENAI_CHAT:
        return [ToolResult(str(message.get("tool_call_id", "")), _kept(_text(message.get("content"))), False)]
    if protocol is Wire.OPENAI_RESPONSES:
        output = message.get("output")
        content = _text(output) if not isinstance(output, str) else output
        return [ToolResult(str(message.get("call_id", "")), _kept(content), False)]
    return [
        ToolResult(str(block.get("tool_use_id", "")), _kept(_text(block.get("content"))), block.get("is_error") is True)
        for block in message.get("content") or ()
        if _is_result(block)
    ]


def _session_key(document: dict[str, Any], headers: Mapping[str, str]) -> str:
    """The session an agent names in its headers or body (Codex's `prompt_cache_key`, Claude Code's
    `metadata.user_id`), or ""."""
    for name in SESSION_HEADERS:
        if value := headers.get(name):
            return f"{name}:{value}"
    if isinstance(key := document.get("prompt_cache_key"), str) and key:
        return f"prompt_cache_key:{key}"
    metadata = document.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user, str) and "session" in user:
        try:
            session = json.loads(user).get("session_id")
        except (ValueError, AttributeError):
            session = user.rpartition("_session_")[2]
        if isinstance(session, str) and session:
            return f"metadata.user_id:{session}"
    return ""


def agent_of(user_agent: str) -> str:
    """The client's product and version from its user-agent: `claude-cli/2.1.332`, `codex_cli_rs/0.171.0`."""
    return user_agent.split(" ", 1)[0][:80] if user_agent else "unknown client"
