"""Going on with a saved session, in the app (`hotloop -c`, `--resume ID`) or headless (`hotloop run -c`).

The session is read and its conversation rebuilt; the agent continues it on the provider
and model it last used (unless the user picks others), in its workspace, with its system
prompt, appending to the same log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hotloop.agent.events import AgentEvent, Notice
from hotloop.config import Choice, Config, ConfigError, Target, resolve
from hotloop.providers.errors import MissingApiKey
from hotloop.sessions.resume import Conversation, closing_events, rebuild
from hotloop.sessions.store import LoggedSession, read_session


@dataclass(frozen=True)
class Resumption:
    path: Path
    session: LoggedSession
    conversation: Conversation

    @classmethod
    def load(cls, path: Path) -> Resumption:
        """Read and rebuild the session at `path`; a SessionError says why it can't be."""
        session = read_session(path)
        return cls(path, session, rebuild(session.events))

    @property
    def id(self) -> str:
        return self.session.header.id

    def target(self, config: Config, choice: Choice) -> tuple[Target, list[str]]:
        """The user's choice if they made one, else the provider and model the session last used."""
        last = self.conversation
        if choice != Choice() or last.provider is None:
            return resolve(config, choice), []
        try:
            return resolve(config, Choice(provider=last.provider, model=last.model)), []
        except (ConfigError, MissingApiKey) as error:
            return resolve(config, Choice()), [
                f"cannot go on with {last.provider} · {last.model} ({error}); using the default"
            ]

    def workspace(self, fallback: Path) -> tuple[Path, list[str]]:
        recorded = Path(self.session.header.workspace)
        if recorded.is_dir():
            return recorded, []
        return fallback, [f"the session's workspace {recorded} is gone; working in {fallback}"]

    def opening_events(self, notes: list[str]) -> list[AgentEvent]:
        """What to show and log first: skipped lines, `notes`, and the end of a turn the log never finished."""
        warnings = [*self.session.warnings, *notes]
        notices: list[AgentEvent] = [Notice(level="warning", message=warning) for warning in warnings]
        return notices + closing_events(self.conversation, self.session.events)
