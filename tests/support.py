"""Helpers shared by the tests: simulators, providers, agents and an event recorder."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from hotloop.agent.events import AgentEvent
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import Tool, ToolRegistry
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.sim.engine import NO_LATENCY, LatencyProfile, SimConfig
from hotloop.providers.sim.model import load_scenario
from hotloop.providers.sim.server import EmbeddedSimulator

FIXTURES = Path(__file__).parent / "fixtures"
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")


def start_sim(config: SimConfig | None = None, **latency: float) -> EmbeddedSimulator:
    config = config or SimConfig()
    config = config.with_latency(**{**vars(NO_LATENCY), **latency})
    return EmbeddedSimulator(config).start()


def scenario_file(tmp_path: Path, steps: list[dict]) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(steps))
    return path


def sim_with_scenario(tmp_path: Path, steps: list[dict], profile: LatencyProfile = NO_LATENCY) -> EmbeddedSimulator:
    config = SimConfig(scenario=load_scenario(scenario_file(tmp_path, steps)))
    return EmbeddedSimulator(config.with_latency(**vars(profile))).start()


def provider_for(sim: EmbeddedSimulator, model: str = "sim-balanced") -> OpenAIChatProvider:
    return OpenAIChatProvider(name="sim", model=model, base_url=sim.base_url, max_retries=0)


class Recorder:
    """An event sink that keeps everything, for assertions."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def make_agent(
    sim: EmbeddedSimulator,
    workspace: Path,
    tools: list[Tool] | None = None,
    registry: ToolRegistry | None = None,
    **options: object,
) -> tuple[Agent, Recorder]:
    """An agent on the simulator with the built-ins plus `tools`, or with `registry` as given."""
    recorder = Recorder()
    registry = registry or ToolRegistry(builtin_tools() + (tools or []))
    agent = Agent(provider_for(sim), registry, emit=recorder, workspace=workspace, **options)  # type: ignore[arg-type]
    return agent, recorder


async def serve_events(events: list[bytes], route: str) -> AsyncIterator[str]:
    """A one-route server that streams `events` at `route`, one write each, and yields its `/v1` base URL."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(route, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()
