"""`HelpScreen`: the keys and slash commands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from hotloop.agent.text import inert
from hotloop.core.slash import COMMANDS

KEYS = """\
| key | what it does |
|---|---|
| Enter | send the prompt |
| shift+enter, ctrl+j | new line in the prompt |
| ↑ / ↓ in the prompt | walk the prompt history |
| Esc | cancel the turn in flight (every issued tool call gets a cancelled result) |
| ctrl+p | command palette: providers, models, tiers, copy, new conversation |
| tab | move between the prompt and the transcript |
| ↑ / ↓ in the transcript | move between items |
| Enter / click | expand or collapse a tool call or the reasoning |
| c / C | copy the item / its last code block |
| ctrl+o | copy the last answer |
| mouse drag, then ctrl+c | copy the selected text |
| ctrl+b | saved sessions |
| F2 | the server panel (vLLM, SGLang, … and the simulator) |
| F3 | the waterfall: where each turn's time went |
| ctrl+n | new conversation |
| F1, ? | this help |
| ctrl+q | quit |
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; max-width: 95%; height: 80%; background: $panel; border: round $accent; padding: 0 1;
    }
    """
    BINDINGS = [Binding("escape,f1,q,question_mark", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        commands = inert("\n".join(f"| `{name}` | {text} |" for name, text in COMMANDS.items()))
        with VerticalScroll():
            yield Markdown(f"# hotloop\n\n## Keys\n\n{KEYS}\n## Commands\n\n| command | |\n|---|---|\n{commands}\n")
