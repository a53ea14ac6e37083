"""OpenAI's Responses API, as strict as the hosted one: request validation, input items as turns, the response.

The hosted API refuses what a chat template would render without complaint, and so does this,
with the API's own error texts: an unknown top-level parameter, a Chat-shaped (nested) tool, a
function_call_output without its function_call or a call left without its output, reasoning
whose encrypted_content does not verify, and a previous_response_id no stored response has.
Requests run on the Chat Completions template, engine and prefix cache. A reasoning item sent
back puts its reasoning where the model generated it, so a tool loop that returns its output
items verbatim reads its whole history from the cache.

Longer than the 450 lines other modules keep to, on purpose: one protocol's strictness in one
place, so its rules, its error texts and the bytes it sends are read and changed together.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import itertools
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from hotloop.sim.anthropic_api import sign
from hotloop.sim.engine import Emission, Generation, SimRequest, invalid_byte_in
from hotloop.sim.openai_api import ApiError
from hotloop.sim.openai_api import usage as chat_usage
from hotloop.sim.scenario import STREAM_ERRORS
from hotloop.sim.template import Call, Turn

_STRING, _INTEGER, _NUMBER, _BOOLEAN = (str,), (int,), (int, float), (bool,)
_OBJECT, _ARRAY = (dict,), (list,)
# responses.create's parameters in the openai SDK, with the JSON types the API takes; it refuses any other. Kept here,
# not read from the SDK: a server's contract doesn't move with the client library installed, and the SDK's types take
# a second to import. tests/test_sim_parameters.py holds it to the SDK's list, and to `BEYOND_THE_SDK`.
PARAMETERS: dict[str, tuple[tuple[type, ...], str]] = {
    "access_programs": (_OBJECT, "an object"),
    "background": (_BOOLEAN, "a boolean"),
    "background_options": (_OBJECT, "an object"),
    "client_metadata": (_OBJECT, "an object"),
    "context_management": (_ARRAY, "an array"),
    "conversation": ((str, dict), "one of a string or object"),
    "image": (_OBJECT, "an object"),
    "include": (_ARRAY, "an array"),
    "input": ((str, list), "one of a string or array of input items"),
    "instructions": (_STRING, "a string"),
    "max_output_tokens": (_INTEGER, "an integer"),
    "max_tool_calls": (_INTEGER, "an integer"),
    "metadata": (_OBJECT, "an object"),
    "model": (_STRING, "a string"),
    "moderation": (_OBJECT, "an object"),
    "parallel_tool_calls": (_BOOLEAN, "a boolean"),
    "previous_response_id": (_STRING, "a string"),
    "prompt": (_OBJECT, "an object"),
    "prompt_cache_key": (_STRING, "a string"),
    "prompt_cache_options": (_OBJECT, "an object"),
    "prompt_cache_retention": (_STRING, "a string"),
    "reasoning": (_OBJECT, "an object"),
    "safety_identifier": (_STRING, "a string"),
    "service_tier": (_STRING, "a string"),
    "store": (_BOOLEAN, "a boolean"),
    "stream": (_BOOLEAN, "a boolean"),
    "stream_options": (_OBJECT, "an object"),
    "temperature": (_NUMBER, "a number"),
    "text": (_OBJECT, "an object"),
    "tool_choice": ((str, dict), "one of a string or object"),
    "tools": (_ARRAY, "an array"),
    "top_logprobs": (_INTEGER, "an integer"),
    "top_p": (_NUMBER, "a number"),
    "truncation": (_STRING, "a string"),
    "user": (_STRING, "a string"),
}
# Parameters the hosted API takes that the SDK's create params don't name: `stream` (the SDK's streaming variant adds
# it) and `client_metadata` (string pairs Codex sends with every request to OpenAI's backends, which take them).
BEYOND_THE_SDK = frozenset({"stream", "client_metadata"})
# Parameters the hosted API honours with state the simulator does not keep: refused rather than ignored.
_UNSUPPORTED = {
    "background": "the simulator does not run background responses",
    "conversation": "the simulator keeps no conversations: continue with previous_response_id",
    "prompt": "the simulator keeps no prompt templates",
}
# The response object's copy of the request's settings, with the API's defaults.
_ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "reasoning": {"effort": None, "summary": None},
    "safety_identifier": None,
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}
MIN_OUTPUT_TOKENS = 16
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_SUMMARIES = ("auto", "concise", "detailed")
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_PART_TYPES = {"assistant": ("output_text", "refusal"), "other": ("input_text", "input_image", "input_file")}
_ITEM_PREFIXES = {"reasoning": "rs", "text": "msg", "call_start": "fc"}


class ResponsesError(ApiError):
    """An error as OpenAI words it: always an `invalid_request_error`, its `code` naming the problem, or null."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(status, message, "invalid_request_error", param)
        self.code = code


