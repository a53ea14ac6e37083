"""`StatusFigures`: what the status bar says of the live session: who answers, the totals, the context meter.

A part of `MainScreen`, handed the session, the status bar and `say`. The totals start again
with each conversation; the warning that the context nears full is said once a conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hotloop import InputError
from hotloop.agent.events import AgentEvent, Compacted, ProviderSwitched, SideRequest, StepFinished, StepStarted
from hotloop.agent.figures import SessionTotals
from hotloop.config import Choice, resolve
from hotloop.core.session import Session
from hotloop.tui.say import Say
from hotloop.tui.widgets.status_bar import CONTEXT_WARNING, StatusBar

if TYPE_CHECKING:
    from hotloop.sessions.store import LoggedSession


class StatusFigures:
    def __init__(self, session: Session, status: Callable[[], StatusBar], say: Say) -> None:
        self._session = session
        self._status = status
        self._say = say
        self.totals = SessionTotals(session.config.pricer())
        self._context_warned = False  # the context-full warning, said once a conversation

    def show(self, event: AgentEvent) -> None:
        """An event of the session, as the status bar counts it."""
        status = self._status()
        if isinstance(event, StepStarted):
            status.state = f"step {event.step}"
            self.totals.add(event)
        elif isinstance(event, (StepFinished, Compacted, SideRequest)):
            self.totals.add(event)
            status.totals = self.totals
            status.show_detail(self._session.cache_lifetime())
            if not isinstance(event, SideRequest):
                self._measure_context()
        elif isinstance(event, ProviderSwitched):
            self._named(status, event.provider, event.model)

    def restored(self, session: LoggedSession) -> None:
        """A saved session is continued: its own totals and its context.

        A fork's history starts with its parent's turns, whose steps were the parent's spend: not counted again.
        """
        from hotloop.sessions.summary import own_spending_since

        since = own_spending_since(session.header)
        for event in session.events:
            # A fork's steps before `since` are its parent's; who answers them still says how the rest are priced.
            if isinstance(event, StepStarted) or (
                isinstance(event, (StepFinished, Compacted, SideRequest)) and event.ts >= since
            ):
                self.totals.add(event)
        status = self._status()
        status.totals = self.totals
        status.show_detail(self._session.cache_lifetime())
        self._measure_context()

    def start_over(self) -> None:
        """A new conversation: no totals, no context, and its warning may be said again."""
        self.totals = SessionTotals(self._session.config.pricer())
        status = self._status()
        status.totals = self.totals
        status.context = None
        self._context_warned = False

    def _measure_context(self) -> None:
        """The meter after a step or a compaction; a warning once the context nears full and nothing will compact it."""
        status = self._status()
        status.context_estimated = self._session.meter.estimated
        status.context = measured = self._session.context()
        if measured is None or self._context_warned:
            return
        used, window = measured
        settings = self._session.config.context
        if used >= CONTEXT_WARNING * window and (not settings.auto_compact or settings.compact_at > CONTEXT_WARNING):
            self._context_warned = True
            left = max(window - used, 0)
            self._say(
                f"the context is {used / window:.0%} full ({left:,} tokens left): /compact summarizes it, "
                "/new starts a fresh conversation",
                "warning",
                timeout=10,
            )

    def show_provider(self) -> None:
        """What answers now."""
        if self._session.agent is not None:
            provider = self._session.agent.provider
            self._named(self._status(), provider.name, provider.model)

    def show_target(self, choice: Choice, status: StatusBar | None = None) -> None:
        """The provider and model `choice` opens on, named before they answer: from the first frame, and while a
        switch or a connection is made."""
        try:
            target = resolve(self._session.config, choice)
        except InputError:
            return  # said by whoever picked it
        self._named(status or self._status(), target.settings.name, target.model or "")

    def _named(self, status: StatusBar, provider: str, model: str) -> None:
        status.provider, status.model = provider, model
        status.tier = self._session.tier_label(provider, model)
