"""`hotloop import` against ccusage on the same files: a real Claude Code and a real Codex session (two runs each,
recorded on this machine against the simulator serving priced model names; tests/fixtures/PROVENANCE.md).

The token counts agree to the token. The dollars agree for Claude Code; for Codex they differ, and hotloop's is
the right one here: the rollout names the provider that served it (`sim`, a local server), and hotloop prices only
OpenAI's own API at OpenAI's list prices, while ccusage prices every `gpt-5` as OpenAI bills it. Priced as OpenAI's
API, hotloop's figure for the same tokens is ccusage's to the cent's millionth. The README explains both.
ccusage's figures are its recorded output; where ccusage is installed, it is run again on the files and must still
say the same.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import StepFinished
from hotloop.agent.pricing import price_step
from hotloop.providers.transport import OPENAI_URL
from hotloop.sessions.imports.sources import expand, import_files
from hotloop.sessions.store import LoggedSession, read_session, summarize

from agents_cli import cli

FIXTURES = Path(__file__).parent / "fixtures" / "ccusage"
pytestmark = pytest.mark.timeout(120)


def imported(tmp_path: Path, agent: str) -> tuple[LoggedSession, Path]:
    report = import_files(expand([FIXTURES / agent]), tmp_path / "sessions")
    assert not report.problems
    ((_, written),) = report.written
    return read_session(written.path), written.path


def totals(session: LoggedSession) -> dict[str, int]:
    """ccusage's four counts from hotloop's steps: uncached input, cache writes, cache reads, output."""
    usages = [event.usage for event in session.events if isinstance(event, StepFinished) and event.usage]
    return {
        "inputTokens": sum(u.uncached or 0 for u in usages),
        "cacheCreationTokens": sum(u.cache_write or 0 for u in usages),
        "cacheReadTokens": sum(u.cache_read or 0 for u in usages),
        "outputTokens": sum(u.output or 0 for u in usages),
    }


def recorded(agent: str) -> dict[str, Any]:
    (session,) = json.loads((FIXTURES / f"ccusage_{agent}_session.json").read_text())["sessions"]
    assert isinstance(session, dict)
    return session


def test_claude_codes_tokens_and_dollars_are_ccusages(tmp_path: Path) -> None:
    session, path = imported(tmp_path, "claude")
    ccusage = recorded("claude")
    assert totals(session) == {key: ccusage[key] for key in totals(session)}
    costs = summarize(path).costs
    assert costs is not None and costs.unknown == 0
    assert costs.known == pytest.approx(Decimal(str(ccusage["totalCost"])), abs=Decimal("1e-9"))


def test_codexs_tokens_are_ccusages_and_its_dollars_are_the_servers(tmp_path: Path) -> None:
    session, path = imported(tmp_path, "codex")
    ccusage = recorded("codex")
    assert totals(session) == {key: ccusage[key] for key in totals(session)}
    costs = summarize(path).costs
    assert costs is not None and costs.priced == 0  # served by `sim`, not OpenAI: no list price applies
    steps = [event for event in session.events if isinstance(event, StepFinished)]
    as_openai = [price_step(step.usage, "gpt-5", OPENAI_URL, at=step.ts) for step in steps]
    assert all(cost is not None for cost in as_openai)
    total = sum((cost.total for cost in as_openai if cost is not None), Decimal(0))
    assert total == pytest.approx(Decimal(str(ccusage["costUSD"])), abs=Decimal("1e-9"))


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_ccusage_itself_still_says_what_was_recorded(tmp_path: Path, agent: str) -> None:
    """ccusage from npm, run on the same files as a home folder holds them."""
    ccusage = cli("ccusage")
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / agent, home / (".claude" if agent == "claude" else ".codex"))
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "PATH": "/usr/bin:/bin", "TZ": "UTC"}
    done = subprocess.run(
        [ccusage, agent, "session", "--json", "--offline"], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)["sessions"]
    keep = ("inputTokens", "cacheCreationTokens", "cacheReadTokens", "outputTokens", "totalCost", "costUSD")
    assert {k: v for k, v in session.items() if k in keep} == {k: v for k, v in recorded(agent).items() if k in keep}
