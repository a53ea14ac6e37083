"""An ACP session's switches: the tier, the model and the mode, as config options (and the mode as a session mode).

`tier` picks one of the config's tiers or `auto`, `model` a provider and model the config lists (the one in
use is always among them); both move the conversation with `Session.switch`, as the app's switch menu does,
from the next request on. `mode` is `ask` (a call with side effects is put to the user) or `read-only`
(every tool with side effects refused by a deny rule, without asking: no rule, `--allow` or `--yes` lets one
through). A session started with `--read-only` has no such tool at all, and stays read-only.
"""

from __future__ import annotations

from typing import Literal

from acp import RequestError
from acp.schema import (
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from hotloop import InputError
from hotloop.agent.approvals import ApprovalRules
from hotloop.config import AUTO_TIER, Choice
from hotloop.core.session import Session

TIER, MODEL, MODE = "tier", "model", "mode"
ASK, READ_ONLY = "ask", "read-only"
PICKED = "picked"  # the tier option's value while the model in use was picked by name and is no tier's
MODES = (
    SessionMode(id=ASK, name="Ask", description="hotloop asks before a call that writes a file or runs a command"),
    SessionMode(id=READ_ONLY, name="Read-only", description="calls that would change anything are refused, unasked"),
)
ConfigOption = SessionConfigOptionSelect
Category = Literal["mode", "model"]


class Switches:
    """The tier, model and mode of one session, as the client sees and sets them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.rules = session.approvals.rules  # the config's and the command line's, read-only mode's added to them
        self.tier: str | None = session.options.tier
        self.mode = READ_ONLY if session.options.read_only else ASK

    # -- what the client is shown --------------------------------------------------------

    def options(self) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        return [self._tier(), self._model(), self._mode()]

    def modes(self) -> SessionModeState:
        return SessionModeState(current_mode_id=self.mode, available_modes=list(MODES))

    def _using(self) -> tuple[str, str]:
        agent = self.session.agent
        assert agent is not None
        return agent.provider.name, agent.provider.model

    def _tier(self) -> ConfigOption:
        config = self.session.config
        router = self.session.router
        if router is not None and router.auto:
            current = AUTO_TIER
        elif self.tier in config.tiers:
            current = self.tier
        else:
            current = (config.tier_of(*self._using()) or PICKED).split(" = ")[0]
        choices = [_select(name, f"{name}: {t.provider} · {t.model}") for name, t in config.tiers.items()]
        choices.append(_select(AUTO_TIER, f"{AUTO_TIER}: the {config.routing.helper_tier} tier sorts each turn"))
        if current == PICKED:
            choices.append(_select(PICKED, "none: the model picked by name"))
        return _option(TIER, "Tier", "model", current, choices)

    def _model(self) -> ConfigOption:
        provider, model = self._using()
        current = f"{provider}:{model}"
        values = [f"{name}:{m}" for name, settings in self.session.config.providers.items() for m in settings.models]
        if current not in values:
            values.insert(0, current)
        choices = [_select(value, value.replace(":", " · ", 1)) for value in values]
        return _option(MODEL, "Model", "model", current, choices)

    def _mode(self) -> ConfigOption:
        choices = [_select(mode.id, mode.name) for mode in MODES]
        return _option(MODE, "Mode", "mode", self.mode, choices)

    # -- what the client sets ------------------------------------------------------------

    async def set(self, config_id: str, value: str | bool) -> None:
        if not isinstance(value, str):
            raise RequestError.invalid_params({"message": f"{config_id} takes one of its options' values"})
        if config_id == MODE:
            self.set_mode(value)
        elif config_id == TIER:
            if value != PICKED:
                await self._switch(Choice(tier=value))
                self.tier = value
        elif config_id == MODEL:
            provider, _, model = value.partition(":")
            if not model:
                raise RequestError.invalid_params({"message": f"a model is `provider:model`, not {value!r}"})
            await self._switch(Choice(provider=provider, model=model))
            self.tier = None
        else:
            raise RequestError.invalid_params({"message": f"no config option {config_id!r} (tier, model, mode)"})

    async def _switch(self, choice: Choice) -> None:
        if self.session.busy:
            raise RequestError.invalid_request({"message": "a prompt is running: switch when it ends"})
        try:
            await self.session.switch(choice)
        except InputError as error:
            raise RequestError.invalid_params({"message": str(error)}) from None

    def set_mode(self, mode: str) -> None:
        if mode not in (ASK, READ_ONLY):
            raise RequestError.invalid_params({"message": f"no mode {mode!r} ({ASK}, {READ_ONLY})"})
        if mode == ASK and self.session.options.read_only:
            raise RequestError.invalid_params({"message": "hotloop acp --read-only offers no tool that acts"})
        self.mode = mode
        runtime = self.session.runtime
        acting = [tool.name for tool in runtime.tools if tool.side_effects] if runtime is not None else []
        denied = (*self.rules.deny, *acting) if mode == READ_ONLY else self.rules.deny
        self.session.approvals.rules = ApprovalRules(allow=self.rules.allow, deny=tuple(denied))


def _select(value: str, name: str) -> SessionConfigSelectOption:
    return SessionConfigSelectOption(value=value, name=name)


def _option(
    option_id: str, name: str, category: Category, current: str, choices: list[SessionConfigSelectOption]
) -> ConfigOption:
    return SessionConfigOptionSelect(
        type="select", id=option_id, name=name, category=category, current_value=current, options=choices
    )
