"""`ProviderSwitch`: another provider, model or tier from the next turn on, the conversation kept.

A part of `MainScreen`, handed the session, the status figures and what it asks of the screen's
turn (is one running, send the next prompt). A switch asked for during a turn waits for its end
(`pending`); prompts wait while a switch is under way (`switching`).
"""

from __future__ import annotations

from collections.abc import Callable

from hotloop import InputError
from hotloop.agent.figures import short_model
from hotloop.config import Choice, resolve
from hotloop.core.session import Session
from hotloop.tui.say import Say
from hotloop.tui.status_figures import StatusFigures
from hotloop.tui.widgets.status_bar import StatusBar


class ProviderSwitch:
    def __init__(
        self,
        session: Session,
        figures: StatusFigures,
        status: Callable[[], StatusBar],
        say: Say,
        *,
        retarget: Callable[[Choice], None],
        turn_running: Callable[[], bool],
        next_prompt: Callable[[], None],
    ) -> None:
        self._session = session
        self._figures = figures
        self._status = status
        self._say = say
        self._retarget = retarget
        self._turn_running = turn_running
        self._next_prompt = next_prompt
        self.pending: Choice | None = None  # a switch asked for during a turn, made when it ends
        self.switching = 0  # switches under way: prompts wait for them

    async def switch(self, choice: Choice) -> None:
        """Use `choice` from the next turn on; the conversation stays.

        Said at once, whatever the turn is doing: the status bar names where it goes while it connects, a turn in
        flight has it wait for its end, and picking what answers already changes nothing, which is said too.
        """
        from hotloop.providers.errors import ProviderError

        if self._session.agent is None:
            self._retarget(choice)
            return
        try:
            if self._session.in_use(choice):
                self.pending = None  # staying is the last word
                self._say(f"already on {self.target_name(choice)}: nothing to switch")
                return
        except InputError as error:
            self._say(str(error), severity="error")
            return
        if self._turn_running():
            self.pending = choice
            self._say(f"switching to {self.target_name(choice)} when this turn ends")
            return
        status = self._status()
        self.switching += 1
        status.state = "switching to"
        self._figures.show_target(choice)
        try:
            # The agent reports the switch, with its cost, through the event stream.
            await self._session.switch(choice)
        except (InputError, ProviderError) as error:
            self._say(str(error), severity="error")
        finally:
            self.switching -= 1
            if status.is_attached:  # not when the app closed under it
                self._figures.show_provider()  # what answers now: the target, or after a failure what answered before
                if not self.switching:
                    status.state = "ready"
        self._next_prompt()

    def target_name(self, choice: Choice) -> str:
        """`sim-anthropic · sim-balanced`: the provider and model `choice` names (a bad name: InputError)."""
        target = resolve(self._session.config, choice)
        return f"{target.settings.name} · {short_model(target.model)}" if target.model else target.settings.name