def _missing(param: str) -> ResponsesError:
    return ResponsesError(400, f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = {int: "an integer", float: "a decimal", str: "a string", list: "an array"}
    return kinds.get(type(value), "an object")


def _wrong_type(param: str, expected: str, value: Any) -> ResponsesError:
    return ResponsesError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_json_kind(value)} instead.",
        param,
        "invalid_type",
    )


def _field(mapping: dict[str, Any], key: str, kinds: tuple[type, ...], expected: str, where: str = "") -> Any:
    """`mapping[key]` if it is of one of `kinds`, None if absent or null; else the API's invalid_type error."""
    value = mapping.get(key)
    if value is None or (isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))):
        return value
    raise _wrong_type(f"{where}.{key}" if where else key, expected, value)


def _required(mapping: dict[str, Any], key: str, kinds: tuple[type, ...], expected: str, where: str) -> Any:
    value = _field(mapping, key, kinds, expected, where)
    if value is None:
        raise _missing(f"{where}.{key}")
    return value


def _invalid_value(param: str, value: Any, supported: tuple[str, ...]) -> ResponsesError:
    named = [f"'{name}'" for name in supported]
    listed = f"{', '.join(named[:-1])}, and {named[-1]}" if len(named) > 2 else " and ".join(named)
    return ResponsesError(400, f"Invalid value: '{value}'. Supported values are: {listed}.", param, "invalid_value")


def seal(reasoning: str) -> str:
    """A reasoning item's encrypted_content: the reasoning, opaque to clients, and the HMAC that proves it ours."""
    return f"{base64.b64encode(reasoning.encode()).decode()}.{sign(reasoning)}"


