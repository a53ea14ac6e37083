"""The finished parts of a transcript: what each one shows, what expands, and what it copies.

Items are plain objects, not widgets, so a session of any length costs one widget. Each
renders itself to strips for a width; `HistoryView` stacks them and maps clicks back.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from hotloop.agent.events import Compacted, StepFinished
from hotloop.agent.figures import compaction_summary, seconds, tool_phase
from hotloop.agent.tools.edit import change_summary, is_diff
from hotloop.nesting import decoded
from hotloop.sessions.projection import CallRecord
from hotloop.tui.render import Palette, RenderContext, markdown_lines, response_text, text_lines

STATUS_MARK = {"ok": "✓", "error": "✗", "cancelled": "⊘", "running": "◌", "pending": "…"}
EXPANDED_OUTPUT_LINES = 40


@dataclass
class Rendered:
    lines: list[Strip]
    # line index → key of the entry a click or Enter on that line toggles
    targets: dict[int, str] = field(default_factory=dict)


class Item:
    """A finished piece of the transcript."""

    def render(self, ctx: RenderContext) -> Rendered:
        raise NotImplementedError

    def toggle(self, key: str) -> None:
        """Expand or collapse the entry `key`."""

    def copy_text(self) -> str | None:
        """What copying this item puts on the clipboard, or None if it has nothing to copy."""
        return None

    def copied(self) -> str:
        """What a copy of it holds, in the user's words: `copied {this}`."""
        return "the item"

    def estimate_height(self, width: int) -> int:
        """A guess at the rendered height, before the item is rendered at this width."""
        return 1


def _prefixed(lines: list[Strip], prefix: str, style: Style) -> list[Strip]:
    head = Strip([Segment(prefix, style)])
    return [Strip.join([head, line]) for line in lines]


def _narrower(ctx: RenderContext, by: int) -> RenderContext:
    return replace(ctx, width=max(ctx.width - by, 10))


