"""`NewOutput`: "↓ new output", shown at the transcript's foot while it grows below the view.

Docked beside the view, not over it, it takes the view's last line instead of covering it: the
view's top stays where it was, and no text is drawn over.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Static


class NewOutput(Static):
    """A click follows the transcript again (as End and ctrl+end do)."""

    DEFAULT_CSS = """
    NewOutput {
        dock: bottom;
        width: auto;
        height: 1;
        margin-left: 3;  /* under the transcript's text, which starts a column in */
        padding: 0 1;
        background: $accent;
        color: $text;
        text-style: bold;
        display: none;
    }
    NewOutput.-shown { display: block; }
    """

    class Pressed(Message):
        """The user asked to see the new output."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("↓ new output · ctrl+end", id=id)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.post_message(self.Pressed())
