"""`PromptInput`: a multi-line prompt. Enter sends; shift+enter or ctrl+j adds a newline; up/down walk the history.

Its keys are bindings, so the help screen lists them from here. The box runs them itself, in
the order keys arrive: a binding run by the app (a priority one, or one the key bubbles up to)
would run before the characters typed just ahead of it are in, and Enter would send half a
prompt. They step aside (`SkipAction`) where the text area's meaning applies: ↑ walks the
history only from the first line.
"""

from __future__ import annotations

from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea
from textual.widgets.text_area import EditResult, Location

from hotloop.agent.text import inert


class PromptInput(TextArea):
    DEFAULT_CSS = """
    PromptInput { height: auto; min-height: 3; max-height: 12; border: tall $primary-muted; }
    PromptInput:focus { border: tall $accent; }
    """
    BINDINGS = [
        Binding("enter", "submit", "Send (queued while a turn runs)", show=False),
        # Most terminals send ctrl+enter as a plain Enter (it arrives only over the kitty keyboard protocol), and
        # alt+enter as Esc then Enter: ctrl+s is the key that arrives everywhere.
        Binding("ctrl+s,ctrl+enter", "submit(True)", "Send now, cancelling the turn in flight", show=False),
        Binding("shift+enter,ctrl+j", "newline", "New line", show=False),
        Binding("up", "walk(-1)", "Earlier prompt (first line); a queued prompt, in an empty box", show=False),
        Binding("down", "walk(1)", "Later prompt (last line)", show=False),
    ]

    _ACTIONS = {
        key.strip(): binding.action
        for binding in BINDINGS
        if isinstance(binding, Binding)
        for key in binding.key.split(",")
    }

    class Submitted(Message):
        """A prompt to send: when the turn in flight ends, or `now`, cancelling it."""

        def __init__(self, text: str, now: bool = False) -> None:
            super().__init__()
            self.text = text
            self.now = now

    class Recall(Message):
        """↑ in an empty box while prompts are queued: the app gives the last one back to edit."""

    def __init__(
        self, *, name: str | None = None, id: str | None = None, classes: str | None = None, disabled: bool = False
    ) -> None:
        super().__init__(
            soft_wrap=True,
            show_line_numbers=False,
            placeholder="Ask anything · Enter sends · shift+enter or ctrl+j: new line · /help",
            name=name,
            id=id,
            classes=classes,
            disabled=disabled,
        )
        self.prompts: list[str] = []
        self.queued = 0  # prompts waiting for the turn in flight, set by the app
        self._browsing: int | None = None  # position in history while walking it
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls the text area's own handler after this one, unless the default is prevented.
        action = self._ACTIONS.get(event.key)
        if action is not None and await self.app.run_action(action, self):
            event.stop()
            event.prevent_default()

    def action_submit(self, now: bool = False) -> None:
        text = self.text
        if not text.strip():
            return
        if not self.prompts or self.prompts[-1] != text:
            self.prompts.append(text)
        self._browsing = None
        self.clear()
        self.post_message(self.Submitted(text, now))

    def action_newline(self) -> None:
        self.insert("\n")

    def action_walk(self, step: int) -> None:
        if step < 0 and not self.text and self.queued:
            self.post_message(self.Recall())
            return
        if step < 0 and not (self.cursor_at_first_line and self.prompts):
            raise SkipAction()
        if step > 0 and not (self.cursor_at_last_line and self._browsing is not None):
            raise SkipAction()
        if self._browsing is None:
            self._draft, self._browsing = self.text, len(self.prompts)
        position = self._browsing + step
        if position >= len(self.prompts):
            self._browsing = None
            self.load_text(self._draft)
        else:
            self._browsing = max(position, 0)
            self.load_text(self.prompts[self._browsing])
        self.move_cursor(self.document.end)

    def _replace_via_keyboard(self, insert: str, start: Location, end: Location) -> EditResult | None:
        """Typed or pasted text, its control characters made inert: the box would draw them raw.

        A paste may be an answer copied with ctrl+o, or come from the terminal, which sends line breaks as `\\r`.
        """
        return super()._replace_via_keyboard(inert(insert.replace("\r\n", "\n").replace("\r", "\n")), start, end)
