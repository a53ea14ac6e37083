"""Scenario files and faults: what a step says, and how a reply misbehaves on purpose.

A scenario is a JSON list of steps: the first answers a request with no assistant message
yet, the next one a request with one, and so on, so a retried request meets the same step
again. A step is an object of these fields, checked strictly (`ScenarioError`, one line):

- `text`, `reasoning`: strings; `tool_calls`: `[{"name", "arguments"}]`, arguments an object,
  or a string sent verbatim (malformed JSON on purpose); `decode_ms`: the step's time per
  output token; `error`: `overloaded_error` or `api_error`, the stream fails after the text.

And the faults, each a way a broken server misbehaves. Those about stream chunks
(`drop_after`, `stall.after_chunks`, `invalid_utf8`) leave an answer without `stream` whole.

- `drop_after`: N: close the connection after N stream chunks, without the stream's end.
- `status`: an HTTP error status (e.g. 429, 500, 503, 529): answer it instead, with the
  protocol's error body; `retry_after`: S adds a `retry-after` header (seconds); `times`: N
  refuses only the first N requests that reach this step, then it answers (default: always).
  A refused request caches nothing; the server records it with its status and no tokens.
- `stall`: `{"before_headers": S}` sends nothing, not even headers, for S seconds (streamed or
  not); `{"after_chunks": N, "seconds": S}` goes silent after N stream chunks, then resumes.
- `invalid_utf8`: true: one streamed chunk (the first text, else reasoning or arguments) has
  a 0xff byte inside its JSON string.
- `huge_argument`: N: the first tool call's arguments (an object) grow to about N characters
  with a `"padding"` field; streamed like any other arguments, about 8 characters a chunk.
- `duplicate_ids`: true: every tool call of the step gets the first one's id.
- `usage`: `{field: integer}` overrides the reported usage, nonsense welcome. OpenAI:
  `prompt_tokens`, `completion_tokens`, `total_tokens`, `cached_tokens` (into
  `prompt_tokens_details`); Anthropic: `input_tokens`, `output_tokens`,
  `cache_read_input_tokens`, `cache_creation_input_tokens`. Each protocol ignores the other's.
- `cut_arguments`: N: the first tool call ends after N characters of its arguments, the
  calls after it are dropped, and the message ends as the output limit ends it
  (`finish_reason: "length"`; Anthropic `stop_reason: "max_tokens"`).
- `deep_json`: N: the JSON of the first stream chunk, of a whole answer, or of a `status` fault's
  error body starts with a field `"nested"` of arrays N levels deep (`[[[…]]]`), as from a hostile
  server: a parser that recurses per level runs out of stack.

`hotloop sim serve --fault FAULT` (repeatable) applies a fault to every request; a step's own
faults win over it. Forms: `drop:N`, `status:CODE[:retry-after=S][:times=N]`, `stall:S` (before
headers), `stall:S:after=N`, `invalid-utf8`, `huge-argument:N`, `duplicate-ids`,
`usage:FIELD=N[:FIELD=N…]`, `cut-arguments:N`, `deep-json:N`. Its `times` counts per distinct request, so a
client's retry of the same request gets through.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeGuard

from hotloop.sim import json_depth
from hotloop.sim.template import Call, Turn

# Errors a scenario step can end with, mid-stream, after its text: (HTTP status, message).
STREAM_ERRORS = {"overloaded_error": (529, "Overloaded"), "api_error": (500, "Internal server error")}
STEP_FIELDS = (
    "text",
    "reasoning",
    "tool_calls",
    "error",
    "decode_ms",
    "drop_after",
    "status",
    "retry_after",
    "times",
    "stall",
    "invalid_utf8",
    "huge_argument",
    "duplicate_ids",
    "usage",
    "cut_arguments",
    "deep_json",
)
OPENAI_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
ANTHROPIC_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
FLAG_FORMS = (
    "drop:N, status:CODE[:retry-after=S][:times=N], stall:S[:after=N], invalid-utf8, huge-argument:N, "
    "duplicate-ids, usage:FIELD=N[:FIELD=N…], cut-arguments:N, deep-json:N"
)


@dataclass(frozen=True)
class Refusal:
    """An HTTP error status instead of a reply, `times` times (None: every time)."""

    status: int
    retry_after: float | None = None
    times: int | None = None


@dataclass(frozen=True)
class Stall:
    """Silence before the headers, and/or for `seconds` after `after_chunks` stream chunks."""

    before_headers: float = 0.0
    after_chunks: int | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Faults:
    """How a reply misbehaves on purpose (the module docstring says how each works); none by default."""

    drop_after: int | None = None
    refusal: Refusal | None = None
    stall: Stall | None = None
    invalid_utf8: bool = False
    huge_argument: int | None = None
    duplicate_ids: bool = False
    usage: tuple[tuple[str, int], ...] = ()
    cut_arguments: int | None = None
    deep_json: int | None = None

    def over(self, base: Faults) -> Faults:
        """These faults on top of `base`: each one set here wins."""
        changed = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}
        return replace(base, **changed)


@dataclass(frozen=True)
class Reply:
    text: str = ""
    reasoning: str = ""
    calls: tuple[Call, ...] = ()
    error: str = ""
    decode_per_token: float | None = None  # a scenario step's own decode pace, e.g. slow, with long tool arguments
    faults: Faults = Faults()


class ScenarioError(ValueError):
    """A scenario file (or a `--fault` flag) that cannot be used; the message names it and the problem."""


def load_scenario(path: str | Path) -> tuple[Reply, ...]:
    """Read a scenario: a JSON list of steps, each an object of `STEP_FIELDS` (the module docstring has them)."""
    try:
        steps = json_depth.loads(Path(path).read_bytes())
    except OSError as error:
        raise ScenarioError(f"cannot read scenario {path}: {error.strerror}") from None
    except ValueError as error:  # not JSON, not UTF-8, or nested too deep
        raise ScenarioError(f"scenario {path} is not valid JSON: {error}") from None
    if not isinstance(steps, list) or not steps:
        raise ScenarioError(f"scenario {path} must be a non-empty JSON list of steps")
    return tuple(_scenario_step(step, f"scenario {path} step {n}") for n, step in enumerate(steps, 1))


def _scenario_step(step: Any, where: str) -> Reply:
    if not isinstance(step, dict):
        raise ScenarioError(f"{where}: a step must be an object (got {type(step).__name__})")
    _known(step, STEP_FIELDS, where)
    text, reasoning = step.get("text", ""), step.get("reasoning", "")
    if not isinstance(text, str) or not isinstance(reasoning, str):
        raise ScenarioError(f"{where}: text and reasoning must be strings")
    error = step.get("error", "")
    if error and error not in STREAM_ERRORS:
        raise ScenarioError(f"{where}: error must be one of {', '.join(STREAM_ERRORS)} (got {error!r})")
    decode_ms = _seconds(step, "decode_ms", where)
    answer = Reply(
        text=text,
        reasoning=reasoning,
        calls=_calls(step.get("tool_calls", []), where),
        error=error,
        decode_per_token=decode_ms / 1000 if decode_ms is not None else None,
        faults=_faults(step, where),
    )
    _check_targets(answer, where)
    return answer


def _calls(raw: Any, where: str) -> tuple[Call, ...]:
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: tool_calls must be a list of {{name, arguments}} objects")
    calls = []
    for n, call in enumerate(raw, 1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ScenarioError(f"{where}: tool call {n} needs a string 'name'")
        _known(call, ("name", "arguments"), f"{where}: tool call {n}")
        arguments = call.get("arguments", {})
        # A string is sent verbatim, so a scenario can feed a client malformed JSON on purpose.
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(Call(id="", name=call["name"], arguments=text))
    return tuple(calls)


def _faults(step: dict[str, Any], where: str) -> Faults:
    return Faults(
        drop_after=_whole(step, "drop_after", where),
        refusal=_refusal(step, where),
        stall=_stall(step["stall"], where) if "stall" in step else None,
        invalid_utf8=_switch(step, "invalid_utf8", where),
        huge_argument=_whole(step, "huge_argument", where, least=1),
        duplicate_ids=_switch(step, "duplicate_ids", where),
        usage=_usage(step.get("usage", {}), where),
        cut_arguments=_whole(step, "cut_arguments", where),
        deep_json=_whole(step, "deep_json", where, least=1),
    )


def _refusal(step: dict[str, Any], where: str) -> Refusal | None:
    status = _whole(step, "status", where, least=400)
    if status is None:
        if "retry_after" in step or "times" in step:
            raise ScenarioError(f"{where}: retry_after and times need a status")
        return None
    if status != 529 and (status > 599 or status not in {known.value for known in HTTPStatus}):
        raise ScenarioError(
            f"{where}: status must be a known HTTP error status, e.g. 429, 500, 503 or 529 (got {status})"
        )
    return Refusal(status, _seconds(step, "retry_after", where), _whole(step, "times", where, least=1))


def status_phrase(status: int) -> str:
    """The status's reason phrase; 529 is Anthropic's own, "Overloaded"."""
    return "Overloaded" if status == 529 else HTTPStatus(status).phrase


def _stall(raw: Any, where: str) -> Stall:
    if not isinstance(raw, dict) or not raw:
        raise ScenarioError(f'{where}: stall must be {{"before_headers": S}} or {{"after_chunks": N, "seconds": S}}')
    _known(raw, ("before_headers", "after_chunks", "seconds"), f"{where}: stall")
    after, seconds = _whole(raw, "after_chunks", where, label="stall."), _seconds(raw, "seconds", where, "stall.")
    if (after is None) != (seconds is None):
        raise ScenarioError(f"{where}: stall.after_chunks and stall.seconds go together")
    return Stall(_seconds(raw, "before_headers", where, "stall.") or 0.0, after, seconds or 0.0)


def _usage(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, dict):
        raise ScenarioError(f'{where}: usage must be an object of token counts, e.g. {{"prompt_tokens": -50}}')
    _known(raw, OPENAI_USAGE + ANTHROPIC_USAGE, f"{where}: usage")
    for key, value in raw.items():
        if not _is_int(value):
            raise ScenarioError(f"{where}: usage.{key} must be a whole number (got {value!r})")
    return tuple(raw.items())


def _check_targets(answer: Reply, where: str) -> None:
    """Faults that act on a step's tool calls or text need some to act on."""
    faults, calls = answer.faults, answer.calls
    if (faults.huge_argument or faults.cut_arguments is not None) and not calls:
        raise ScenarioError(f"{where}: huge_argument and cut_arguments need tool_calls")
    if faults.huge_argument and not _is_object(calls[0].arguments):
        raise ScenarioError(f"{where}: huge_argument pads the first tool call's arguments, which must be an object")
    if faults.duplicate_ids and len(calls) < 2:
        raise ScenarioError(f"{where}: duplicate_ids needs at least two tool_calls")
    if faults.invalid_utf8 and not (answer.text or answer.reasoning or calls):
        raise ScenarioError(f"{where}: invalid_utf8 needs text, reasoning or tool_calls to put the byte in")


