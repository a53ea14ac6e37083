"""Rendering with Rich into Textual `Strip`s, styled from the app's theme.

The live widgets and the frozen history items draw through the same functions, so a step
that finishes looks exactly as it did while it streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from rich.console import Console, RenderableType
from rich.style import Style
from rich.text import Span, Text
from rich.theme import Theme
from textual.app import App, ReturnType
from textual.color import Color
from textual.strip import Strip

from hotloop.agent.events import ResponseFinished, StepFinished
from hotloop.agent.figures import NOT_REPORTED, iterations, stop_words, timing, tokens
from hotloop.agent.text import inert
from hotloop.core.markdown_blocks import block_starts, parser
from hotloop.providers.events import UsageLedger


@dataclass(frozen=True)
class Palette:
    """Rich styles for hotloop's own chrome, taken from the Textual theme."""

    accent: str
    muted: str
    text_muted: str  # the quiet text of the live step's strip and the welcome
    success: str
    warning: str
    error: str
    surface: str
    frame: str  # a tool pane's border before its call runs
    dark: bool

    @property
    def code_theme(self) -> str:
        return "monokai" if self.dark else "friendly"

    def markdown_theme(self) -> Theme:
        return Theme(
            {
                "markdown.h1": f"bold {self.accent}",
                "markdown.h1.border": self.accent,
                "markdown.h2": f"bold {self.accent}",
                "markdown.h3": f"bold {self.accent}",
                "markdown.h4": f"italic {self.accent}",
                "markdown.code": f"bold {self.accent} on {self.surface}",
                "markdown.link": f"underline {self.accent}",
                "markdown.link_url": self.muted,
                "markdown.item.bullet": self.accent,
                "markdown.item.number": self.accent,
                "markdown.block_quote": self.muted,
                "markdown.hr": self.muted,
            },
            inherit=True,
        )


def theme_palette(app: App[ReturnType]) -> Palette:
    """The palette of the app's current theme, with every colour made solid against the background."""
    variables = app.theme_variables
    background = Color.parse(variables["background"])

    def solid(name: str) -> str:
        value = variables[name]
        if value.startswith("auto"):  # "auto 60%": text that contrasts with the background, that opaque
            alpha = float(value.removeprefix("auto").strip().rstrip("%") or 100) / 100
            return (background + background.get_contrast_text(alpha)).hex
        return (background + Color.parse(value)).hex

    return Palette(
        accent=solid("accent"),
        muted=solid("foreground-muted"),
        text_muted=solid("text-muted"),
        success=solid("success"),
        warning=solid("warning"),
        error=solid("error"),
        surface=solid("surface"),
        frame=solid("primary-muted"),
        dark=app.current_theme.dark,
    )


def inert_text(text: Text) -> Text:
    """`text` with its control characters drawn as stand-ins (`inert`), its styles kept."""
    plain = text.plain
    if inert(plain) == plain:
        return text
    # A stand-in may be longer than its character (C1: `<9b>`): spans move to the new offsets.
    pieces = [inert(char) for char in plain]
    ends = list(accumulate(map(len, pieces), initial=0))

    def at(offset: int) -> int:
        return ends[min(offset, len(plain))]

    shown = text.blank_copy("".join(pieces))
    shown.spans = [Span(at(span.start), at(span.end), span.style) for span in text.spans]
    return shown


@dataclass(frozen=True)
class RenderContext:
    """How to render for one width and palette.

    Everything the transcript draws goes through `lines`, which makes `Text` inert; Markdown is
    made inert before it is parsed (`markdown_block`).
    """

    console: Console
    width: int
    palette: Palette

    def lines(self, renderable: RenderableType) -> list[Strip]:
        if isinstance(renderable, Text):
            renderable = inert_text(renderable)
        options = self.console.options.update(width=max(self.width, 10), height=None)
        with self.console.use_theme(self.palette.markdown_theme()):
            rendered = self.console.render_lines(renderable, options, pad=False)
        # Meta would tie every segment to a widget; links live in the style, not the meta.
        return [Strip(line).discard_meta() for line in rendered]


def _is_blank(strip: Strip) -> bool:
    return not strip.text.strip()


def trimmed(strips: list[Strip]) -> list[Strip]:
    start, end = 0, len(strips)
    while start < end and _is_blank(strips[start]):
        start += 1
    while end > start and _is_blank(strips[end - 1]):
        end -= 1
    return strips[start:end]


