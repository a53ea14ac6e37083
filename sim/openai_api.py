"""OpenAI Chat Completions as vLLM speaks it: request parsing and the response bytes.

Tool-call pairing is checked the way OpenAI checks it, which is stricter than vLLM: a
conversation that would be rejected by a hosted provider must not pass here either. Tool-call
arguments sent back must be JSON, as llama.cpp requires (and, as llama.cpp does, a 500 says so).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hotloop.sim import json_depth
from hotloop.sim.engine import DEFAULT_MODEL, Emission, Generation, SimRequest, invalid_byte_in
from hotloop.sim.scenario import OPENAI_USAGE, STREAM_ERRORS, status_phrase
from hotloop.sim.template import Call, Turn, joined_text


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.code: int | str | None = status  # vLLM's; OpenAI's own API names the problem instead

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatCall:
    request: SimRequest
    stream: bool
    include_usage: bool
    priority: int = 0


def parse_chat(body: Any) -> ChatCall:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    if body.get("n") not in (None, 1):
        raise ApiError(400, "the simulator generates one choice per request (n=1)", param="n")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(_is_function_tool(t) for t in tools):
        raise ApiError(400, "tools must be a list of {type: function, function: {name, parameters}}", param="tools")
    options = body.get("stream_options") or {}
    request = SimRequest(body.get("model") or DEFAULT_MODEL, _turns(messages), tools, _max_tokens(body))
    return ChatCall(
        request=request,
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")) if isinstance(options, dict) else False,
        priority=_priority(body),
    )


def _priority(body: dict[str, Any]) -> int:
    value = body.get("priority", 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "priority must be an integer", param="priority")
    return value


def _is_function_tool(tool: Any) -> bool:
    return (
        isinstance(tool, dict)
        and tool.get("type") == "function"
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
    )


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, "max_tokens must be a positive integer", param="max_tokens")
    return value


def _turns(messages: list[Any]) -> list[Turn]:
    turns: list[Turn] = []
    pending: list[str] = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            raise ApiError(
                400, f"messages[{n}]: role must be system, developer, user, assistant or tool", param="messages"
            )
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                raise ApiError(
                    400,
                    f"messages[{n}]: messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'.",
                    param="messages",
                )
            pending.remove(call_id)
            turns.append(Turn("tool", _content(message, n), call_id=call_id))
            continue
        if pending:
            raise ApiError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                param="messages",
            )
        if role == "assistant":
            calls = _calls(message.get("tool_calls"), n)
            pending = [call.id for call in calls]
            turns.append(Turn("assistant", _content(message, n), calls=calls))
        else:
            turns.append(Turn("system" if role == "developer" else role, _content(message, n)))
    return turns


def _content(message: dict[str, Any], n: int) -> str:
    text = joined_text(message.get("content"))
    if text is None:
        raise ApiError(400, f"messages[{n}].content must be a string or a list of text parts", param="messages")
    return text


def _calls(raw: Any, n: int) -> tuple[Call, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, f"messages[{n}].tool_calls must be a list", param="messages")
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
        ):
            raise ApiError(400, f"messages[{n}].tool_calls entries need id and function.name", param="messages")
        arguments = function.get("arguments", "")
        if isinstance(arguments, str) and "arguments" in function:  # left out, they stay "" as before
            _require_json(arguments)
        calls.append(
            Call(call["id"], function["name"], arguments if isinstance(arguments, str) else json.dumps(arguments))
        )
    return tuple(calls)


def _require_json(arguments: str) -> None:
    """llama.cpp parses the arguments of past calls to render them, and answers a 500 when they aren't JSON."""
    try:
        json_depth.loads(arguments)
    except json_depth.TooDeep as error:
        raise ApiError(400, f"tool call arguments are {error}") from None
    except json.JSONDecodeError as error:
        raise ApiError(500, f"Failed to parse tool call arguments as JSON: {error}", "server_error") from None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def usage(generation: Generation, prompt_tokens_details: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + generation.output_tokens,
        "completion_tokens": generation.output_tokens,
    }
    # vLLM leaves the details out on a miss rather than reporting 0.
    if prompt_tokens_details and generation.cached_tokens:
        body["prompt_tokens_details"] = {"cached_tokens": generation.cached_tokens}
    for key, value in generation.reply.faults.usage:
        if key == "cached_tokens":
            body["prompt_tokens_details"] = {**body.get("prompt_tokens_details", {}), key: value}
        elif key in OPENAI_USAGE:
            body[key] = value
    return body


