"""Tiers at work: which tier answers a turn.

`auto`: before each turn the helper tier (fast) classifies the prompt as simple or complex, and
the turn goes to the tier configured for that class (fast or strong). The question goes out
through `side_jobs.py`, at the end of the conversation when the helper tier is its own model,
so it reads the conversation's cached prefix. The helper tier's other jobs (titles, summaries)
are `SideJobs`'; the router starts them after a turn and hands summaries to the agents it makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, TurnFinished
from hotloop.agent.prompt import volatile_context
from hotloop.config import AUTO_TIER, Choice, Config, Target, resolve
from hotloop.core.side_jobs import CLASSIFY, CLASSIFY_ASK, Ask, Prefix, SideJobs
from hotloop.providers.errors import ProviderError

if TYPE_CHECKING:
    from pathlib import Path

    from hotloop.agent.approvals import Approvals
    from hotloop.agent.hooks import Hooks
    from hotloop.agent.loop import Agent
    from hotloop.agent.options import AgentOptions
    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider


class Router:
    """Which tier answers each turn of a session, and the agents it makes with the helper tier's summaries."""

    def __init__(self, config: Config, runtime: Runtime, auto: bool = False) -> None:
        self.config = config
        self.routing = config.routing
        self.runtime = runtime
        self.auto = auto
        self.side_jobs = SideJobs(config, runtime)

    def new_agent(
        self,
        provider: Provider,
        *,
        emit: Callable[[AgentEvent], None],
        workspace: Path,
        system: str | None = None,
        cache_key: str | None = None,
        max_steps: int | None = None,
        options: AgentOptions | None = None,
        approvals: Approvals | None = None,
        hooks: Hooks | None = None,
    ) -> Agent:
        """The runtime's agent (`Runtime.agent`) on `options` (the config's by default), with the helper tier's
        summaries if the config asks for them."""
        options = options or self.runtime.config.agent_options(max_steps)
        if self.routing.summarize_over_tokens:
            options = replace(options, summarize=self.side_jobs.summarize)
        return self.runtime.agent(
            provider,
            emit=emit,
            workspace=workspace,
            options=options,
            system=system,
            cache_key=cache_key,
            approvals=approvals,
            hooks=hooks,
        )

    def chose(self, choice: Choice) -> None:
        """The user picked a provider, model or tier: `auto` routes from the next turn on, anything else stops it."""
        self.auto = choice.tier == AUTO_TIER

    async def turn(self, agent: Agent, prompt: str) -> TurnFinished:
        """One turn of `agent`, on the tier `auto` picks or the one chosen; then the side jobs it calls for."""
        if self.auto:
            target, route = await self.route(prompt, agent)
            provider = await self.runtime.connect(target)
            if (provider.name, provider.model) != agent.using:
                agent.switch(provider, self.runtime.cost_per_hour(provider))
        else:
            route = self.config.tier_of(agent.provider.name, agent.provider.model) or ""
        finished = await agent.run_turn(prompt, route)
        self.side_jobs.started(self.side_jobs.after_turn(agent, finished, agent.emit))
        return finished

    async def route(self, prompt: str, agent: Agent) -> tuple[Target, str]:
        """The tier for a turn of `agent` on the `auto` tier, and the reason to show on its strips.

        When both answers lead to one model (a server that serves one), nothing is asked: the
        question would only cost a request before every turn.
        """
        simple, complex_ = (
            resolve(self.config, Choice(tier=tier)) for tier in (self.routing.auto_simple, self.routing.auto_complex)
        )
        if (simple.settings.name, simple.model) == (complex_.settings.name, complex_.model):
            return complex_, f"auto: {self.routing.auto_simple} = {self.routing.auto_complex}, not asked"
        # The prompt as the turn will send it (context included), so the turn's request reads it from the cache too.
        turn = prompt + volatile_context(agent.workspace)
        ask = Ask(CLASSIFY, prompt, f"{turn}\n\n{CLASSIFY_ASK}", tuple(agent.messages), Prefix.of(agent))
        try:
            answer = await self.side_jobs.ask(ask, max_tokens=4, background=False)
        except ProviderError as error:
            return complex_, f"auto: classifier failed ({error}) → {self.routing.auto_complex}"
        if "simple" in answer.lower():
            return simple, f"auto: simple → {self.routing.auto_simple}"
        return complex_, f"auto: complex → {self.routing.auto_complex}"