def unsealed(content: Any) -> str | None:
    """The reasoning `seal` put in `content`; None if `seal` did not make it."""
    if not isinstance(content, str):
        return None
    payload, _, signature = content.partition(".")
    try:
        reasoning = base64.b64decode(payload, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return reasoning if hmac.compare_digest(signature.encode(), sign(reasoning).encode()) else None


# -- the request -------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversation:
    """A conversation as turns, and the calls of its last turn still waiting for their output."""

    turns: tuple[Turn, ...] = ()
    open_calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResponsesCall:
    request: SimRequest
    stream: bool
    conversation: Conversation  # the input after any previous response's, without instructions: what `store` keeps
    settings: dict[str, Any]  # echoed in the response object
    store: bool
    encrypted: bool  # `include` asks for the reasoning's encrypted_content
    summary: bool  # `reasoning.summary` asks for a summary of it


def parse_responses(body: Any, store: ResponseStore) -> ResponsesCall:
    """The request, checked as the API checks it; a previous response and stored reasoning come from `store`."""
    if not isinstance(body, dict):
        raise ResponsesError(400, "the request body must be a JSON object")
    for key, value in body.items():
        if key not in PARAMETERS:
            raise ResponsesError(400, f"Unknown parameter: '{key}'.", key, "unknown_parameter")
        _field(body, key, *PARAMETERS[key])
        if key in _UNSUPPORTED and value not in (None, False):
            raise ResponsesError(400, f"{key}: {_UNSUPPORTED[key]}", key)
    model = body.get("model")
    if model is None:
        raise _missing("model")
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and max_tokens < MIN_OUTPUT_TOKENS:
        raise ResponsesError(
            400,
            "Invalid 'max_output_tokens': integer below minimum value. "
            f"Expected a value >= {MIN_OUTPUT_TOKENS}, but got {max_tokens} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )
    tools = _tools(body.get("tools") or [])
    previous = body.get("previous_response_id")
    conversation = _InputReader(store, Conversation() if previous is None else store.conversation(previous)).read(
        body.get("input")
    )
    instructions = body.get("instructions")
    turns = [Turn("system", instructions), *conversation.turns] if instructions else list(conversation.turns)
    settings = {key: default if body.get(key) is None else body[key] for key, default in _ECHOED.items()}
    return ResponsesCall(
        # Asked for reasoning (an effort or a summary), the model reasons, as a reasoning model does.
        request=SimRequest(
            model, turns, tools, max_tokens, thinking=_reasoning_asked(body) or None, call_ids="responses"
        ),
        stream=bool(body.get("stream")),
        conversation=conversation,
        settings={**settings, "tools": tools},
        store=settings["store"],
        encrypted=ENCRYPTED_REASONING in (body.get("include") or []),
        summary=(body.get("reasoning") or {}).get("summary") in _SUMMARIES,
    )


def _reasoning_asked(body: dict[str, Any]) -> bool:
    reasoning = body.get("reasoning") or {}
    return any(reasoning.get(key) is not None for key in ("effort", "summary"))


def _tools(raw: list[Any]) -> list[dict[str, Any]]:
    """Function tools, flat as this API has them; the Chat shape (`function: {name, …}`) has no `name` here.

    Tools of other types (Codex offers `web_search`, `namespace` and `custom` ones) are taken and never called: the
    planner calls function tools only.
    """
    for n, tool in enumerate(raw):
        where = f"tools[{n}]"
        if not isinstance(tool, dict):
            raise _wrong_type(where, "an object", tool)
        kind = _required(tool, "type", _STRING, "a string", where)
        if kind != "function":
            continue
        _required(tool, "name", _STRING, "a string", where)
        if "parameters" not in tool:
            raise _missing(f"{where}.parameters")
        _field(tool, "parameters", _OBJECT, "an object", where)
        _field(tool, "description", _STRING, "a string", where)
        _field(tool, "strict", _BOOLEAN, "a boolean", where)
    return raw


class _InputReader:
    """Reads input items into turns: an assistant's reasoning, message and calls become one turn, as generated."""

    def __init__(self, store: ResponseStore, earlier: Conversation) -> None:
        self.store = store
        self.turns = list(earlier.turns)
        self.open_calls = list(earlier.open_calls)
        self.assistant: Turn | None = None  # the assistant turn being read, item by item

    def read(self, raw: Any) -> Conversation:
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
        for n, item in enumerate(items):
            where = f"input[{n}]"
            if not isinstance(item, dict):
                raise _wrong_type(where, "an object", item)
            kind = _field(item, "type", _STRING, "a string", where) or ("message" if "role" in item else None)
            if kind == "message":
                self._message(item, where)
            elif kind == "function_call":
                self._call(item, where)
            elif kind == "function_call_output":
                self._output(item, where)
            elif kind == "reasoning":
                self._reasoning(item, where)
            elif kind is None:
                raise _missing(f"{where}.type")
            else:
                raise ResponsesError(
                    400,
                    f"{where}.type: the simulator reads message, function_call, function_call_output and reasoning "
                    f"items (got '{kind}')",
                    f"{where}.type",
                )
        self._end_assistant()
        if self.open_calls:
            raise ResponsesError(400, f"No tool output found for function call {self.open_calls[0]}.", "input")
        return Conversation(tuple(self.turns))

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = _required(item, "role", _STRING, "a string", where)
        if role not in _ROLES:
            raise _invalid_value(f"{where}.role", role, tuple(_ROLES))
        text = _text(item, "content", where, "assistant" if role == "assistant" else "other")
        if role != "assistant":
            self._end_assistant()
            self.turns.append(Turn(_ROLES[role], text))
            return
        if self.assistant is not None and (self.assistant.text or self.assistant.calls):
            self._end_assistant()
        turn = self.assistant or Turn("assistant")
        self.assistant = replace(turn, text=turn.text + text)

    def _call(self, item: dict[str, Any], where: str) -> None:
        call = Call(
            _required(item, "call_id", _STRING, "a string", where),
            _required(item, "name", _STRING, "a string", where),
            _required(item, "arguments", _STRING, "a string", where),
        )
        turn = self.assistant or Turn("assistant")
        self.assistant = replace(turn, calls=(*turn.calls, call))
        self.open_calls.append(call.id)

    def _output(self, item: dict[str, Any], where: str) -> None:
        call_id = _required(item, "call_id", _STRING, "a string", where)
        if call_id not in self.open_calls:
            raise ResponsesError(400, f"No tool call found for function call output with call_id {call_id}.", "input")
        self.open_calls.remove(call_id)
        self._end_assistant()
        self.turns.append(Turn("tool", _text(item, "output", where, "other"), call_id=call_id))

    def _reasoning(self, item: dict[str, Any], where: str) -> None:
        summary = _required(item, "summary", _ARRAY, "an array", where)
        for k, part in enumerate(summary):
            at = f"{where}.summary[{k}]"
            if not isinstance(part, dict):
                raise _wrong_type(at, "an object", part)
            if part.get("type") != "summary_text":
                raise _invalid_value(f"{at}.type", part.get("type"), ("summary_text",))
            _required(part, "text", _STRING, "a string", at)
        item_id = _field(item, "id", _STRING, "a string", where)
        label = item_id or where
        encrypted = item.get("encrypted_content")
        if encrypted is not None:
            reasoning = unsealed(encrypted)
            if reasoning is None:
                raise ResponsesError(
                    400,
                    f"The encrypted content for item {label} could not be verified.",
                    None,
                    "invalid_encrypted_content",
                )
        else:
            # Without its encrypted_content, a reasoning item is one the API stored, found by its id.
            reasoning = self.store.reasoning(item_id) if item_id else None
            if reasoning is None:
                raise ResponsesError(
                    404,
                    f"Item with id '{label}' not found. Items are not persisted when `store` is set to false. "
                    "Try again with `store` set to true, or remove this item from your input.",
                    "input",
                )
        self._end_assistant()
        self.assistant = Turn("assistant", reasoning=reasoning)

    def _end_assistant(self) -> None:
        if self.assistant is not None:
            self.turns.append(self.assistant)
            self.assistant = None


def _text(item: dict[str, Any], key: str, where: str, side: str) -> str:
    """A message's content or a call's output: a string, or text parts of the kinds `side` may send."""
    content = item.get(key)
    if content is None:
        raise _missing(f"{where}.{key}")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _wrong_type(f"{where}.{key}", "one of a string or array of content parts", content)
    texts = []
    for k, part in enumerate(content):
        at = f"{where}.{key}[{k}]"
        if not isinstance(part, dict):
            raise _wrong_type(at, "an object", part)
        kind = part.get("type")
        if kind not in _PART_TYPES[side]:
            raise _invalid_value(f"{at}.type", kind, _PART_TYPES[side])
        if kind in ("input_image", "input_file"):
            raise ResponsesError(400, f"{at}.type: the simulator reads text only (got '{kind}')", f"{at}.type")
        name = "refusal" if kind == "refusal" else "text"
        texts.append(_required(part, name, _STRING, "a string", at))
    return "".join(texts)


# -- the response ------------------------------------------------------------------------


class ResponseStore:
    """What `store` keeps (the API's default): each response's conversation, and its reasoning items by id.

    The oldest responses go first past `capacity`, so a long-running simulator stays bounded.
    """

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._conversations: OrderedDict[str, Conversation] = OrderedDict()
        self._reasoning: OrderedDict[str, str] = OrderedDict()

    def conversation(self, response_id: str) -> Conversation:
        found = self._conversations.get(response_id)
        if found is None:
            raise ResponsesError(
                404,
                f"Previous response with id '{response_id}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        return found

    def reasoning(self, item_id: str) -> str | None:
        return self._reasoning.get(item_id)

    def keep(self, answer: Answer) -> None:
        """Store a response made with `store`, unless it failed: its input, then its output as one turn."""
        generation = answer.generation
        if not answer.call.store or generation.reply.error:
            return
        said = Turn("assistant", generation.text, tuple(generation.calls), reasoning=generation.reasoning)
        self._conversations[answer.id] = Conversation(
            (*answer.call.conversation.turns, said), tuple(call.id for call in generation.calls)
        )
        for run, item_id in zip(answer.runs, answer.item_ids, strict=True):
            if run[0].kind == "reasoning":
                self._reasoning[item_id] = _joined(run)
        for kept in (self._conversations, self._reasoning):
            while len(kept) > self.capacity:
                kept.popitem(last=False)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _joined(run: list[Emission]) -> str:
    return "".join(emission.text for emission in run)


@dataclass
class Answer:
    """One response to a call: its generation, the ids it is sent under, and its output items."""

    call: ResponsesCall
    generation: Generation
    id: str = field(default_factory=lambda: _id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    runs: list[list[Emission]] = field(init=False)  # one output item each
    item_ids: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.runs = self.generation.runs
        self.item_ids = [_id(_ITEM_PREFIXES[run[0].kind]) for run in self.runs]

    @property
    def status(self) -> str:
        if self.generation.reply.error:
            return "failed"
        return "incomplete" if self.generation.finish_reason == "length" else "completed"

    def item(self, index: int, done: bool) -> dict[str, Any]:
        """Output item `index`: empty, as `output_item.added` shows it, or `done`."""
        run, item_id = self.runs[index], self.item_ids[index]
        text = _joined(run) if done else ""
        cut = done and self.status == "incomplete" and index == len(self.runs) - 1
        status = "incomplete" if cut else "completed" if done else "in_progress"
        if run[0].kind == "reasoning":
            item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
            if done and self.call.summary:
                item["summary"] = [{"type": "summary_text", "text": text}]
            if done and self.call.encrypted:
                item["encrypted_content"] = seal(text)
            return item
        if run[0].kind == "text":
            content = [_output_text(text)] if done else []
            return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}
        call = run[0].call
        assert call is not None
        return {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "arguments": text,
            "call_id": call.id,
            "name": call.name,
        }

    def response(self, status: str) -> dict[str, Any]:
        """The response object as it stands at `status`: in_progress has no output and no usage yet."""
        finished = status != "in_progress"
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": None,
            "model": self.generation.model,
            "output": [self.item(n, done=True) for n in range(len(self.runs))] if finished else [],
            **self.call.settings,
            "usage": usage(self.generation) if finished else None,
        }
        if status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        if status == "failed":
            body["error"] = {"code": "server_error", "message": STREAM_ERRORS[self.generation.reply.error][1]}
        return body


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def usage(generation: Generation) -> dict[str, Any]:
    """Chat's usage, with a scenario's overrides, under this API's names; cached tokens are always reported."""
    chat = chat_usage(generation, prompt_tokens_details=True)
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": chat.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "cache_write_tokens": generation.cache.write,
        },
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {
            "reasoning_tokens": sum(e.tokens for e in generation.emissions if e.kind == "reasoning")
        },
        "total_tokens": chat["total_tokens"],
    }


