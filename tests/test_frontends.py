"""`hotloop run` and the app are two shells on one session core: the same options send the same bytes."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotloop.core.session import SessionOptions
from hotloop.headless.run import run
from hotloop.sim.embedded import EmbeddedSimulator

from support import start_sim
from tui_support import idle, running_app, send

MCP_SERVER = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).parent / 'mcp_server.py'))}"


@pytest.fixture
def server(isolated_home: Path) -> Iterator[EmbeddedSimulator]:
    """A simulator outside hotloop's process, configured as the default provider, with titles off."""
    simulator = start_sim()
    (isolated_home / "config.toml").write_text(
        'default_provider = "local"\n[routing]\ntitles = false\n'
        f'[providers.local]\nkind = "openai"\nbase_url = "{simulator.base_url}"\nmodels = ["sim-balanced"]\n'
    )
    yield simulator
    simulator.stop()


def chat_requests(server: EmbeddedSimulator) -> list[bytes]:
    return [request.body for request in server.server.requests if request.path == "/v1/chat/completions"]


async def test_both_frontends_send_byte_identical_first_requests(server: EmbeddedSimulator, tmp_path: Path) -> None:
    """System file, MCP server and step cap given the same way to each: the first request is the same bytes.

    The tool list is final before the first prompt goes out, MCP tools included, so it can't
    change between the first request and the next (which would miss the prefix cache).
    """
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    rules = tmp_path / "rules.md"
    rules.write_text("Answer in French.")
    options = SessionOptions(system=rules.read_text(), mcp=(MCP_SERVER,), max_steps=3, workspace=workspace)

    assert await run(options, ["read notes.txt"]) == 0
    headless = chat_requests(server)
    async with running_app(options=options) as (app, pilot):
        await send(app, pilot, "read notes.txt")
        await idle(app, pilot)
    from_app = chat_requests(server)[len(headless) :]

    assert headless and from_app
    assert from_app[0] == headless[0]
    first = json.loads(headless[0])
    tools = [tool["function"]["name"] for tool in first["tools"]]
    assert {"add", "getenv", "read_file"} <= set(tools)  # the MCP server's and the built-ins, in one sorted list
    assert tools == sorted(tools)
    assert first["messages"][0]["content"].endswith("Answer in French.")
    assert len(headless) == len(from_app) == 2  # the same turn: a read, then the answer
