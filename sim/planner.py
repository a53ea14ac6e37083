"""The simulator's planner: the tool calls a task asks for, batch by batch.

Each clause of the task ("read README.md and pyproject.toml, then grep for TODO") gives its
batches: first the calls that only look (reads, listings, searches, any tool named in it), then
the ones that act, in the order the clause asks for them: an edit, a write, a command. An edit
whose text isn't quoted is planned on the file as read: the batch that reads it comes first, and
the edit is made from the read's result (`resolved`), as a model edits what it has seen. A
quoted span is one value: its `;` or `then` splits nothing. It plans in hotloop's tools' words, and
the request's `Toolbox` (`toolbox.py`) makes each call with the tool offered for the job: Claude Code's `Read`, Codex's
`exec_command`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hotloop.sim import json_depth
from hotloop.sim.agents import file_text
from hotloop.sim.template import Call, Turn
from hotloop.sim.toolbox import ROLES, Toolbox


@dataclass(frozen=True)
class Edit:
    """An edit of `path` to make once the file has been read: `old` → `new` when the prompt quoted both; else
    on the line holding `old` (quoted alone), or the line that best matches `words`, marked with a comment."""

    path: str
    ask: str  # the clause, for the comment
    words: tuple[str, ...]
    old: str | None = None
    new: str | None = None


Planned = Call | Edit

_CLAUSE_SPLIT = re.compile(r"\b(?:and then|then|after that|afterwards|next)\b|;", re.IGNORECASE)
# An apostrophe inside a word ("the user's") opens no quote.
_QUOTED = re.compile(r"\"([^\"]+)\"|(?<!\w)'([^']+)'(?!\w)|`([^`]+)`")
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/])")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")
_READ_WORDS = re.compile(r"\b(read|open|show|cat|view|look at|read_file)\b", re.IGNORECASE)
_LIST_WORDS = re.compile(r"\b(list|ls|directory|directories|folder|tree|list_dir)\b", re.IGNORECASE)
# "in the src folder" names src; "in this folder", "of the current directory" name the working one.
_LIST_TARGET = re.compile(
    r"\b(?:in|of|under)\s+(?:(?:the|this|that|my|our|current|working)\s+)*([\w./-]+/?)", re.IGNORECASE
)
_HERE = frozenset({"folder", "directory", "dir", "project", "repo", "repository", "workspace", "here", "it"})
_SEARCH_WORDS = re.compile(r"\b(grep|search|find|look for|occurrences)\b", re.IGNORECASE)
_SEARCH_TARGET = re.compile(r"\b(?:for|of)\s+([\w.:-]+)", re.IGNORECASE)
_EDIT_WORDS = re.compile(r"\b(fix|change|edit|update|rename|replace|correct|modify|edit_file)\b", re.IGNORECASE)
_WRITE_WORDS = re.compile(r"\b(write|create|save|write_file)\b", re.IGNORECASE)
_RUN_WORDS = re.compile(r"\b(run|execute|run_shell)\b", re.IGNORECASE)
_RUN_UNQUOTED = re.compile(r"\s*([^,]*?)\s*(?:\band\b|,|$)", re.IGNORECASE)
_TESTS = re.compile(r"\b(tests?|test suite|pytest)\b", re.IGNORECASE)
# "run the tests", "run tests": words, not a command line.
_SAID_IN_WORDS = re.compile(r"^(?:the|a|an|my|our|some|all|it|them|this|that|to|with|tests?)\b", re.IGNORECASE)
_TRAILING = re.compile(r"(?:\s+(?:in|of|at|and|to|the|with))+$", re.IGNORECASE)
# A project's test command by the language of the files the task names; Python's otherwise.
_TEST_COMMANDS = {".js": "npm test", ".ts": "npm test", ".go": "go test ./...", ".rs": "cargo test"}
_TEST_COMMAND = "python3 -m pytest -q"
# Words of a request that say what to do, not what to look for in the file.
_PLAIN_WORDS = re.compile(
    r"(?:the|for|from|with|and|its|this|that|these|those|files?|lines?|please|then|run|tests?|"
    r"fix|change|edit|update|rename|replace|correct|modify)"
)
_COMMENTS = {
    **dict.fromkeys(("py", "sh", "rb", "toml", "yaml", "yml", "pl", "r", "cfg", "conf", "ini"), ("# ", "")),
    **dict.fromkeys(("js", "ts", "jsx", "tsx", "go", "rs", "c", "h", "cc", "cpp", "java", "kt", "swift"), ("// ", "")),
    **dict.fromkeys(("md", "html", "xml", "svg"), ("<!-- ", " -->")),
    **dict.fromkeys(("sql", "lua", "hs"), ("-- ", "")),
    "css": ("/* ", " */"),
}


def clauses(task: str) -> list[str]:
    """The task cut at `then`, `;` and the like, outside quotes."""
    masked = _QUOTED.sub(lambda match: "x" * len(match.group(0)), task)
    parts, start = [], 0
    for match in _CLAUSE_SPLIT.finditer(masked):
        parts.append(task[start : match.start()])
        start = match.end()
    return [*parts, task[start:]]


def plan(task: str, tools: Toolbox) -> list[list[Planned]]:
    """Batches of parallel calls for the task, each clause's in order; a call made already is not made again."""
    batches: list[list[Planned]] = []
    seen: set[tuple[str, str]] = set()
    for clause in clauses(task):
        for batch in _clause_batches(clause, tools):
            kept = [item for item in batch if isinstance(item, Edit) or (item.name, item.arguments) not in seen]
            seen.update((item.name, item.arguments) for item in kept if isinstance(item, Call))
            if kept:
                batches.append([item if isinstance(item, Edit) else tools.call(item) for item in kept])
    return batches


