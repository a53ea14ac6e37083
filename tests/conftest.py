"""Shared fixtures: a private config and data folder per test, and the embedded simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hotloop.sim.embedded import EmbeddedSimulator

from support import KEY_VARIABLES, start_sim


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own config path and data folder, and no provider keys."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOTLOOP_CONFIG", str(home / "config.toml"))
    monkeypatch.setenv("HOTLOOP_DATA_DIR", str(home / "data"))
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def sim() -> Iterator[EmbeddedSimulator]:
    """The simulator with every latency at zero and a cold cache."""
    simulator = start_sim()
    yield simulator
    simulator.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A small project for the agent's tools to read and grep."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("# Demo\n\nTODO: write the docs.\n")
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    (root / "notes.txt").write_text("TODO: more tests\n")
    return root
