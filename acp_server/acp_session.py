"""One ACP session: hotloop's `Session`, the updates it sends in order, its turn in flight, its switches.

`session/prompt` runs one turn through `Session.turn`, its events sent as `session/update` notifications in
the order they happened (`updates.py` maps them), and answers with the stop reason and the turn's usage once
every update before it has gone. A call that needs approval is put to the client as
`session/request_permission`, after the `tool_call` it names; the answer goes back to hotloop's `Approvals`.
`session/cancel` cancels the turn's task, hotloop's own cancel path (the step ends `cut="cancelled"`, the turn
`cancelled`). A session opened to go on with a saved one (`session/load`) sends its history first
(`history.py`), before anything new.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from acp import RequestError
from acp.interfaces import Client
from acp.schema import PermissionOption, PromptResponse, ToolCallUpdate

from hotloop.acp_server.history import replayed
from hotloop.acp_server.switches import READ_ONLY, Switches
from hotloop.acp_server.updates import Update, Updates
from hotloop.agent.approvals import Reply, Request
from hotloop.agent.events import AgentEvent, Notice, ProviderSwitched, StepStarted, TurnFinished
from hotloop.agent.text import inert, visible
from hotloop.config import Config
from hotloop.core.session import Session, SessionOptions
from hotloop.sessions.store import LoggedSession

OPTIONS = (
    PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Allow for this session", kind="allow_always"),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
    PermissionOption(option_id="reject_always", name="Reject for this session", kind="reject_always"),
)


class AcpSession:
    """One ACP session: hotloop's `Session`, the updates it sends in order, its turn in flight."""

    def __init__(self, session_id: str, config: Config, options: SessionOptions, client: Client) -> None:
        self.id = session_id
        self.client = client
        self.session = Session(config, options, self._emit, restored=self._restored, ask=self._ask)
        self.updates = Updates(options.workspace, self.session.config.pricer(), self.session.context)
        self.outbox: asyncio.Queue[Update] = asyncio.Queue()
        self.sender = asyncio.create_task(self._send())
        self.turn: asyncio.Task[TurnFinished] | None = None
        self.rejected: set[tuple[str, str]] = set()  # (tool, subject) the user rejected for the session
        self.switches = Switches(self.session)
        self.history: dict[str, Any] = {}  # a loaded session's ledger, as `_meta` of `session/load`'s answer
        self.recorded: tuple[str, str] | None = None  # the provider and model a loaded session's log last names

    async def open(self) -> None:
        """Start hotloop's session (a saved one's history sent first); a RequestError if it can't."""
        try:
            await self.session.open()
        except Exception as error:
            await self.close()
            raise RequestError.internal_error({"message": f"hotloop couldn't start: {error}"}) from None
        if self.switches.mode == READ_ONLY:
            self.switches.set_mode(READ_ONLY)
        agent = self.session.agent
        using = (agent.provider.name, agent.provider.model) if agent is not None else None
        if self.recorded is not None and using is not None and self.recorded != using:
            ran, now = (visible(" · ".join(pair)) for pair in (self.recorded, using))
            self.session.emit(Notice(level="info", message=f"this session ran on {ran}; it goes on with {now}"))
        await self.outbox.join()

    def _restored(self, saved: LoggedSession) -> None:
        for update in replayed(saved.events, self.updates):
            self.outbox.put_nowait(update)
        self.history = {"hotloop": self.updates.meta()}
        self.recorded = _last_model(saved.events)
        self.updates.turn_started()

    def _emit(self, event: AgentEvent) -> None:
        if isinstance(event, Notice) and event.level != "error":
            print(f"hotloop: {event.level}: {event.message}", file=sys.stderr)  # an editor's log of the agent
        for update in self.updates(event):
            self.outbox.put_nowait(update)

    async def _send(self) -> None:
        while True:
            update = await self.outbox.get()
            try:
                await self.client.session_update(session_id=self.id, update=update)
            except Exception as error:  # the client gone or refusing one update: the turn goes on
                print(f"hotloop: an update wasn't sent: {error}", file=sys.stderr)
            finally:
                self.outbox.task_done()

    async def _ask(self, request: Request) -> Reply:
        """A call with side effects put to the client, once the updates before it (its `tool_call`) have gone."""
        if (request.tool, request.subject) in self.rejected:
            return Reply("deny", "rejected for this session")
        await self.outbox.join()
        options = [_named(o, request) for o in OPTIONS if o.kind != "allow_always" or request.session_rules]
        call = ToolCallUpdate(tool_call_id=request.call_id, title=question(request), status="pending")
        try:
            answer = await self.client.request_permission(session_id=self.id, tool_call=call, options=options)
        except Exception as error:  # an error, an answer that isn't one, the client gone: no, as a denial is safe
            said = inert(" ".join(f"{type(error).__name__}: {error}".split()))[:300]
            print(
                f"hotloop: the client's answer to a question couldn't be read ({said}): the call is denied",
                file=sys.stderr,
            )
            return Reply("deny", "the editor's answer couldn't be read")
        outcome = answer.outcome
        chosen = outcome.option_id if outcome.outcome == "selected" else None
        if chosen == "allow_once":
            return Reply("once")
        if chosen == "allow_always" and request.session_rules:
            return Reply("session")
        if chosen == "reject_always":
            self.rejected.add((request.tool, request.subject))
        return Reply("deny", "the user rejected it" if chosen else "the prompt was cancelled")

    async def prompt(self, text: str) -> PromptResponse:
        if self.turn is not None and not self.turn.done():
            raise RequestError.invalid_request({"message": "a prompt is running in this session: cancel it first"})
        self.updates.turn_started()
        self.turn = asyncio.create_task(self.session.turn(text))
        try:
            finished = await asyncio.shield(self.turn)
        except asyncio.CancelledError:
            if not self.turn.cancelled():
                self.turn.cancel()  # the request itself was cancelled: the turn with it
                raise
            return await self._answer("cancelled")
        reason = self.updates.stop_reason(finished)
        if reason is None:
            await self.outbox.join()
            message = "; ".join(self.updates.errors) or f"the turn ended: {finished.reason}"
            raise RequestError.internal_error({"message": message, "_meta": {"hotloop": self.updates.meta()}})
        return await self._answer(reason)

    async def _answer(self, reason: Any) -> PromptResponse:
        await self.outbox.join()  # every update of the turn before its answer
        meta = {"hotloop": {**self.updates.meta(), **self._logged()}}
        return PromptResponse(stop_reason=reason, usage=self.updates.usage(), field_meta=meta)

    def _logged(self) -> dict[str, str]:
        """The hotloop session this one writes to: the id `session/list` shows and `session/load` takes."""
        log = self.session.log
        return {"session": log.id} if log is not None else {}

    def cancel(self) -> None:
        if self.turn is not None and not self.turn.done():
            self.turn.cancel()

    async def close(self) -> None:
        self.cancel()
        if self.turn is not None:
            await asyncio.gather(self.turn, return_exceptions=True)
        await self.session.close()
        self.sender.cancel()
        await asyncio.gather(self.sender, return_exceptions=True)


