"""One session's life, the same for every frontend: `hotloop run` and the app are thin shells on it.

A `Session` connects the provider (starting the embedded simulator when it is the one),
resumes a saved session or starts a new one, builds the agent, starts the MCP servers,
teaches prefetch what earlier sessions in the workspace did, runs turns, switches provider,
model or tier, and closes. Every event goes first to the session log, then to the
frontend's sink. The log is created at the first turn, so a session that never sent a
prompt leaves no file; what was said before that (config warnings, MCP notices, a switch)
is written when it opens.

`open()` returns once the tool list is final (MCP tools included), so the first request a
frontend sends already has the tools every later one will: the prefix cache never sees
the list change under it.

This module imports little at the top: the app builds a `Session` before its first paint,
and the engine (SDKs, the simulator) loads inside `open()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hotloop import InputError
from hotloop.agent.approvals import NO_ONE, ApprovalRules, Approvals, Ask
from hotloop.agent.cache_lifetime import CacheRhythm
from hotloop.agent.compaction import log_counts
from hotloop.agent.events import (
    AgentEvent,
    ApprovalDecided,
    Compacted,
    Notice,
    ProviderSwitched,
    SideRequest,
    StepFinished,
    TurnFinished,
)
from hotloop.agent.hooks import Hooks
from hotloop.agent.tools.processes import StartAhead
from hotloop.agent.tools.shell import sandbox_notice, under_subreaper
from hotloop.config import AUTO_TIER, Choice, Config, resolve
from hotloop.core.agent_maker import AgentMaker
from hotloop.core.context_meter import ContextMeter
from hotloop.core.keepalive import Pinger
from hotloop.core.log_keeper import LogKeeper
from hotloop.core.mcp_controls import McpControls
from hotloop.core.prewarm import Prewarmer
from hotloop.core.server_watch import ServerFollower
from hotloop.core.switch_menu import SwitchOption, import_sdks, in_use, probe_all, switch_options
from hotloop.core.telemetry import Telemetry, start_telemetry  # imports the SDK only when configured
from hotloop.providers.events import CUT_SHORT

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.resumption import Resumption
    from hotloop.core.routing import Router
    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider
    from hotloop.providers.transport import RequestTimeout
    from hotloop.sessions.fork import Forked
    from hotloop.sessions.log import SessionLog
    from hotloop.sessions.store import LoggedSession

DISCOVERY_WAIT = 1.0  # seconds open() waits for the server to say what it is
SIDE_JOB_GRACE = 10.0  # seconds a headless run waits at the end for a title still being written


@dataclass(frozen=True)
class SessionOptions:
    """What a user can ask of a session on the command line; `None` means "as configured"."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    tier: str | None = None
    system: str | None = None  # text added to the system prompt (`--system FILE`)
    mcp: tuple[str, ...] = ()  # MCP stdio servers as command lines (`--mcp "CMD ARGS"`)
    max_steps: int | None = None
    timeout: RequestTimeout | None = None  # `--timeout`
    workspace: Path = field(default_factory=Path.cwd)
    resume: Path | None = None  # the log of a saved session to continue
    yes: bool = False  # every call with side effects allowed (`--yes`)
    allow: tuple[str, ...] = ()  # approval rules added to the config's (`--allow 'run_shell:pytest*'`)
    read_only: bool = False  # no tool with side effects offered at all (`--read-only`)
    otel: bool = False  # export OpenTelemetry spans (`--otel`): to the configured collector, else the local one

    @property
    def choice(self) -> Choice:
        return Choice(self.provider, self.model, self.base_url, self.tier)


