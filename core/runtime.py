"""What a session talks to: providers (starting the embedded simulator when one needs it) and tools.

The headless CLI and the TUI share it. A `Runtime` keeps one provider per configured name,
so switching back and forth reuses connections. Providers are built in a worker thread: an SDK's
import, its client (a TLS context, one more transport per proxy variable) and the simulator's start
would otherwise hold the event loop, and with it a request in flight, for a second and more under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hotloop import paths
from hotloop.agent.events import AgentEvent, Notice, ProviderSwitched
from hotloop.agent.figures import short_model
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.edit import edit_tools
from hotloop.agent.tools.mcp import McpBridge
from hotloop.agent.tools.mcp_config import server_from_command_line
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.agent.tools.shell import shell_tool
from hotloop.config import Choice, Config, ConfigError, ProviderSettings, SimSettings, Target, resolve
from hotloop.core.prewarm import Lifetimes
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.errors import ConnectionFailed, ProviderError, UnknownModel
from hotloop.providers.lanes import Lanes
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.protocols import Wire
from hotloop.providers.transport import SdkProvider
from hotloop.sessions.log import SessionLog
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig
from hotloop.sim.scenario import ScenarioError, load_scenario

if TYPE_CHECKING:
    from hotloop.agent.approvals import Approvals
    from hotloop.agent.hooks import Hooks
    from hotloop.agent.loop import Agent
    from hotloop.agent.options import AgentOptions
    from hotloop.agent.prefetch import Predictor
    from hotloop.providers.vllm import ServerInfo

PROBE_TIMEOUT = 3.0
Key = TypeVar("Key", bound=Hashable)


class Runtime:
    """The session's providers and tool registry, closed together."""

    def __init__(self, config: Config, read_only: bool = False) -> None:
        self.config = config
        # hotloop's own files, wherever they sit: out of every write tool's reach, and read-only in the sandbox.
        config_file, data = paths.config_file(), paths.data_dir()
        own = {config_file: "config file (its hooks run commands)", data: "data folder (session logs)"}
        kept = [*([config_file] if config_file.exists() else []), config_file.parent, data]
        acting = [*edit_tools(own), shell_tool(config.shell, config.key_env_names(), kept)]
        self.tools = ToolRegistry([*builtin_tools(), *acting], read_only=read_only)
        self.simulator: EmbeddedSimulator | None = None
        self._providers: dict[tuple[str, str | None], Provider] = {}
        self._helpers: dict[tuple[str, str | None, str | None], Provider] = {}
        self._building: dict[Hashable, asyncio.Task[Provider]] = {}  # providers being built, by their key
        self._simulator_lock = threading.Lock()
        self._discoveries: dict[int, asyncio.Task[None]] = {}
        self._bridge: McpBridge | None = None
        self._served: dict[tuple[str, str | None], list[str]] = {}
        self.lanes = Lanes(config.routing.lanes, config.routing.max_background)
        self.lifetimes = Lifetimes()  # the cache lifetime each provider's writes ask for, per request

    async def connect(self, target: Target) -> Provider:
        """The provider for `target`, set to its model; a server with no model configured is asked.

        A model the server doesn't list is refused at once, with the list (not at the first request).
        """
        settings = target.settings
        provider = await self._provider(settings)
        if target.model:
            served = await self.served(settings)
            if served is not None and target.model not in served:
                listed = f" (available: {', '.join(sorted(served))})" if served else ""
                raise UnknownModel(f"unknown model {target.model!r} at {provider.where}{listed}")
            provider.model = target.model
        elif not provider.model:
            served = await provider.list_models()
            if not served:
                raise ProviderError(f"{settings.name} serves no models; pass --model")
            provider.model = served[0]
        return provider

    async def helper(self, target: Target) -> Provider:
        """A provider of its own for a helper tier's requests, so they never change the main agent's model."""
        settings = target.settings
        key = (settings.name, settings.base_url, target.model)
        if key in self._helpers:
            return self._helpers[key]
        main = await self._provider(settings)  # the simulator started, and its server being discovered

        def build() -> Provider:
            provider = self._open(settings, helper=True)
            provider.model = target.model or ""
            return provider

        provider = await self._build(self._helpers, key, build)
        await self.server_of(main)
        _share_server(main, provider)
        return provider

    async def server_of(self, provider: Provider) -> ServerInfo | None:
        """What the provider's server said of itself (vLLM, SGLang, …); None for hosted APIs and mute servers."""
        discovery = self._discoveries.get(id(provider))
        if discovery is not None:
            await asyncio.shield(discovery)
        return provider.server

    async def _discover(self, provider: Provider) -> None:
        """For a server someone runs, on any protocol: what it is (its window, whether requests carry `priority`)."""
        from hotloop.providers.anthropic import AnthropicProvider
        from hotloop.providers.vllm import ServedModel, ServerInfo, discover

        if (
            isinstance(provider, AnthropicProvider)
            and provider.server is None
            and self.simulator is not None
            and provider.base_url == self.simulator.url
        ):
            # The simulator's Anthropic side: Anthropic's model list gives no window, but this runtime started the
            # server and knows it (its OpenAI side is asked over HTTP, as any vLLM is).
            sim = self.simulator.server.config
            models = tuple(ServedModel(name, sim.max_model_len) for name in sim.models)
            provider.server = ServerInfo("vllm", models, healthy=True, has_metrics=True, simulated=True)
        # Any protocol's self-hosted server is asked (llama.cpp's Anthropic side answers /models and /props too).
        speaks = (OpenAIChatProvider, OpenAIResponsesProvider, AnthropicProvider)
        if not isinstance(provider, speaks) or provider.server is not None or provider.official:
            await _warm(provider)
            return
        try:
            provider.server = await asyncio.wait_for(discover(provider), PROBE_TIMEOUT)
        except ConnectionFailed:
            del self._discoveries[id(provider)]  # not up yet: asked again when the provider is next wanted
            return
        except (ProviderError, TimeoutError):
            return  # not a server that describes itself; requests work all the same
        if provider.server is not None and isinstance(provider, OpenAIChatProvider):
            provider.send_priority = provider.server.takes_priority and self.config.routing.lanes

    def agent(
        self,
        provider: Provider,
        *,
        emit: Callable[[AgentEvent], None],
        workspace: Path,
        tools: ToolRegistry | None = None,
        options: AgentOptions | None = None,
        system: str | None = None,
        cache_key: str | None = None,
        max_steps: int | None = None,
        approvals: Approvals | None = None,
        hooks: Hooks | None = None,
    ) -> Agent:
        """An agent as the config says: its options, the runtime's tools (unless given) and lanes.

        The one place agents are made (the app, `hotloop run`, `hotloop bench`): a setting in the
        config reaches them all. `options` replaces the config's only where a caller says why.
        """
        from hotloop.agent.loop import Agent

        return Agent(
            provider,
            tools if tools is not None else self.tools,
            emit=emit,
            workspace=workspace,
            options=options or self.config.agent_options(max_steps),
            system=system,
            cache_key=cache_key,
            lanes=self.lanes,
            approvals=approvals,
            hooks=hooks,
        )

    async def switch(self, agent: Agent, choice: Choice) -> ProviderSwitched:
        """Move `agent`'s conversation to the provider, model or tier chosen; the event says what it costs."""
        provider = await self.connect(resolve(self.config, choice))
        return agent.switch(provider, self.cost_per_hour(provider))

    def cost_per_hour(self, provider: Provider) -> float | None:
        """What the config says `provider`'s server costs an hour (self-hosted), for the log to price by."""
        settings = self.config.providers.get(provider.name)
        return settings.cost_per_hour if settings is not None else None

    async def _provider(self, settings: ProviderSettings) -> Provider:
        key = (settings.name, settings.base_url)
        provider = self._providers.get(key) or await self._build(self._providers, key, lambda: self._open(settings))
        if id(provider) not in self._discoveries:
            # In the background: the first request need not wait for the server to describe itself, and
            # finds the connection open (discovery's requests, or a bare one, pay the connect and TLS cost).
            self._discoveries[id(provider)] = asyncio.create_task(self._discover(provider))
        return provider

    async def _build(self, into: dict[Key, Provider], key: Key, build: Callable[[], Provider]) -> Provider:
        """`build()` run in a worker thread, once however many ask at once, and its provider kept in `into`."""
        building = self._building.get(key)
        if building is None:
            building = self._building[key] = asyncio.ensure_future(asyncio.to_thread(build))

            def built(task: asyncio.Task[Provider]) -> None:
                del self._building[key]
                if not task.cancelled() and task.exception() is None:
                    into[key] = task.result()  # kept before any waiter resumes: a later ask finds it

            building.add_done_callback(built)
        return await asyncio.shield(building)

    def _open(self, settings: ProviderSettings, helper: bool = False) -> Provider:
        """A provider for `settings` (in a worker thread); a helper's thinks not: its answers are a few words long,
        and Anthropic refuses a `max_tokens` not above the thinking budget."""
        base_url, location, sim_minimum = settings.base_url, None, None
        if settings.is_simulator:
            with self._simulator_lock:  # two providers of the simulator built at once would start two
                if self.simulator is None:
                    self.simulator = EmbeddedSimulator(simulator_config(self.config.sim)).start()
            base_url, location, sim_minimum = (
                self.simulator.url,
                "the embedded simulator",
                self.config.sim.cache_min_tokens,
            )
        anthropic = settings.protocol is Wire.ANTHROPIC
        # OpenAI caches prompts of 1,024 tokens and more: a shorter one is not a miss.
        official_minimum = 1024 if settings.key_required else None
        options = ProviderOptions(
            name=settings.name,
            base_url=f"{base_url}/v1" if settings.is_simulator and not anthropic else base_url,
            api_key=settings.api_key(),
            max_retries=settings.max_retries,
            timeout=settings.request_timeout,
            location=location,
            affinity_header=settings.affinity_header or None,
            # The simulator's Anthropic side has Anthropic's minimum; its OpenAI side, vLLM's (none).
            cache_min_tokens=(sim_minimum or settings.cache_min_tokens)
            if anthropic
            else settings.cache_min_tokens or official_minimum,
        )
        if anthropic:
            from hotloop.providers.anthropic import AnthropicProvider

            return AnthropicProvider(
                options,
                max_tokens=settings.max_tokens,
                thinking_budget=None if helper else settings.thinking_budget,
                cache_ttl=partial(self.lifetimes.of, settings),
                cache_breakpoints=settings.cache_breakpoints,
                cache_diagnostics=settings.cache_diagnostics,
            )
        routed = {"prompt_cache_key": settings.sends_prompt_cache_key, "user": settings.user}
        if settings.protocol is Wire.OPENAI_RESPONSES:
            return OpenAIResponsesProvider(
                options,
                **routed,
                reasoning_summary=settings.reasoning_summary,
                previous_response_id=settings.previous_response_id,
                max_tokens=settings.max_tokens,
            )
        return OpenAIChatProvider(options, **routed, max_tokens=settings.max_tokens)

    def open_session_log(
        self, provider: Provider, workspace: Path, system: str, session_id: str | None = None
    ) -> SessionLog:
        """A new session log that masks every configured key's value, or a one-line ConfigError."""
        folder = paths.sessions_dir()
        try:
            return SessionLog.create(
                folder,
                provider=provider.name,
                model=provider.model,
                workspace=workspace,
                system=system,
                base_url=provider.base_url,
                cost_per_hour=self.cost_per_hour(provider),
                secrets_to_mask=self.config.secrets(),
                session_id=session_id,
            )
        except OSError as error:
            raise ConfigError(f"cannot create a session log in {folder}: {error.strerror}") from None

    async def learn_from_past(self, predictor: Predictor, workspace: Path) -> None:
        """Teach a prefetch predictor what earlier sessions in this workspace did (off the event loop)."""
        from hotloop.sessions.store import past_events

        for events in await asyncio.to_thread(past_events, paths.sessions_dir(), workspace):
            predictor.learn_from(events)

    async def served(self, settings: ProviderSettings) -> list[str] | None:
        """The models a provider's server lists, asked until it answers; None when it can't say (no answer, no key)."""
        key = (settings.name, settings.base_url)
        if key not in self._served:
            listing = await self.probe(settings)
            if not isinstance(listing, list):
                return None
            self._served[key] = listing
        return self._served[key]

    async def fit_tiers(self, target: Target) -> str | None:
        """Tiers (and so titles, summaries and auto's classifier) only on models the session's server lists.

        Returns what to say when a tier moved: `fast = balanced = strong = MODEL` on a one-model server.
        """
        settings = target.settings
        served = await self.served(settings)
        if not served:
            return None  # a server that can't say what it serves; the first request will
        self.config, moved = self.config.fitted_to(settings.name, served, target.model)
        if not moved:
            return None
        model = self.config.tiers[next(iter(moved))].model
        same = [t.name for t in self.config.tiers.values() if (t.provider, t.model) == (settings.name, model)]
        where = settings.base_url or settings.name
        if len(served) == 1:
            return f"{' = '.join(same)} = {short_model(model)}: the only model {where} serves"
        unlisted = ", ".join(sorted(set(moved.values())))
        return (
            f"{' = '.join(same)} = {short_model(model)}: {where} doesn't serve {unlisted}; "
            f"name its models in the config's [tiers] (models: {', '.join(map(short_model, served))})"
        )

    async def probe(self, settings: ProviderSettings) -> list[str] | str:
        """The models a provider serves, or why it can't be used (missing key, unreachable)."""
        if settings.key_required and not settings.api_key():
            return f"missing API key: set {settings.api_key_env}"
        if settings.is_simulator:
            # In-process and always there: asking it would only load an SDK while the user works.
            return list(SimConfig().models)
        provider = await self._provider(settings)
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

    @property
    def mcp(self) -> McpBridge | None:
        """The MCP servers' bridge, if the session has any server."""
        return self._bridge

    async def aclose(self) -> None:
        if self._bridge is not None:
            await self._bridge.aclose()
        discoveries = list(self._discoveries.values())
        for discovery in discoveries:
            discovery.cancel()
        # Ended before the clients close: one between two of its requests would send the next on a closed client.
        await asyncio.gather(*discoveries, *self._building.values(), return_exceptions=True)
        for provider in [*self._providers.values(), *self._helpers.values()]:
            await provider.aclose()
        if self.simulator is not None:
            self.simulator.stop()


