"""`SlashCommands`: what the main screen's slash commands do, and the workers they start.

A part of `MainScreen`, handed the session, `say`, the screen's switch and sessions browser, and
what it asks of the screen's turn. Its workers are the screen's (`run_worker`), so that Esc, which
cancels the screen's "turn" group, stops a /compact as it stops a turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.screen import Screen

from hotloop import InputError
from hotloop.agent.events import Notice
from hotloop.config import Choice
from hotloop.core.session import Session
from hotloop.core.slash import Slash
from hotloop.tui.say import Say
from hotloop.tui.sessions_browsing import SessionsBrowser
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.tools.mcp import McpState


class SlashCommands:
    def __init__(
        self,
        screen: Screen[None],
        session: Session,
        say: Say,
        sessions: SessionsBrowser,
        *,
        switch_to: Callable[[Choice], object],
        retarget: Callable[[Choice], None],
        new_conversation: Callable[[], None],
        turn_running: Callable[[], bool],
    ) -> None:
        self._screen = screen
        self._session = session
        self._say = say
        self._sessions = sessions
        self._switch_to = switch_to
        self._retarget = retarget
        self._new_conversation = new_conversation
        self._turn_running = turn_running

    def run(self, slash: Slash) -> None:
        agent = self._session.agent
        if slash.name == "/new":
            self._new_conversation()
        elif slash.name == "/help":
            self._screen.call_later(self._screen.app.run_action, "help")
        elif slash.name == "/fork":
            self._start(partial(self._fork, int(slash.args[0]) if slash.args else None), "fork")
        elif slash.name == "/compact":
            self._compact()
        elif slash.name == "/mcp":
            if agent is None:
                self._say("not connected yet", severity="warning")
            elif slash.args == ("accept",):
                self._accept_tools()
            else:
                self._start(partial(self._mcp, slash.args[1] if slash.args else None), "mcp")
        elif agent is None:
            self._retarget(slash.choice(self._session.choice.provider or self._session.config.default_provider))
        else:
            self._switch_to(slash.choice(agent.provider.name))

    def _start(self, work: Callable[[], Awaitable[None]], group: str) -> None:
        self._screen.run_worker(work, group=group, exclusive=True, exit_on_error=False)

    def _compact(self) -> None:
        if self._session.agent is None:
            self._say("not connected yet", severity="warning")
        elif self._turn_running():
            self._say("a turn is running: /compact when it ends", severity="warning")
        else:
            self._screen.query_one(StatusBar).state = "compacting…"
            # In the turn's group: prompts sent meanwhile queue, and Esc cancels it.
            self._start(self._compact_work, "turn")

    async def _compact_work(self) -> None:
        try:
            await self._session.compact()
        except InputError as error:
            self._say(str(error), severity="error")

    async def _fork(self, turn: int | None) -> None:
        """`/fork [N]`: go on in a new session holding this conversation up to turn N; this one's log stays."""
        if self._session.agent is None:
            self._say("not connected yet", severity="warning")
            return
        try:
            forked = await self._session.fork(turn)
        except InputError as error:
            self._say(str(error), severity="error")
            return
        for warning in forked.warnings:
            self._say(warning, severity="warning")
        await self._sessions.resume_here(forked.path)
        log = self._session.log
        if log is not None and log.path == forked.path:
            self._say(f"forked session {forked.parent} at turn {forked.turn}: this is session {forked.id}")
        self._sessions.list_again()  # the fork joins the list, under its parent

    async def _mcp(self, restart: str | None) -> None:
        """`/mcp`: each MCP server's state and tools, in the transcript; `/mcp restart NAME` starts one again."""
        if restart is not None:
            try:
                await self._session.mcp.restart(restart)
            except InputError as error:
                self._say(str(error), severity="error")
                return
        servers = self._session.mcp.servers()
        lines = [mcp_line(state) for state in servers] or ["no MCP servers (add them in the config, or with --mcp)"]
        self._screen.query_one(Transcript).apply(Notice(level="info", message="MCP servers:\n" + "\n".join(lines)))

    def _accept_tools(self) -> None:
        """`/mcp accept`: the tool descriptions held back to keep the cache go out with the next request."""
        accepted = self._session.mcp.accept()
        if not accepted:
            self._say("no tool descriptions are held back")
        for held in accepted:
            cost = f"≈{held.tokens:,} tokens re-prefilled"
            self._say(f"{held.server}: the new descriptions of {', '.join(held.names)} go out next request ({cost})")


def mcp_line(state: McpState) -> str:
    """`fs · running · read_file, list_dir` or `fs · stopped: the server exited · /mcp restart fs`."""
    name = state.server.name
    if state.status == "running":
        return f"{name} · running · {', '.join(state.tools) or 'no tools'}"
    problem = f": {state.problem}" if state.problem else ""
    return f"{name} · {state.status}{problem} · /mcp restart {name}"
