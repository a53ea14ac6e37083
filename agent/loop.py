"""The agent loop: a turn is a sequence of steps.

Each step builds the request, streams the model's answer, has the step's tool calls run
concurrently (`tool_runner.py`), and appends the results, until the model answers without calling a tool or
the step cap is reached. Every stage is reported as an event to one `emit` callback.

The conversation stays valid whatever happens: a failing or hanging tool becomes an error
result, a cancelled turn gives every issued call a `cancelled` result, and a provider error
keeps the partial answer, marked as interrupted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from hotloop.agent.approvals import Approvals
from hotloop.agent.cache_explainer import CacheExplainer, cache_block
from hotloop.agent.compaction import Compaction, LogCounts, resumed_anchor, too_long, with_fix
from hotloop.agent.events import (
    Compacted,
    Notice,
    ProviderSwitched,
    TurnEnd,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import counted, stop_words
from hotloop.agent.hooks import Hooks
from hotloop.agent.options import AgentOptions
from hotloop.agent.prompt import PromptBuilder, system_prompt, volatile_context
from hotloop.agent.recorder import StepRecorder
from hotloop.agent.step import StepAccumulator
from hotloop.agent.switching import CacheWarmth
from hotloop.agent.tool_runner import Emit, ToolRunner, cancel_all
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import Provider
from hotloop.providers.conversation import ChatRequest, Message, ToolResultMessage, UserMessage, repaired
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import CUT_SHORT, ProviderWarning, ServerHint, ToolCallReady
from hotloop.providers.lanes import Lanes

if TYPE_CHECKING:
    from hotloop.providers.server_metrics import Residency


class Agent:
    """Runs turns of one conversation against one provider at a time; `switch` moves it to another.

    `cache_key` (the session id) is sent to providers that route by it, so a session's
    requests reach the same cache.
    """

    def __init__(
        self,
        provider: Provider,
        tools: ToolRegistry,
        *,
        emit: Emit,
        workspace: Path,
        options: AgentOptions | None = None,
        system: str | None = None,
        context: Callable[[], str] | None = None,
        cache_key: str | None = None,
        lanes: Lanes | None = None,
        approvals: Approvals | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.provider = provider
        self.options = options or AgentOptions()
        self.emit = emit
        # The step's calls run apart from the loop, their events into the same stream.
        self.runner = ToolRunner(
            tools,
            emit=lambda event: self.emit(event),
            workspace=workspace,
            options=self.options,
            approvals=approvals,
            hooks=hooks,
            summarize=partial(summarize, self) if (summarize := self.options.summarize) is not None else None,
        )
        self.compaction = Compaction(self)
        self.cache_key = cache_key
        self.lanes = lanes
        self.explainer = CacheExplainer()
        # vLLM's, where the server is followed
        self.server_residency: Callable[[], Residency | None] = self.options.residency or (lambda: None)
        self.route = ""  # the tier that answers and why, shown on each step's strip (`run_turn`'s)
        self.warmth = CacheWarmth()
        self._using = (provider.name, provider.model)
        self.tools = tools
        self.workspace = workspace
        self.messages: list[Message] = []
        self._checked = 0  # messages already repaired: history only grows, so only the rest needs a look
        self._last_finish = ""  # the last step's finish reason
        self.turn = 0
        self._builder = PromptBuilder(system if system is not None else system_prompt(), tools)
        self._context = context or (lambda: volatile_context(workspace))

    @property
    def using(self) -> tuple[str, str]:
        """The provider and model the last request went to (or the next will, before any)."""
        return self._using

    @property
    def system(self) -> str:
        return self._builder.system

    @system.setter
    def system(self, text: str) -> None:
        """A new system prompt from the next request on (it costs the cache everything after it)."""
        self._builder.system = text

    def context_window(self) -> int | None:
        """Tokens a request may hold on the model in use: its server's figure, else the price table's (hosted APIs)."""
        from hotloop.agent.pricing import known_window

        if self.provider.server is not None:
            return self.provider.server.max_model_len(self.provider.model)
        return known_window(self.provider.model, self.provider.base_url)

    def restore(self, messages: list[Message], turns: int, warmth: CacheWarmth, log: LogCounts | None = None) -> None:
        """Go on with a conversation rebuilt from its session log (`log`: what it counted, for compaction's sizes)."""
        self.go_on_from(list(messages))
        self.turn, self.warmth = turns, warmth
        self.compaction.anchor, self.compaction.summary = resumed_anchor(log, self.messages, self._using, self.request)

    def go_on_from(self, messages: list[Message]) -> None:
        """`messages` are the conversation from now on (checked again before the next request)."""
        self.messages, self._checked = messages, 0

    def request(self, messages: list[Message]) -> ChatRequest:
        """The request that sends `messages` as this agent sends them."""
        return self._builder.request(messages, self.options.max_tokens, self.cache_key)

    def switch(self, provider: Provider, cost_per_hour: float | None = None) -> ProviderSwitched:
        """Continue the conversation on `provider` (at its current model) from the next request on.

        `cost_per_hour` (the config's, for a self-hosted server) goes into the event, so the log prices its steps.
        """
        context, cold = self.warmth.cost(provider.name, provider.model)
        previous, self._using = self._using, (provider.name, provider.model)
        self.provider = provider
        self.compaction.anchor = None  # counted by another tokenizer
        switched = ProviderSwitched(
            provider=provider.name,
            model=provider.model,
            previous_provider=previous[0],
            previous_model=previous[1],
            context_tokens=context if self.messages else 0,
            cold_tokens=cold if self.messages else 0,
            base_url=provider.base_url,
            cost_per_hour=cost_per_hour,
        )
        self.emit(switched)
        return switched

    async def run_turn(self, prompt: str, route: str = "") -> TurnFinished:
        """Answer one user prompt, calling tools as the model asks, and report how the turn ended.

        A UserPromptSubmit hook that blocks the prompt keeps it out of the conversation: no turn starts.
        """
        self.route = route
        hooks = self.runner.hooks
        if hooks is not None:
            submitted = await self.runner.hooked(hooks.user_prompt_submit(prompt))
            if submitted.denied:
                self.emit(Notice(level="warning", message=f"a hook blocked the prompt: {submitted.reason}"))
                return TurnFinished(turn=self.turn, reason="error", steps=0, wall=0.0)
        self.turn += 1
        turn, started = self.turn, time.perf_counter()
        context = self._context()
        self.emit(TurnStarted(turn=turn, prompt=prompt, context=context))
        self.messages.append(UserMessage(prompt + context))
        self.runner.new_turn(prompt)
        self.compaction.before = 0
        steps = 0
        reason: TurnEnd = "answer"
        try:
            while True:
                steps += 1
                if not await self._step(turn, steps):
                    if self._last_finish in CUT_SHORT:
                        reason = "cut_off"
                        self.emit(Notice(level="warning", message=incomplete(self._last_finish)))
                    break
                if steps >= self.options.max_steps:
                    reason = "max_steps"
                    self.emit(Notice(level="warning", message=f"stopped after {counted(steps, 'step')} (the step cap)"))
                    break
        except ProviderError as error:
            reason = "error"
            self.emit(Notice(level="error", message=with_fix(str(error))))
        except asyncio.CancelledError:
            self.emit(TurnFinished(turn=turn, reason="cancelled", steps=steps, wall=time.perf_counter() - started))
            raise
        if hooks is not None:
            await self.runner.hooked(hooks.stop())
        finished = TurnFinished(turn=turn, reason=reason, steps=steps, wall=time.perf_counter() - started)
        self.emit(finished)
        return finished

    async def compact(
        self,
        trigger: Literal["manual", "auto"],
        context_tokens: int | None = None,
        window: int | None = None,
        before_estimated: bool = False,
    ) -> Compacted:
        """Replace the conversation by a summary its own model writes at the end of it (`Compaction.run`)."""
        return await self.compaction.run(trigger, context_tokens, window, before_estimated)

    async def _step(self, turn: int, step: int) -> bool:
        """One request and its tool phase; True if the model asked for tools."""
        self.prepare()
        request = self.request(self.messages)
        size = len(msgspec.json.encode(request))
        if await self.compaction.if_full(step, size):
            request = self.request(self.messages)
            size = len(msgspec.json.encode(request))
        self.runner.step_started()
        fingerprint = self.explainer.fingerprint(request, self.provider.name, self.provider.model, time.time())
        recorder = StepRecorder(self.emit, self.provider.protocol, turn, step)
        recorder.start(self.provider.name, self.provider.model, fingerprint)
        window, estimate = self.context_window(), self.compaction.estimate(size)
        if window and estimate is not None:
            warning = too_long(step, estimate, self.options.max_tokens, window, self.provider.model)
            if warning is not None:
                self.emit(Notice(level="warning", message=warning))
        stream = StepAccumulator(
            started=time.perf_counter(), cap=self.provider.cap(request), window=self.context_window()
        )
        early: dict[str, asyncio.Task[ToolResultMessage]] = {}
        try:
            async with self.interactive():
                async for event in self.provider.stream(request):
                    if isinstance(event, ServerHint):
                        self.emit(Notice(level="info", message=event.message))
                        continue
                    if isinstance(event, ProviderWarning):
                        self.emit(Notice(level="warning", message=event.message))
                        continue
                    stream.take(event, time.perf_counter())
                    self.emit(event)
                    if isinstance(event, ToolCallReady) and self._early_dispatch:
                        # Its arguments are complete: run it while the model writes the rest of the message.
                        call = stream.calls[-1]
                        if call.id not in stream.problems():
                            early[call.id] = self.runner.start(call, recorder)
        except ProviderError:
            self._keep_interrupted(stream, await cancel_all(early.values()))
            raise
        except asyncio.CancelledError:
            self._keep_interrupted(stream, await cancel_all(early.values()))
            self._respond(recorder, stream, said=False)
            recorder.finish(time.perf_counter(), cut="cancelled")
            raise
        self._respond(recorder, stream)
        self.warmth.record(self.provider.name, self.provider.model, stream.usage)
        self.compaction.counted(size, stream.usage)
        self.messages.append(stream.message())
        self._last_finish = stream.finish_reason
        try:
            self.messages.extend(await self.runner.run(stream.calls, recorder, early, stream.problems()))
        except asyncio.CancelledError:
            self.messages.extend(self.runner.cut)
            recorder.finish(time.perf_counter(), cut="cancelled")
            raise
        self.runner.learn(stream.calls)
        recorder.finish(time.perf_counter())
        return bool(stream.calls)

    def _respond(self, recorder: StepRecorder, stream: StepAccumulator, said: bool = True) -> None:
        """The response's figures as far as it came (`StepRecorder`), and what the cache did."""
        server, timings, provider = self.provider.server, stream.timings, self.provider
        block = cache_block(server.kind if server is not None else None, timings.source if timings else "")
        lifetimes = bool(provider.protocol.traits.cache.lifetimes)
        note = self.explainer.explain(stream.usage, self.messages, lifetimes, block, self.server_residency())
        connect = provider.connect_paid(stream.started)
        recorder.respond(stream, time.perf_counter(), note, route=self.route, connect=connect, said=said)

    @property
    def _early_dispatch(self) -> bool:
        return self.options.early_dispatch and self.options.parallel_tools

    def interactive(self) -> AbstractAsyncContextManager[None]:
        """The lane a request the user waits for goes out in."""
        return self.lanes.interactive() if self.lanes is not None else nullcontext()

    def prepare(self) -> None:
        """Before a request: the history made one every provider accepts, saying what changed (it goes to the
        session log), and the provider in use noted."""
        self._using = (self.provider.name, self.provider.model)
        tail, notes = repaired(self.messages[self._checked :])
        if notes:
            self.messages[self._checked :] = tail
            self.emit(
                Notice(level="warning", message="repaired the conversation before sending it: " + "; ".join(notes))
            )
        self._checked = len(self.messages)

    def _keep_interrupted(self, stream: StepAccumulator, ran: dict[str, ToolResultMessage]) -> None:
        """Keep a partial answer; complete calls keep the result they got, or a cancelled one: history stays valid."""
        self.messages.extend(stream.cut_short(ran))


def incomplete(reason: str) -> str:
    """The notice ending a turn whose answer was cut short, with what helps: a larger cap can't help a full window."""
    said = f"the answer is incomplete: {stop_words(reason)}"
    return f"{said}; /compact summarizes the conversation, /new starts afresh" if reason == "context_window" else said
