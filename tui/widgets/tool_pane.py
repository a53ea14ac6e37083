"""`ToolPane`: one tool call, live — its arguments filling in, a spinner and timer, its output."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Log, Static

from hotloop.agent.figures import seconds
from hotloop.agent.text import inert
from hotloop.agent.tools.edit import is_diff
from hotloop.sessions.projection import CallRecord
from hotloop.tui.items import STATUS_MARK

if TYPE_CHECKING:
    from rich.syntax import Syntax

SPINNER = "◐◓◑◒"


class ToolPane(Vertical):
    """A call's pane. Its border says how it is going: running, ok, error or cancelled."""

    DEFAULT_CSS = """
    ToolPane {
        height: 100%;
        border: round $primary-muted;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        padding: 0 1;
    }
    ToolPane.-running { border: round $accent; }
    ToolPane.-pending { border: round $primary-muted; }
    ToolPane.-ok { border: round $success; }
    ToolPane.-error { border: round $error; }
    ToolPane.-cancelled { border: round $warning; }
    ToolPane.-waiting { border: double $warning; }
    ToolPane > .arguments { color: $text-muted; height: 2; }
    ToolPane > .preview { height: auto; max-height: 100%; display: none; }
    /* A diff stays, before and after; a command shows while it waits, then its output has the room. */
    ToolPane > .preview.-diff, ToolPane.-waiting > .preview { display: block; }
    ToolPane.-waiting > .arguments, ToolPane.-diff > .arguments, ToolPane.-waiting > Log { display: none; }
    ToolPane > Log {
        height: 1fr;
        background: $surface;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
        scrollbar-background: $surface;
    }
    """

    def __init__(self, call: CallRecord, clock: Callable[[], float]) -> None:
        super().__init__(classes="-pending")
        self.call = call
        self.clock = clock
        self._timer: Timer | None = None
        self._written = 0  # output chunks already in the log
        self._result_shown = False
        self._preview_shown = False

    def compose(self) -> ComposeResult:
        yield Static(classes="arguments", markup=False)
        yield Static(classes="preview", markup=False)
        yield Log(max_lines=500)

    def on_mount(self) -> None:
        self.sync()

    def sync(self) -> None:
        """Show the call as it is now. Events can outrun mounting, so this always works from the model."""
        if not self.children:  # not composed yet; on_mount syncs (`is_mounted` is still False there)
            return
        call = self.call
        # Content, not a str: a str title is parsed as markup. The model names the tool.
        self.border_title = Content(inert(call.name or "…"))
        self.query_one(".arguments", Static).update(inert(" ".join(call.arguments.split())) or "…")
        if call.preview and not self._preview_shown:
            self._preview_shown = True
            preview = self.query_one(".preview", Static)
            preview.update(preview_of(call.preview))
            preview.set_class(is_diff(call.preview), "-diff")
        log = self.query_one(Log)
        for text in call.output[self._written :]:
            _write(log, text)
        self._written = len(call.output)
        if call.status == "running" and self._timer is None:
            self._timer = self.set_interval(0.1, self.tick)
        if call.status in ("ok", "error", "cancelled"):
            self._finish(log)
        self.set_classes(f"-{call.status}" + (" -diff" if is_diff(call.preview) else ""))
        self.tick()

    def _finish(self, log: Log) -> None:
        if self._timer is not None:
            self._timer.stop()
        # A tool that streamed nothing shows its result instead.
        if not self.call.output and self.call.result and not self._result_shown:
            _write(log, self.call.result)
            self._result_shown = True

    def tick(self) -> None:
        call = self.call
        if call.duration is not None:
            reused = f" · {call.reused}" if call.reused else ""
            # A replayed log says what `reused` is: shown as it reads.
            self.border_subtitle = Content(
                inert(f"{STATUS_MARK.get(call.status, '?')} {call.status} · {seconds(call.duration)}{reused}")
            )
        elif call.status == "waiting":
            self.border_subtitle = "⏸ waiting for approval"
        elif call.started is not None:
            elapsed = max(self.clock() - call.started, 0.0)
            self.border_subtitle = f"{SPINNER[int(elapsed * 8) % len(SPINNER)]} {seconds(elapsed)}"
        else:
            self.border_subtitle = "arguments…"


def preview_of(preview: str) -> Syntax:
    """What a call would do, highlighted: a diff as a diff, a command as shell."""
    from rich.syntax import Syntax  # Pygments: ~9 ms, paid at the first preview, not before the first paint

    return Syntax(inert(preview), "diff" if is_diff(preview) else "bash", word_wrap=True, background_color="default")


def _write(log: Log, text: str) -> None:
    """A tool's output into the pane's log; the log itself hides only some control characters, not ESC."""
    log.write_lines(inert(text).rstrip("\n").splitlines())
