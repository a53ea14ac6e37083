"""The small jobs the helper tier (fast) does beside the conversation: titles, summaries, and auto's question.

- Titles: after the first turn, the helper tier writes the session a short title, in the
  background lane.
- Summaries (off by default): a tool result longer than `summarize_over_tokens` is
  summarized by the helper tier before it enters the main context, and a notice says so.
- `ask` puts a question to the helper tier; `routing.py`'s `auto` asks it to classify a turn.

Helper requests use their own provider instances, so they never change the main agent's model. When the
helper tier is the conversation's own provider and model, a side job is asked at the end of the conversation
instead of as a fresh prompt: the conversation's request as the agent sends it (system prompt, tools,
messages), then one user message ending with the instruction (the classifier's starts with the turn's prompt
as the turn will send it, the summarizer's with the tool result). It reads the conversation's cached prefix
and, on a server that keeps one prompt (llama.cpp with one slot), leaves it there for the next step. Another
model shares no cache with the conversation, so it gets the short fresh prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, SessionTitled, TurnFinished
from hotloop.config import Choice, Config, Target, resolve
from hotloop.providers.conversation import AssistantMessage, ChatRequest, Message, ToolCall, ToolSpec, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import TextDelta

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.runtime import Runtime

_ONE_WORD = (
    "Reply with one word: simple (a greeting, a question answered in a sentence or two, one lookup) or complex "
    "(several steps or parts, code changes, analysis across files)."
)
CLASSIFY = f"You route tasks for a coding agent. {_ONE_WORD}"
TITLE = "Write a title of at most six words for the conversation below. Reply with the title only, no quotes."
SUMMARIZE = (
    "Summarize this tool result for a coding agent in at most {words} words. Keep file names, numbers, errors "
    "and whatever the task needs; drop repetition. Reply with the summary only."
)
# The same jobs asked as the last paragraph of a user message at the end of the conversation itself.
CLASSIFY_ASK = f"Don't act on the request above yet, only route it. {_ONE_WORD}"
# Short: on a server that caches in blocks it is most of what the title request computes.
TITLE_ASK = "Reply with only a title of six words or fewer."
CHARS_PER_TOKEN = 4  # a rough count is enough to decide what is long


@dataclass(frozen=True)
class Prefix:
    """What every request of a conversation starts with, the provider and model they go to, and whether to reuse it.

    `reuse` is whether a side job on the same model should be asked after the conversation: on a
    server someone runs (vLLM, llama.cpp, SGLang, the simulator), whichever protocol it is spoken
    in, its cache holds a few conversations and a fresh prompt evicts one. A hosted API evicts
    nothing a title would, and bills the reuse: cached reads at a tenth (and, on Anthropic, the ask
    written at 1.25×), which costs more than the short fresh prompt (benchmarks/helper_prefix.py).
    """

    using: tuple[str, str]
    system: str
    tools: tuple[ToolSpec, ...]
    cache_key: str | None
    reuse: bool

    @classmethod
    def of(cls, agent: Agent) -> Prefix:
        return cls(agent.using, agent.system, agent.tools.specs(), agent.cache_key, not agent.provider.official)


@dataclass(frozen=True)
class Ask:
    """A side job in its two forms: a fresh prompt, and an instruction after the conversation's own messages."""

    system: str
    text: str
    instruction: str
    messages: Sequence[Message] = ()
    prefix: Prefix | None = None

    def request(self, target: Target, max_tokens: int, background: bool) -> ChatRequest:
        """The conversation's request plus the instruction on the conversation's model, else the fresh prompt."""
        prefix = self.prefix
        if prefix is not None and prefix.reuse and prefix.using == (target.settings.name, target.model):
            return ChatRequest(
                system=prefix.system,
                tools=prefix.tools,
                messages=(*self.messages, UserMessage(self.instruction)),
                max_tokens=max_tokens,
                cache_key=prefix.cache_key,
                background=background,
            )
        return ChatRequest(
            system=self.system,
            tools=(),
            messages=(UserMessage(self.text),),
            max_tokens=max_tokens,
            cache_key=prefix.cache_key if prefix is not None else None,  # still the session's: its affinity key
            background=background,
        )