def resolved(batch: list[Planned], since: list[Turn], tools: Toolbox) -> list[Call]:
    """The batch's calls, its edits made from what the reads since the task began returned; an edit of a file
    that could not be read is dropped."""
    read = _read_results(since, [item.path for item in batch if isinstance(item, Edit)], tools)
    calls = [item if isinstance(item, Call) else _edit_call(item, read.get(item.path)) for item in batch]
    return [tools.call(call) for call in calls if call is not None]


def _clause_batches(clause: str, tools: Toolbox) -> list[list[Planned]]:
    # Verbs are looked for outside quotes: `write "run fast" to notes.txt` runs nothing.
    masked = _QUOTED.sub(lambda match: "x" * len(match.group(0)), clause)
    quoted = [(next(group for group in match.groups() if group), match.start()) for match in _QUOTED.finditer(clause)]
    text = _QUOTED.sub(" ", clause)
    acts: list[tuple[int, list[Planned]]] = []
    available = tools.available
    run = _RUN_WORDS.search(masked) if "run_shell" in available else None
    command = _command(clause, run, quoted) if run is not None else None
    if run is not None and command is not None:
        acts.append((run.start(), [_call("run_shell", {"command": command})]))
        text = text.replace(command, " ", 1)  # an unquoted command's words name no file to read
    paths = list(dict.fromkeys([*_PATH.findall(text), *(value for value, _ in quoted if _PATH.fullmatch(value))]))
    values = [value for value, _ in quoted if value != command and value not in paths]
    write = _WRITE_WORDS.search(masked) if "write_file" in available else None
    edit = _EDIT_WORDS.search(masked) if {"edit_file", "read_file"} <= available else None
    if write is not None and paths and values:
        contents = values.pop(0) + "\n"
        acts.append((write.start(), [_call("write_file", {"path": path, "content": contents}) for path in paths]))
    elif edit is not None and paths:
        old, new = (values[0], values[1] if len(values) > 1 else None) if values else (None, None)
        values = values[2:]
        ends = run.start() if run is not None and run.start() > edit.start() else len(clause)
        ask = _PATH.sub(" ", _QUOTED.sub(" ", clause[edit.start() : ends]))
        words = re.findall(r"[a-z][a-z0-9_]{2,}", _PATH.sub(" ", text).lower())
        said = _TRAILING.sub("", " ".join(ask.split()))
        subject = tuple(word for word in words if not _PLAIN_WORDS.fullmatch(word))
        acts.append((edit.start(), [Edit(path, said, subject, old, new) for path in paths]))
    looking = _looking(clause, values, text, tools, acting=bool(acts))
    looking += [
        _call("read_file", {"path": item.path}) for _, items in acts for item in items if isinstance(item, Edit)
    ]
    batches: list[list[Planned]] = [list(dict.fromkeys(looking))]
    batches += [items for _, items in sorted(acts, key=lambda act: act[0])]
    return [batch for batch in batches if batch]


