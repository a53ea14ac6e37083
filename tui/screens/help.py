"""`HelpScreen`: every key and slash command, read from the bindings and the command table themselves.

Nothing here lists a key by hand: a binding added, changed or removed anywhere shows here as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from hotloop.agent.text import inert
from hotloop.core.slash import COMMANDS


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 95%; height: 85%; background: $panel; border: round $accent; padding: 0 1;
    }
    HelpScreen Static { margin-bottom: 1; }
    """
    BINDINGS = [Binding("escape,f1,q", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            for title, table in self.sections():
                yield Static(Text(title, "bold"))
                yield Static(table)

    def sections(self) -> list[tuple[str, Table]]:
        """Each part of the app with its keys, then the slash commands."""
        from hotloop.tui.screens.main import MainScreen
        from hotloop.tui.screens.replay import ReplayScreen
        from hotloop.tui.screens.session_view import SessionView
        from hotloop.tui.screens.waterfall import WaterfallScreen
        from hotloop.tui.widgets.approval_bar import AnswerList
        from hotloop.tui.widgets.history_view import HistoryView
        from hotloop.tui.widgets.prompt_input import PromptInput
        from hotloop.tui.widgets.sessions_sidebar import SessionList, SessionsSidebar

        # The main screen's keys, and the app's own that it doesn't list already (F1).
        main_keys = {binding.key for binding in MainScreen.BINDINGS if isinstance(binding, Binding)}
        anywhere = [
            *MainScreen.BINDINGS,
            *(b for b in type(self.app).BINDINGS if not (isinstance(b, Binding) and b.key in main_keys)),
            Binding(self.app.COMMAND_PALETTE_BINDING, "command_palette", "Providers, models, tiers, copy, sessions"),
            Binding("ctrl+q", "quit", "Quit"),
        ]
        commands = Table.grid(padding=(0, 2))
        commands.add_column(style="bold", no_wrap=True)
        commands.add_column()
        for name, text in COMMANDS.items():
            commands.add_row(name, Text(inert(text)))  # Text: `[restart NAME]` is not markup
        return [
            ("The prompt", self._keys(PromptInput.BINDINGS)),
            ("Anywhere", self._keys(anywhere)),
            ("The transcript (Tab to it; click an entry to expand it)", self._keys(HistoryView.BINDINGS)),
            ("A call waiting for approval (above the prompt)", self._keys(AnswerList.BINDINGS)),
            (
                "Saved sessions (ctrl+b; typing searches)",
                self._keys([*SessionsSidebar.BINDINGS, *SessionList.BINDINGS]),
            ),
            ("A saved session, read-only (Enter in the sessions)", self._keys(SessionView.BINDINGS)),
            ("A replay (hotloop replay, or r in the sessions)", self._keys(ReplayScreen.BINDINGS)),
            ("The waterfall (F3)", self._keys(WaterfallScreen.BINDINGS)),
            ("Commands, typed as a prompt", commands),
        ]

    def _keys(self, bindings: Iterable[BindingType]) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True, min_width=18)
        table.add_column()
        for entry in bindings:
            binding = entry if isinstance(entry, Binding) else Binding(*entry)
            keys = " / ".join(self.app.get_key_display(Binding(key.strip(), "")) for key in binding.key.split(","))
            table.add_row(Text(keys), Text(binding.tooltip or binding.description))
        return table
