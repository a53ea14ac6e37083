"""Command-palette providers: switch provider, model or tier, keeping the conversation."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.markup import escape

from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.core.session import SwitchOption
    from hotloop.tui.app import HotloopApp


class SwitchCommands(Provider):
    """Every configured provider and model, and the tiers. Unusable ones say why and can't be picked."""

    @property
    def hotloop(self) -> HotloopApp:
        """The app, as the `HotloopApp` this provider is registered on."""
        from hotloop.tui.app import HotloopApp  # at run time only: the app module imports this one

        app = self.app
        if not isinstance(app, HotloopApp):
            raise TypeError(f"SwitchCommands needs a HotloopApp, not {type(app).__name__}")
        return app

    async def startup(self) -> None:
        self._options = await self.hotloop.switch_options()

    async def discover(self) -> Hits:
        for option in self._options:
            yield DiscoveryHit(Content(inert(option.title)), self._callback(option), help=_help(option))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for option in self._options:
            score = matcher.match(option.title)
            if score > 0:
                # The matcher parses what it highlights as markup; model names come from servers.
                shown = matcher.highlight(escape(inert(option.title)))
                yield Hit(score, shown, self._callback(option), help=_help(option))

    def _callback(self, option: SwitchOption) -> Callable[[], object]:
        app = self.hotloop
        if option.unavailable:
            return partial(app.say, f"{option.title}: {option.unavailable}", severity="error")
        return partial(app.switch_to, option.choice)


def _help(option: SwitchOption) -> str:
    """The option's help, escaped: the palette parses help as markup, and it may quote a server's error."""
    return escape(inert(option.help))