def _last_model(events: list[AgentEvent]) -> tuple[str, str] | None:
    last = next((e for e in reversed(events) if isinstance(e, StepStarted | ProviderSwitched)), None)
    return (last.provider, last.model) if last is not None else None


def question(request: Request) -> str:
    """The call as the app's approval bar shows it, on one line: the programs a command runs first, then its whole
    text spelled out (`visible`: controls, invisible characters and padding shown, never the raw text)."""
    if request.commands:
        count = f"{len(request.commands)} commands" if len(request.commands) > 1 else "a command"
        head = f"{request.tool} wants to run {count} ({visible(', '.join(request.programs))}): "
    elif request.file and request.given:
        head = f"{request.tool} wants to write {visible(request.given)} through a symlink, to: "
    else:
        head = f"{request.tool}: "
    notes = [f"it writes {request.warning}"] if request.warning else []
    notes += [f"no rule can allow it: {'; '.join(request.unread)}"] if request.unread else []
    return head + visible(request.subject) + "".join(f" ({visible(note)})" for note in notes)


def _named(option: PermissionOption, request: Request) -> PermissionOption:
    """`allow_always` names the rules it adds, as the app's session answer does."""
    if option.kind != "allow_always":
        return option
    return option.model_copy(update={"name": f"{option.name}: {visible(', '.join(request.session_rules))}"})
