"""`ToolPanes`: a step's tool calls as live panes side by side, wrapping to a grid past three."""

from __future__ import annotations

from collections.abc import Callable

from textual.widget import Widget

from hotloop.sessions.projection import CallRecord
from hotloop.tui.widgets.tool_pane import ToolPane


class ToolPanes(Widget):
    DEFAULT_CSS = """
    ToolPanes { layout: grid; grid-size: 3; grid-rows: 9; grid-gutter: 0 1; height: auto; }
    ToolPanes.-columns-1 { grid-size: 1; }
    ToolPanes.-columns-2 { grid-size: 2; }
    /* A diff waiting for approval (or just applied) needs room to be read. */
    ToolPanes.-diffs { grid-rows: 16; }
    ToolPanes.-empty { display: none; }
    """

    def __init__(
        self, clock: Callable[[], float], *, name: str | None = None, id: str | None = None, disabled: bool = False
    ) -> None:
        super().__init__(classes="-empty", name=name, id=id, disabled=disabled)
        self.clock = clock
        self.panes: dict[str, ToolPane] = {}

    @property
    def calls(self) -> list[CallRecord]:
        return [pane.call for pane in self.panes.values()]

    def add(self, call: CallRecord) -> ToolPane:
        pane = self.panes[call.call_id] = ToolPane(call, self.clock)
        self.mount(pane)
        columns = min(len(self.panes), 3)
        self.set_classes(f"-columns-{columns}")
        return pane

    def pane(self, call_id: str) -> ToolPane | None:
        return self.panes.get(call_id)

    def show_diffs(self) -> None:
        """Make room for the diffs the panes show."""
        self.add_class("-diffs")

    def clear(self) -> None:
        self.panes.clear()
        self.remove_children()
        self.set_classes("-empty")
