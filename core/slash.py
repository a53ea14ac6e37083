"""Slash commands typed as a prompt: /model, /tier, /provider, /new, /fork, /compact, /mcp, /help.

The app takes all of them; `hotloop run` takes the switching ones and /compact between its prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hotloop.config import Choice

COMMANDS = {
    "/model": "NAME: use another model of the current provider",
    "/tier": "fast|balanced|strong: use the provider and model the tier maps to; auto: the fast tier picks per turn",
    "/provider": "NAME [MODEL]: switch provider (and model); the conversation continues",
    "/new": "start a new conversation (and session log)",
    "/fork": "[N]: go on in a new session holding this conversation up to turn N (default: all of it)",
    "/compact": "replace the conversation by a summary its model writes; the cached prefix is kept",
    "/mcp": "[restart NAME | accept]: the MCP servers; restart one; send held tools",
    "/help": "show keys and commands",
}
_NEEDS_ARGUMENT = {"/model", "/tier", "/provider"}
SWITCHES = ("/model", "/tier", "/provider")
BETWEEN_PROMPTS = (*SWITCHES, "/compact")  # what `hotloop run` takes among its prompts


@dataclass(frozen=True)
class Slash:
    name: str
    args: tuple[str, ...] = ()

    def choice(self, current_provider: str) -> Choice:
        """What a switching command picks; `/model` stays on the current provider."""
        if self.name == "/model":
            return Choice(provider=current_provider, model=self.args[0])
        if self.name == "/tier":
            return Choice(tier=self.args[0])
        return Choice(provider=self.args[0], model=self.args[1] if len(self.args) > 1 else None)


class SlashError(ValueError):
    """A slash command that can't run; the message says why, in one line."""


def parse(text: str) -> Slash | None:
    """The slash command in `text`, None if it is an ordinary prompt, or a SlashError."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name, *args = stripped.split()
    if name not in COMMANDS:
        raise SlashError(f"unknown command {name} (commands: {', '.join(COMMANDS)})")
    if name in _NEEDS_ARGUMENT and not args:
        raise SlashError(f"{name} needs an argument: {name} {COMMANDS[name]}")
    if (name == "/provider" and len(args) > 2) or (name in ("/model", "/tier") and len(args) > 1):
        raise SlashError(f"too many arguments: {name} {COMMANDS[name]}")
    if name == "/mcp" and args and args != ["accept"] and (args[0] != "restart" or len(args) != 2):
        raise SlashError(f"/mcp takes nothing, restart NAME or accept: /mcp {COMMANDS[name]}")
    if name in ("/new", "/compact", "/help") and args:
        raise SlashError(f"{name} takes no arguments")
    if name == "/fork" and (len(args) > 1 or (args and not _turn_number(args[0]))):
        raise SlashError(f"/fork takes nothing, or a turn number: /fork {COMMANDS[name]}")
    return Slash(name, tuple(args))


def _turn_number(text: str) -> bool:
    return text.isascii() and text.isdecimal() and int(text) > 0