def _command(clause: str, run: re.Match[str], quoted: list[tuple[str, int]]) -> str | None:
    """The command `run` asks for: the first quoted after it, the project's tests, or the words that follow it."""
    for value, start in quoted:
        if start > run.start():
            return value
    after = _RUN_UNQUOTED.match(_QUOTED.sub(" ", clause[run.end() :]))
    words = after.group(1) if after is not None else ""
    if not _SAID_IN_WORDS.match(words):
        return words or None
    if not _TESTS.search(words):
        return None
    suffixes = [PurePosixPath(path).suffix for path in _PATH.findall(clause)]
    return next((_TEST_COMMANDS[suffix] for suffix in suffixes if suffix in _TEST_COMMANDS), _TEST_COMMAND)


def _looking(clause: str, quoted: list[str], text: str, tools: Toolbox, acting: bool) -> list[Call]:
    """The calls that only look: tools the clause names, reads of the files it names, a listing, a search."""
    calls: list[Call] = []
    for name, schema in tools.unbound.items():
        if name not in ROLES and re.search(rf"\b{re.escape(name)}\b", clause):
            calls.extend(_call(name, args) for args in _arguments_for(schema, quoted, text))
    available = tools.available
    searching = "grep" in available and _SEARCH_WORDS.search(text)
    if "read_file" in available and (_READ_WORDS.search(text) or not (searching or acting)):
        calls.extend(_call("read_file", {"path": path}) for path in _PATH.findall(text))
    if "list_dir" in available and _LIST_WORDS.search(text):
        listed = _LIST_TARGET.search(text)
        target = listed.group(1).rstrip(".") if listed else ""
        calls.append(_call("list_dir", {"path": "." if not target or target.lower() in _HERE else target}))
    if searching:
        target = quoted[0] if quoted else _search_target(text)
        if target:
            calls.append(_call("grep", {"pattern": target}))
    return calls


def _call(name: str, arguments: dict[str, Any]) -> Call:
    return Call(id="", name=name, arguments=json.dumps(arguments))


def _search_target(text: str) -> str | None:
    match = _SEARCH_TARGET.search(text)
    return match.group(1) if match else None


def _read_results(since: list[Turn], wanted: list[str], tools: Toolbox) -> dict[str, str]:
    """What each `wanted` file read since the task began held, by path (the last read of it); failed reads left
    out. A read is known by the call the toolbox makes for it; an agent's own read tool numbers the lines."""
    reads = {_key(tools.call(_call("read_file", {"path": path}))): path for path in wanted}
    paths = {call.id: reads[_key(call)] for turn in since for call in turn.calls if _key(call) in reads}
    reader = tools.roles.get("read_file")
    numbered = reader is not None and reader.name != "read_file"
    return {
        paths[turn.call_id]: file_text(turn.text) if numbered else turn.text
        for turn in since
        if turn.role == "tool" and turn.call_id in paths and not turn.text.startswith("error")
    }


def _key(call: Call) -> tuple[str, str]:
    """A call by its tool and its arguments, whatever their order and spacing."""
    try:
        return call.name, json.dumps(json_depth.loads(call.arguments), sort_keys=True)
    except ValueError:  # not JSON, or nested too deep
        return call.name, call.arguments


def _edit_call(edit: Edit, content: str | None) -> Call | None:
    """The edit_file call for `edit` on the file's `content`; None if it wasn't read."""
    if content is None:
        return None
    if edit.old is not None and edit.new is not None:
        arguments: dict[str, Any] = {"path": edit.path, "old_string": edit.old, "new_string": edit.new}
        return _call("edit_file", arguments | ({"replace_all": True} if content.count(edit.old) > 1 else {}))
    lines = content.splitlines()
    start = _best_line(lines, edit)
    if start is None:
        return None
    old = lines[start]
    for line in lines[start + 1 :]:  # edit_file wants text found once: take the next lines until it is
        if content.count(old) <= 1:
            break
        old += "\n" + line
    opening, closing = _COMMENTS.get(PurePosixPath(edit.path).suffix.lstrip(".").lower(), ("(", ")"))
    first, newline, rest = old.partition("\n")
    new = f"{first}  {opening}hotloop sim: {edit.ask}{closing}{newline}{rest}"
    return _call("edit_file", {"path": edit.path, "old_string": old, "new_string": new})


def _best_line(lines: list[str], edit: Edit) -> int | None:
    """The line holding the quoted text, else the one with the most of the clause's words (their first five
    letters: `greeting` finds `greet`), the first on a tie; None for a file with no text."""
    candidates = [n for n, line in enumerate(lines) if line.strip() and not line.startswith("[lines ")]
    if edit.old is not None:
        candidates = [n for n in candidates if edit.old in lines[n]]
    stems = [word[:5] for word in edit.words]
    return max(candidates, key=lambda n: (sum(stem in lines[n].lower() for stem in stems), -n), default=None)


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
