"""Command-palette providers: switch provider, model or tier, keeping the conversation."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from hotloop.tui.app import HotloopApp


class SwitchCommands(Provider):
    """Every configured provider and model, and the tiers. Unusable ones say why and can't be picked."""

    async def startup(self) -> None:
        app: HotloopApp = self.app  # type: ignore[assignment]
        self._options = await app.switch_options()

    async def discover(self) -> Hits:
        for option in self._options:
            yield DiscoveryHit(option.title, self._callback(option), help=option.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for option in self._options:
            score = matcher.match(option.title)
            if score > 0:
                yield Hit(score, matcher.highlight(option.title), self._callback(option), help=option.help)

    def _callback(self, option):  # type: ignore[no-untyped-def]
        app: HotloopApp = self.app  # type: ignore[assignment]
        if option.unavailable:
            return partial(app.notify, f"{option.title}: {option.unavailable}", severity="error")
        return partial(app.switch_to, option.choice)
