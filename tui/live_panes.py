"""The step's tool calls while they run: live panes side by side, wrapping to a grid past three.

Each pane is a box drawn as lines, not a widget: its border says how the call is going (running,
ok, error, cancelled; doubled while it waits for approval), its title names the tool, its foot
has a spinner and timer, and inside are the arguments filling in and the tail of the output. A
call that would change something shows what it would do (a diff, a command), highlighted.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from hotloop.agent.figures import seconds
from hotloop.agent.text import inert
from hotloop.agent.tools.edit import is_diff
from hotloop.sessions.projection import CallRecord
from hotloop.tui.items import STATUS_MARK
from hotloop.tui.render import Palette, RenderContext

if TYPE_CHECKING:
    from rich.syntax import Syntax

SPINNER = "◐◓◑◒"
COLUMNS = 3
ROW_HEIGHT = 9
DIFF_ROW_HEIGHT = 16  # the most a row showing a diff grows to: it gets the rows its diff needs, if the view has them
ARGUMENT_LINES = 2
OUTPUT_LINES_KEPT = DIFF_ROW_HEIGHT  # more than a pane ever shows


@dataclass(frozen=True)
class _Border:
    top_left: str
    horizontal: str
    top_right: str
    vertical: str
    bottom_left: str
    bottom_right: str


ROUND = _Border("╭", "─", "╮", "│", "╰", "╯")
DOUBLE = _Border("╔", "═", "╗", "║", "╚", "╝")


class LivePane:
    """One call's pane. `sync` takes in what changed in its record; `lines` draws it."""

    def __init__(self, call: CallRecord, clock: Callable[[], float]) -> None:
        self.call = call
        self.clock = clock
        self.output: list[str] = []  # the output's last lines, control characters made inert
        self._written = 0  # output chunks already in `output`
        self._result_shown = False
        self.preview: Syntax | None = None
        # The preview's lines for one width and palette: highlighting costs milliseconds.
        self._preview_lines: tuple[tuple[int, Palette], list[Strip]] | None = None

    @property
    def status(self) -> str:
        return self.call.status

    @property
    def diff(self) -> bool:
        return is_diff(self.call.preview)

    def sync(self) -> None:
        """Take in the call as it is now: new output, its preview, its result once finished."""
        call = self.call
        if call.preview and self.preview is None:
            self.preview = preview_of(call.preview)
        for text in call.output[self._written :]:
            self._write(text)
        self._written = len(call.output)
        # A tool that streamed nothing shows its result instead.
        if call.status in ("ok", "error", "cancelled") and not call.output and call.result and not self._result_shown:
            self._write(call.result)
            self._result_shown = True

    def _write(self, text: str) -> None:
        self.output += inert(text).rstrip("\n").expandtabs().splitlines()
        del self.output[:-OUTPUT_LINES_KEPT]

    def title(self) -> str:
        """The tool's name; a change's path too, as its diff is shown from the first hunk on."""
        name = self.call.name or "…"
        if self.diff:
            with contextlib.suppress(ValueError, AttributeError):
                return f"{name} {json.loads(self.call.arguments).get('path')}"
        return name

    def subtitle(self) -> str:
        call = self.call
        if call.duration is not None:
            reused = f" · {call.reused}" if call.reused else ""
            # A replayed log says what `reused` is: shown as it reads.
            return inert(f"{STATUS_MARK.get(call.status, '?')} {call.status} · {seconds(call.duration)}{reused}")
        if call.status == "waiting":
            return "⏸ waiting for approval"
        if call.started is not None:
            elapsed = max(self.clock() - call.started, 0.0)
            return f"{SPINNER[int(elapsed * 8) % len(SPINNER)]} {seconds(elapsed)}"
        return "arguments…"

    def lines(self, width: int, height: int, ctx: RenderContext) -> list[Strip]:
        """The pane drawn in a box `width` × `height`."""
        palette = ctx.palette
        colour = {
            "running": palette.accent,
            "ok": palette.success,
            "error": palette.error,
            "cancelled": palette.warning,
            "waiting": palette.warning,
        }.get(self.status, palette.frame)
        border = DOUBLE if self.status == "waiting" else ROUND
        edge = Style.parse(colour)
        inner = max(width - 4, 1)  # a border and a space of padding on each side
        body = self._body(inner, height - 2, ctx)
        side, pad = Segment(border.vertical, edge), Segment(" ")
        rows = [Strip([side, pad, *line.crop_extend(0, inner, None), pad, side]) for line in body]
        name = inert(self.title())
        top = _edge(border.top_left, border.horizontal, border.top_right, width, edge, name, None)
        foot = _edge(border.bottom_left, border.horizontal, border.bottom_right, width, edge, self.subtitle(), palette)
        return [top, *rows, foot]

    def _body(self, width: int, height: int, ctx: RenderContext) -> list[Strip]:
        """What the box holds: the arguments or the preview, then the output's tail."""
        waiting = self.status == "waiting"
        lines: list[Strip] = []
        if self.preview is not None and (waiting or self.diff):
            preview = self._preview(width, ctx)
            lines += preview if len(preview) <= height else _cut(preview, height, ctx)
        else:
            arguments = Text(inert(" ".join(self.call.arguments.split())) or "…", ctx.palette.text_muted)
            lines += replace(ctx, width=width).lines(arguments)[:ARGUMENT_LINES]
            lines += [Strip.blank(0)] * (ARGUMENT_LINES - len(lines))
        room = height - len(lines)
        if waiting:  # a command shows while it waits; its output has the room once it runs
            return lines + [Strip.blank(0)] * room
        log = Style.parse(f"on {ctx.palette.surface}")
        tail = self.output[-room:] if room > 0 else []
        lines += [Strip([Segment(line, log)]).crop_extend(0, width, log) for line in tail]
        return lines + [Strip.blank(width, log)] * (room - len(tail))

    def _preview(self, width: int, ctx: RenderContext) -> list[Strip]:
        key = (width, ctx.palette)
        if self._preview_lines is None or self._preview_lines[0] != key:
            assert self.preview is not None
            self._preview_lines = (key, replace(ctx, width=width).lines(self.preview))
        return self._preview_lines[1]

    def needs(self, width: int, ctx: RenderContext) -> int:
        """The rows the pane needs to show all of its preview, border included (0 without one)."""
        return len(self._preview(max(width - 4, 1), ctx)) + 2 if self.preview is not None else 0


