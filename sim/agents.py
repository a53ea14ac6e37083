"""What agents wrap around the user's words, taken off so the model answers the request itself: hotloop's
`<context>`, Claude Code's `<system-reminder>`, Codex's `<environment_context>`, opencode's task sent as a JSON
string; where each says it works (for tools that want absolute paths); a file's text in their numbered reads; and
opencode's title job, which asks in its system prompt and sends the task after a line of its own.
"""

from __future__ import annotations

import json
import re

from hotloop.sim.template import Turn

_CONTEXT_BLOCK = re.compile(r"<(context|system-reminder|environment_context)>.*?</\1>", re.DOTALL)
# Claude Code's environment block, Codex's environment_context, opencode's <env>.
_WORKING_DIRECTORY = re.compile(
    r"Primary working directory: (/\S*)|<cwd>(/[^<]*)</cwd>|^\s*Working directory: (/\S*)", re.MULTILINE
)
# A read's result as the agents number it: Claude Code's `1\t# Demo`; opencode's `1: # Demo` inside <content>.
_TAB_NUMBERED = re.compile(r"\s*\d+\t(.*)")
_OPENCODE_READ = re.compile(r"<path>[^<]*</path>\n<type>file</type>\n<content>\n(.*)\n</content>", re.DOTALL)
_COLON_NUMBERED = re.compile(r"\d+: (.*)")
_OPENCODE_TITLE = "You are a title generator."
_OPENCODE_TITLE_SUBJECT = "Generate a title for this conversation:\n"


def strip_context(text: str) -> str:
    """The user's own words: the agents' context blocks taken out, and opencode's JSON string of the task read."""
    text = _CONTEXT_BLOCK.sub("", text).strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    try:  # `opencode run` sends its prompt as a JSON string: quotes around it, a quote inside it escaped
        unquoted = json.loads(text)
    except ValueError:  # quoted words, not a JSON string: `"a" and "b"`
        return text
    return unquoted.strip() if isinstance(unquoted, str) else text


def working_directory(turns: list[Turn]) -> str | None:
    """The folder the agent says it works in, for tools that want absolute paths; None if it says none."""
    for turn in turns:
        found = _WORKING_DIRECTORY.search(turn.text)
        if found is not None:
            return next(group for group in found.groups() if group)
    return None


def title_subject(turns: list[Turn]) -> str | None:
    """What opencode asks a title for, when its system prompt asks for one; None for any other request. Its
    user message comes as two text blocks, the line that asks and the task."""
    if not turns or turns[0].role != "system" or not turns[0].text.startswith(_OPENCODE_TITLE):
        return None
    asked = "".join(turn.text for turn in turns if turn.role == "user")
    return asked.removeprefix(_OPENCODE_TITLE_SUBJECT)


def file_text(result: str) -> str:
    """The file's text in a read tool's result, its line numbers taken off where the agent numbers them."""
    lines = result.splitlines()
    if lines and all(_TAB_NUMBERED.fullmatch(line) for line in lines):
        return "\n".join(_TAB_NUMBERED.sub(r"\1", line) for line in lines)
    opencode = _OPENCODE_READ.fullmatch(result.strip())
    if opencode is None:
        return result
    # The block ends with a note of its own, `(End of file - total 3 lines)`, past the numbered lines.
    numbered = (_COLON_NUMBERED.fullmatch(line) for line in opencode.group(1).splitlines())
    return "\n".join(found.group(1) for found in numbered if found is not None)
