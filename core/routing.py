"""Tiers at work: which tier answers a turn, and the small jobs the fast tier does on the side.

- `auto`: before each turn the helper tier (fast) classifies the prompt as simple or complex,
  and the turn goes to the tier configured for that class (fast or strong).
- Titles: after the first turn, the helper tier writes the session a short title, in the
  background lane.
- Summaries (off by default): a tool result longer than `summarize_over_tokens` is
  summarized by the helper tier before it enters the main context, and a notice says so.

Helper requests use their own provider instances, so they never change the main agent's model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, SessionTitled, TurnFinished
from hotloop.agent.loop import Agent
from hotloop.config import AUTO_TIER, Choice, Config, Target, resolve
from hotloop.providers.conversation import AssistantMessage, ChatRequest, Message, ToolCall, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import TextDelta

if TYPE_CHECKING:
    from pathlib import Path

    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider

CLASSIFY = (
    "You route tasks for a coding agent. Reply with one word: simple (a greeting, a question answered in a "
    "sentence or two, one lookup) or complex (several steps or parts, code changes, analysis across files)."
)
TITLE = "Write a title of at most six words for the conversation below. Reply with the title only, no quotes."
SUMMARIZE = (
    "Summarize this tool result for a coding agent in at most {words} words. Keep file names, numbers, errors "
    "and whatever the task needs; drop repetition. Reply with the summary only."
)
CHARS_PER_TOKEN = 4  # a rough count is enough to decide what is long


class Router:
    def __init__(self, config: Config, runtime: Runtime, auto: bool = False) -> None:
        self.config = config
        self.routing = config.routing
        self.runtime = runtime
        self.lanes = runtime.lanes
        self.auto = auto
        self._side_jobs: set[asyncio.Task[None]] = set()

    def new_agent(
        self,
        provider: Provider,
        *,
        emit: Callable[[AgentEvent], None],
        workspace: Path,
        system: str | None = None,
        cache_key: str | None = None,
        max_steps: int | None = None,
    ) -> Agent:
        """An agent as the config says: the runtime's tools and lanes, the latency switches, and summaries if asked."""
        latency = self.config.latency
        return Agent(
            provider,
            self.runtime.tools,
            emit=emit,
            workspace=workspace,
            system=system,
            max_steps=max_steps or self.config.max_steps,
            tool_timeout=self.config.tool_timeout,
            cache_key=cache_key,
            lanes=self.lanes,
            summarize=self.summarize if self.routing.summarize_over_tokens else None,
            early_dispatch=latency.early_dispatch,
            memo_ttl=latency.memo_ttl,
            prefetch=latency.prefetch,
        )

    def chose(self, choice: Choice) -> None:
        """The user picked a provider, model or tier: `auto` routes from the next turn on, anything else stops it."""
        self.auto = choice.tier == AUTO_TIER

    async def turn(self, agent: Agent, prompt: str) -> TurnFinished:
        """One turn of `agent`, on the tier `auto` picks or the one chosen; then the side jobs it calls for."""
        if self.auto:
            target, agent.route = await self.route(prompt)
            provider = await self.runtime.connect(target)
            if (provider.name, provider.model) != agent.using:
                agent.switch(provider)
        else:
            agent.route = self.config.tier_of(agent.provider.name, agent.provider.model) or ""
        finished = await agent.run_turn(prompt)
        job = self.after_turn(agent, finished, agent.emit)
        if job is not None:
            self._side_jobs.add(job)
            job.add_done_callback(self._side_jobs.discard)
        return finished

    async def settle(self, timeout: float) -> None:
        """Let side jobs in flight finish (a title before `hotloop run` exits), up to `timeout` seconds."""
        if self._side_jobs:
            await asyncio.wait(self._side_jobs, timeout=timeout)
        for job in self._side_jobs:
            job.cancel()

    async def route(self, prompt: str) -> tuple[Target, str]:
        """The tier for a turn of the `auto` tier, and the reason to show on its strips."""
        try:
            answer = await self._ask(CLASSIFY, prompt, max_tokens=4, background=False)
        except ProviderError as error:
            tier = self.routing.auto_complex
            return resolve(self.config, Choice(tier=tier)), f"auto: classifier failed ({error}) → {tier}"
        kind = "simple" if "simple" in answer.lower() else "complex"
        tier = self.routing.auto_simple if kind == "simple" else self.routing.auto_complex
        return resolve(self.config, Choice(tier=tier)), f"auto: {kind} → {tier}"

    async def title(self, messages: list[Message]) -> str | None:
        """A short title for the conversation so far; None if the helper tier can't give one."""
        try:
            text = await self.lanes.background(lambda: self._ask(TITLE, _transcript(messages), 24, background=True))
        except ProviderError:
            return None
        title = " ".join(text.strip().strip("\"'").split())
        return title[:80] or None

    async def summarize(self, call: ToolCall, content: str) -> tuple[str, str] | None:
        """A shorter result for the context, and a note saying what happened; None if it is short already."""
        limit = self.routing.summarize_over_tokens
        tokens = len(content) // CHARS_PER_TOKEN
        if not limit or tokens <= limit:
            return None
        words = max(limit // 2, 20)
        system = SUMMARIZE.format(words=words)
        text = await self.lanes.background(
            lambda: self._ask(system, f"{call.name}({call.arguments}) returned:\n{content}", words * 2, background=True)
        )
        summary = f"[summary of a {tokens:,}-token result, by the {self.routing.helper_tier} tier]\n{text.strip()}"
        note = (
            f"{call.name}'s result ({tokens:,} tokens) was summarized to {len(summary) // CHARS_PER_TOKEN:,} "
            f"by the {self.routing.helper_tier} tier before entering the context"
        )
        return summary, note

    def after_turn(
        self, agent: Agent, finished: TurnFinished, emit: Callable[[AgentEvent], None]
    ) -> asyncio.Task[None] | None:
        """Start the title job after the session's first answered turn."""
        if finished.turn != 1 or finished.reason != "answer" or not self.routing.titles:
            return None

        async def titled() -> None:
            title = await self.title(agent.messages)
            if title:
                emit(SessionTitled(title=title, model=self.helper_target().model or ""))

        return asyncio.create_task(titled())

    async def _ask(self, system: str, user: str, max_tokens: int, background: bool) -> str:
        provider = await self.runtime.helper(self.helper_target())
        request = ChatRequest(
            system=system, tools=(), messages=(UserMessage(user),), max_tokens=max_tokens, background=background
        )
        if background:
            events = [event async for event in provider.stream(request)]
        else:
            async with self.lanes.interactive():
                events = [event async for event in provider.stream(request)]
        return "".join(event.text for event in events if isinstance(event, TextDelta))

    def helper_target(self) -> Target:
        return resolve(self.config, Choice(tier=self.routing.helper_tier))


def _transcript(messages: list[Message]) -> str:
    """The conversation as plain text for the titler: the user's words and the answers, no tool traffic."""
    lines = []
    for message in messages[:6]:
        if isinstance(message, UserMessage):
            lines.append("User: " + message.content.split("<context>")[0].strip()[:600])
        elif isinstance(message, AssistantMessage) and message.text:
            lines.append("Assistant: " + message.text.strip()[:600])
    return "\n".join(lines)
