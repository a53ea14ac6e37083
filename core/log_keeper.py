"""A session's log, kept: created at the first turn, with what was said before it; dropped if nothing answered.

Events before the first turn (config warnings, MCP notices, a switch) are held and written when
the log opens, so a session that never sent a prompt leaves no file. A log whose prompt no
provider ever answered is deleted on close: it is not a session to find, continue or replay.
Answered means a step the provider billed or finished, or a tool that ran: a step cut short
(Ctrl-C, a closed pipe) before its usage came is not one, whatever it streamed, since a session
of no tokens is not one to continue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, StepFinished, ToolFinished

if TYPE_CHECKING:
    from hotloop.sessions.log import SessionLog


def _answered(event: AgentEvent) -> bool:
    """Whether `event` shows the session did work worth keeping: a step billed or whole, or a tool that ran."""
    if isinstance(event, StepFinished):
        return event.usage is not None or not event.cut
    return isinstance(event, ToolFinished) and event.status != "cancelled"


class LogKeeper:
    """The log events go to, the events held until it opens, and what happened to the last one closed."""

    def __init__(self) -> None:
        self.log: SessionLog | None = None
        self.last: SessionLog | None = None  # the log closed last: the one to name on exit
        self.problem: str | None = None  # why a log stopped early (a failing disk), once it is closed
        self._held: list[AgentEvent] = []  # said before the log exists; written when it opens
        self._unanswered = False  # a log this session created that no step has finished in yet

    def write(self, event: AgentEvent) -> None:
        if self.log is not None:
            self.log.write(event)
        else:
            self._held.append(event)
        if _answered(event):
            self._unanswered = False

    def open(self, log: SessionLog, created: bool) -> None:
        """Go on in `log` (`created` for this session: dropped on close if nothing answers), held events first."""
        self.log = log
        for event in self._held:
            log.write(event)
        self._held.clear()
        self._unanswered = created

    async def synced(self) -> None:
        if self.log is not None:
            await self.log.synced()

    def close(self) -> None:
        from hotloop.sessions.summary import summary_path

        if self.log is not None:
            self.log.close()
            if self.log.error is not None:
                self.problem = f"the session log stopped at {self.log.path}: {self.log.error.strerror}"
            elif self._unanswered:
                for file in (self.log.path, summary_path(self.log.path)):
                    file.unlink(missing_ok=True)
            self.last = self.log
            self.log = None
        self._unanswered = False
        self._held.clear()
