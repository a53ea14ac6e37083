"""One meaning per word: the server panel's figures are the server's, named as such, and it names the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotloop.core.session import SessionOptions
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.status_bar import StatusBar

from tui_support import idle, running_app, send, wait_until, write_config


@pytest.mark.parametrize(
    "provider",
    [
        "sim",
        "sim-responses",
        "sim-anthropic",
    ],
)
async def test_the_panel_names_the_simulator_and_calls_its_hit_rate_the_servers(
    isolated_home: Path, provider: str
) -> None:
    """On every protocol the panel says it found hotloop's simulator (not vLLM), and its hit rate is the server's:
    labelled so, over the last minute and since start, never "session", which is the status bar's word."""
    write_config(isolated_home)
    async with running_app(size=(130, 36), options=SessionOptions(provider=provider)) as (app, pilot):
        await send(app, pilot, "list the files")
        await idle(app, pilot)
        await wait_until(lambda: bool(app.query(ServerPanel)) and app.query_one(ServerPanel).report is not None)
        panel = app.query_one(ServerPanel)
        await wait_until(lambda: panel.report is not None and panel.report.stats is not None)
        lines = str(panel.render()).splitlines()
        assert lines[0].startswith("hotloop's simulator")
        assert "server hit rate" in lines
        assert any(line.startswith("  last 1 min") for line in lines)
        assert any(line.startswith("  since start") for line in lines)
        assert not any("session" in line for line in lines)
        assert "cache hit" in str(app.main.query_one(StatusBar).render())
