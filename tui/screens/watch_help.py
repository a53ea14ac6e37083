"""`WatchHelp`: how to point an agent at `hotloop watch`, with this pass-through's own address, and the keys."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from hotloop.tui.screens.help import HelpScreen


def recipes(url: str) -> str:
    """The lines that point each kind of agent at the pass-through at `url`."""
    return (
        f"Claude Code, the Anthropic SDK:  ANTHROPIC_BASE_URL={url}\n"
        f"OpenAI SDK, most agents:         OPENAI_BASE_URL={url}/v1\n"
        "Codex (its own OpenAI provider ignores OPENAI_BASE_URL): in ~/.codex/config.toml\n"
        '  model_provider = "watched"\n'
        "  [model_providers.watched]\n"
        '  name = "hotloop watch"\n'
        f'  base_url = "{url}/v1"\n'
        '  wire_api = "responses"\n'
        '  env_key = "OPENAI_API_KEY"\n'
        "Your key goes to the upstream as the agent sent it; hotloop never writes it down.\n"
        "hotloop watch --run CMD… starts a command pointed here, and prints a table when it ends."
    )


class WatchHelp(HelpScreen):
    """The app's help screen (its look, its keys to close), on the watch's own contents."""

    def __init__(self, url: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.url = url
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Point an agent here", "bold"))
            yield Static(recipes(self.url), markup=False)
            yield Static(Text("Keys", "bold"))
            yield Static("\n".join(f"{key:<12}{what}" for key, what in self.keys), markup=False)