class Session:
    """A session from start to close. `emit` is the frontend's sink; the log sees every event first.

    `restored` is called with a saved session's logged events when it is continued, before
    anything new is emitted, so a frontend can draw the history first.
    """

    def __init__(
        self,
        config: Config,
        options: SessionOptions,
        emit: Callable[[AgentEvent], None],
        restored: Callable[[LoggedSession], None] | None = None,
        ask: Ask | None = None,
    ) -> None:
        """`ask` puts a call with side effects to the user; without it, only rules and flags allow one."""
        if options.timeout is not None:
            config = config.with_timeout(options.timeout)
        self.config, self.choice = config.pointed_at(options.choice)
        if options.resume is None:
            resolve(self.config, self.choice)  # a bad provider, tier or missing key fails here, before anything starts
        self.options = options
        self.workspace = options.workspace
        rules = self.config.approvals
        self.approvals = Approvals(
            ApprovalRules(allow=(*rules.allow, *options.allow), deny=rules.deny), ask, allow_all=options.yes
        )
        hooks = self.config.hooks
        self.hooks = Hooks(hooks, self.workspace, self.config.key_env_names()) if hooks else None
        self._sink = emit
        self._restored = restored or (lambda session: None)
        self.runtime: Runtime | None = None
        self.router: Router | None = None
        self.agent: Agent | None = None
        self.logs = LogKeeper()
        self.cut_off_steps = 0  # steps the output limit or the context window ended: their work is incomplete
        self.unapproved_calls = 0  # calls refused because no one could approve them (headless): work not done
        self.meter = ContextMeter()
        self._turns = 0  # turns in flight
        self._probes: asyncio.Task[dict[str, list[str] | str]] | None = None
        self._sdks: asyncio.Task[None] | None = None  # the SDKs the switch menu's providers need, being imported
        # What the provider's server says of itself (`server_watch.py`), once a frontend follows it.
        self.server = ServerFollower(lambda: self.runtime, self._provider, lambda: self.busy)
        self._ready = False
        self.telemetry: Telemetry | None = None  # spans of the stream (`core/telemetry.py`), from open() on
        self.prewarmer = Prewarmer(lambda: self.config, lambda: self.runtime, self.emit)  # core/prewarm.py
        self.keepalive = Pinger(lambda: self.config, lambda: self.runtime, self.emit)  # core/keepalive.py
        self.mcp = McpControls(lambda: self.runtime.mcp if self.runtime is not None else None, self.emit)
        self.makes = AgentMaker(options, self.emit, self.approvals, self.hooks, self.server.residency)  # its agents
        self.subreaper = StartAhead()  # run_shell's subreaper program, started at open in a thread (processes.py)

    @property
    def ready(self) -> bool:
        """Whether `open()` has finished: the tool list is final and turns may run."""
        return self._ready

    @property
    def busy(self) -> bool:
        """Whether a turn is in flight."""
        return self._turns > 0

    # -- the event stream -----------------------------------------------------------------

    def emit(self, event: AgentEvent) -> None:
        """Every event of the session: to its log (or held until the log opens), then to the frontend."""
        self.logs.write(event)
        if isinstance(event, StepFinished):
            self.cut_off_steps += event.finish_reason in CUT_SHORT
        self.meter.observe(event)
        self.prewarmer.rhythm.observe(event)
        self.keepalive.observe(event)
        if self.telemetry is not None:
            self.telemetry.observe(event)
        if isinstance(event, ApprovalDecided) and event.by == NO_ONE:
            self.unapproved_calls += 1
        if isinstance(event, SideRequest) and self.agent is not None:
            self.agent.warmth.prewarmed(event)  # what its server holds now, by its own count
        self._sink(event)

    # -- opening ------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, resume if asked, build the agent, start MCP; return once the tool list is final."""
        from hotloop.core.resumption import Resumption
        from hotloop.core.routing import Router
        from hotloop.core.runtime import Runtime

        if self.telemetry is None:
            conversation = lambda: self.log.id if self.log is not None else None  # noqa: E731
            self.telemetry = start_telemetry(self.config, self.options.otel, self.emit, conversation)
        path = self.options.resume
        resumed = await asyncio.to_thread(Resumption.load, path, self.config.secrets()) if path is not None else None
        if self.runtime is None:
            self.runtime = Runtime(self.config, read_only=self.options.read_only)
        try:
            notes: list[str] = []
            if resumed is not None:
                self.config, target, notes = resumed.target(self.config, self.choice)
            else:
                target = resolve(self.config, self.choice)
            self.runtime.config = self.config
            fitted = await self.runtime.fit_tiers(target)
            self.config = self.runtime.config
            if fitted is not None and resumed is None:
                target = resolve(self.config, self.choice)  # a tier now names a model the server lists
            self.router = Router(self.config, self.runtime, auto=self.choice.tier == AUTO_TIER)
            provider = await self.runtime.connect(target)
        except BaseException:
            if resumed is not None:
                resumed.log.close()  # its lock: the session is free again
            if self._probes is None:  # the switch menu's list: another provider may be picked meanwhile
                self._probes = asyncio.create_task(probe_all(self.runtime, self.config))
            raise
        with contextlib.suppress(TimeoutError):
            # What the server is decides the first requests' `priority` and the flag a hint names; a
            # local server says in milliseconds, and a slow one doesn't hold the session up for long.
            await asyncio.wait_for(self.runtime.server_of(provider), DISCOVERY_WAIT)
        self.agent = self._new_agent(provider, self._system())
        for warning in self.config.warnings:
            self.emit(Notice(level="warning", message=warning))
        if (unsandboxed := await asyncio.to_thread(sandbox_notice, self.config.shell)) is not None:
            self.emit(Notice(level="warning", message=unsandboxed))
        self.subreaper.start(lambda: not self.options.read_only and under_subreaper(self.config.shell))
        if fitted is not None:
            self.emit(Notice(level="info", message=fitted))
        if resumed is not None:
            self._continue(resumed, notes)
        await self.runtime.start_mcp(list(self.options.mcp), self.emit)
        if self.agent.options.prefetch:
            await self.runtime.learn_from_past(self.makes.predictor, self.workspace)
        if self._probes is not None:
            self._probes.cancel()
        self._probes = asyncio.create_task(probe_all(self.runtime, self.config))
        self._ready = True
        self.prewarmer.start(self.agent, "start")  # the tool list is final: the prefix is what the first step sends
        # The startup heap never dies: keep the collector off it, and collect old objects rarely.
        gc.collect()
        gc.freeze()
        gc.set_threshold(700, 10, 1_000_000)

    def retarget(self, choice: Choice) -> None:
        """Open on `choice` instead (a provider, model or tier), while the session couldn't open yet."""
        if self._ready:
            raise RuntimeError("retarget() is for a session that isn't open; switch() moves an open one")
        resolve(self.config, choice)  # a bad provider, tier or missing key fails here, as at the start
        self.choice = choice

    def _system(self, kept: str | None = None) -> str:
        return self.makes.system(self.agent, kept)

    def _new_agent(self, provider: Provider, system: str, cache_key: str | None = None) -> Agent:
        assert self.router is not None
        return self.makes.new(self.router, provider, system, cache_key)

    def _continue(self, resumed: Resumption, notes: list[str]) -> None:
        """Go on with a saved session: its history in the agent and on screen, appending to its log."""
        assert self.agent is not None
        log = resumed.log
        moved = resumed.elsewhere(self.workspace)  # the user's folder, never the log's
        header, conversation = resumed.session.header, resumed.conversation
        self.agent = self._new_agent(self.agent.provider, self._system(header.system), header.routing_key)
        self.agent.restore(
            conversation.messages, conversation.turns, conversation.warmth, log_counts(resumed.session.events)
        )
        self.meter = ContextMeter()
        self.prewarmer.rhythm = CacheRhythm()
        for event in resumed.session.events:
            self.meter.observe(event)
            self.prewarmer.rhythm.observe(event)
        self._open_log(log)
        self._restored(resumed.session)
        for event in resumed.opening_events(notes + moved):
            self.emit(event)

    def _open_log(self, log: SessionLog, created: bool = False) -> None:
        self.logs.open(log, created)
        if self.hooks is not None:
            self.hooks.session_id = log.id

    @property
    def log(self) -> SessionLog | None:
        """The log this conversation writes to; None until its first turn."""
        return self.logs.log

    # -- turns and switches -------------------------------------------------------------

    async def turn(self, prompt: str) -> TurnFinished:
        """One turn of the conversation, on the tier `auto` picks or the one chosen."""
        assert self.agent is not None and self.runtime is not None and self.router is not None
        if not self._ready:
            raise RuntimeError("a turn before the session is open")
        self.agent.system = self._system(self.agent.system)  # AGENTS.md may have changed since the last turn
        if self.log is None:
            agent = self.agent
            log = self.runtime.open_session_log(agent.provider, self.workspace, agent.system, agent.cache_key)
            self._open_log(log, created=True)
        self._turns += 1
        self.server.nudge()
        self.prewarmer.turn_started()  # no pre-warm beside the step's own request: it slowed it
        self.keepalive.turn_started()
        try:
            await self._compact_if_full()
            return await self.router.turn(self.agent, prompt)
        finally:
            self._turns -= 1
            self.server.nudge()
            self.prewarmer.after_turn(self.agent)
            self.keepalive.after_turn(self.agent)
            # A turn that ended (answered or cancelled) is on disk before its caller hears: a kill after loses none.
            await self.logs.synced()

    def context(self) -> tuple[int, int] | None:
        """How full the context is: the tokens the last step left in it, and the window; None if either is unknown."""
        return self.meter.of(self.context_window())

    async def compact(self) -> Compacted | None:
        """`/compact`: the conversation replaced by its summary; None if that failed (a notice says why)."""
        assert self.agent is not None
        if self.log is None or not self.agent.messages:
            raise InputError("nothing to compact yet: this conversation has no turn")
        if self.busy:
            raise InputError("a turn is running: compact when it ends")
        self._turns += 1
        self.server.nudge()
        try:
            return await self._compact("manual")
        finally:
            self._turns -= 1
            self.server.nudge()

    async def _compact_if_full(self) -> None:
        """Compact before a turn once the last step filled `[context] compact_at` of the window."""
        why = self.meter.due(self.config.context, self.context_window())
        if why is not None and self.agent is not None and self.agent.messages:
            self.emit(Notice(level="info", message=why))
            await self._compact("auto")

    async def _compact(self, trigger: Literal["manual", "auto"]) -> Compacted | None:
        from hotloop.providers.errors import ProviderError

        assert self.agent is not None
        try:
            return await self.agent.compact(trigger, self.meter.used, self.context_window())
        except ProviderError:
            return None  # the agent said it, and counted what the server billed, as a failed side request

    def in_use(self, choice: Choice) -> bool:
        """Whether `choice` is what answers now: switching there would change nothing (a bad name: InputError)."""
        return self.agent is not None and in_use(self.config, choice, self.agent.using, self.router)

    async def switch(self, choice: Choice) -> ProviderSwitched | None:
        """Move the conversation to another provider, model or tier from the next request on; None (nothing done,
        nothing logged) if `choice` answers already."""
        assert self.agent is not None and self.runtime is not None and self.router is not None
        if self.in_use(choice):
            return None
        switched = await self.runtime.switch(self.agent, choice)
        self.router.chose(choice)
        self.server.nudge()
        self.prewarmer.start(self.agent, "switch")
        return switched

    def context_window(self) -> int | None:
        """Tokens a request may hold on the model in use (None before the agent exists, or if unknown)."""
        return self.agent.context_window() if self.agent is not None else None

    def cache_lifetime(self) -> str | None:
        """On Anthropic: the lifetime the cache is written for, why, and what the other would have cost so far."""
        return self.prewarmer.lifetime_detail(self.agent.provider) if self.agent is not None else None

    def _provider(self) -> Provider | None:
        return self.agent.provider if self.agent is not None else None

    def tier_label(self, provider: str, model: str) -> str | None:
        """The tier that names this provider and model, as the status bar shows it (`auto → fast`)."""
        tier = self.config.tier_of(provider, model)
        return f"auto → {tier}" if self.router is not None and self.router.auto else tier

    def new_conversation(self) -> None:
        """Close this conversation's log and start another on the same provider (a turn in flight is the caller's)."""
        assert self.agent is not None
        self.logs.close()
        self.agent.provider.prune(())
        self.agent = self._new_agent(self.agent.provider, self._system())
        self.meter = ContextMeter()
        self.prewarmer.rhythm = CacheRhythm()

    async def continue_session(self, path: Path) -> None:
        """Leave this conversation (its log stays) and go on with the saved one at `path`."""
        from hotloop.core.resumption import Resumption

        assert self.runtime is not None
        resumed = await asyncio.to_thread(Resumption.load, path, self.config.secrets())
        try:
            config, target, notes = resumed.target(self.config, Choice())
            self.runtime.config = self.config = config
            provider = await self.runtime.connect(target)
        except BaseException:
            resumed.log.close()
            raise
        self.logs.close()
        if self.agent is not None:
            self.agent.provider.prune(())
        self.agent = self._new_agent(provider, self._system())
        self._continue(resumed, notes)
        self.server.nudge()
        self.prewarmer.start(self.agent, "start")

    async def fork(self, turn: int | None = None) -> Forked:
        """A new session holding this conversation's turns up to `turn` (all by default); `continue_session` goes on."""
        from hotloop.sessions.fork import fork_session

        if self.log is None:
            raise InputError("nothing to fork yet: this conversation has no turn")
        if self.busy:
            raise InputError("a turn is running: fork when it ends")
        self.log.flush()  # the fork reads the log: what is buffered belongs in it
        return await asyncio.to_thread(fork_session, self.log.path, turn)

    # -- what the frontends show besides the stream ---------------------------------------

    async def switch_options(self) -> list[SwitchOption]:
        """Every tier, provider and model, each with what switching to it would cost now."""
        if self._sdks is None:  # imported meanwhile, off the loop: a pick needn't wait for one (seconds under load)
            self._sdks = asyncio.create_task(import_sdks(self.config))
        return switch_options(self.config, self.agent, await self._probes if self._probes is not None else {})

    # -- closing ------------------------------------------------------------------------

    async def close(self, grace: float = 0.0) -> None:
        """Let side jobs finish for up to `grace` seconds (a title), then close the log, servers and connections."""
        # Awaited before the clients close: a cancelled task can still be mid-request, and would use a closed client.
        tasks = [task for task in (self._probes, self._sdks) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.close()
        await self.prewarmer.close()
        await self.keepalive.close()
        if self.router is not None:
            await self.router.side_jobs.settle(grace)
        if self.telemetry is not None:  # before the log closes: an export's warning is logged too
            await self.telemetry.close()
        self.logs.close()
        if self.runtime is not None:
            await self.runtime.aclose()
        await self.subreaper.close()
