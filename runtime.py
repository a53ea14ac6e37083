"""What a run talks to: the provider (starting the embedded simulator if needed) and the tools.

Both the headless CLI and the TUI open a `Runtime` the same way. Choosing a provider that
doesn't exist, or one whose key is missing, fails here, before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hotloop.agent.events import Notice
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.mcp import McpBridge, server_from_command_line
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.config import Config, ConfigError, ProviderSettings
from hotloop.providers.errors import MissingApiKey, ProviderError
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.sim.engine import SimConfig
from hotloop.providers.sim.model import ScenarioError, load_scenario
from hotloop.providers.sim.server import EmbeddedSimulator


@dataclass(frozen=True)
class Choice:
    """What the user picked on the command line; `None` means "as configured"."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None


def resolve(config: Config, choice: Choice) -> ProviderSettings:
    """The provider settings for `choice`, or a one-line ConfigError / MissingApiKey."""
    settings = config.provider(choice.provider)
    if choice.base_url:
        if settings.kind == "sim":
            raise ConfigError("--base-url does not apply to the embedded simulator; use --provider openai --base-url URL")
        # The configured models belong to the configured server; another server is asked what it serves.
        settings = replace(settings, base_url=choice.base_url, models=(), default_model=None)
    if settings.key_required and not settings.api_key():
        raise MissingApiKey(f"missing API key for provider {settings.name!r}: set {settings.api_key_env}")
    return settings


class Runtime:
    """A connected provider and the tool registry, closed together."""

    def __init__(self, provider: OpenAIChatProvider, tools: ToolRegistry, simulator: EmbeddedSimulator | None) -> None:
        self.provider = provider
        self.tools = tools
        self.simulator = simulator
        self._bridge: McpBridge | None = None

    @classmethod
    async def connect(cls, config: Config, settings: ProviderSettings, model: str | None) -> Runtime:
        """Connect to the provider; a provider with no model configured is asked which it serves."""
        simulator = None
        if settings.kind == "sim":
            simulator = EmbeddedSimulator(simulator_config(config)).start()
            provider = OpenAIChatProvider(
                name=settings.name,
                model=model or settings.default_model or "",
                base_url=simulator.base_url,
                location="the embedded simulator",
            )
        else:
            provider = OpenAIChatProvider(
                name=settings.name,
                model=model or settings.default_model or (settings.models[0] if settings.models else ""),
                base_url=settings.base_url,
                api_key=settings.api_key(),
                max_retries=settings.max_retries,
            )
        runtime = cls(provider, ToolRegistry(builtin_tools()), simulator)
        if not provider.model:
            try:
                served = await provider.list_models()
            except ProviderError:
                await runtime.aclose()
                raise
            if not served:
                await runtime.aclose()
                raise ProviderError(f"{settings.name} serves no models; pass --model")
            provider.model = served[0]
        return runtime

    async def start_mcp(
        self, config: Config, command_lines: list[str], notify: Callable[[Notice], None]
    ) -> None:
        servers = list(config.mcp)
        for line in command_lines:
            servers.append(server_from_command_line(line, {s.name for s in servers}))
        if servers:
            self._bridge = McpBridge(self.tools, notify, config.key_env_names())
            await self._bridge.start(servers)

    async def aclose(self) -> None:
        if self._bridge is not None:
            await self._bridge.aclose()
        await self.provider.aclose()
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