def _known(mapping: dict[str, Any], known: Sequence[str], where: str) -> None:
    unknown = [key for key in mapping if key not in known]
    if unknown:
        raise ScenarioError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(known)})")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole(mapping: dict[str, Any], key: str, where: str, least: int = 0, label: str = "") -> int | None:
    """The whole number at `key`, at least `least`; None when the key is absent."""
    if key not in mapping:
        return None
    value = mapping[key]
    if not _is_int(value) or value < least:
        raise ScenarioError(f"{where}: {label}{key} must be a whole number, {least} or more (got {value!r})")
    return value


def _seconds(mapping: dict[str, Any], key: str, where: str, label: str = "") -> float | None:
    """The number at `key`, 0 or more; None when the key is absent."""
    if key not in mapping:
        return None
    value = mapping[key]
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < math.inf:
        raise ScenarioError(f"{where}: {label}{key} must be a number, 0 or more (got {value!r})")
    return float(value)


def _switch(mapping: dict[str, Any], key: str, where: str) -> bool:
    value = mapping.get(key, False)
    if not isinstance(value, bool):
        raise ScenarioError(f"{where}: {key} must be true or false (got {value!r})")
    return value


def _is_object(arguments: str) -> bool:
    try:
        return isinstance(json_depth.loads(arguments), dict)
    except ValueError:
        return False


