"""The simulator's deterministic "model".

Given the conversation and the tools offered, it either follows a scenario file (one step
per assistant message) or plans from the user's words: each clause of the task ("read
README.md and pyproject.toml, then grep for TODO") becomes one batch of parallel tool
calls, and once every batch has its results it writes a Markdown answer built from them.
The same request always gets the same reply.

A scenario file, and the faults a reply can carry, are `scenario.py`'s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hotloop.sim.scenario import Reply, scenario_step
from hotloop.sim.template import Call, Turn


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
