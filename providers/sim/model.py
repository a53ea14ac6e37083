"""The simulator's deterministic "model".

Given the conversation and the tools offered, it either follows a scenario file (one step
per assistant message) or plans from the user's words: each clause of the task ("read
README.md and pyproject.toml, then grep for TODO") becomes one batch of parallel tool
calls, and once every batch has its results it writes a Markdown answer built from them.
The same request always gets the same reply.

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

`hotloop sim serve --fault FAULT` (repeatable) applies a fault to every request; a step's own
faults win over it. Forms: `drop:N`, `status:CODE[:retry-after=S][:times=N]`, `stall:S` (before
headers), `stall:S:after=N`, `invalid-utf8`, `huge-argument:N`, `duplicate-ids`,
`usage:FIELD=N[:FIELD=N…]`, `cut-arguments:N`. Its `times` counts per distinct request, so a
client's retry of the same request gets through.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeGuard

from hotloop.providers.sim.template import Call, Turn

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
)
OPENAI_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
ANTHROPIC_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
FLAG_FORMS = (
    "drop:N, status:CODE[:retry-after=S][:times=N], stall:S[:after=N], invalid-utf8, huge-argument:N, "
    "duplicate-ids, usage:FIELD=N[:FIELD=N…], cut-arguments:N"
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
        steps = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ScenarioError(f"cannot read scenario {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
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
        return isinstance(json.loads(arguments), dict)
    except json.JSONDecodeError:
        return False


def padded(arguments: str, size: int) -> str:
    """Object arguments grown to about `size` characters by a `"padding"` field; anything else unchanged."""
    if not _is_object(arguments):
        return arguments
    value = json.loads(arguments)
    bare = len(json.dumps({**value, "padding": ""}))
    return json.dumps({**value, "padding": "x" * max(size - bare, 0)})


def parse_faults(flags: Sequence[str]) -> Faults:
    """`hotloop sim serve --fault` flags as one set of faults; of two flags of a kind, the later wins."""
    faults = Faults()
    for flag in flags:
        faults = _flag_faults(flag).over(faults)
    return faults


_NUMBER_FLAGS = {"drop": "drop_after", "huge-argument": "huge_argument", "cut-arguments": "cut_arguments"}
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


def reply(turns: list[Turn], tools: list[dict[str, Any]], scenario: tuple[Reply, ...] = ()) -> Reply:
    """The reply to a conversation, from the scenario while it lasts, then from the planner.

    A side job (classify a task, title a conversation, summarize a tool result, compact the conversation) is answered
    whatever the scenario says: a scenario scripts the main agent's steps.
    """
    side_job = _side_job(turns)
    if side_job is not None:
        return side_job
    step = scenario_step(turns)
    if step < len(scenario):
        return scenario[step]
    last_user = max((i for i, turn in enumerate(turns) if turn.role == "user"), default=-1)
    task, earlier = _task_of(turns[last_user].text if last_user >= 0 else "")
    since = turns[last_user + 1 :]
    batches = plan(task, _tool_names(tools), _tool_schemas(tools))
    done = earlier + sum(1 for turn in since if turn.role == "assistant")
    if done < len(batches):
        return Reply(text=_preface(batches[done]), calls=tuple(batches[done]))
    return Reply(text=answer(task, since))


_SPLIT_PARTS = re.compile(
    r"[.;!?\n]+(?=\s|$)|\b(?:and then|then|after that|afterwards|also)\b"
    r"|\band (?=(?:add|fix|write|run|read|grep|list|update|refactor|test|explain|create|remove|delete|check|find)\b)",
    re.IGNORECASE,
)
_POLITE = re.compile(r"^(?:please|can you|could you|would you|i want you to|i'd like you to)\s+", re.IGNORECASE)
_SUMMARY_WORDS = re.compile(r"at most (\d+) words")
# hotloop's compaction instruction (agent/compaction.py) says this; the summary it asks for replaces the conversation.
_COMPACTING = "is about to be compacted"
_SUMMARY_BLOCK = re.compile(r"<summary>\n(.*)\n</summary>", re.DOTALL)
_ASKED, _CALLED = "- The user asked: ", "  - called "  # a compaction summary's lines


def _task_of(text: str) -> tuple[str, int]:
    """The request a user message makes, and how many batches of calls were made for it already.

    After a compaction the message holds the summary: the request that follows it, or, when the
    compaction came mid-turn, the summary's last request, past the calls the summary records (a
    model goes on from a summary; it doesn't start the work over).
    """
    found = _SUMMARY_BLOCK.search(text)
    if found is None:
        return _strip_context(text), 0
    if after := text[found.end() :].strip():
        return _strip_context(after), 0
    task, done = "", 0
    for line in found.group(1).splitlines():
        if line.startswith(_ASKED):
            task, done = line.removeprefix(_ASKED), 0
        elif line.startswith(_CALLED):
            done += 1
    return task, done


def _side_job(turns: list[Turn]) -> Reply | None:
    """A side job asked by its system prompt, or as the last paragraph of the request's last message (a user's)."""
    system = turns[0].text if turns and turns[0].role == "system" else ""
    first_user = next((turn.text for turn in turns if turn.role == "user"), "")
    fresh = _job(system, first_user)
    if fresh is not None or not turns or turns[-1].role != "user":
        return fresh
    # Asked at the end of the conversation it is about, to read its cached prefix: a title is about all of it.
    about, _, instruction = turns[-1].text.rpartition("\n\n")
    if _COMPACTING in instruction:
        return Reply(text=conversation_summary(turns[:-1]))
    return _job(instruction, about or first_user)


def _job(instruction: str, about: str) -> Reply | None:
    """The answer to a side job's `instruction` about a task, a transcript or a tool result; None if it is none."""
    if "Reply with one word: simple" in instruction:
        return Reply(text=classify(_strip_context(about)))
    if instruction.startswith(("Write a title", "Reply with only a title")):
        return Reply(text=title_for(about))
    if instruction.startswith("Summarize this tool result"):
        words = _SUMMARY_WORDS.search(instruction)
        return Reply(text=summary_of(about, int(words.group(1)) if words else 60))
    return None