def padded(arguments: str, size: int) -> str:
    """Object arguments grown to about `size` characters by a `"padding"` field; anything else unchanged."""
    if not _is_object(arguments):
        return arguments
    value = json.loads(arguments)
    bare = len(json.dumps({**value, "padding": ""}))
    return json.dumps({**value, "padding": "x" * max(size - bare, 0)})


def nested_in(data: bytes, depth: int) -> bytes:
    """JSON (a body, or an SSE event's) with a `"nested"` field of arrays `depth` levels deep first in its object."""
    at = data.find(b"{") + 1
    return data[:at] + b'"nested":' + b"[" * depth + b"]" * depth + b"," + data[at:]


def parse_faults(flags: Sequence[str]) -> Faults:
    """`hotloop sim serve --fault` flags as one set of faults; of two flags of a kind, the later wins."""
    faults = Faults()
    for flag in flags:
        faults = _flag_faults(flag).over(faults)
    return faults


_NUMBER_FLAGS = {
    "drop": "drop_after",
    "huge-argument": "huge_argument",
    "cut-arguments": "cut_arguments",
    "deep-json": "deep_json",
}
_SWITCH_FLAGS = {"invalid-utf8": "invalid_utf8", "duplicate-ids": "duplicate_ids"}


def _flag_faults(flag: str) -> Faults:
    """One flag, NAME[:VALUE][:OPTION=VALUE…], checked as the scenario fields it stands for."""
    name, *parts = flag.split(":")
    values = [_scalar(part) for part in parts if "=" not in part]
    options = {key: _scalar(value) for key, _, value in (part.partition("=") for part in parts if "=" in part)}
    where = f"--fault {flag}"
    return _faults(_flag_step(name, values, options, where), where)


def _flag_step(name: str, values: list[Any], options: dict[str, Any], where: str) -> dict[str, Any]:
    if name in _SWITCH_FLAGS and not values and not options:
        return {_SWITCH_FLAGS[name]: True}
    if name == "usage" and not values and options:
        return {"usage": options}
    if len(values) == 1:
        if name in _NUMBER_FLAGS and not options:
            return {_NUMBER_FLAGS[name]: values[0]}
        if name == "status" and set(options) <= {"retry-after", "times"}:
            return {"status": values[0], **{key.replace("-", "_"): value for key, value in options.items()}}
        if name == "stall" and set(options) <= {"after"}:
            if options:
                return {"stall": {"after_chunks": options["after"], "seconds": values[0]}}
            return {"stall": {"before_headers": values[0]}}
    raise ScenarioError(f"{where}: expected one of {FLAG_FORMS}")


def _scalar(text: str) -> Any:
    """A flag's value as JSON (2, 0.5, -50), or the text itself, for the check to name."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def scenario_step(turns: list[Turn]) -> int:
    """The scenario step that answers a conversation: one per assistant message already in it."""
    return sum(1 for turn in turns if turn.role == "assistant")