@dataclass
class UserItem(Item):
    prompt: str

    def render(self, ctx: RenderContext) -> Rendered:
        body = text_lines(Text(self.prompt.rstrip()), _narrower(ctx, 2))
        return Rendered(_prefixed(body, "▌ ", Style.parse(f"bold {ctx.palette.accent}")))

    def copy_text(self) -> str:
        return self.prompt

    def copied(self) -> str:
        return "your prompt"

    def estimate_height(self, width: int) -> int:
        return sum(len(line) // max(width - 2, 10) + 1 for line in self.prompt.splitlines() or [""])


@dataclass
class AnswerItem(Item):
    text: str
    reasoning: str = ""
    interrupted: bool = False
    reasoning_open: bool = False
    # The answer's Markdown lines for one width and palette: the live view hands over what it rendered.
    rendered_text: dict[tuple[int, Palette], list[Strip]] = field(default_factory=dict, repr=False, compare=False)

    def render(self, ctx: RenderContext) -> Rendered:
        muted = Style.parse(ctx.palette.muted)
        lines: list[Strip] = []
        targets = {}
        if self.reasoning:
            targets[0] = "reasoning"
            words = len(self.reasoning.split())
            arrow = "▾" if self.reasoning_open else "▸"
            lines += text_lines(Text(f"{arrow} reasoning · {words:,} words", muted), ctx)
            if self.reasoning_open:
                thought = text_lines(Text(self.reasoning.strip(), Style(italic=True, dim=True)), _narrower(ctx, 2))
                lines += _prefixed(thought, "  ", muted)
        key = (ctx.width, ctx.palette)
        if key not in self.rendered_text:
            self.rendered_text.clear()
            self.rendered_text[key] = markdown_lines(self.text, ctx)
        lines += self.rendered_text[key]
        if self.interrupted:
            lines += text_lines(Text("⊘ interrupted", Style.parse(ctx.palette.warning)), ctx)
        return Rendered(lines, targets)

    def toggle(self, key: str) -> None:
        if key == "reasoning":
            self.reasoning_open = not self.reasoning_open

    def copy_text(self) -> str:
        return self.text

    def copied(self) -> str:
        return "the answer"

    def estimate_height(self, width: int) -> int:
        return max(len(self.text) // max(width, 10) + self.text.count("\n") + 1, 1)


CHANGES = frozenset({"edit_file", "write_file"})  # their collapsed line says what changed


def call_head(call: CallRecord, width: int = 80) -> str:
    """`read_file {"path": "README.md"}`, the arguments cut to fit `width`; a change, `edit README.md +3 −1`.

    A change that was not made says so first, then why: `create notes.txt +1 −0 · not written, denied by you`.
    """
    if call.name in CHANGES and is_diff(call.preview):
        with contextlib.suppress(ValueError, AttributeError):
            change = change_summary(str(json.loads(call.arguments).get("path")), call.preview)
            if call.status not in ("error", "cancelled"):
                return change
            denied = f", {call.decision}" if call.decision.startswith("denied") else ""
            return f"{change} · not written{denied}"
    args = " ".join(call.arguments.split())
    room = max(width - len(call.name) - 16, 8)
    return f"{call.name} {args if len(args) <= room else args[: room - 1] + '…'}"


@dataclass
class ToolCallsItem(Item):
    """A step's tool calls, one line each (expandable), and the summary line."""

    calls: list[CallRecord]
    wall: float
    total: float
    expanded: set[str] = field(default_factory=set)

    def render(self, ctx: RenderContext) -> Rendered:
        palette = ctx.palette
        colours = {"ok": palette.success, "error": palette.error, "cancelled": palette.warning}
        lines: list[Strip] = []
        targets = {}
        for call in self.calls:
            targets[len(lines)] = call.call_id
            open_ = call.call_id in self.expanded
            line = Text(f"{'▾' if open_ else '▸'} ", palette.muted)
            line.append(f"{STATUS_MARK.get(call.status, '?')} ", colours.get(call.status, ""))
            line.append(call_head(call, ctx.width - 12), "")
            if call.duration is not None:
                line.append(f"  {seconds(call.duration)}", palette.muted)
            if call.reused:
                line.append(f" · {call.reused}", palette.accent)
            lines += text_lines(line, ctx)[:1]
            if open_:
                lines += _prefixed(self._details(call, _narrower(ctx, 4)), "    ", Style.parse(palette.muted))
        lines += text_lines(Text(tool_phase(len(self.calls), self.wall, self.total), palette.muted), ctx)
        return Rendered(lines, targets)

    def _details(self, call: CallRecord, ctx: RenderContext) -> list[Strip]:
        try:
            arguments = json.dumps(decoded(json.loads, call.arguments), indent=2, ensure_ascii=False)
        except (json.JSONDecodeError, TypeError):
            arguments = call.arguments
        text = Text(arguments, Style.parse(ctx.palette.muted))
        if call.decision:  # who let it run, or didn't
            text.append(f"\n{call.decision}", Style.parse(ctx.palette.accent))
        body = call.full_text().rstrip("\n").splitlines()
        shown = body[:EXPANDED_OUTPUT_LINES]
        text.append("\n" + "\n".join(shown) if shown else "\n(no output)")
        if len(body) > len(shown):
            text.append(
                f"\n… {len(body) - len(shown):,} more lines (ctrl+c copies them all)", Style.parse(ctx.palette.muted)
            )
        return text_lines(text, ctx)

    def toggle(self, key: str) -> None:
        self.expanded ^= {key}

    def copy_text(self) -> str:
        return "\n\n".join(f"{call.name} {call.arguments}\n{call.full_text()}" for call in self.calls)

    def copied(self) -> str:
        return f"{'the tool call' if len(self.calls) == 1 else f'the {len(self.calls)} tool calls'} and the output"

    def estimate_height(self, width: int) -> int:
        return len(self.calls) + 1


@dataclass
class UsageItem(Item):
    step: StepFinished
    cost: str | None = None  # what the step cost, as `dollars` says it
    streamed: int | None = None  # a cancelled step's output the server never counted, estimated in tokens

    def render(self, ctx: RenderContext) -> Rendered:
        line = Text(f"step {self.step.step} · ", ctx.palette.muted)
        line.append_text(response_text(self.step, ctx.palette))
        if self.streamed is not None:
            line.append(f" · out ≈{self.streamed:,} streamed (an estimate: cancelled before the server counted it)")
        if self.cost is not None:
            line.append(f" · {self.cost}")
        return Rendered(text_lines(line, ctx))


@dataclass
class NoticeItem(Item):
    level: str
    message: str

    def render(self, ctx: RenderContext) -> Rendered:
        palette = ctx.palette
        mark, colour = {"error": ("✗", palette.error), "warning": ("⚠", palette.warning)}.get(
            self.level, ("ℹ", palette.muted)
        )
        return Rendered(text_lines(Text(f"{mark} {self.message}", colour), ctx))

    def copy_text(self) -> str:
        return self.message

    def copied(self) -> str:
        return {"error": "the error message", "warning": "the warning"}.get(self.level, "the note")


@dataclass
class CompactionItem(Item):
    """A rule where the conversation was compacted, its figures, and the summary that replaced it (click to read)."""

    compacted: Compacted
    cost: str | None = None  # what the summary request cost, as `dollars` says it
    open: bool = False

    def render(self, ctx: RenderContext) -> Rendered:
        palette = ctx.palette
        arrow = "▾" if self.open else "▸"
        rule = Text(f"{arrow} ── conversation compacted ", Style.parse(f"bold {palette.accent}"))
        rule.append("─" * max(ctx.width - rule.cell_len, 0), palette.accent)
        summary = compaction_summary(self.compacted) + (f" · {self.cost}" if self.cost is not None else "")
        lines = text_lines(rule, ctx) + text_lines(Text(summary, palette.muted), ctx)
        if self.open:
            lines += _prefixed(markdown_lines(self.compacted.summary, _narrower(ctx, 2)), "  ", Style())
        return Rendered(lines, {0: "summary"})

    def toggle(self, key: str) -> None:
        self.open = not self.open

    def copy_text(self) -> str:
        return self.compacted.summary

    def copied(self) -> str:
        return "the summary that replaced the compacted turns"

    def estimate_height(self, width: int) -> int:
        return 3
