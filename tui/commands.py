"""Command-palette providers: switch provider, model or tier, keeping the conversation."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.markup import escape
from textual.notifications import SeverityLevel

from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.config import Choice
    from hotloop.core.switch_menu import SwitchOption


@runtime_checkable
class SwitchSource(Protocol):
    """What the palette's switching reads and does: the app it is registered on provides it."""

    async def switch_options(self) -> list[SwitchOption]: ...
    def switch_to(self, choice: Choice) -> object: ...
    def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None: ...


class SwitchCommands(Provider):
    """Every configured provider and model, and the tiers. Unusable ones say why and can't be picked."""

    @property
    def source(self) -> SwitchSource:
        app = self.app
        if not isinstance(app, SwitchSource):
            raise TypeError(f"SwitchCommands needs an app that is a SwitchSource, not {type(app).__name__}")
        return app

    async def startup(self) -> None:
        self._options = await self.source.switch_options()

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
        source = self.source
        if option.unavailable:
            return partial(source.say, f"{option.title}: {option.unavailable}", severity="error")
        return partial(source.switch_to, option.choice)


def _help(option: SwitchOption) -> str:
    """The option's help, escaped: the palette parses help as markup, and it may quote a server's error."""
    return escape(inert(option.help))
