"""Mouse selection for widgets that draw pre-rendered lines (the line API)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget


def with_selection(widget: Widget, strip: Strip, y: int) -> Strip:
    """`strip` (line `y` of `widget`) with the selected cells highlighted, and offsets for the mouse."""
    selection = widget.text_selection
    span = selection.get_span(y) if selection is not None else None
    if span is not None:
        start, end = span
        end = strip.cell_length if end == -1 else end
        highlight = widget.screen.get_component_rich_style("screen--selection")
        strip = Strip.join(
            [strip.crop(0, start), strip.crop(start, end).apply_style(highlight), strip.crop(end, strip.cell_length)]
        )
    return strip


def selected_text(lines: Iterable[str], selection: Selection) -> tuple[str, str]:
    """The selected part of a widget whose lines read `lines`."""
    return selection.extract("\n".join(line.rstrip() for line in lines)), "\n"
