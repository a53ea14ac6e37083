"""`SlashCommands`: the main screen's slash commands and the workers they start.

A base of `MainScreen`: the workers must belong to the screen, so that Esc, which cancels the
screen's "turn" group, stops a /compact as it stops a turn. What it uses of the screen is
declared below; the screen defines it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.notifications import SeverityLevel
from textual.screen import Screen

from hotloop import InputError
from hotloop.agent.events import Notice
from hotloop.agent.figures import short_model
from hotloop.config import Choice, resolve
from hotloop.core.session import Session
from hotloop.core.slash import Slash
from hotloop.tui.prompt_queue import PromptQueue
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.tools.mcp import McpState


class SlashCommands(Screen[None]):
    session: Session
    queue: PromptQueue
    pending_switch: Choice | None  # a switch asked for during a turn, made when it ends
    switching: int  # switches under way: prompts wait for them

    if TYPE_CHECKING:

        def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None: ...
        def retarget(self, choice: Choice) -> None: ...
        def show_provider(self) -> None: ...
        def show_target(self, choice: Choice) -> None: ...
        def next_prompt(self) -> None: ...
        def action_new_conversation(self) -> None: ...
        def list_sessions_again(self) -> None: ...
        async def resume_here(self, path: Path) -> None: ...

    @property
    def turn_running(self) -> bool:
        """A turn or a /compact is running (they share the group)."""
        return any(worker.group == "turn" and worker.is_running for worker in self.workers)

    def run_slash(self, slash: Slash) -> None:
        agent = self.session.agent
        if slash.name == "/new":
            self.action_new_conversation()
        elif slash.name == "/help":
            self.call_later(self.app.run_action, "help")
        elif slash.name == "/fork":
            self.fork(int(slash.args[0]) if slash.args else None)
        elif slash.name == "/compact":
            self._compact()
        elif slash.name == "/mcp":
            if agent is None:
                self.say("not connected yet", severity="warning")
            elif slash.args == ("accept",):
                self._accept_tools()
            else:
                self.mcp(slash.args[1] if slash.args else None)
        elif agent is None:
            self.retarget(slash.choice(self.session.choice.provider or self.session.config.default_provider))
        else:
            self.switch_to(slash.choice(agent.provider.name))

    def _compact(self) -> None:
        if self.session.agent is None:
            self.say("not connected yet", severity="warning")
        elif self.turn_running:
            self.say("a turn is running: /compact when it ends", severity="warning")
        else:
            self.query_one(StatusBar).state = "compacting…"
            self.compact()

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def compact(self) -> None:
        """`/compact`, in the turn's group: prompts sent meanwhile queue, and Esc cancels it."""
        try:
            await self.session.compact()
        except InputError as error:
            self.say(str(error), severity="error")

    @work(exclusive=True, group="fork", exit_on_error=False)
    async def fork(self, turn: int | None) -> None:
        """`/fork [N]`: go on in a new session holding this conversation up to turn N; this one's log stays."""
        if self.session.agent is None:
            self.say("not connected yet", severity="warning")
            return
        try:
            forked = await self.session.fork(turn)
        except InputError as error:
            self.say(str(error), severity="error")
            return
        for warning in forked.warnings:
            self.say(warning, severity="warning")
        await self.resume_here(forked.path)
        if self.session.log is not None and self.session.log.path == forked.path:
            self.say(f"forked session {forked.parent} at turn {forked.turn}: this is session {forked.id}")
        self.list_sessions_again()  # the fork joins the list, under its parent

    @work(exclusive=True, group="mcp", exit_on_error=False)
    async def mcp(self, restart: str | None) -> None:
        """`/mcp`: each MCP server's state and tools, in the transcript; `/mcp restart NAME` starts one again."""
        if restart is not None:
            try:
                await self.session.restart_mcp(restart)
            except InputError as error:
                self.say(str(error), severity="error")
                return
        servers = self.session.mcp_servers()
        lines = [mcp_line(state) for state in servers] or ["no MCP servers (add them in the config, or with --mcp)"]
        self.query_one(Transcript).apply(Notice(level="info", message="MCP servers:\n" + "\n".join(lines)))

    def _accept_tools(self) -> None:
        """`/mcp accept`: the tool descriptions held back to keep the cache go out with the next request."""
        accepted = self.session.accept_tools()
        if not accepted:
            self.say("no tool descriptions are held back")
        for held in accepted:
            cost = f"≈{held.tokens:,} tokens re-prefilled"
            self.say(f"{held.server}: the new descriptions of {', '.join(held.names)} go out next request ({cost})")

    @work(exclusive=True, group="switch", exit_on_error=False)
    async def switch_to(self, choice: Choice) -> None:
        """Use another provider, model or tier from the next turn on; the conversation stays.

        Said at once, whatever the turn is doing: the status bar names where it goes while it connects, a turn in
        flight has it wait for its end, and picking what answers already changes nothing, which is said too.
        """
        from hotloop.providers.errors import ProviderError

        if self.session.agent is None:
            self.retarget(choice)
            return
        try:
            if self.session.in_use(choice):
                self.pending_switch = None  # staying is the last word
                self.say(f"already on {self.target_name(choice)}: nothing to switch")
                return
        except InputError as error:
            self.say(str(error), severity="error")
            return
        if self.turn_running:
            self.pending_switch = choice
            self.say(f"switching to {self.target_name(choice)} when this turn ends")
            return
        status = self.query_one(StatusBar)
        self.switching += 1
        status.state = "switching to"
        self.show_target(choice)
        try:
            # The agent reports the switch, with its cost, through the event stream.
            await self.session.switch(choice)
        except (InputError, ProviderError) as error:
            self.say(str(error), severity="error")
        finally:
            self.switching -= 1
            if status.is_attached:  # not when the app closed under it
                self.show_provider()  # what answers now: the target, or after a failure what answered before
                if not self.switching:
                    status.state = "ready"
        self.next_prompt()

    def target_name(self, choice: Choice) -> str:
        """`sim-anthropic · sim-balanced`: the provider and model `choice` names (a bad name: InputError)."""
        target = resolve(self.session.config, choice)
        return f"{target.settings.name} · {short_model(target.model)}" if target.model else target.settings.name


def mcp_line(state: McpState) -> str:
    """`fs · running · read_file, list_dir` or `fs · stopped: the server exited · /mcp restart fs`."""
    name = state.server.name
    if state.status == "running":
        return f"{name} · running · {', '.join(state.tools) or 'no tools'}"
    problem = f": {state.problem}" if state.problem else ""
    return f"{name} · {state.status}{problem} · /mcp restart {name}"
