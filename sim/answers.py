"""What the simulator's "model" writes: the answer built from a task's tool results, and its help.

The help is its answer to a prompt that asks for no tools ("help", "what can you do"): it says
which words make it call which tools.
"""

from __future__ import annotations

import re
from pathlib import Path

from hotloop.sim import json_depth
from hotloop.sim.template import Call, Turn


def preface(batch: list[Call]) -> str:
    names = sorted({call.name for call in batch})
    return f"Running {len(batch)} tool call{'s' if len(batch) != 1 else ''} ({', '.join(names)}).\n"


def answer(task: str, since: list[Turn]) -> str:
    """The final Markdown answer, built from the tool results gathered for this task."""
    calls = {call.id: call for turn in since if turn.role == "assistant" for call in turn.calls}
    results = [turn for turn in since if turn.role == "tool"]
    if not results:
        return _direct_answer(task)
    lines = [f"## Results for: {headline(task)}", ""]
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


def headline(task: str) -> str:
    line = task.strip().splitlines()[0] if task.strip() else "(empty task)"
    return line if len(line) <= 80 else line[:77] + "..."


def _result_line(call: Call | None, text: str) -> str:
    label = f"`{call.name}` {_code(call.arguments)}" if call else "`tool`"
    body = text.strip()
    first = body.splitlines()[0] if body else "(no output)"
    if len(first) > 100:
        first = first[:97] + "..."
    lines = len(body.splitlines())
    return f"- {label}: {lines} line{'' if lines == 1 else 's'}; first: {_code(first)}"


def _code(text: str) -> str:
    """`text` quoted as code, as a model quotes a tool's words: Markdown shows `__init__.py` as it is, not bold."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


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
        path = _path_of(call.arguments)
        language = _FENCE_LANGUAGE.get(Path(str(path)).suffix, "text")
        excerpt = "\n".join(result.text.splitlines()[:6]).replace("```", "'''")
        return f"First lines of `{path}`:\n\n```{language}\n{excerpt}\n```"
    return ""


def _path_of(arguments: str) -> object:
    """A call's `path` argument; "" when its arguments (a client's, in the history) are no JSON object."""
    try:
        value = json_depth.loads(arguments)
    except ValueError:
        return ""
    return value.get("path", "") if isinstance(value, dict) else ""


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
    return f"## {headline(task)}\n\n{HELP}"


HELP = """This answer comes from **hotloop's embedded simulator**, a deterministic stand-in for a \
vLLM server. It streams like one, caches prefixes like one and reports usage like one. Its words \
for the tools:

- *Read* files by name, *list* a folder or *grep* for a word.
- *Fix*, *change* or *update* something in a file (`fix the greeting in src/app.py`): it reads the \
file, then edits the line that best matches your words, marking it with a comment. Quote the text \
to change it exactly: `change "Helo" to "Hello" in src/app.py`.
- *Write* quoted text to a file: `write "a note" to notes.txt`.
- *Run* a quoted command (`run "make test"`) or *run the tests*: the shell runs it.
- An edit, a write or a command runs once you allow it (or with `--yes`).
- Chain clauses with *then* for several steps; each clause's calls run in parallel.
- Ask for *N words* to get a long answer.
"""


def _long_answer(task: str, words: int) -> str:
    paragraphs, sentence = [f"## {headline(task)}", ""], []
    for n in range(words):
        sentence.append(_FILLER[n % len(_FILLER)])
        if len(sentence) >= 60:
            paragraphs += [" ".join(sentence), ""]
            sentence = []
    if sentence:
        paragraphs.append(" ".join(sentence))
    return "\n".join(paragraphs).rstrip() + "\n"
