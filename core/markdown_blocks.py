"""The structure of a Markdown document: where its top-level blocks start, and its code blocks.

Both use the parser that rich's Markdown uses, so they agree with what it renders.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


@lru_cache(maxsize=1)
def parser() -> MarkdownIt:
    """The one parser, configured as rich's Markdown configures its own."""
    from markdown_it import MarkdownIt

    return MarkdownIt().enable("strikethrough").enable("table")


def block_starts(source: str) -> list[int]:
    """Character offsets where each top-level Markdown block of `source` starts."""
    line_offsets = [0]
    for line in source.splitlines(keepends=True):
        line_offsets.append(line_offsets[-1] + len(line))
    return [
        line_offsets[token.map[0]]
        for token in parser().parse(source)
        if token.level == 0 and token.map is not None and token.nesting in (0, 1)
    ]


def code_blocks(source: str) -> list[str]:
    """The contents of every fenced or indented code block, in order."""
    return [token.content for token in parser().parse(source) if token.type in ("fence", "code_block")]
