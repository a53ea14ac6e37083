"""`AgentMaker`: the agents a session makes (at open, a resume, `/new`, a continued session), each whole when made.

Every one gets the session's event stream, workspace, approvals and hooks, the followed server's residency and the
prefetch predictor they share (what was learned outlives a conversation); the router adds the helper tier's
summaries. Nothing is set on an agent once it is made. Its system prompt is a kept one or a new one, with the
project's instructions as they are now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, Notice

if TYPE_CHECKING:
    from hotloop.agent.approvals import Approvals
    from hotloop.agent.hooks import Hooks
    from hotloop.agent.loop import Agent
    from hotloop.agent.prefetch import Predictor
    from hotloop.core.routing import Router
    from hotloop.core.session import SessionOptions
    from hotloop.providers.base import Provider
    from hotloop.providers.server_metrics import Residency


class AgentMaker:
    def __init__(
        self,
        options: SessionOptions,
        emit: Callable[[AgentEvent], None],
        approvals: Approvals,
        hooks: Hooks | None,
        residency: Callable[[], Residency | None],
    ) -> None:
        """`options`: the session's (its workspace, the text added to the system prompt, the step cap)."""
        self._emit = emit
        self._workspace = options.workspace
        self._extra_system = options.system
        self._max_steps = options.max_steps
        self._approvals = approvals
        self._hooks = hooks
        self._residency = residency
        self._predictor: Predictor | None = None  # made with the first agent: the SDKs load in `open()`, not here

    @property
    def predictor(self) -> Predictor:
        """Prefetch's predictor, shared by every agent made."""
        if self._predictor is None:
            from hotloop.agent.prefetch import Predictor

            self._predictor = Predictor()
        return self._predictor

    def system(self, current: Agent | None, kept: str | None = None) -> str:
        """`kept` (a logged or the current prompt) or a new one, with the project's instructions as they are now;
        their warnings said when the prompt differs from `current`'s (not at every turn)."""
        from hotloop.agent.instructions import read_instructions, with_instructions
        from hotloop.agent.prompt import system_prompt

        instructions = read_instructions(self._workspace)
        system = with_instructions(kept, instructions) if kept else system_prompt(self._extra_system, instructions)
        if current is None or system != current.system:
            for warning in instructions.warnings:
                self._emit(Notice(level="warning", message=warning))
        return system

    def new(self, router: Router, provider: Provider, system: str, cache_key: str | None = None) -> Agent:
        """An agent for `provider`; a new conversation's gets the id its log will have, as its routing key from the
        first request on (a start's pre-warm goes out before the log exists, to the replica the steps will use)."""
        from hotloop.sessions.log import new_session_id

        options = router.runtime.config.agent_options(self._max_steps)
        return router.new_agent(
            provider,
            emit=self._emit,
            workspace=self._workspace,
            system=system,
            cache_key=cache_key or new_session_id(),
            options=replace(options, residency=self._residency, predictor=self.predictor),
            approvals=self._approvals,
            hooks=self._hooks,
        )
