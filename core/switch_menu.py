"""The switch menu: every tier, provider and model, each with what moving the conversation there costs now.

What each provider serves is asked once per session (`probe_all`, in the background from the
start), so the palette opens at once; a provider that can't be reached is listed with the
reason and can't be picked.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hotloop.config import AUTO_TIER, Choice, Config, resolve

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.routing import Router
    from hotloop.core.runtime import Runtime

Probes = dict[str, list[str] | str]  # by provider: the models its server lists, or why it can't be reached


@dataclass(frozen=True)
class SwitchOption:
    """One entry of the switch menu: a tier, or a provider and model, and what moving there costs now."""

    title: str
    help: str
    choice: Choice
    unavailable: str | None = None


async def probe_all(runtime: Runtime, config: Config) -> Probes:
    """What every configured provider serves, asked of them all at once."""
    names = list(config.providers)
    results = await asyncio.gather(*(runtime.probe(config.providers[name]) for name in names))
    return dict(zip(names, results, strict=True))


def switch_options(config: Config, agent: Agent | None, probes: Probes) -> list[SwitchOption]:
    """Every tier, provider and model, each with what switching `agent`'s conversation to it would cost now."""
    from hotloop.agent.switching import describe_cost

    def cost(provider: str, model: str) -> str:
        if agent is None or not agent.messages:
            return ""
        if (provider, model) == (agent.provider.name, agent.provider.model):
            return " · current"
        return " · " + describe_cost(*agent.warmth.cost(provider, model))

    options = []
    for tier in config.tiers.values():
        reason = probes.get(tier.provider)
        options.append(
            SwitchOption(
                f"tier: {tier.name}",
                f"{tier.provider} · {tier.model}{cost(tier.provider, tier.model)}",
                Choice(tier=tier.name),
                reason if isinstance(reason, str) else None,
            )
        )
    routing = config.routing
    options.append(
        SwitchOption(
            f"tier: {AUTO_TIER}",
            f"the {routing.helper_tier} tier sorts each turn: simple → {routing.auto_simple}, "
            f"complex → {routing.auto_complex}",
            Choice(tier=AUTO_TIER),
        )
    )
    for name, settings in config.providers.items():
        served = probes.get(name, [])
        if isinstance(served, str):
            options.append(SwitchOption(f"provider: {name}", f"unavailable: {served}", Choice(provider=name), served))
            continue
        where = settings.base_url or f"embedded simulator, {settings.protocol} API"
        for model in settings.models or tuple(served):
            options.append(
                SwitchOption(
                    f"model: {name} · {model}", f"{where}{cost(name, model)}", Choice(provider=name, model=model)
                )
            )
    return options


def in_use(config: Config, choice: Choice, using: tuple[str, str], router: Router | None) -> bool:
    """Whether `choice` is what answers now (`using`, or a tier picked per turn if the router is on `auto`): moving
    there changes nothing. A provider picked without a model keeps the model in use, as connecting to it would."""
    auto = router is not None and router.auto
    if auto or choice.tier == AUTO_TIER:
        return auto and choice.tier == AUTO_TIER
    target = resolve(config, choice)
    return target.settings.name == using[0] and target.model in (None, using[1])


async def import_sdks(config: Config) -> None:
    """The SDKs the configured providers are spoken through, imported in a worker thread if they aren't yet."""
    for sdk in sorted({settings.sdk for settings in config.providers.values()} - set(sys.modules)):
        await asyncio.to_thread(importlib.import_module, sdk)
