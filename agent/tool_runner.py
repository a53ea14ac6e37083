"""A step's tool calls, run: apart from the loop that asks the model (`loop.py`).

`ToolRunner` runs each call in a task of its own: the PreToolUse hooks and the approval first
(a call dispatched early waits there while the read-only calls of its step run), then the
memo or a prefetched result if one fits, else the tool itself under its timeout, then the
PostToolUse hooks and, for a long result, the summarizer. Whatever happens, a call ends in
exactly one `ToolFinished` and one result: a tool's failure, a timeout, a refusal and a cancel
are results the model reads, never a crash of the turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from pathlib import Path

from hotloop.agent.approvals import Approvals, Verdict, subject_of
from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    HookRan,
    Notice,
    ToolOutput,
    ToolStatus,
)
from hotloop.agent.hooks import HookOutcome, Hooks
from hotloop.agent.memo import Memo
from hotloop.agent.options import AgentOptions
from hotloop.agent.prefetch import Prefetcher
from hotloop.agent.recorder import StepRecorder
from hotloop.agent.step import CANCELLED_RESULT, ArgumentError, parse_arguments
from hotloop.agent.tools.registry import CallKey, Tool, ToolContext, ToolError, ToolRegistry, call_key, cap_output
from hotloop.providers.conversation import ToolCall, ToolResultMessage
from hotloop.providers.errors import ProviderError

Emit = Callable[[AgentEvent], None]
# Given a call and its (long) result: a shorter result for the context, and a note saying so; or None.
Summarize = Callable[[ToolCall, str], Awaitable[tuple[str, str] | None]]


class ToolRunner:
    """Runs an agent's tool calls: approvals, hooks, memo, prefetch, timeouts and cancels, each call its own task."""

    def __init__(
        self,
        tools: ToolRegistry,
        *,
        emit: Emit,
        workspace: Path,
        options: AgentOptions,
        approvals: Approvals | None = None,
        hooks: Hooks | None = None,
        summarize: Summarize | None = None,
    ) -> None:
        self.tools = tools
        self.emit = emit
        self.workspace = workspace
        self.options = options
        # Calls with side effects run once allowed; with no one to ask, only what rules and flags allow.
        self.approvals = approvals if approvals is not None else Approvals()
        self.hooks = hooks
        self.summarize = summarize
        self.memo = Memo(options.memo_ttl)
        self.prefetcher = Prefetcher(tools, self._run_ahead, options.predictor) if options.prefetch else None
        self._prefetch_context: Hashable = None
        self.cut: list[ToolResultMessage] = []  # the results of a tool phase cancelled midway

    def new_turn(self, prompt: str) -> None:
        """What the predictor guesses the first step's calls from."""
        self._prefetch_context = ("prompt", prompt)
        if self.prefetcher is not None:
            self.prefetcher.discard()  # guesses a cancelled step left running

    def step_started(self) -> None:
        """Start the predicted calls: they run while the model prefills and decodes."""
        if self.prefetcher is not None:
            self.prefetcher.start(self._prefetch_context, skip=self._remembered)

    def _remembered(self, key: CallKey) -> bool:
        """Whether the memo answers this call now: running it ahead would be wasted work."""
        hits = self.memo.hits
        held = self.memo.get(self.tools.get(key[0]), key[1]) is not None
        self.memo.hits = hits  # a look, not a use
        return held

    async def run(
        self,
        calls: list[ToolCall],
        step: StepRecorder,
        started: dict[str, asyncio.Task[ToolResultMessage]],
        problems: dict[str, str],
    ) -> list[ToolResultMessage]:
        """Run the calls not started early, all at once; every result, in call order.

        A call in `problems` is not run: its result is the error that says why. Cancelled, each
        call still gives its `cancelled` result, in `self.cut` for the caller to keep.
        """
        step.phase.count = len(calls)
        for call in calls:
            if call.id in problems:
                started[call.id] = asyncio.create_task(self._refused(call, step, problems[call.id]))
        if not self.options.parallel_tools:
            return [await (started.get(call.id) or self.run_one(call, step)) for call in calls]
        tasks = [started.get(call.id) or self.start(call, step) for call in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            # Each tool turns its own cancellation into a `cancelled` result; collect them all.
            self.cut = list(await asyncio.gather(*tasks))
            raise

    def start(self, call: ToolCall, step: StepRecorder) -> asyncio.Task[ToolResultMessage]:
        """Run `call` now, beside whatever else runs (early dispatch: the model still writes the message)."""
        return asyncio.create_task(self.run_one(call, step))

    async def run_one(self, call: ToolCall, step: StepRecorder) -> ToolResultMessage:
        """One call, approved first, then from the memo, a prefetch or the tool itself, with hooks around it."""
        tool = self.tools.get(call.name)
        # Before the call starts, even one dispatched early: read-only calls run meanwhile.
        try:
            refusal = await self._may_run(call, tool)
        except asyncio.CancelledError:
            return await self._refused(call, step, None)
        if refusal is not None:
            return await self._refused(call, step, refusal)
        started = time.perf_counter()
        step.tool_started(call.id, call.name, call.arguments)
        remembered = self.memo.get(tool, call.arguments)
        if remembered is not None:
            return self._finished(call, step, (started, time.perf_counter()), "ok", remembered, reused="memo")
        guess = self.prefetcher.take(call_key(call.name, call.arguments)) if self.prefetcher is not None else None
        if guess is not None:
            content = await self._attach(guess[0])
            if content is not None:
                return self._finished(
                    call, step, (started, time.perf_counter()), "ok", content, reused="prefetch", ahead=guess[1]
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
            after = await self.hooked(self.hooks.post_tool_use(call.name, call.arguments, content), call.id)
            if after.denied:
                content += f"\n[a PostToolUse hook objected: {after.reason}]"
        if status == "ok":
            self.memo.put(tool, call.arguments, content)
            if self.summarize is not None:
                content = await self._summarized(call, content)
        return self._finished(call, step, (started, ended), status, content)

    async def _refused(self, call: ToolCall, step: StepRecorder, problem: str | None) -> ToolResultMessage:
        """A call that doesn't run: the error that says why, or cancelled (`problem` None)."""
        now = time.perf_counter()
        step.tool_started(call.id, call.name, call.arguments)
        if problem is None:
            return self._finished(call, step, (now, now), "cancelled", CANCELLED_RESULT)
        return self._finished(call, step, (now, now), "error", f"error: {problem}")

    async def _may_run(self, call: ToolCall, tool: Tool | None) -> str | None:
        """None if the call may run, else why not: PreToolUse hooks first, then approval of side effects."""
        hooked = await self.hooked(self.hooks.pre_tool_use(call.name, call.arguments), call.id) if self.hooks else None
        if hooked is not None and hooked.denied:
            return f"a PreToolUse hook denied this call: {hooked.reason}"
        if tool is None or not tool.side_effects:
            return None
        return await self._approval(call, tool, hooked.decision if hooked is not None else "")

    async def hooked(self, running: Awaitable[HookOutcome], call_id: str = "") -> HookOutcome:
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
        step: StepRecorder,
        span: tuple[float, float],
        status: ToolStatus,
        content: str,
        reused: str = "",
        ahead: float = 0.0,
    ) -> ToolResultMessage:
        step.tool_finished(call.id, call.name, status, content, span, reused=reused, ahead=ahead)
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

    def learn(self, calls: list[ToolCall]) -> None:
        """Teach the predictor what followed, and say what prefetching did this step."""
        if self.prefetcher is None:
            return
        keys = [key for call in calls if (key := call_key(call.name, call.arguments)) is not None]
        self.prefetcher.predictor.learn(self._prefetch_context, keys)
        self._prefetch_context = frozenset(keys)
        step = self.prefetcher.settle()
        if step.prefetched:  # the wasted work shown: `prefetched 3, used 2`
            self.emit(Notice(level="info", message=step.line()))

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
        return tool.timeout if tool is not None and tool.timeout is not None else self.options.tool_timeout


async def cancel_all(tasks: Iterable[asyncio.Task[ToolResultMessage]]) -> dict[str, ToolResultMessage]:
    """Stop calls started early (each turns its cancellation into a `cancelled` result); their results by call id."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*pending, return_exceptions=True)
    return {result.call_id: result for result in results if isinstance(result, ToolResultMessage)}
