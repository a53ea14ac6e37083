"""`PromptInput`: a multi-line prompt. Enter sends; shift+enter or ctrl+j adds a newline; up/down walk the history."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import TextArea
from textual.widgets.text_area import EditResult, Location

from hotloop.agent.text import inert


class PromptInput(TextArea):
    DEFAULT_CSS = """
    PromptInput { height: auto; min-height: 3; max-height: 12; border: tall $primary-muted; }
    PromptInput:focus { border: tall $accent; }
    """

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

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
        self._browsing: int | None = None  # position in history while walking it
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self._submit()
        elif event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
        elif event.key == "up" and self.cursor_at_first_line and self.prompts:
            event.stop()
            event.prevent_default()
            self._walk(-1)
        elif event.key == "down" and self.cursor_at_last_line and self._browsing is not None:
            event.stop()
            event.prevent_default()
            self._walk(1)
        else:
            await super()._on_key(event)

    def _replace_via_keyboard(self, insert: str, start: Location, end: Location) -> EditResult | None:
        """Typed or pasted text, its control characters made inert: the box would draw them raw.

        A paste may be an answer copied with ctrl+o, or come from the terminal, which sends line breaks as `\\r`.
        """
        return super()._replace_via_keyboard(inert(insert.replace("\r\n", "\n").replace("\r", "\n")), start, end)

    def _submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        if not self.prompts or self.prompts[-1] != text:
            self.prompts.append(text)
        self._browsing = None
        self.clear()
        self.post_message(self.Submitted(text))

    def _walk(self, step: int) -> None:
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
