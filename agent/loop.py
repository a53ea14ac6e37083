"""The agent loop: a turn is a sequence of steps.

Each step builds the request, streams the model's answer, runs all of the step's tool calls
concurrently, and appends the results, until the model answers without calling a tool or
the step cap is reached. Every stage is reported as an event to one `emit` callback.

The conversation stays valid whatever happens: a failing or hanging tool becomes an error
result, a cancelled turn gives every issued call a `cancelled` result, and a provider error
keeps the partial answer, marked as interrupted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from hotloop.agent.approvals import Approvals, Verdict, subject_of
from hotloop.agent.cache_explainer import CacheExplainer
from hotloop.agent.compaction import (
    compacted_messages,
    compacted_size,
    compaction_failed,
    grown_tokens,
    summary_messages,
    with_fix,
)
from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    Compacted,
    HookRan,
    Notice,
    ProviderSwitched,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    ToolStatus,
    TurnEnd,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import CUT_OFF
from hotloop.agent.hooks import HookOutcome, Hooks
from hotloop.agent.memo import Memo
from hotloop.agent.prefetch import Prefetcher
from hotloop.agent.prompt import PromptBuilder, system_prompt, volatile_context
from hotloop.agent.step import CANCELLED_RESULT, ArgumentError, StepAccumulator, parse_arguments
from hotloop.agent.switching import CacheWarmth
from hotloop.agent.tools.registry import CallKey, Tool, ToolContext, ToolError, ToolRegistry, call_key, cap_output
from hotloop.providers.base import Provider
from hotloop.providers.conversation import Message, ToolCall, ToolResultMessage, UserMessage, repaired
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import ProviderWarning, ServerHint, StreamStarted, ToolCallReady
from hotloop.providers.lanes import Lanes

Emit = Callable[[AgentEvent], None]
# Given a call and its (long) result: a shorter result for the context, and a note saying so; or None.
Summarize = Callable[[ToolCall, str], Awaitable[tuple[str, str] | None]]
# The defaults of a turn's limits, which the config's are too.
MAX_STEPS = 25  # model requests per turn
TOOL_TIMEOUT = 120.0  # seconds; a tool that runs longer becomes an error result


@dataclass
class _ToolPhase:
    """A step's tool runs, as (start, end) spans."""

    count: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def durations(self) -> list[float]:
        return [end - start for start, end in self.spans]

    @property
    def wall(self) -> float:
        """Seconds during which at least one tool ran.

        Not first start to last end: with early dispatch a call starts while the model still writes
        the next, and that writing is the model's time, not the tools'.
        """
        ran, reached = 0.0, float("-inf")
        for start, end in sorted(self.spans):
            ran += max(end - max(start, reached), 0.0)
            reached = max(reached, end)
        return ran


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
        system: str | None = None,
        max_steps: int = MAX_STEPS,
        tool_timeout: float = TOOL_TIMEOUT,
        max_tokens: int | None = None,
        context: Callable[[], str] | None = None,
        cache_key: str | None = None,
        lanes: Lanes | None = None,
        summarize: Summarize | None = None,
        early_dispatch: bool = True,
        memo_ttl: float = 0.0,
        parallel_tools: bool = True,
        prefetch: bool = False,
        approvals: Approvals | None = None,
        hooks: Hooks | None = None,
        compact_at: float | None = None,
    ) -> None:
        self.provider = provider
        # The share of the window a step's request may fill before the turn compacts first; None: never mid-turn.
        self.compact_at = compact_at
        self._compacted_before = 0  # the step of this turn the last compaction ran before (0: none)
        # Calls with side effects run once allowed; with no one to ask, only what rules and flags allow.
        self.approvals = approvals if approvals is not None else Approvals()
        self.hooks = hooks
        self.cache_key = cache_key
        self.lanes = lanes
        self.summarize = summarize
        self.parallel_tools = parallel_tools  # off only to measure what running a step's calls together saves
        self.early_dispatch = early_dispatch and parallel_tools
        self._explainer = CacheExplainer()
        self.memo = Memo(memo_ttl)
        self.prefetcher = Prefetcher(tools, self._run_ahead) if prefetch else None
        self._prefetch_context: Hashable = None
        self.route = ""  # the tier that answers and why, shown on each step's strip
        self.warmth = CacheWarmth()
        self._using = (provider.name, provider.model)
        self.tools = tools
        self.emit = emit
        self.workspace = workspace
        self.max_steps = max_steps
        self.tool_timeout = tool_timeout
        self.max_tokens = max_tokens
        self.messages: list[Message] = []
        self._checked = 0  # messages already repaired: history only grows, so only the rest needs a look
        self._last_finish = ""  # the last step's finish reason
        self._sized: tuple[int, int] | None = None  # the last request's encoded size and its reported prompt tokens
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

    def restore(self, messages: list[Message], turns: int, warmth: CacheWarmth) -> None:
        """Go on with a conversation rebuilt from its session log."""
        self.messages, self.turn, self.warmth = list(messages), turns, warmth
        self._checked = 0

    def switch(self, provider: Provider, cost_per_hour: float | None = None) -> ProviderSwitched:
        """Continue the conversation on `provider` (at its current model) from the next request on.

        `cost_per_hour` (the config's, for a self-hosted server) goes into the event, so the log prices its steps.
        """
        context, cold = self.warmth.cost(provider.name, provider.model)
        previous, self._using = self._using, (provider.name, provider.model)
        self.provider = provider
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
        if self.hooks is not None:
            submitted = await self._hooked(self.hooks.user_prompt_submit(prompt))
            if submitted.denied:
                self.emit(Notice(level="warning", message=f"a hook blocked the prompt: {submitted.reason}"))
                return TurnFinished(turn=self.turn, reason="error", steps=0, wall=0.0)
        self.turn += 1
        turn, started = self.turn, time.perf_counter()
        context = self._context()
        self.emit(TurnStarted(turn=turn, prompt=prompt, context=context))
        self.messages.append(UserMessage(prompt + context))
        self._prefetch_context = ("prompt", prompt)
        self._compacted_before = 0
        steps = 0
        reason: TurnEnd = "answer"
        try:
            while True:
                steps += 1
                if not await self._step(turn, steps):
                    if self._last_finish == "length":
                        reason = "cut_off"
                        self.emit(Notice(level="warning", message=f"the answer is incomplete: {CUT_OFF}"))
                    break
                if steps >= self.max_steps:
                    reason = "max_steps"
                    self.emit(Notice(level="warning", message=f"stopped after {steps} steps (the step cap)"))
                    break
        except ProviderError as error:
            reason = "error"
            self.emit(Notice(level="error", message=with_fix(str(error))))
        except asyncio.CancelledError:
            self.emit(TurnFinished(turn=turn, reason="cancelled", steps=steps, wall=time.perf_counter() - started))
            raise
        if self.hooks is not None:
            await self._hooked(self.hooks.stop())
        return self._finish(turn, reason, steps, started)

    async def compact(
        self, trigger: Literal["manual", "auto"], context_tokens: int | None = None, window: int | None = None
    ) -> Compacted:
        """Replace the conversation by a summary its own model writes at the end of it (`agent/compaction.py`).

        The conversation changes only once the summary is whole: an error, a cut-off or empty
        summary, or a cancel leaves it as it was.
        """
        self._repair()
        self._using = (self.provider.name, self.provider.model)
        request = self._builder.request(summary_messages(self.messages), self.max_tokens, self.cache_key)
        self._explainer.fingerprint(request, self.provider.name, self.provider.model, time.time())
        stream = StepAccumulator(started=time.perf_counter())
        async with self._interactive():
            async for event in self.provider.stream(request):
                if not isinstance(event, (ServerHint, ProviderWarning)):
                    stream.take(event, time.perf_counter())
        summary = stream.message().text.strip()
        if stream.finish_reason == "length":
            raise ProviderError(f"the summary was {CUT_OFF}")
        if not summary:
            raise ProviderError("the model wrote no summary")
        messages = compacted_messages(summary)
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
                self._builder.request(compacted_messages("")),
                request,
                stream.usage.prompt_total if stream.usage else None,
                stream.usage.output if stream.usage else None,
            ),
            window=window,
            cache_note=self._explainer.explain(stream.usage, self.messages, self.provider.protocol == "anthropic"),
        )
        self.messages, self._checked = messages, 0
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
        if step == 1 or self.compact_at is None or self._sized is None or not window:
            return False
        estimate = grown_tokens(size, *self._sized)
        if estimate < self.compact_at * window or self._compacted_before == step - 1:
            return False
        self.emit(
            Notice(
                level="info",
                message=f"compacting before step {step}: its request would fill ≈ {estimate / window:.0%} of the "
                f"{window:,}-token window, past [context] compact_at = {self.compact_at:g}",
            )
        )
        self._compacted_before = step
        try:
            await self.compact("auto", estimate, window)
        except ProviderError as error:
            self.emit(Notice(level="error", message=compaction_failed(error)))
            return False
        return True

    def _finish(self, turn: int, reason: TurnEnd, steps: int, started: float) -> TurnFinished:
        finished = TurnFinished(turn=turn, reason=reason, steps=steps, wall=time.perf_counter() - started)
        self.emit(finished)
        return finished

    async def _step(self, turn: int, step: int) -> bool:
        """One request and its tool phase; True if the model asked for tools."""
        self._repair()
        self._using = (self.provider.name, self.provider.model)
        request = self._builder.request(self.messages, self.max_tokens, self.cache_key)
        size = len(msgspec.json.encode(request))
        if await self._compacted_if_full(step, size):
            request = self._builder.request(self.messages, self.max_tokens, self.cache_key)
            size = len(msgspec.json.encode(request))
        if self.prefetcher is not None:
            self.prefetcher.start(self._prefetch_context)  # runs while the model prefills and decodes
        fingerprint = self._explainer.fingerprint(request, self.provider.name, self.provider.model, time.time())
        self.emit(
            StepStarted(
                turn=turn, step=step, provider=self.provider.name, model=self.provider.model, fingerprint=fingerprint
            )
        )
        self._warn_if_too_long(step, size)
        stream = StepAccumulator(started=time.perf_counter())
        phase = _ToolPhase()
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
                    if isinstance(event, StreamStarted):
                        continue  # a time, kept in the step's figures; no frontend draws it
                    self.emit(event)
                    if isinstance(event, ToolCallReady) and self.early_dispatch:
                        # Its arguments are complete: run it while the model writes the rest of the message.
                        call = stream.calls[-1]
                        if call.id not in stream.problems():
                            early[call.id] = asyncio.create_task(self._run_tool(call, phase))
        except (ProviderError, asyncio.CancelledError):
            self._keep_interrupted(stream, await _cancel_all(early.values()))
            raise
        response = ResponseFinished(
            turn=turn,
            step=step,
            usage=stream.usage,
            ttft=stream.ttft(),
            decode_tps=stream.decode_tps(per_delta=self.provider.protocol != "anthropic"),
            model_time=time.perf_counter() - stream.started,
            finish_reason=stream.finish_reason,
            route=self.route,
            connect=self.provider.connect_paid(stream.started),
            cache_note=self._explainer.explain(stream.usage, self.messages, self.provider.protocol == "anthropic"),
            figures_by=stream.timings.source if stream.timings is not None else "",
            server_prefill=stream.timings.prefill if stream.timings is not None else None,
        )
        self.emit(response)
        self.warmth.record(self.provider.name, self.provider.model, stream.usage)
        if stream.usage is not None and stream.usage.prompt_total:
            self._sized = (size, stream.usage.prompt_total)
        self.messages.append(stream.message())
        self._last_finish = stream.finish_reason
        await self._run_tools(stream.calls, phase, early, stream.problems())
        self._learn(stream.calls)
        self.emit(
            StepFinished(
                turn=turn,
                step=step,
                usage=response.usage,
                ttft=response.ttft,
                decode_tps=response.decode_tps,
                model_time=response.model_time,
                wall=time.perf_counter() - stream.started,
                tool_count=phase.count,
                tool_sum=sum(phase.durations),
                tool_wall=phase.wall,
                finish_reason=response.finish_reason,
                route=self.route,
                cache_note=response.cache_note,
                figures_by=response.figures_by,
                server_prefill=response.server_prefill,
            )
        )
        return bool(stream.calls)

    def _warn_if_too_long(self, step: int, size: int) -> None:
        """Say so before a request the model's context can't hold, estimated from the last step's count."""
        window = self.context_window()
        if self._sized is None or not window:
            return
        estimate = grown_tokens(size, *self._sized)
        reserved = f" + {self.max_tokens:,} reserved for the answer" if self.max_tokens else ""
        if estimate + (self.max_tokens or 0) > window:
            self.emit(
                Notice(
                    level="warning",
                    message=f"step {step}'s request is ≈ {estimate:,} tokens{reserved}, more than the "
                    f"{window:,} tokens {self.provider.model} holds: the server will likely refuse it "
                    "(/compact once this turn ends, or switch to a model with a longer context)",
                )
            )

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

    async def _run_tools(
        self,
        calls: list[ToolCall],
        phase: _ToolPhase,
        started: dict[str, asyncio.Task[ToolResultMessage]],
        problems: dict[str, str],
    ) -> None:
        """Run the calls not started early, all at once; append every result in call order.

        A call in `problems` is not run: its result is the error that says why.
        """
        phase.count = len(calls)
        for call in calls:
            if call.id in problems:
                started[call.id] = asyncio.create_task(self._refused(call, phase, problems[call.id]))
        if not self.parallel_tools:
            self.messages.extend([await (started.get(call.id) or self._run_tool(call, phase)) for call in calls])
            return
        tasks = [started.get(call.id) or asyncio.create_task(self._run_tool(call, phase)) for call in calls]
        try:
            results = await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Each tool turns its own cancellation into a `cancelled` result; collect them all.
            results = await asyncio.gather(*tasks)
            self.messages.extend(results)
            raise
        self.messages.extend(results)

    async def _run_tool(self, call: ToolCall, phase: _ToolPhase) -> ToolResultMessage:
        tool = self.tools.get(call.name)
        # Before the call starts, even one dispatched early: read-only calls run meanwhile.
        try:
            refusal = await self._may_run(call, tool)
        except asyncio.CancelledError:
            return await self._refused(call, phase, None)
        if refusal is not None:
            return await self._refused(call, phase, refusal)
        started = time.perf_counter()
        self.emit(ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments))
        remembered = self.memo.get(tool, call.arguments)
        if remembered is not None:
            return self._finished(call, phase, (started, time.perf_counter()), "ok", remembered, reused="memo")
        guess = self.prefetcher.take(call_key(call.name, call.arguments)) if self.prefetcher is not None else None
        if guess is not None:
            content = await self._attach(guess[0])
            if content is not None:
                return self._finished(
                    call, phase, (started, time.perf_counter()), "ok", content, reused="prefetch", ahead=guess[1]
                )
        if tool is not None and not tool.read_only:
            self.memo.clear()  # it may change what the read-only tools would now say
            if self.prefetcher is not None:
                self.prefetcher.discard()
        status: ToolStatus = "ok"
        try:
            content = await self._invoke(call)
        except asyncio.CancelledError:
            status, content = "cancelled", CANCELLED_RESULT
        except ToolError as error:
            status, content = "error", f"error: {error}"
        except TimeoutError:
            status, content = "error", f"error: {call.name} timed out after {self._timeout_of(call.name):g} s"
        except Exception as error:  # a tool's bug must not end the turn
            status, content = "error", f"error: {call.name} raised {type(error).__name__}: {error}"
        ended = time.perf_counter()
        if self.hooks is not None:
            after = await self._hooked(self.hooks.post_tool_use(call.name, call.arguments, content), call.id)
            if after.denied:
                content += f"\n[a PostToolUse hook objected: {after.reason}]"
        if status == "ok":
            self.memo.put(tool, call.arguments, content)
            if self.summarize is not None:
                content = await self._summarized(call, content)
        return self._finished(call, phase, (started, ended), status, content)

    async def _refused(self, call: ToolCall, phase: _ToolPhase, problem: str | None) -> ToolResultMessage:
        """A call that doesn't run: the error that says why, or cancelled (`problem` None)."""
        now = time.perf_counter()
        self.emit(ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments))
        if problem is None:
            return self._finished(call, phase, (now, now), "cancelled", CANCELLED_RESULT)
        return self._finished(call, phase, (now, now), "error", f"error: {problem}")

    async def _may_run(self, call: ToolCall, tool: Tool | None) -> str | None:
        """None if the call may run, else why not: PreToolUse hooks first, then approval of side effects."""
        hooked = await self._hooked(self.hooks.pre_tool_use(call.name, call.arguments), call.id) if self.hooks else None
        if hooked is not None and hooked.denied:
            return f"a PreToolUse hook denied this call: {hooked.reason}"
        if tool is None or not tool.side_effects:
            return None
        return await self._approval(call, tool, hooked.decision if hooked is not None else "")

    async def _hooked(self, running: Awaitable[HookOutcome], call_id: str = "") -> HookOutcome:
        """A hook event's outcome, each run logged (the waterfall draws it) and its failures said."""
        outcome = await running
        for run in outcome.runs:
            self.emit(
                HookRan(
                    hook_event=run.hook.event,
                    command=run.hook.command,
                    seconds=run.seconds,
                    call_id=call_id,
                    decision=run.decision,
                )
            )
        for warning in outcome.warnings:
            self.emit(Notice(level="warning", message=warning))
        return outcome

    async def _approval(self, call: ToolCall, tool: Tool, hooked: str) -> str | None:
        """None if the call may run, else why not; the decision goes to the log, and a question to the user.

        A PreToolUse hook's `allow` answers for the user (deny rules, and the question about a write inside .git/,
        still hold); its `ask` asks whatever rules allow.
        """
        try:
            arguments = parse_arguments(call)
        except ArgumentError:
            return None  # it can't run as written: `_invoke` says why
        try:
            # Shown in the pane whoever decides (the diff an edit makes), and asked about if no rule decides.
            preview = await tool.preview(arguments, self._context_for(call)) if tool.preview is not None else ""
            subject = subject_of(tool, arguments, self.workspace)
        except ToolError as error:
            return str(error)  # it would fail as written (no such text to replace): nothing to approve
        verdict = self.approvals.ruling(tool, subject)
        if hooked == "allow" and (verdict is None or verdict.allowed) and not subject.inside_git:
            verdict = Verdict(True, "a PreToolUse hook")
        elif hooked == "ask" and verdict is not None and verdict.allowed:
            verdict = None
        if verdict is None and self.approvals.ask is None:
            verdict = self.approvals.refusal(tool, subject)
        elif verdict is None:
            request = self.approvals.request(call.id, call.name, subject, preview)
            self.emit(ApprovalAsked(call_id=call.id, name=call.name, subject=subject.text, preview=preview))
            verdict = await self.approvals.ask_user(request)
        self.emit(
            ApprovalDecided(
                call_id=call.id,
                name=call.name,
                allowed=verdict.allowed,
                by=verdict.by,
                reason=verdict.reason,
                preview="" if verdict.asked else preview,  # a question has carried it already
            )
        )
        return None if verdict.allowed else verdict.reason

    def _finished(
        self,
        call: ToolCall,
        phase: _ToolPhase,
        span: tuple[float, float],
        status: ToolStatus,
        content: str,
        reused: str = "",
        ahead: float = 0.0,
    ) -> ToolResultMessage:
        started, ended = span
        phase.spans.append((started, ended))
        self.emit(
            ToolFinished(
                call_id=call.id,
                name=call.name,
                status=status,
                duration=ended - started,
                result=content,
                reused=reused,
                ahead=ahead,
            )
        )
        return ToolResultMessage(call.id, call.name, content, is_error=status != "ok")

    async def _summarized(self, call: ToolCall, content: str) -> str:
        assert self.summarize is not None
        try:
            shorter = await self.summarize(call, content)
        except ProviderError as error:  # the full result is still correct, only longer
            self.emit(
                Notice(level="warning", message=f"could not summarize {call.name}'s result, kept it whole: {error}")
            )
            return content
        if shorter is None:
            return content
        self.emit(Notice(level="info", message=shorter[1]))
        return shorter[0]

    @staticmethod
    async def _attach(ahead: asyncio.Task[str]) -> str | None:
        """The prefetched result; None if the guess failed (the call then runs for real)."""
        try:
            return await ahead
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the turn itself is being cancelled
            return None
        except Exception:
            return None

    def _learn(self, calls: list[ToolCall]) -> None:
        """Teach the predictor what followed, and say what prefetching did this step."""
        if self.prefetcher is None:
            return
        keys = [key for call in calls if (key := call_key(call.name, call.arguments)) is not None]
        self.prefetcher.predictor.learn(self._prefetch_context, keys)
        self._prefetch_context = frozenset(keys)
        before = (self.prefetcher.stats.hits, self.prefetcher.stats.saved)
        wrong = self.prefetcher.discard()
        stats = self.prefetcher.stats
        if stats.hits > before[0] or wrong:
            self.emit(
                Notice(
                    level="info",
                    message=f"prefetch: {stats.hits - before[0]} hit(s), {wrong} miss(es), "
                    f"{stats.saved - before[1]:.2f} s of tool time done ahead",
                )
            )

    async def _run_ahead(self, tool: Tool, key: CallKey) -> str:
        """A predicted call, run before the model asks for it; its output stays out of the stream."""
        context = ToolContext("prefetch", self.workspace)
        async with asyncio.timeout(self._timeout_of(tool.name)):
            result = await tool.handler(json.loads(key[1]), context)
        return cap_output(result if isinstance(result, str) else str(result))

    async def _invoke(self, call: ToolCall) -> str:
        tool = self.tools.get(call.name)
        if tool is None:
            offered = ", ".join(t.name for t in self.tools) or "none"
            raise ToolError(f"unknown tool {call.name!r} (available: {offered})")
        try:
            arguments = parse_arguments(call)
        except ArgumentError as error:
            raise ToolError(str(error)) from None
        async with asyncio.timeout(self._timeout_of(call.name)):
            result = await tool.handler(arguments, self._context_for(call))
        return cap_output(result if isinstance(result, str) else str(result))

    def _context_for(self, call: ToolCall) -> ToolContext:
        return ToolContext(call.id, self.workspace, lambda text: self.emit(ToolOutput(call_id=call.id, text=text)))

    def _timeout_of(self, name: str) -> float:
        tool = self.tools.get(name)
        return tool.timeout if tool is not None and tool.timeout is not None else self.tool_timeout


async def _cancel_all(tasks: Iterable[asyncio.Task[ToolResultMessage]]) -> dict[str, ToolResultMessage]:
    """Stop calls started early (each turns its cancellation into a `cancelled` result); their results by call id."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*pending, return_exceptions=True)
    return {result.call_id: result for result in results if isinstance(result, ToolResultMessage)}