def conversation_summary(turns: list[Turn]) -> str:
    """A compaction's summary: each request of the user, the tools it took, and the first line of the answer.

    An earlier summary (the conversation was compacted before) is kept whole at the top.
    """
    lines = ["## The conversation so far"]
    for turn in turns:
        if turn.role == "user" and (earlier := _SUMMARY_BLOCK.search(turn.text)):
            lines += earlier.group(1).splitlines()[1:]
        elif turn.role == "user":
            lines.append(f"{_ASKED}{_clipped(_strip_context(turn.text), 100)}")
        elif turn.role == "assistant" and turn.calls:
            calls = ", ".join(f"{call.name}({_clipped(call.arguments, 60)})" for call in turn.calls)
            lines.append(f"{_CALLED}{calls}")
        elif turn.role == "assistant":
            first = next((line for line in turn.text.splitlines() if line.strip(" #")), "")
            lines.append(f"  - answered: {_clipped(first.strip(' #'), 100)}")
    return "\n".join(lines)


def _clipped(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify(task: str) -> str:
    """simple or complex: a task of several parts, or a long one, is complex."""
    parts = [part for part in _SPLIT_PARTS.split(task) if part and part.strip(" ,")]
    return "complex" if len(parts) >= 2 or len(task.split()) > 25 else "simple"


def title_for(transcript: str) -> str:
    """The first request's first clause, in at most six words."""
    first = next((line[6:] for line in transcript.splitlines() if line.startswith("User: ")), transcript)
    clause = _CLAUSE_SPLIT.split(_strip_context(first))[0]
    words = _POLITE.sub("", clause.strip()).rstrip(" ,.?!").split()[:6]
    title = " ".join(words).rstrip(",")
    return title[:1].upper() + title[1:] if title else "Untitled session"


def summary_of(text: str, words: int) -> str:
    """The start of a tool result, cut at `words` words, and how much there was."""
    _, _, result = text.partition(" returned:\n")
    lines = (result or text).splitlines()
    kept: list[str] = []
    for line in lines:
        if sum(len(k.split()) for k in kept) + len(line.split()) > words:
            break
        kept.append(line)
    return "\n".join(kept) + f"\n… ({len(lines):,} lines, {len(result or text):,} characters in all)"


def thinking_for(task_turns: list[Turn], answer: Reply) -> str:
    """What the model "thinks" before a reply, for a client that asked for reasoning but got none planned."""
    last_user = next((turn.text for turn in reversed(task_turns) if turn.role == "user"), "")
    task = _headline(_strip_context(last_user))
    if answer.calls:
        names = ", ".join(sorted({call.name for call in answer.calls}))
        return (
            f"The task is: {task}. I need {len(answer.calls)} tool call(s) first ({names}); they can run in parallel."
        )
    return f"The task is: {task}. I have what I need to answer."


def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [name for name, _ in _iter_tools(tools)]


def _tool_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return dict(_iter_tools(tools))


def _iter_tools(tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for tool in tools:
        # OpenAI nests under "function" with "parameters"; Anthropic is flat with "input_schema".
        spec = tool.get("function", tool)
        schema = spec.get("parameters") or spec.get("input_schema") or {}
        if isinstance(spec.get("name"), str):
            found.append((spec["name"], schema if isinstance(schema, dict) else {}))
    return found


_CONTEXT_BLOCK = re.compile(r"<context>.*?</context>", re.DOTALL)
_CLAUSE_SPLIT = re.compile(r"\b(?:and then|then|after that|afterwards|next)\b|;", re.IGNORECASE)
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|`([^`]+)`")
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/])")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")
_BUILTIN_WORDS = {"read_file", "list_dir", "grep"}
_READ_WORDS = re.compile(r"\b(read|open|show|cat|view|look at|read_file)\b", re.IGNORECASE)
_LIST_WORDS = re.compile(r"\b(list|ls|directory|directories|folder|tree|list_dir)\b", re.IGNORECASE)
_LIST_TARGET = re.compile(r"\b(?:in|of|under)\s+([\w./-]+/?)", re.IGNORECASE)
_SEARCH_WORDS = re.compile(r"\b(grep|search|find|look for|occurrences)\b", re.IGNORECASE)
_SEARCH_TARGET = re.compile(r"\b(?:for|of)\s+([\w.:-]+)", re.IGNORECASE)


def _strip_context(text: str) -> str:
    return _CONTEXT_BLOCK.sub("", text).strip()


def plan(task: str, names: list[str], schemas: dict[str, dict[str, Any]]) -> list[list[Call]]:
    """Batches of parallel calls for the task: one batch per clause that asks for tools."""
    batches: list[list[Call]] = []
    seen: set[tuple[str, str]] = set()
    for clause in _CLAUSE_SPLIT.split(task):
        batch = []
        for name, arguments in _calls_for(clause, names, schemas):
            if (name, arguments) not in seen:
                seen.add((name, arguments))
                batch.append(Call(id="", name=name, arguments=arguments))
        if batch:
            batches.append(batch)
    return batches


def _calls_for(clause: str, names: list[str], schemas: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    quoted = [next(group for group in match.groups() if group) for match in _QUOTED.finditer(clause)]
    unquoted = _QUOTED.sub(" ", clause)
    calls: list[tuple[str, str]] = []
    for name in names:
        if name not in _BUILTIN_WORDS and re.search(rf"\b{re.escape(name)}\b", clause):
            calls.extend((name, json.dumps(args)) for args in _arguments_for(schemas[name], quoted, unquoted))
    searching = "grep" in names and _SEARCH_WORDS.search(unquoted)
    if "read_file" in names and (_READ_WORDS.search(unquoted) or not searching):
        calls.extend(("read_file", json.dumps({"path": path})) for path in _PATH.findall(unquoted))
    if "list_dir" in names and _LIST_WORDS.search(unquoted):
        listed = _LIST_TARGET.search(unquoted)
        calls.append(("list_dir", json.dumps({"path": listed.group(1).rstrip(".") if listed else "."})))
    if searching:
        target = quoted[0] if quoted else _search_target(unquoted)
        if target:
            calls.append(("grep", json.dumps({"pattern": target})))
    return calls


def _search_target(text: str) -> str | None:
    match = _SEARCH_TARGET.search(text)
    return match.group(1) if match else None


def _arguments_for(schema: dict[str, Any], quoted: list[str], text: str) -> list[dict[str, Any]]:
    """One argument object per value of the first required parameter found in the text."""
    properties = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties] or list(properties)[:1]
    if not required:
        return [{}]
    candidates = {name: _candidates(properties[name], quoted, text) for name in required}
    first = required[0]
    return [
        {name: (value if name == first else candidates[name][0]) for name in required} for value in candidates[first]
    ]


def _candidates(prop: Any, quoted: list[str], text: str) -> list[Any]:
    kind = prop.get("type") if isinstance(prop, dict) else None
    if kind in ("number", "integer"):
        numbers = [float(n) if kind == "number" else int(float(n)) for n in _NUMBER.findall(text)]
        return numbers or [1]
    if kind == "boolean":
        return [False]
    if kind == "string" or kind is None:
        return quoted or _PATH.findall(text) or [text.split()[-1].strip(".,!?") if text.split() else "x"]
    return [None]


def _preface(batch: list[Call]) -> str:
    names = sorted({call.name for call in batch})
    return f"Running {len(batch)} tool call{'s' if len(batch) != 1 else ''} ({', '.join(names)}).\n"


def answer(task: str, since: list[Turn]) -> str:
    """The final Markdown answer, built from the tool results gathered for this task."""
    calls = {call.id: call for turn in since if turn.role == "assistant" for call in turn.calls}
    results = [turn for turn in since if turn.role == "tool"]
    if not results:
        return _direct_answer(task)
    lines = [f"## Results for: {_headline(task)}", ""]
    lines.extend(_result_line(calls.get(result.call_id), result.text) for result in results)
    excerpt = _first_excerpt(calls, results)
    if excerpt:
        lines += ["", excerpt]
    steps = sum(1 for turn in since if turn.role == "assistant")
    lines += [
        "",
        f"{len(results)} tool result{'s' if len(results) != 1 else ''} from {steps} step{'s' if steps != 1 else ''}.",
    ]
    return "\n".join(lines)


def _headline(task: str) -> str:
    line = task.strip().splitlines()[0] if task.strip() else "(empty task)"
    return line if len(line) <= 80 else line[:77] + "..."


def _result_line(call: Call | None, text: str) -> str:
    label = f"`{call.name}` {call.arguments}" if call else "`tool`"
    body = text.strip()
    first = body.splitlines()[0] if body else "(no output)"
    if len(first) > 100:
        first = first[:97] + "..."
    lines = len(body.splitlines())
    return f"- {label}: {lines} line{'' if lines == 1 else 's'}; first: {first}"


_FENCE_LANGUAGE = {
    ".py": "python",
    ".toml": "toml",
    ".md": "markdown",
    ".json": "json",
    ".js": "javascript",
    ".ts": "typescript",
    ".rs": "rust",
    ".go": "go",
    ".sh": "bash",
    ".yaml": "yaml",
    ".yml": "yaml",
}


def _first_excerpt(calls: dict[str, Call], results: list[Turn]) -> str:
    for result in results:
        call = calls.get(result.call_id)
        if call is None or call.name != "read_file" or result.text.lower().startswith("error"):
            continue
        path = json.loads(call.arguments).get("path", "") if call.arguments.startswith("{") else ""
        language = _FENCE_LANGUAGE.get(Path(str(path)).suffix, "text")
        excerpt = "\n".join(result.text.splitlines()[:6]).replace("```", "'''")
        return f"First lines of `{path}`:\n\n```{language}\n{excerpt}\n```"
    return ""


_WORD_COUNT = re.compile(r"\b(\d{2,6})\s+(?:words|tokens)\b", re.IGNORECASE)
_FILLER = [
    "Prefix",
    "caching",
    "keeps",
    "the",
    "static",
    "part",
    "of",
    "every",
    "request",
    "warm,",
    "so",
    "each",
    "step",
    "pays",
    "only",
    "for",
    "the",
    "tokens",
    "it",
    "adds.",
    "Parallel",
    "tool",
    "calls",
    "overlap",
    "their",
    "waits.",
    "Streaming",
    "shows",
    "the",
    "first",
    "token",
    "as",
    "soon",
    "as",
    "the",
    "server",
    "has",
    "it.",
]


def _direct_answer(task: str) -> str:
    wanted = _WORD_COUNT.search(task)
    if wanted:
        return _long_answer(task, int(wanted.group(1)))
    return (
        f"## {_headline(task)}\n\n"
        "This answer comes from **hotloop's embedded simulator**, a deterministic stand-in for a "
        "vLLM server. It streams like one, caches prefixes like one and reports usage like one.\n\n"
        "- Ask it to *read* files by name, *list* a folder or *grep* for a word, and it calls tools.\n"
        "- Chain clauses with *then* to get several steps of parallel calls.\n"
        "- Ask for *N words* to get a long answer.\n"
    )


def _long_answer(task: str, words: int) -> str:
    paragraphs, sentence = [f"## {_headline(task)}", ""], []
    for n in range(words):
        sentence.append(_FILLER[n % len(_FILLER)])
        if len(sentence) >= 60:
            paragraphs += [" ".join(sentence), ""]
            sentence = []
    if sentence:
        paragraphs.append(" ".join(sentence))
    return "\n".join(paragraphs).rstrip() + "\n"
