"""What a session talks to: providers (starting the embedded simulator when one needs it) and tools.

The headless CLI and the TUI share it. A `Runtime` keeps one provider per configured name,
so switching back and forth reuses connections.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from hotloop import paths
from hotloop.agent.events import Notice
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.mcp import McpBridge, server_from_command_line
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.config import Config, ConfigError, ProviderSettings, Target
from hotloop.providers.base import Provider
from hotloop.providers.errors import ProviderError
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.sim.engine import SimConfig
from hotloop.providers.sim.model import ScenarioError, load_scenario
from hotloop.providers.sim.server import EmbeddedSimulator
from hotloop.sessions.log import SessionLog

PROBE_TIMEOUT = 3.0


class Runtime:
    """The session's providers and tool registry, closed together."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.tools = ToolRegistry(builtin_tools())
        self.simulator: EmbeddedSimulator | None = None
        self._providers: dict[tuple[str, str | None], OpenAIChatProvider] = {}
        self._bridge: McpBridge | None = None

    async def connect(self, target: Target) -> OpenAIChatProvider:
        """The provider for `target`, set to its model; a server with no model configured is asked."""
        settings = target.settings
        provider = self._provider(settings)
        if target.model:
            provider.model = target.model
        elif not provider.model:
            served = await provider.list_models()
            if not served:
                raise ProviderError(f"{settings.name} serves no models; pass --model")
            provider.model = served[0]
        return provider

    def _provider(self, settings: ProviderSettings) -> OpenAIChatProvider:
        key = (settings.name, settings.base_url)
        if key not in self._providers:
            self._providers[key] = self._open(settings)
        return self._providers[key]

    def _open(self, settings: ProviderSettings) -> OpenAIChatProvider:
        if settings.kind == "sim":
            if self.simulator is None:
                self.simulator = EmbeddedSimulator(simulator_config(self.config)).start()
            return OpenAIChatProvider(
                name=settings.name, model="", base_url=self.simulator.base_url, location="the embedded simulator"
            )
        return OpenAIChatProvider(
            name=settings.name,
            model="",
            base_url=settings.base_url,
            api_key=settings.api_key(),
            max_retries=settings.max_retries,
        )

    def open_session_log(self, provider: Provider, workspace: Path) -> SessionLog:
        """A new session log that masks every configured key's value, or a one-line ConfigError."""
        secrets = [value for name in self.config.key_env_names() if (value := os.environ.get(name))]
        folder = paths.sessions_dir()
        try:
            return SessionLog.create(
                folder, provider=provider.name, model=provider.model, workspace=workspace, secrets_to_mask=secrets
            )
        except OSError as error:
            raise ConfigError(f"cannot create a session log in {folder}: {error.strerror}") from None

    async def probe(self, settings: ProviderSettings) -> list[str] | str:
        """The models a provider serves, or why it can't be used (missing key, unreachable)."""
        if settings.key_required and not settings.api_key():
            return f"missing API key: set {settings.api_key_env}"
        provider = self._provider(settings)
        try:
            return await asyncio.wait_for(provider.list_models(), PROBE_TIMEOUT)
        except TimeoutError:
            return f"no answer from {provider.base_url} within {PROBE_TIMEOUT:g} s"
        except ProviderError as error:
            return str(error)

    async def start_mcp(self, command_lines: list[str], notify: Callable[[Notice], None]) -> None:
        servers = list(self.config.mcp)
        for line in command_lines:
            servers.append(server_from_command_line(line, {s.name for s in servers}))
        if servers:
            self._bridge = McpBridge(self.tools, notify, self.config.key_env_names())
            await self._bridge.start(servers)

    async def aclose(self) -> None:
        if self._bridge is not None:
            await self._bridge.aclose()
        for provider in self._providers.values():
            await provider.aclose()
        if self.simulator is not None:
            self.simulator.stop()


def simulator_config(config: Config) -> SimConfig:
    sim = config.sim
    try:
        scenario = load_scenario(sim.scenario) if sim.scenario else ()
    except ScenarioError as error:
        raise ConfigError(str(error)) from None
    return SimConfig(cache_blocks=sim.cache_blocks, scenario=scenario).with_latency(
        ttft=sim.ttft_ms / 1000 if sim.ttft_ms is not None else None,
        prefill_per_token=sim.prefill_us_per_token / 1e6 if sim.prefill_us_per_token is not None else None,
        decode_per_token=sim.decode_ms_per_token / 1000 if sim.decode_ms_per_token is not None else None,
    )