class _Phases(NamedTuple):
    """An output item's events between `added` and `done`: those that open it, its deltas', those that close it."""

    opening: list[tuple[str, dict[str, Any]]]
    delta: tuple[str, dict[str, Any]] | None
    closing: list[tuple[str, dict[str, Any]]]


def _phases(kind: str, text: str, summary: bool) -> _Phases:
    if kind == "reasoning":
        if not summary:
            return _Phases([], None, [])  # decoded unseen: only the item, with its encrypted_content
        at = {"summary_index": 0}
        return _Phases(
            [("response.reasoning_summary_part.added", {**at, "part": {"type": "summary_text", "text": ""}})],
            ("response.reasoning_summary_text.delta", at),
            [
                ("response.reasoning_summary_text.done", {**at, "text": text}),
                ("response.reasoning_summary_part.done", {**at, "part": {"type": "summary_text", "text": text}}),
            ],
        )
    if kind == "text":
        at = {"content_index": 0}
        return _Phases(
            [("response.content_part.added", {**at, "part": _output_text("")})],
            ("response.output_text.delta", {**at, "logprobs": []}),
            [
                ("response.output_text.done", {**at, "text": text, "logprobs": []}),
                ("response.content_part.done", {**at, "part": _output_text(text)}),
            ],
        )
    return _Phases(
        [],
        ("response.function_call_arguments.delta", {}),
        [("response.function_call_arguments.done", {"arguments": text})],
    )


