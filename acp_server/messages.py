"""Each line from the client checked as one JSON-RPC 2.0 message before the SDK's receive loop sees it.

The loop takes whatever JSON a line decodes to as a message object, and dies on what isn't one (an array, a
number, an id that can't be a dict key, an error that isn't an object): one such line would end the agent. Here
a line that can't be read is refused with the spec's error: `-32700` for one that is not JSON, not UTF-8 or
nested deeper than `nesting.LIMIT` levels; `-32600` for one that is no message object (a batch, a number), or
whose id or method is of the wrong type; `-32602` for params that aren't an object. The reply names the
request's id when it could be read, else `null`, and a notification gets none, as the spec says. Unknown
methods pass: the SDK answers them `-32601`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from hotloop.agent.text import inert
from hotloop.nesting import TooDeep, decoded

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32602, -32603
TITLES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid request", INVALID_PARAMS: "Invalid params"}
Id = str | int | float | None
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # only an escape can make a lone surrogate
_SURROGATE = re.compile("[\ud800-\udfff]")  # left after decoding, each is lone: a pair decodes as one character
Message = dict[str, Any]


@dataclass(frozen=True)
class Refused:
    """A line that is no message ACP can take: why, and the error reply it gets (None for a notification)."""

    code: int
    reason: str
    id: Id = None
    answered: bool = True

    def reply(self) -> Message | None:
        if not self.answered:
            return None
        error = {"code": self.code, "message": TITLES[self.code], "data": {"message": self.reason}}
        return {"jsonrpc": "2.0", "id": self.id, "error": error}

    def line(self) -> str:
        """The one line the agent's log gets."""
        return f"hotloop: refused a message from the client ({TITLES[self.code].lower()}): {inert(self.reason)}"


def checked(line: bytes) -> Message | Refused:
    """The line as a message the SDK can take, or why not."""
    try:
        text = line.decode()
    except UnicodeDecodeError as error:
        return Refused(PARSE_ERROR, f"not UTF-8: {error.reason} at byte {error.start:,}")
    try:
        message = decoded(_decode, text)
    except TooDeep as error:
        return Refused(PARSE_ERROR, f"JSON {error.msg}")
    except ValueError as error:  # not JSON, NaN, a number of more than 4,300 digits
        return Refused(PARSE_ERROR, f"not JSON: {_short(str(error))}")
    if isinstance(message, list):
        return Refused(INVALID_REQUEST, "a batch (a JSON array): ACP takes one message a line")
    if not isinstance(message, dict):
        return Refused(INVALID_REQUEST, f"a JSON {_kind(message)}, not a message object")
    has_id, request_id = "id" in message, message.get("id")
    if has_id and not _is_id(request_id):
        return Refused(INVALID_REQUEST, f"an id must be a string or a number, not {_kind(request_id)}")
    if "method" in message:
        return _request(message, request_id, has_id, text)
    if not has_id:
        return Refused(INVALID_REQUEST, "neither a request (a method) nor a response (an id)")
    return _response(message)


def _request(message: Message, request_id: Id, has_id: bool, text: str) -> Message | Refused:
    method = message["method"]
    if not isinstance(method, str):
        return Refused(INVALID_REQUEST, f"a method must be a string, not {_kind(method)}", request_id)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        reason = f"{_short(method)}'s params must be an object, not {_kind(params)}"
        return Refused(INVALID_PARAMS, reason, request_id, answered=has_id)
    if params is not None and _SURROGATE_ESCAPE.search(text):
        message["params"] = _mended(params)
    return message


def _mended(value: Any) -> Any:
    """`value` with each lone surrogate (`\\ud83d`: half an emoji a JavaScript client cut) as U+FFFD, as a UTF-8
    decoder reads a broken sequence: no text with one can be written to a log, a request or a file."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mended(item) for item in value]
    if isinstance(value, dict):
        return {_mended(key): _mended(item) for key, item in value.items()}
    return value


def _response(message: Message) -> Message | Refused:
    """A client's answer to one of the agent's requests; a malformed error still fails the request it answers."""
    if "result" not in message and "error" not in message:
        return Refused(INVALID_REQUEST, "a response with neither a result nor an error")
    error = message.get("error")
    if "result" not in message and not (isinstance(error, dict) and isinstance(error.get("code"), int)):
        said = {"code": INTERNAL_ERROR, "message": f"the client answered with a malformed error: {_kind(error)}"}
        return {**message, "error": said}
    return message


def _is_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return value is None or isinstance(value, str | int) or (isinstance(value, float) and math.isfinite(value))


def _decode(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number out of range"
    if isinstance(value, int | float):
        return "number"
    kinds = {str: "string", list: "array", dict: "object", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
