"""The user's own words in a prompt: agents put their context in the user's message too.

Claude Code sends `<system-reminder>` blocks ahead of the prompt in the same message; Codex sends its
`<environment_context>`, `<user_instructions>`, AGENTS.md and `<turn_aborted>` as user messages of their own;
`opencode run` sends the prompt as a JSON string, quotes and escapes included.
A title (the listing, `show`, the waterfall, the watch's table) is the first line of what follows such blocks;
an importer takes a message of context alone for no prompt at all. One rule for all of them.
"""

from __future__ import annotations

import json
import re

# A block an agent wraps its context in, ahead of the words: a tag of its own (`system-reminder`,
# `environment_context`, `command-name`), never a plain HTML one the user may start with (`<b>`).
_WRAPPED = re.compile(r"\s*<([A-Za-z]+[_-][A-Za-z_-]*)(?:\s[^>]*)?>.*?</\1>", re.DOTALL)
# Codex's AGENTS.md comes as a user message of its own, headed so.
_CONTEXT_HEADINGS = ("# AGENTS.md",)
HEADLINE_LENGTH = 80


def users_words(prompt: str) -> str:
    """`prompt` without the agent's tagged context ahead of the user's words; "" if it is context alone."""
    if prompt.lstrip().startswith(_CONTEXT_HEADINGS):
        return ""
    while (wrapped := _WRAPPED.match(prompt)) is not None:
        prompt = prompt[wrapped.end() :]
    return _unquoted(prompt.strip())


def _unquoted(words: str) -> str:
    """opencode's JSON string read; quoted words that aren't one (`"a" and "b"`) kept as written."""
    if len(words) < 2 or words[0] != '"' or words[-1] != '"':
        return words
    try:
        decoded = json.loads(words)
    except ValueError:
        return words
    return decoded.strip() if isinstance(decoded, str) else words


def headline(prompt: str, length: int = HEADLINE_LENGTH) -> str:
    """The first line of the user's own words in `prompt`, at most `length` characters (`…` where cut)."""
    first = next((line.strip() for line in users_words(prompt).splitlines() if line.strip()), "")
    return first if len(first) <= length else first[: length - 1] + "…"