class SideJobs:
    """The helper tier's jobs for one session, and the ones still running (a title `hotloop run` waits for)."""

    def __init__(self, config: Config, runtime: Runtime) -> None:
        self.config = config
        self.routing = config.routing
        self.runtime = runtime
        self.lanes = runtime.lanes
        self._running: set[asyncio.Task[None]] = set()

    async def title(self, messages: Sequence[Message], prefix: Prefix | None = None) -> str | None:
        """A short title for the conversation `messages`, whose requests start with `prefix`; None if none came."""
        ask = Ask(TITLE, _transcript(messages), TITLE_ASK, messages, prefix)
        try:
            text = await self.lanes.background(lambda: self.ask(ask, 24, background=True))
        except ProviderError:
            return None
        title = " ".join(text.strip().strip("\"'").split())
        return title[:80] or None

    async def summarize(self, agent: Agent, call: ToolCall, content: str) -> tuple[str, str] | None:
        """A shorter result of `agent`'s `call` for the context, and a note saying so; None if it is short already."""
        limit = self.routing.summarize_over_tokens
        tokens = len(content) // CHARS_PER_TOKEN
        if not limit or tokens <= limit:
            return None
        words = max(limit // 2, 20)
        system = SUMMARIZE.format(words=words)
        result = f"{call.name}({call.arguments}) returned:\n{content}"
        ask = Ask(system, result, f"{result}\n\n{system}", _sent_before(agent.messages, call), Prefix.of(agent))
        text = await self.lanes.background(lambda: self.ask(ask, words * 2, background=True))
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

        # As the turn left it: a later turn may be mid-step (calls without results) when the title goes out.
        messages, prefix = tuple(agent.messages), Prefix.of(agent)

        async def titled() -> None:
            title = await self.title(messages, prefix)
            if title:
                emit(SessionTitled(title=title, model=self.helper_target().model or ""))

        return asyncio.create_task(titled())

    def started(self, job: asyncio.Task[None] | None) -> None:
        """Keep `job` until it ends, so `settle` can wait for it."""
        if job is not None:
            self._running.add(job)
            job.add_done_callback(self._running.discard)

    async def settle(self, timeout: float) -> None:
        """Let jobs in flight finish (a title before `hotloop run` exits), up to `timeout` seconds."""
        if self._running:
            await asyncio.wait(self._running, timeout=timeout)
        for job in self._running:
            job.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)  # done with the clients before they close

    async def ask(self, ask: Ask, max_tokens: int, background: bool) -> str:
        target = self.helper_target()
        provider = await self.runtime.helper(target)
        request = ask.request(target, max_tokens, background)
        if background:
            events = [event async for event in provider.stream(request)]
        else:
            async with self.lanes.interactive():
                events = [event async for event in provider.stream(request)]
        return "".join(event.text for event in events if isinstance(event, TextDelta))

    def helper_target(self) -> Target:
        return resolve(self.config, Choice(tier=self.routing.helper_tier))


def _sent_before(messages: list[Message], call: ToolCall) -> list[Message]:
    """The messages of the request that asked for `call`: those before its assistant message, if that is in yet."""
    for n in range(len(messages) - 1, -1, -1):
        message = messages[n]
        if isinstance(message, AssistantMessage) and any(c.id == call.id for c in message.tool_calls):
            return messages[:n]
    return list(messages)  # early dispatch: the call ran while its message was still streaming


def _transcript(messages: Sequence[Message]) -> str:
    """The conversation as plain text for the titler: the user's words and the answers, no tool traffic."""
    lines = []
    for message in messages[:6]:
        if isinstance(message, UserMessage):
            lines.append("User: " + message.content.split("<context>")[0].strip()[:600])
        elif isinstance(message, AssistantMessage) and message.text:
            lines.append("Assistant: " + message.text.strip()[:600])
    return "\n".join(lines)
