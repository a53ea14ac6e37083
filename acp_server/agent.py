"""`hotloop acp`: the protocol's requests answered on hotloop's session core, one `Session` per ACP session.

`session/new` opens a session in the client's `cwd` (its stdio MCP servers added to the config's), each prompt
a turn of it (`acp_session.py`). `session/list` lists hotloop's saved sessions and `session/load` goes on with
one, its history replayed first (`history.py`), as `hotloop -c` does. The tier, the model and the mode (ask or
read-only) are config options, and the mode a session mode too (`switches.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.interfaces import Client
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AudioContentBlock,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionListCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    SseMcpServer,
    TextContentBlock,
    TextResourceContents,
)

from hotloop import InputError, __version__
from hotloop.acp_server.acp_session import AcpSession
from hotloop.acp_server.history import listed, session_path
from hotloop.acp_server.stdio import Stdio, one_line_logs
from hotloop.acp_server.switches import MODE
from hotloop.config import Choice, Config, load_config
from hotloop.core.session import SessionOptions
from hotloop.sessions.store import SessionError

McpServers = list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio]
Prompt = list[
    TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock | EmbeddedResourceContentBlock
]


class HotloopAgent:
    """The ACP agent: the protocol's methods on hotloop's sessions."""

    def __init__(self, options: SessionOptions) -> None:
        self.options = options  # the command line's, for every session; the workspace is the client's
        self.client: Client | None = None
        self.sessions: dict[str, AcpSession] = {}

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=True),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            agent_info=Implementation(name="hotloop", title="hotloop", version=__version__),
            auth_methods=[],
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session = await self._open(uuid.uuid4().hex, cwd, mcp_servers, resume=None)
        switches = session.switches
        return NewSessionResponse(session_id=session.id, config_options=switches.options(), modes=switches.modes())

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: McpServers | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        """Go on with a saved hotloop session: its history replayed as updates, then this answer; prompts follow."""
        try:
            path = await asyncio.to_thread(session_path, session_id)
        except SessionError as error:
            raise RequestError.resource_not_found(str(error)) from None
        for open_id, open_session in list(self.sessions.items()):  # open here already: its log is let go first
            log = open_session.session.log
            if open_id == session_id or (log is not None and log.id == session_id):
                await self.close_session(open_id)
        session = await self._open(session_id, cwd, mcp_servers, resume=path)
        switches, history = session.switches, session.history
        return LoadSessionResponse(config_options=switches.options(), modes=switches.modes(), field_meta=history)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        page = await asyncio.to_thread(listed, cwd, cursor)
        return ListSessionsResponse(sessions=page.sessions, next_cursor=page.next_cursor)

    async def _open(self, session_id: str, cwd: str, servers: McpServers | None, resume: Path | None) -> AcpSession:
        assert self.client is not None
        workspace = Path(cwd)
        if not workspace.is_absolute() or not workspace.is_dir():
            raise RequestError.invalid_params({"message": f"cwd must be an absolute path to a folder: {cwd!r}"})
        try:
            config = await asyncio.to_thread(load_config)
            mcp = (*self.options.mcp, *_mcp_command_lines(servers or []))
            options = dataclasses.replace(self.options, workspace=workspace, mcp=mcp, resume=resume)
            options = _configured(options, config)
            session = AcpSession(session_id, config, options, self.client)
        except InputError as error:
            raise RequestError.invalid_params({"message": str(error)}) from None
        await session.open()
        self.sessions[session.id] = session
        return session

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse | None:
        session = self._session(session_id)
        session.switches.set_mode(mode_id)
        await session.client.session_update(session_id=session_id, update=_options_now(session))
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        session = self._session(session_id)
        await session.switches.set(config_id, value)
        if config_id == MODE:
            update = CurrentModeUpdate(session_update="current_mode_update", current_mode_id=session.switches.mode)
            await session.client.session_update(session_id=session_id, update=update)
        return SetSessionConfigOptionResponse(config_options=session.switches.options())

    async def prompt(self, session_id: str, prompt: Prompt, **kwargs: Any) -> PromptResponse:
        return await self._session(session_id).prompt(_prompt_text(prompt))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if (session := self.sessions.get(session_id)) is not None:
            session.cancel()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        if (session := self.sessions.pop(session_id, None)) is not None:
            await session.close()
        return CloseSessionResponse()

    def cancel_all(self) -> None:
        for session in self.sessions.values():
            session.cancel()

    async def close_all(self) -> None:
        sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            with contextlib.suppress(Exception):
                await session.close()

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"message": f"no session {session_id!r}"})
        return session

    # -- what hotloop doesn't offer over ACP (yet) -----------------------------------------

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        return AuthenticateResponse()  # hotloop's providers take their keys from the environment, as configured

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        raise RequestError.method_not_found("session/fork")

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        raise RequestError.method_not_found("session/resume")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def _configured(options: SessionOptions, config: Config) -> SessionOptions:
    """A session on the command line's provider, else the config's default: never on the provider and server a
    loaded session's log names, which may be a hosted API the user never picked (an imported session's)."""
    if options.choice != Choice():
        return options
    return dataclasses.replace(options, provider=config.default_provider)


def _options_now(session: AcpSession) -> ConfigOptionUpdate:
    return ConfigOptionUpdate(session_update="config_option_update", config_options=list(session.switches.options()))


def _prompt_text(prompt: Prompt) -> str:
    """The prompt as one text: its text blocks, embedded files under their names, linked files by path."""
    parts: list[str] = []
    for block in prompt:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(block.resource, TextResourceContents):
            parts.append(f"\n{block.resource.uri}:\n```\n{block.resource.text}\n```\n")
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"{block.uri.removeprefix('file://')}")
    text = "".join(parts)
    if not text.strip():
        raise RequestError.invalid_params({"message": "the prompt has no text (hotloop takes text and files)"})
    return text


def _mcp_command_lines(servers: McpServers) -> tuple[str, ...]:
    """The client's stdio MCP servers as `--mcp` command lines; one with environment variables, or over HTTP, isn't."""
    lines: list[str] = []
    for server in servers:
        if isinstance(server, McpServerStdio) and not server.env:
            lines.append(shlex.join([server.command, *server.args]))
        else:
            print(f"hotloop: MCP server {server.name!r} skipped: only stdio servers without env", file=sys.stderr)
    return tuple(lines)


async def serve(options: SessionOptions, out: int) -> int:
    """Answer ACP on stdin and `out` (`stdio.protocol_out()`) until the client closes stdin; 0 then."""
    one_line_logs()
    agent = HotloopAgent(options)
    try:
        await run_agent(agent, Stdio(out, ended=agent.cancel_all))
    finally:
        await agent.close_all()
    return 0
