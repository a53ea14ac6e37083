"""The suite's set-up: the whole suite on every core; per test a private config and data folder, no start
pre-warm, and the embedded simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hotloop.core import prewarm
from hotloop.sim.embedded import EmbeddedSimulator

from support import KEY_VARIABLES, start_sim


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads these options
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`pytest` with no paths runs the suite on every core, in worker processes (pytest-xdist); named files or
    tests run in one process, where `-s` and `--pdb` work. `-n` on the command line decides either way."""
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    worker = hasattr(config, "workerinput")  # a worker is started with the suite's arguments: it must not fork again
    if whole_suite and not worker and getattr(config.option, "numprocesses", 0) is None:
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "worksteal"  # a worker that runs out takes tests from the other: the slow ones vary


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


@pytest.fixture(autouse=True)
def no_start_prewarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's start and switch pre-warms wait past any test's timeout, unless a test sets its own
    `prewarmer.delay` (test_prewarm.py): their 1-second timer would race what a test watches on a loaded machine
    (the screen, the simulator's requests, the totals, the log)."""
    monkeypatch.setattr(prewarm, "DELAY", 3600.0)


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