def simulator_config(sim: SimSettings) -> SimConfig:
    """The simulator the `[sim]` settings describe: the embedded one's, and `hotloop sim serve`'s from its flags."""
    try:
        scenario = load_scenario(sim.scenario) if sim.scenario else ()
    except ScenarioError as error:
        raise ConfigError(str(error)) from None
    return SimConfig(
        cache_blocks=sim.cache_blocks,
        scenario=scenario,
        cache_min_tokens=sim.cache_min_tokens,
        max_model_len=sim.max_model_len,
        max_running=sim.max_running,
        scheduling=sim.scheduling_policy,
        prompt_tokens_details=sim.prompt_tokens_details,
        batch_slowdown=sim.batch_slowdown,
    ).with_latency(
        ttft=sim.ttft_ms / 1000 if sim.ttft_ms is not None else None,
        prefill_per_token=sim.prefill_us_per_token / 1e6 if sim.prefill_us_per_token is not None else None,
        decode_per_token=sim.decode_ms_per_token / 1000 if sim.decode_ms_per_token is not None else None,
    )


async def _warm(provider: Provider) -> None:
    """Open the keep-alive connection before the first request needs it; any answer will do."""
    with contextlib.suppress(ProviderError, TimeoutError):  # the first request will say what is wrong
        await asyncio.wait_for(provider.fetch(provider.base_url), PROBE_TIMEOUT)


def _share_server(main: Provider, helper: Provider) -> None:
    """What discovery found of the main provider's server, for the helper on it (its window caps the answer)."""
    if isinstance(helper, SdkProvider) and isinstance(main, SdkProvider):
        helper.server = main.server
    if isinstance(helper, OpenAIChatProvider) and isinstance(main, OpenAIChatProvider):
        helper.send_priority = main.send_priority