@lru_cache(maxsize=1)
def _markdown_class() -> type:
    """rich's Markdown, parsed by one shared parser: rich builds a new parser per document (~1 ms).

    Built on first use: rich.markdown, markdown-it and pygments cost ~75 ms to import, which
    the first paint doesn't need.
    """
    from rich.markdown import Markdown

    class SharedParserMarkdown(Markdown):
        def __init__(self, markup: str, code_theme: str) -> None:
            self.markup = markup
            self.parsed = parser().parse(markup)
            self.code_theme = code_theme
            self.justify = None
            self.style = "none"
            self.hyperlinks = True
            self.inline_code_lexer = None
            self.inline_code_theme = code_theme

    return SharedParserMarkdown


def warm_up() -> None:
    """Import and prime Markdown rendering (safe in a thread: it renders nothing)."""
    from rich.syntax import Syntax

    _markdown_class()
    Syntax("x = 1", "python").highlight("x = 1")
    parser().parse("# warm")


def markdown_block(source: str, ctx: RenderContext) -> list[Strip]:
    """One top-level Markdown block, without blank lines at its edges; its control characters made inert."""
    return trimmed(ctx.lines(_markdown_class()(inert(source), ctx.palette.code_theme)))


def split_blocks(source: str) -> list[str]:
    """The top-level Markdown blocks of `source`, each with its own text."""
    starts = block_starts(source)
    if not starts:
        return [source] if source.strip() else []
    return [source[a:b] for a, b in zip(starts, [*starts[1:], len(source)], strict=True)]


def markdown_lines(source: str, ctx: RenderContext) -> list[Strip]:
    """A whole document rendered block by block, blocks separated by one blank line.

    Rendering per block is what lets streaming re-render only the open block: Rich spaces
    a whole document differently around lists and code fences.
    """
    lines: list[Strip] = []
    for block in split_blocks(source):
        rendered = markdown_block(block, ctx)
        if rendered and lines:
            lines.append(Strip.blank(0))
        lines.extend(rendered)
    return lines


def text_lines(text: Text, ctx: RenderContext) -> list[Strip]:
    return ctx.lines(text)


def usage_text(usage: UsageLedger | None, palette: Palette) -> Text:
    """`prompt 2,351 ▕███░▏ read 2,320 · write – · uncached 31 · out 117`, never 0 for "not reported"."""
    muted = Style.parse(palette.muted)
    line = Text()
    if usage is not None and usage.distrust is not None:
        line.append(f"usage not trustworthy (server said {usage.distrust})", Style.parse(palette.warning))
        return line
    if usage is None or usage.prompt_total is None:
        line.append(f"prompt {NOT_REPORTED}", muted)
        if usage is not None and usage.output is not None:
            line.append(f" · out {usage.output:,}")
        return line
    line.append(f"prompt {usage.prompt_total:,} ")
    if usage.below_cache_min is not None:
        line.append(f"· below cache minimum ({usage.below_cache_min:,}): not cached, not a miss", muted)
    elif usage.cache_read is None:
        line.append(f"· cache {NOT_REPORTED}", muted)
    else:
        line.append_text(cache_bar(usage, palette))
        line.append(f" read {usage.cache_read:,}", Style.parse(palette.success))
        if usage.cache_write is not None:
            line.append(f" · write {usage.cache_write:,}", Style.parse(palette.warning))
        line.append(f" · uncached {tokens(usage.uncached)}")
    line.append(" · out ")
    line.append(tokens(usage.output), muted if usage.output is None else "")
    line.append(iterations(usage), muted)
    return line


def cache_bar(usage: UsageLedger, palette: Palette, width: int = 8) -> Text:
    """A small bar: the prompt split into cache read, cache write and uncached prefill."""
    total = usage.prompt_total or 0
    if not total:
        return Text("▕" + " " * width + "▏")
    read = round(width * (usage.cache_read or 0) / total)
    write = min(round(width * (usage.cache_write or 0) / total), width - read)
    bar = Text("▕")
    bar.append("█" * read, palette.success)
    bar.append("█" * write, palette.warning)
    bar.append("░" * (width - read - write), palette.muted)
    bar.append("▏")
    return bar


def response_text(response: ResponseFinished | StepFinished, palette: Palette) -> Text:
    """The usage line plus TTFT and decode speed."""
    line = usage_text(response.usage, palette)
    if response.route:
        line = Text.assemble((f"{response.route} · ", palette.accent), line)
    if response.ttft is None:
        line.append(f" · ttft {NOT_REPORTED}")
    for part in timing(response):
        warned = part == stop_words(response.finish_reason) or (
            isinstance(response, StepFinished) and part == response.cut
        )
        line.append(f" · {part}", Style.parse(palette.warning) if warned else "")
    if response.cache_note:
        line.append(f" · {response.cache_note}", palette.warning)
    return line


# A step's tool phase on its strip, in the headless line's words:
# `3 tools ran for 1.02 s (sum 3.01 s, 3.0× from parallelism)`.