def _cut(lines: list[Strip], height: int, ctx: RenderContext) -> list[Strip]:
    """The first of `lines` that fit `height`, the last row saying how many more there are."""
    more = Text(f"… {len(lines) - height + 1:,} more lines", ctx.palette.text_muted)
    return [*lines[: height - 1], *ctx.lines(more)[:1]]


def _edge(left: str, fill: str, right: str, width: int, edge: Style, label: str, subtitle: Palette | None) -> Strip:
    """A top border with `label` as its title, or (with a palette) a bottom one with it as its subtitle."""
    room = width - 6  # corners, a line either side of the label's spaces
    if len(label) > room:
        label = label[: max(room - 1, 0)] + "…"
    shown = f" {label} " if label else ""
    run = fill * max(width - 3 - len(shown), 0)
    if subtitle is None:
        segments = [Segment(left + fill, edge), Segment(shown), Segment(run, edge)]
    else:
        segments = [Segment(left + run, edge), Segment(shown, Style.parse(subtitle.text_muted)), Segment(fill, edge)]
    return Strip([*segments, Segment(right, edge)]).crop_extend(0, width, None)


class LivePanes:
    """The panes of the step in flight, in the order their calls started."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.panes: dict[str, LivePane] = {}
        self.diffs = False

    def add(self, call: CallRecord) -> LivePane:
        pane = self.panes[call.call_id] = LivePane(call, self.clock)
        pane.sync()
        return pane

    def pane(self, call_id: str) -> LivePane | None:
        return self.panes.get(call_id)

    def show_diffs(self) -> None:
        """Make room for the diffs the panes show."""
        self.diffs = True

    def clear(self) -> None:
        self.panes.clear()
        self.diffs = False

    def lines(self, ctx: RenderContext, rows: int = DIFF_ROW_HEIGHT) -> list[Strip]:
        """Every pane, up to three side by side a row, one column apart.

        A row showing a diff is as tall as its longest diff needs, within `rows` (what the view has
        room for beside the rest of the step), so the diff being approved and the question both fit.
        """
        panes = list(self.panes.values())
        if not panes:
            return []
        columns = min(len(panes), COLUMNS)
        room = ctx.width - (columns - 1)
        # As a grid of fractions splits it: the remainder goes to the later columns.
        edges = [room * n // columns for n in range(columns + 1)]
        widths = [b - a for a, b in pairwise(edges)]
        height = ROW_HEIGHT
        if self.diffs:
            needed = max(pane.needs(widths[n % columns], ctx) for n, pane in enumerate(panes))
            height = max(ROW_HEIGHT, min(needed, rows, DIFF_ROW_HEIGHT))
        gap = Strip.blank(1)
        lines: list[Strip] = []
        for first in range(0, len(panes), columns):
            row = [
                pane.lines(width, height, ctx)
                for pane, width in zip(panes[first : first + columns], widths, strict=False)
            ]
            for y in range(height):
                parts: list[Strip] = []
                for pane_lines in row:
                    parts += [gap, pane_lines[y]] if parts else [pane_lines[y]]
                lines.append(Strip.join(parts))
        return lines


def preview_of(preview: str) -> Syntax:
    """What a call would do, highlighted: a diff as a diff (from its first hunk: the question names the file), a
    command as shell."""
    from rich.syntax import Syntax  # Pygments: ~9 ms, paid at the first preview, not before the first paint

    diff = is_diff(preview)
    shown = "".join(preview.splitlines(keepends=True)[2:]).rstrip("\n") if diff else preview
    return Syntax(inert(shown), "diff" if diff else "bash", word_wrap=True, background_color="default")