def stream_events(answer: Answer) -> Iterator[tuple[int, bytes]]:
    """SSE events as `(output tokens decoded before it can be sent, bytes)`, in the API's order, numbered."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": next(numbers), **fields}
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    yield 1, event("response.created", response=answer.response("in_progress"))
    yield 1, event("response.in_progress", response=answer.response("in_progress"))
    decoded = 0
    broken = answer.generation.invalid_utf8_emission
    for index, run in enumerate(answer.runs):
        kind, deltas = run[0].kind, run
        if kind == "call_start":  # the call's name decodes before its item can be announced
            decoded += run[0].tokens
            deltas = run[1:]
        phases = _phases(kind, _joined(run), answer.call.summary)
        at = {"item_id": answer.item_ids[index], "output_index": index}
        yield max(decoded, 1), event("response.output_item.added", output_index=index, item=answer.item(index, False))
        for name, fields in phases.opening:
            yield max(decoded, 1), event(name, **at, **fields)
        for emission in deltas:
            decoded += emission.tokens
            if phases.delta is not None:
                data = event(phases.delta[0], **at, **phases.delta[1], delta=emission.text)
                # `is`, not ==: the same piece of text may come twice, and only one event gets the byte.
                yield decoded, invalid_byte_in(data, "delta") if emission is broken else data
        for name, fields in phases.closing:
            yield max(decoded, 1), event(name, **at, **fields)
        yield max(decoded, 1), event("response.output_item.done", output_index=index, item=answer.item(index, True))
    if answer.status == "completed":
        decoded += 1  # the end-of-message token
    # A scenario's error fails the response after its output, as the API reports a failure mid-stream.
    yield max(decoded, 1), event(f"response.{answer.status}", response=answer.response(answer.status))
