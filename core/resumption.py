"""Going on with a saved session, in the app (`hotloop -c`, `--resume ID`) or headless (`hotloop run -c`).

The session's log is locked first, then read, so two hotloops continuing one session a moment
apart can't both write: the second is refused, or reads what the first appended. The
conversation is rebuilt, and the agent continues it on the provider, model and server it last
used (unless the user picks others), with its system prompt, appending to the same log. It runs
in the folder the user continues it from (the editor's, over ACP): the workspace a log records is
history, never adopted, as a log (an import above all) is a file anyone could have written.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hotloop.agent.events import AgentEvent, Notice
from hotloop.agent.text import visible
from hotloop.config import Choice, Config, ConfigError, Target, resolve
from hotloop.providers.errors import MissingApiKey
from hotloop.sessions.log import SessionLog
from hotloop.sessions.resume import Conversation, closing_events, rebuild
from hotloop.sessions.store import LoggedSession, SessionError, read_header, read_session

_PATH_SHOWN = 200  # characters of a recorded folder a note shows


@dataclass(frozen=True)
class Resumption:
    path: Path
    session: LoggedSession
    conversation: Conversation
    log: SessionLog  # locked: this process is the session's one writer

    @classmethod
    def load(cls, path: Path, secrets: list[str]) -> Resumption:
        """Lock the session at `path`, then read and rebuild it; SessionInUse or a SessionError say why not."""
        header, header_size = read_header(path)
        try:
            log = SessionLog.reopen(path, header.id, header_size, secrets)
        except OSError as error:
            raise SessionError(f"cannot append to {path}: {error.strerror}") from None
        try:
            session = read_session(path)
            return cls(path, session, rebuild(session.events), log)
        except BaseException:
            log.close()
            raise

    @property
    def id(self) -> str:
        return self.session.header.id

    @property
    def base_url(self) -> str:
        """The server the session last talked to ("" if unknown: an older log)."""
        switched = self.conversation.base_url
        return switched if switched is not None else self.session.header.base_url

    def target(self, config: Config, choice: Choice) -> tuple[Config, Target, list[str]]:
        """The user's choice if they made one, else the provider, model and server the session last used.

        A provider the session reached at another URL than the config's (`--base-url`) is pointed
        there again, and a note says so; the config comes back moved, for the rest of the session.
        Only a server on this machine, though: a log is a file anyone could have written, and a URL
        it names elsewhere would receive the provider's key, so that one is named and not followed.
        """
        last = self.conversation
        if choice != Choice() or last.provider is None:
            return config, resolve(config, choice), []
        settings = config.providers.get(last.provider)
        url, notes = self.base_url, []
        if settings is not None and not settings.is_simulator and url and url != _root(settings.base_url):
            if _on_this_machine(url):
                config, _ = config.pointed_at(Choice(provider=last.provider, base_url=url))
                notes.append(f"continuing on {last.provider} at {visible(url)}, the server this session used")
            else:
                notes.append(
                    f"this session used {last.provider} at {visible(url)}, which the config doesn't name: continuing at"
                    f" {visible(_root(settings.base_url) or 'its default URL')} (--base-url goes back there)"
                )
        try:
            return config, resolve(config, Choice(provider=last.provider, model=last.model)), notes
        except (ConfigError, MissingApiKey) as error:
            default = config.provider().name
            return (
                config,
                resolve(config, Choice()),
                [f"cannot go on with {last.provider} · {last.model} ({error}); using the default provider, {default}"],
            )

    def elsewhere(self, workspace: Path) -> list[str]:
        """The line that says so when the session was recorded in another folder than `workspace`, where it runs."""
        recorded = self.session.header.workspace
        if not recorded or recorded == str(workspace):
            return []
        shown = visible(recorded if len(recorded) <= _PATH_SHOWN else recorded[: _PATH_SHOWN - 1] + "…")
        return [f"recorded in {shown}; runs in {visible(str(workspace))}"]

    def opening_events(self, notes: list[str]) -> list[AgentEvent]:
        """What to show and log first: skipped lines, `notes`, and the end of a turn the log never finished."""
        warnings = [*self.session.warnings, *notes]
        notices: list[AgentEvent] = [Notice(level="warning", message=warning) for warning in warnings]
        return notices + closing_events(self.conversation, self.session.events)


def _on_this_machine(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _root(url: str | None) -> str:
    return (url or "").rstrip("/")
