"""Anthropic Messages as the API speaks it: request validation, the prompt as cacheable blocks, and the response bytes.

Validation follows the API's documented rules, with its error texts where it has them:
every `tool_use` is answered by a `tool_result` in the next user message, results before
any text; at most 4 `cache_control` breakpoints; thinking blocks come back with the
signature they were given, and with thinking on, the assistant message of an open tool
loop starts with one. Consecutive messages of one role are combined, as the API does. A top-level field the API
doesn't take is refused ("Extra inputs are not permitted"); a `system` message mid-conversation is taken where the
API takes it (after a user's message, before an assistant's or at the end), as Claude Code sends its environment.

Longer than the 450 lines other modules keep to, on purpose: one protocol's strictness in one
place, so its rules, its error texts and the bytes it sends are read and changed together.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from hotloop.sim import json_depth
from hotloop.sim.cache import ONE_HOUR, CacheBlock
from hotloop.sim.cache_diagnosis import Diagnoser, enabled
from hotloop.sim.engine import Emission, Generation, SimRequest, invalid_byte_in
from hotloop.sim.scenario import ANTHROPIC_USAGE, STREAM_ERRORS, status_phrase
from hotloop.sim.template import TOOLS_PREAMBLE, Call, Turn, joined_text
from hotloop.sim.tokenizer import encode

MAX_BREAKPOINTS = 4
THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_TTLS = {"5m": 300.0, "1h": ONE_HOUR}
_ID = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_SIGNING_KEY = b"hotloop-sim-thinking"
_ROLE_MARKS = {"user": "\n\nHuman: ", "assistant": "\n\nAssistant: "}
_GENERATION_PROMPT = "\n\nAssistant:"
# messages.create's parameters in the SDK (its beta ones included, but `betas`, which travels as a header), as
# tests/test_sim_parameters.py checks; kept here for responses_api.PARAMETERS' reasons.
PARAMETERS = frozenset(
    {
        *("billing_policy", "cache_control", "compaction", "container", "context_management", "diagnostics"),
        *("fallback_credit_token", "fallbacks", "inference_geo", "max_tokens", "mcp_servers", "messages"),
        *("metadata", "model", "output_config", "service_tier", "speed", "stop_sequences", "system", "thinking"),
        *("thread", "tool_choice", "tools", "user_profile_id", "workspace_id"),
    }
)
# What the API takes beyond the SDK's types: `stream` (the SDK's streaming variant adds it), and the sampling
# parameters SDK 1.0 dropped from its types, which the API still takes from older clients.
BEYOND_THE_SDK = frozenset({"stream", "temperature", "top_k", "top_p"})
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ERROR_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class AnthropicError(Exception):
    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.kind = kind or _ERROR_KINDS.get(status, "api_error")

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.kind, "message": self.message}, "request_id": _request_id()}


def failure(kind: str) -> AnthropicError:
    """The error a scenario step ends with."""
    status, message = STREAM_ERRORS[kind]
    return AnthropicError(status, message, kind)


def refusal(status: int) -> AnthropicError:
    """A `status` fault's error, of the API's type for the status (429: rate_limit_error, 529: overloaded_error)."""
    return AnthropicError(status, status_phrase(status))


def sign(thinking: str) -> str:
    """The signature the simulator gives a thinking block, and checks when the block comes back."""
    return base64.b64encode(hmac.new(_SIGNING_KEY, thinking.encode(), hashlib.sha256).digest()).decode()


@dataclass(frozen=True)
class MessagesCall:
    request: SimRequest
    stream: bool
    message_id: str = ""
    diagnostics: dict[str, Any] | None = None  # the cache diagnostics the response carries (the beta's)


def parse_messages(body: Any, beta: str | None = None, diagnoser: Diagnoser | None = None) -> MessagesCall:
    """The request in the engine's terms; with the diagnostics beta on (`beta`: the `anthropic-beta` header) and a
    `diagnostics` object, `diagnoser` compares it with the request its `previous_message_id` names."""
    if not isinstance(body, dict):
        raise AnthropicError(400, "the request body must be a JSON object")
    extra = next((key for key in body if key not in PARAMETERS | BEYOND_THE_SDK), None)
    if extra is not None:
        raise AnthropicError(400, f"{extra}: Extra inputs are not permitted")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise AnthropicError(400, "model: Field required")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise AnthropicError(400, "max_tokens: Field required")
    if not _is_int(max_tokens) or max_tokens < 1:
        raise AnthropicError(400, "max_tokens: Input should be greater than or equal to 1")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise AnthropicError(400, "messages: at least one message is required")
    thinking = _thinking(body.get("thinking"), max_tokens)
    reader = _PromptReader()
    tools = reader.tools(body.get("tools"))
    system = reader.system(body.get("system"))
    turns = reader.messages(messages, thinking)
    if body.get("cache_control") is not None:
        reader.mark_last(body["cache_control"])  # automatic caching: the last cacheable block
    if reader.breakpoints > MAX_BREAKPOINTS:
        raise AnthropicError(
            400,
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {reader.breakpoints}.",
        )
    reader.add(_GENERATION_PROMPT)
    request = SimRequest(
        model=model,
        turns=[Turn("system", system), *turns] if system else turns,
        tools=[tool for tool in tools if tool["name"] in reader.loaded],
        max_tokens=max_tokens,
        blocks=tuple(reader.blocks),
        thinking=thinking,
        call_ids="anthropic",
    )
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    asked = _diagnostics_asked(body, beta)
    if asked is None or diagnoser is None:
        return MessagesCall(request, bool(body.get("stream")), message_id)
    diagnostics = diagnoser.diagnose(body, asked.get("previous_message_id"), message_id)
    return MessagesCall(request, bool(body.get("stream")), message_id, diagnostics)


def _diagnostics_asked(body: dict[str, Any], beta: str | None) -> dict[str, Any] | None:
    """The request's `diagnostics` object, checked; None if it has none."""
    asked = body.get("diagnostics")
    if asked is None:
        return None
    if not enabled(beta):
        raise AnthropicError(400, "diagnostics: requires the anthropic-beta header cache-diagnosis-2026-04-07")
    previous = asked.get("previous_message_id", None) if isinstance(asked, dict) else None
    if not isinstance(asked, dict) or (previous is not None and not isinstance(previous, str)):
        raise AnthropicError(400, "diagnostics.previous_message_id: Input should be a valid string or null")
    return asked


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _thinking(raw: Any, max_tokens: int) -> bool:
    if raw is None or (isinstance(raw, dict) and raw.get("type") == "disabled"):
        return False
    if not isinstance(raw, dict) or raw.get("type") not in ("enabled", "adaptive"):
        raise AnthropicError(
            400, "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'"
        )
    if raw["type"] == "adaptive":
        return True
    budget = raw.get("budget_tokens")
    if not _is_int(budget) or budget < 1024:
        raise AnthropicError(400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if budget >= max_tokens:
        raise AnthropicError(
            400,
            "`max_tokens` must be greater than `thinking.budget_tokens`. "
            f"Please consult our documentation at {THINKING_DOCS}",
        )
    return True


class _PromptReader:
    """Reads tools, system and messages into turns for the model and content blocks for the cache."""

    def __init__(self) -> None:
        self.blocks: list[CacheBlock] = []
        self.breakpoints = 0
        self.declared: set[str] = set()  # the tools the request names
        self.loaded: set[str] = set()  # those the model may call: not deferred, or added since, and not removed

    def add(self, text: str, cache_control: Any = None, where: str = "") -> None:
        ids = encode(text)
        self.blocks.append(CacheBlock(len(ids), hash(ids), self._ttl(cache_control, where)))

    def mark_last(self, cache_control: Any) -> None:
        self.blocks[-1] = replace(self.blocks[-1], ttl=self._ttl(cache_control, ""))

    def _ttl(self, control: Any, where: str) -> float | None:
        if control is None:
            return None
        at = f"{where}.cache_control" if where else "cache_control"
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            raise AnthropicError(400, f"{at}.type: Input should be 'ephemeral'")
        ttl = control.get("ttl", "5m")
        if ttl not in _TTLS:
            raise AnthropicError(400, f"{at}.ttl: Input should be '5m' or '1h'")
        self.breakpoints += 1
        return _TTLS[ttl]

    def tools(self, raw: Any) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise AnthropicError(400, "tools: Input should be a valid list")
        tools = []
        for n, tool in enumerate(raw):
            if not isinstance(tool, dict):
                raise AnthropicError(400, f"tools.{n}: Input should be a valid dictionary")
            if tool.get("type") not in (None, "custom"):
                raise AnthropicError(400, f"tools.{n}: the simulator does not run server tools ({tool['type']})")
            if not isinstance(tool.get("name"), str) or not _TOOL_NAME.fullmatch(tool["name"]):
                raise AnthropicError(
                    400, f"tools.{n}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                )
            if not isinstance(tool.get("input_schema"), dict):
                raise AnthropicError(400, f"tools.{n}.custom.input_schema: Field required")
            spec = {key: value for key, value in tool.items() if key != "cache_control"}
            self.declared.add(tool["name"])
            if not tool.get("defer_loading"):  # a deferred tool is known, but callable only once a block adds it
                self.loaded.add(tool["name"])
            preamble = TOOLS_PREAMBLE if n == 0 else ""
            self.add(preamble + json.dumps(spec, ensure_ascii=False), tool.get("cache_control"), f"tools.{n}")
            tools.append(spec)
        return tools

    def system(self, raw: Any) -> str:
        if raw is None:
            return ""
        if isinstance(raw, str):
            if raw:
                self.add(raw)
            return raw
        if not isinstance(raw, list) or not all(isinstance(b, dict) and b.get("type") == "text" for b in raw):
            raise AnthropicError(400, "system: Input should be a valid string or a list of text blocks")
        for n, block in enumerate(raw):
            self.add(_text(block, f"system.{n}"), block.get("cache_control"), f"system.{n}")
        return "\n\n".join(block["text"] for block in raw)

    def messages(self, raw: list[Any], thinking: bool) -> list[Turn]:
        groups = _combined(raw)
        turns: list[Turn] = []
        pending: dict[str, int] = {}  # tool_use ids awaiting a result -> the message that made them
        for n, role, blocks in groups:
            if role == "system":
                turns.append(self._system(n, blocks))
            elif role == "user":
                _no_tool_changes(blocks, n)
                turns.extend(self._user(n, blocks, pending))
            else:
                _no_tool_changes(blocks, n)
                _require_results(pending)
                turn = self._assistant(n, blocks)
                pending = {call.id: n for call in turn.calls}
                turns.append(turn)
        _require_results(pending)
        if thinking:
            _require_leading_thinking([group for group in groups if group[1] != "system"])
        return turns

    def _system(self, n: int, blocks: list[dict[str, Any]]) -> Turn:
        texts = []
        for k, block in enumerate(blocks):
            where = f"messages.{n}.content.{k}"
            if block.get("type") in _TOOL_CHANGES:
                self.add(("\n\nSystem: " if k == 0 else "") + self._tool_change(block, where), None, where)
                continue
            if block.get("type") != "text":
                raise AnthropicError(
                    400,
                    f"{where}.type: the simulator reads text blocks from a system message (got {block.get('type')!r})",
                )
            texts.append(_text(block, where))
            self.add(("\n\nSystem: " if k == 0 else "") + texts[-1], block.get("cache_control"), where)
        return Turn("system", "".join(texts))

    def _tool_change(self, block: dict[str, Any], where: str) -> str:
        """A tool brought in or taken out mid-conversation (the `mid-conversation-tool-changes` beta): the tool must
        be one the request declares; the model may call it from here on, or no longer."""
        tool = block.get("tool")
        name = tool.get("name") if isinstance(tool, dict) and tool.get("type") == "tool_reference" else None
        if not isinstance(name, str) or name not in self.declared:
            raise AnthropicError(400, f"{where}.tool: a tool_reference to a tool declared in `tools` is required")
        if block["type"] == "tool_addition":
            self.loaded.add(name)
        else:
            self.loaded.discard(name)
        return f"{block['type']}: {name}"

    def _user(self, n: int, blocks: list[dict[str, Any]], pending: dict[str, int]) -> list[Turn]:
        turns, results_done = [], False
        for k, block in enumerate(blocks):
            where, mark = f"messages.{n}.content.{k}", _ROLE_MARKS["user"] if k == 0 else ""
            kind = block.get("type")
            if kind == "tool_result":
                call_id = block.get("tool_use_id")
                if results_done:
                    raise AnthropicError(
                        400,
                        f"{where}: `tool_result` blocks must come first in a user message, before any other content",
                    )
                if call_id not in pending:
                    raise AnthropicError(
                        400,
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                    )
                del pending[call_id]
                text = _result_text(block.get("content"), where)
                self.add(f"{mark}<tool_result {call_id}>{text}</tool_result>", block.get("cache_control"), where)
                turns.append(Turn("tool", text, call_id=call_id))
            elif kind == "text":
                results_done = True
                text = _text(block, where)
                self.add(mark + text, block.get("cache_control"), where)
                turns.append(Turn("user", text))
            else:
                raise AnthropicError(
                    400, f"{where}.type: the simulator reads text and tool_result blocks from users (got {kind!r})"
                )
        _require_results(pending)
        return turns

    def _assistant(self, n: int, blocks: list[dict[str, Any]]) -> Turn:
        texts, calls = [], []
        for k, block in enumerate(blocks):
            where, mark = f"messages.{n}.content.{k}", _ROLE_MARKS["assistant"] if k == 0 else ""
            kind = block.get("type")
            if kind == "text":
                texts.append(_text(block, where))
                self.add(mark + texts[-1], block.get("cache_control"), where)
            elif kind == "tool_use":
                call = _tool_use(block, where)
                calls.append(call)
                self.add(
                    mark + json.dumps({"id": call.id, "name": call.name, "input": block["input"]}),
                    block.get("cache_control"),
                    where,
                )
            elif kind == "thinking":
                if not isinstance(block.get("thinking"), str) or block.get("signature") != sign(block["thinking"]):
                    raise AnthropicError(400, f"{where}: Invalid `signature` in `thinking` block")
                self.add(mark + block["thinking"], block.get("cache_control"), where)
            elif kind == "redacted_thinking":
                self.add(mark + str(block.get("data", "")), block.get("cache_control"), where)
            else:
                raise AnthropicError(
                    400, f"{where}.type: unsupported content block type {kind!r} in an assistant message"
                )
        return Turn("assistant", "".join(texts), calls=tuple(calls))


def _combined(raw: list[Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Messages as `(index of the first, role, blocks)`, consecutive messages of one role combined."""
    groups: list[tuple[int, str, list[dict[str, Any]]]] = []
    for n, message in enumerate(raw):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
            raise AnthropicError(400, f"messages.{n}.role: Input should be 'user', 'assistant' or 'system'")
        if message["role"] == "system":
            _check_system_place(raw, n)
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
            raise AnthropicError(
                400, f"messages.{n}.content: Input should be a valid string or a list of content blocks"
            )
        if not content and not (n == len(raw) - 1 and message["role"] == "assistant"):
            raise AnthropicError(
                400,
                f"messages.{n}: all messages must have non-empty content "
                "except for the optional final assistant message",
            )
        if groups and groups[-1][1] == message["role"]:
            groups[-1][2].extend(content)
        else:
            groups.append((n, message["role"], list(content)))
    return groups


def _no_tool_changes(blocks: list[dict[str, Any]], n: int) -> None:
    if any(block.get("type") in _TOOL_CHANGES for block in blocks):
        raise AnthropicError(
            400,
            f"messages.{n}.content: 'tool_addition'/'tool_removal' blocks are only permitted within role: "
            '"system" messages',
        )


def _check_system_place(raw: list[Any], n: int) -> None:
    """A system message follows a user's (a tool result's included) and precedes an assistant's or ends the array."""
    before = raw[n - 1].get("role") if n > 0 and isinstance(raw[n - 1], dict) else None
    after = raw[n + 1].get("role") if n + 1 < len(raw) and isinstance(raw[n + 1], dict) else None
    if before != "user":
        raise AnthropicError(
            400,
            f"messages.{n}: a message with role 'system' must follow a 'user' message; "
            "use the top-level `system` parameter for instructions from the start",
        )
    if after not in (None, "assistant"):
        raise AnthropicError(400, f"messages.{n}: role 'system' must precede an 'assistant' message or end the array")


def _require_results(pending: dict[str, int]) -> None:
    if pending:
        where = min(pending.values())
        raise AnthropicError(
            400,
            f"messages.{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(pending)}. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        )


def _require_leading_thinking(groups: list[tuple[int, str, list[dict[str, Any]]]]) -> None:
    """With thinking on, the assistant message whose tool results end the request must start with thinking."""
    if len(groups) < 2 or not any(block.get("type") == "tool_result" for block in groups[-1][2]):
        return
    n, _, blocks = groups[-2]
    first = blocks[0].get("type") if blocks else None
    if first not in ("thinking", "redacted_thinking"):
        raise AnthropicError(
            400,
            f"messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When "
            "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
            "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
            "previous turns. To avoid this requirement, disable `thinking`. "
            f"Please consult our documentation at {THINKING_DOCS}",
        )


def _text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise AnthropicError(400, f"{where}.text: Field required")
    if not text.strip():
        raise AnthropicError(400, f"{where}: text content blocks must contain non-whitespace text")
    return text


def _result_text(content: Any, where: str) -> str:
    text = joined_text(content)
    if text is None:
        raise AnthropicError(400, f"{where}.content: Input should be a valid string or a list of text blocks")
    return text


def _tool_use(block: dict[str, Any], where: str) -> Call:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not _ID.fullmatch(call_id):
        raise AnthropicError(400, f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
    if not isinstance(name, str) or not name:
        raise AnthropicError(400, f"{where}.name: Field required")
    if not isinstance(arguments, dict):
        raise AnthropicError(400, f"{where}.input: Input should be a valid dictionary")
    return Call(call_id, name, json.dumps(arguments))


# -- the response ------------------------------------------------------------------------


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _event(payload: dict[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {_dumps(payload)}\n\n".encode()


_TOOL_CHANGES = ("tool_addition", "tool_removal")
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
_TEXT_KEYS = {"text": "text", "reasoning": "thinking", "call_args": "partial_json"}
_BLOCK_KINDS = {"reasoning": "thinking", "text": "text", "call_start": "tool_use"}


def usage(generation: Generation) -> dict[str, Any]:
    use = generation.cache
    body = {
        "input_tokens": generation.prompt_tokens - use.read - use.write,
        "cache_creation_input_tokens": use.write,
        "cache_read_input_tokens": use.read,
        "cache_creation": {"ephemeral_5m_input_tokens": use.write_5m, "ephemeral_1h_input_tokens": use.write_1h},
        "output_tokens": generation.output_tokens,
        "service_tier": "standard",
    }
    body.update((key, value) for key, value in generation.reply.faults.usage if key in ANTHROPIC_USAGE)
    return body


def _opening_block(kind: str, emissions: list[Emission]) -> dict[str, Any]:
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if kind == "text":
        return {"type": "text", "text": ""}
    call = emissions[0].call
    assert call is not None
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}


def _delta(kind: str, emission: Emission) -> dict[str, Any]:
    if kind == "thinking":
        return {"type": "thinking_delta", "thinking": emission.text}
    if kind == "text":
        return {"type": "text_delta", "text": emission.text}
    return {"type": "input_json_delta", "partial_json": emission.text}


def stream_events(generation: Generation, call: MessagesCall | None = None) -> Iterator[tuple[int, bytes]]:
    """SSE events as `(output tokens decoded before it can be sent, bytes)`, in the API's order."""
    message: dict[str, Any] = {
        "id": call.message_id if call is not None else f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": generation.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage(generation), "output_tokens": 1},
    }
    if call is not None and call.diagnostics is not None:
        message["diagnostics"] = call.diagnostics  # streamed, the diagnostics ride on message_start's message
    yield 1, _event({"type": "message_start", "message": message})
    decoded = 0
    broken = generation.invalid_utf8_emission
    for index, emissions in enumerate(generation.runs):
        kind = _BLOCK_KINDS[emissions[0].kind]
        yield (
            max(decoded, 1),
            _event({"type": "content_block_start", "index": index, "content_block": _opening_block(kind, emissions)}),
        )
        if index == 0:
            yield max(decoded, 1), PING
        for emission in emissions:
            decoded += emission.tokens
            data = _event({"type": "content_block_delta", "index": index, "delta": _delta(kind, emission)})
            # `is`, not ==: the same piece of text may come twice, and only one chunk gets the byte.
            yield decoded, invalid_byte_in(data, _TEXT_KEYS[emission.kind]) if emission is broken else data
        if kind == "thinking":
            signature = sign("".join(e.text for e in emissions))
            yield (
                decoded,
                _event(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": signature},
                    }
                ),
            )
        yield decoded, _event({"type": "content_block_stop", "index": index})
    if generation.reply.error:
        error = failure(generation.reply.error)
        yield max(decoded, 1), _event({"type": "error", "error": {"type": error.kind, "message": error.message}})
        return
    if generation.finish_reason != "length":
        decoded += 1  # the end-of-message token
    final = usage(generation)
    cumulative = {
        key: final[key]
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    }
    delta = {"stop_reason": _STOP_REASONS[generation.finish_reason], "stop_sequence": None}
    yield max(decoded, 1), _event({"type": "message_delta", "delta": delta, "usage": cumulative})
    yield max(decoded, 1), _event({"type": "message_stop"})


def message(generation: Generation, asked: MessagesCall | None = None) -> dict[str, Any]:
    """The whole response, for a request without `stream`."""
    content: list[dict[str, Any]] = []
    if generation.reasoning:
        content.append({"type": "thinking", "thinking": generation.reasoning, "signature": sign(generation.reasoning)})
    if generation.text:
        content.append({"type": "text", "text": generation.text})
    for call in generation.calls:
        try:
            arguments = json_depth.loads(call.arguments)
        except ValueError:  # cut short by max_tokens, or a scenario's nested too deep
            arguments = {}
        content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    whole = {
        "id": asked.message_id if asked is not None else f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": generation.model,
        "content": content,
        "stop_reason": _STOP_REASONS[generation.finish_reason],
        "stop_sequence": None,
        "usage": usage(generation),
    }
    return whole if asked is None or asked.diagnostics is None else {**whole, "diagnostics": asked.diagnostics}


def models_page(models: list[str], created: str) -> dict[str, Any]:
    """`GET /v1/models` as Anthropic lists them."""
    data = [{"type": "model", "id": name, "display_name": name, "created_at": created} for name in models]
    return {
        "data": data,
        "has_more": False,
        "first_id": models[0] if models else None,
        "last_id": models[-1] if models else None,
    }