def stream_chunks(
    generation: Generation, include_usage: bool, prompt_tokens_details: bool
) -> Iterator[tuple[int, bytes]]:
    """SSE events as `(output tokens decoded before it can be sent, bytes)`."""
    head = _dumps(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": generation.model,
        }
    )[:-1]

    def chunk(choice: dict[str, Any]) -> bytes:
        return f'data: {head},"choices":[{_dumps(choice)}]}}\n\n'.encode()

    def delta(payload: dict[str, Any]) -> bytes:
        return chunk({"index": 0, "delta": payload, "logprobs": None, "finish_reason": None})

    decoded = 0
    broken = generation.invalid_utf8_emission
    yield 1, delta({"role": "assistant", "content": ""})
    for emission in generation.emissions:
        decoded += emission.tokens
        data = delta(_delta_of(emission))
        # `is`, not ==: the same piece of text may come twice, and only one chunk gets the byte.
        yield decoded, invalid_byte_in(data, _TEXT_KEYS[emission.kind]) if emission is broken else data
    if generation.reply.error:
        # vLLM reports a failure inside the stream as an error object, then ends it.
        yield max(decoded, 1), f"data: {_dumps(failure(generation.reply.error).body())}\n\ndata: [DONE]\n\n".encode()
        return
    if generation.finish_reason != "length":
        decoded += 1  # the end-of-message token
    last = max(decoded, 1)
    yield (
        last,
        chunk(
            {
                "index": 0,
                "delta": {"content": ""},
                "logprobs": None,
                "finish_reason": generation.finish_reason,
                "stop_reason": None,
            }
        ),
    )
    if include_usage:
        yield (
            last,
            f'data: {head},"choices":[],"usage":{_dumps(usage(generation, prompt_tokens_details))}}}\n\n'.encode(),
        )
    yield last, b"data: [DONE]\n\n"


_TEXT_KEYS = {"text": "content", "reasoning": "reasoning", "call_args": "arguments"}


def refusal(status: int) -> ApiError:
    """A `status` fault's error, named as vLLM names its errors (503: ServiceUnavailableError)."""
    phrase = status_phrase(status)
    return ApiError(status, phrase, phrase.removesuffix(" Error").replace(" ", "") + "Error")


def failure(kind: str) -> ApiError:
    """The error a scenario step ends with, as vLLM would report it (it has no 529: overload is 503)."""
    status, message = STREAM_ERRORS[kind]
    return ApiError(
        503 if status == 529 else status, message, "ServiceUnavailableError" if status == 529 else "InternalServerError"
    )


def _delta_of(emission: Emission) -> dict[str, Any]:
    if emission.kind == "text":
        return {"content": emission.text}
    if emission.kind == "reasoning":
        return {"reasoning": emission.text}
    if emission.kind == "call_start" and emission.call is not None:
        call = emission.call
        return {
            "tool_calls": [
                {"id": call.id, "type": "function", "index": emission.index, "function": {"name": call.name}}
            ]
        }
    return {"tool_calls": [{"index": emission.index, "function": {"arguments": emission.text}}]}


def completion(generation: Generation, prompt_tokens_details: bool) -> dict[str, Any]:
    calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in generation.calls
    ]
    message = {
        "role": "assistant",
        "content": generation.text or None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": calls,
        "reasoning": generation.reasoning or None,
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": generation.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": generation.finish_reason,
                "stop_reason": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(generation, prompt_tokens_details),
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }
