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
from hotloop.agent.compaction import (
    LogCounts,
    compacted_messages,
    compacted_size,
    compaction_failed,
    grown_tokens,
    resumed_anchor,
    summary_bytes,
    summary_messages,
    too_long,
    with_fix,
    written_summary,
)
from hotloop.agent.events import (
    Compacted,
    Notice,
    ProviderSwitched,
    ResponseFinished,
    StepFinished,
    StepStarted,
    TurnEnd,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import counted, stop_words
from hotloop.agent.hooks import Hooks
from hotloop.agent.options import AgentOptions
from hotloop.agent.prompt import PromptBuilder, system_prompt, volatile_context
from hotloop.agent.step import StepAccumulator
from hotloop.agent.switching import CacheWarmth
from hotloop.agent.tool_runner import Emit, ToolPhase, ToolRunner, cancel_all
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import Provider
from hotloop.providers.conversation import Message, ToolResultMessage, UserMessage, repaired
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
        )
        self._compacted_before = 0  # the step of this turn the last compaction ran before (0: none)
        self.cache_key = cache_key
        self.lanes = lanes
        self._explainer = CacheExplainer()
        self.server_residency: Callable[[], Residency | None] = lambda: None  # vLLM's, where the server is followed
        self.route = ""  # the tier that answers and why, shown on each step's strip
        self.warmth = CacheWarmth()
        self._using = (provider.name, provider.model)
        self.tools = tools
        self.workspace = workspace
        self.messages: list[Message] = []
        self._checked = 0  # messages already repaired: history only grows, so only the rest needs a look
        self._last_finish = ""  # the last step's finish reason
        self._sized: tuple[int, int] | None = None  # the last request's encoded size and its reported prompt tokens
        # The conversation's first counted request, its size and prompt tokens less the summary it may begin with
        # (`_summary`: that summary's size and tokens; None if its count is unknown): what a compaction's
        # result is measured from, the server's count of the system prompt and tools included.
        self._anchor: tuple[int, int] | None = None
        self._summary: tuple[int, int] | None = (0, 0)
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
        self.messages, self.turn, self.warmth = list(messages), turns, warmth
        self._checked = 0
        request = partial(self._builder.request, max_tokens=self.options.max_tokens, cache_key=self.cache_key)
        self._anchor, self._summary = resumed_anchor(log, self.messages, self._using, request)

    def switch(self, provider: Provider, cost_per_hour: float | None = None) -> ProviderSwitched:
        """Continue the conversation on `provider` (at its current model) from the next request on.

        `cost_per_hour` (the config's, for a self-hosted server) goes into the event, so the log prices its steps.
        """
        context, cold = self.warmth.cost(provider.name, provider.model)
        previous, self._using = self._using, (provider.name, provider.model)
        self.provider = provider
        self._anchor = None  # counted by another tokenizer
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

    async def run_turn(self, prompt: str) -> TurnFinished:
        """Answer one user prompt, calling tools as the model asks, and report how the turn ended.

        A UserPromptSubmit hook that blocks the prompt keeps it out of the conversation: no turn starts.
        """
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
        self._compacted_before = 0
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
        """Replace the conversation by a summary its own model writes at the end of it (`agent/compaction.py`).

        The conversation changes only once the summary is whole: an error, a cut-off or empty
        summary, or a cancel leaves it as it was. `before_estimated`: `context_tokens` counts a step
        not sent yet (the last step's count plus an estimate of what was added since).
        """
        self._repair()
        self._using = (self.provider.name, self.provider.model)
        anthropic = self.provider.protocol == "anthropic"
        request = self._builder.request(summary_messages(self.messages), self.options.max_tokens, self.cache_key)
        self._explainer.fingerprint(request, self.provider.name, self.provider.model, time.time())
        stream = StepAccumulator(
            started=time.perf_counter(), cap=self.provider.cap(request), window=self.context_window()
        )
        try:
            async with self._interactive():
                async for event in self.provider.stream(request):
                    if not isinstance(event, (ServerHint, ProviderWarning)):
                        stream.take(event, time.perf_counter())
            summary = written_summary(stream)
        except ProviderError as error:
            self.emit(compaction_failed(trigger, self.provider, stream, error))  # said once, billed usage counted
            raise
        messages = compacted_messages(summary)
        summary_tokens = stream.usage.output if stream.usage else None
        compacted = Compacted(
            trigger=trigger,
            turns=self.turn,
            summary=summary,
            provider=self.provider.name,
            model=self.provider.model,
            usage=stream.usage,
            ttft=stream.ttft(),
            model_time=time.perf_counter() - stream.started,
            context_tokens=context_tokens,
            after_tokens=compacted_size(
                self._builder.request(compacted_messages(""), self.options.max_tokens, self.cache_key),
                summary_tokens,
                self._anchor,
                (request, stream.usage.prompt_total if stream.usage else None),
            ),
            window=window,
            before_estimated=before_estimated,
            cache_note=self._explainer.explain(
                stream.usage, self.messages, anthropic, residency=self.server_residency()
            ),
        )
        self.messages, self._checked = messages, 0
        self._anchor = None
        self._summary = (summary_bytes(summary), summary_tokens) if summary_tokens is not None else None
        self.provider.prune(messages)  # the turns summarized are sent no more
        self._explainer.compacted()
        self.warmth.record(self.provider.name, self.provider.model, stream.usage)
        self.emit(compacted)
        return compacted

    async def _compacted_if_full(self, step: int, size: int) -> bool:
        """Inside a turn: compact before a step whose request (`size` bytes encoded) would fill `compact_at` of the
        window; True if it did.

        Tool results grow a long turn past the window with no turn boundary in sight, so the check
        is per step, on the request as it would go (the last step's count plus what was added since).
        A failed compaction leaves the conversation as it was, and the step goes out anyway. So does
        a step right after a compaction: one step that fills the window again would have it compact
        in a loop (a tool result too long for any summary to help); the server's refusal says so.
        """
        window = self.context_window()
        compact_at = self.options.compact_at
        if step == 1 or compact_at is None or self._sized is None or not window:
            return False
        estimate = grown_tokens(size, *self._sized)
        if estimate < compact_at * window or self._compacted_before == step - 1:
            return False
        self.emit(
            Notice(
                level="info",
                message=f"compacting before step {step}: its request would fill ≈ {estimate / window:.0%} of the "
                f"{window:,}-token window, past [context] compact_at = {compact_at:g}",
            )
        )
        self._compacted_before = step
        try:
            await self.compact("auto", estimate, window, before_estimated=True)
        except ProviderError:
            return False
        return True

    async def _step(self, turn: int, step: int) -> bool:
        """One request and its tool phase; True if the model asked for tools."""
        self._repair()
        self._using = (self.provider.name, self.provider.model)
        request = self._builder.request(self.messages, self.options.max_tokens, self.cache_key)
        size = len(msgspec.json.encode(request))
        if await self._compacted_if_full(step, size):
            request = self._builder.request(self.messages, self.options.max_tokens, self.cache_key)
            size = len(msgspec.json.encode(request))
        self.runner.step_started()
        fingerprint = self._explainer.fingerprint(request, self.provider.name, self.provider.model, time.time())
        self.emit(
            StepStarted(
                turn=turn, step=step, provider=self.provider.name, model=self.provider.model, fingerprint=fingerprint
            )
        )
        if (window := self.context_window()) and self._sized is not None:
            estimate = grown_tokens(size, *self._sized)
            if (warning := too_long(step, estimate, self.options.max_tokens, window, self.provider.model)) is not None:
                self.emit(Notice(level="warning", message=warning))
        stream = StepAccumulator(
            started=time.perf_counter(), cap=self.provider.cap(request), window=self.context_window()
        )
        phase = ToolPhase()
        early: dict[str, asyncio.Task[ToolResultMessage]] = {}
        try:
            async with self._interactive():
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
                            early[call.id] = self.runner.start(call, phase)
        except ProviderError:
            self._keep_interrupted(stream, await cancel_all(early.values()))
            raise
        except asyncio.CancelledError:
            self._keep_interrupted(stream, await cancel_all(early.values()))
            self.emit(step_finished(self._response(turn, step, stream), stream, phase, cut="cancelled"))
            raise
        response = self._response(turn, step, stream)
        self.emit(response)
        self.warmth.record(self.provider.name, self.provider.model, stream.usage)
        if stream.usage is not None and stream.usage.prompt_total:
            self._sized = (size, stream.usage.prompt_total)
            if self._anchor is None and self._summary is not None:
                self._anchor = (size - self._summary[0], stream.usage.prompt_total - self._summary[1])
        self.messages.append(stream.message())
        self._last_finish = stream.finish_reason
        try:
            self.messages.extend(await self.runner.run(stream.calls, phase, early, stream.problems()))
        except asyncio.CancelledError:
            self.messages.extend(self.runner.cut)
            self.emit(step_finished(response, stream, phase, cut="cancelled"))
            raise
        self.runner.learn(stream.calls)
        self.emit(step_finished(response, stream, phase))
        return bool(stream.calls)

    def _response(self, turn: int, step: int, stream: StepAccumulator) -> ResponseFinished:
        """The response's figures as far as it came: its usage and times, and what the cache did."""
        anthropic, server, timings = self.provider.protocol == "anthropic", self.provider.server, stream.timings
        block = cache_block(server.kind if server is not None else None, timings.source if timings else "")
        return ResponseFinished(
            turn=turn,
            step=step,
            usage=stream.usage,
            ttft=stream.ttft(),
            decode_tps=stream.decode_tps(per_delta=not anthropic),
            model_time=time.perf_counter() - stream.started,
            finish_reason=stream.finish_reason,
            route=self.route,
            connect=self.provider.connect_paid(stream.started),
            cache_note=self._explainer.explain(stream.usage, self.messages, anthropic, block, self.server_residency()),
            figures_by=timings.source if timings is not None else "",
            server_prefill=timings.prefill if timings is not None else None,
            answered_by=stream.answered_by,
        )

    @property
    def _early_dispatch(self) -> bool:
        return self.options.early_dispatch and self.options.parallel_tools

    def _interactive(self) -> AbstractAsyncContextManager[None]:
        return self.lanes.interactive() if self.lanes is not None else nullcontext()

    def _repair(self) -> None:
        """Make the history one every provider accepts, saying what changed (it goes to the session log)."""
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


def step_finished(response: ResponseFinished, stream: StepAccumulator, phase: ToolPhase, cut: str = "") -> StepFinished:
    """The step's end, with its response's figures and its tools'; `cut`: why it stopped before its end.

    A step cut short is finished all the same: the provider billed what it streamed.
    """
    return StepFinished(
        turn=response.turn,
        step=response.step,
        usage=response.usage,
        ttft=response.ttft,
        decode_tps=response.decode_tps,
        model_time=response.model_time,
        finish_reason=response.finish_reason,
        route=response.route,
        cache_note=response.cache_note,
        figures_by=response.figures_by,
        server_prefill=response.server_prefill,
        wall=time.perf_counter() - stream.started,
        tool_count=phase.count,
        tool_sum=sum(phase.durations),
        tool_wall=phase.wall,
        cut=cut,
    )
