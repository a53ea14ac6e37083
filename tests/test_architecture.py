"""The layers hold: import-linter's contracts (pyproject.toml) pass, and each one fails when broken.

Contracts are checked statically; four runtime checks stay here because no import graph can
see them: the headless core never loads Textual, the config loads nothing of the simulator but
its defaults, the event vocabulary loads almost nothing of hotloop, and `--version` loads almost nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SERVER, ALONE = "the simulator is a server", "the simulator stands alone"
ROOTS = "the root modules import nothing of hotloop"
# A planted import per contract: (module file, the line added, the contract it must break).
PLANTS = {
    "layers": ("providers/events.py", "from hotloop import config", "layers: cli > frontends"),
    "frontends": ("tui/fold.py", "import hotloop.headless.printer", "layers: cli > frontends"),
    "textual": ("sessions/store.py", "import textual", "Textual only in the TUI"),
    # Only the runtime and the CLI import the simulator; the config reads its defaults, nothing more.
    "simulator_in_the_agent": ("agent/loop.py", "from hotloop.sim import engine", SERVER),
    "simulator_in_a_protocol": ("providers/openai_responses.py", "from hotloop.sim.scenario import Faults", SERVER),
    "simulator_beside_the_runtime": ("core/routing.py", "import hotloop.sim.embedded", SERVER),
    "simulator_in_the_config": ("config/settings.py", "from hotloop.sim import engine", SERVER),
    # The simulator imports no package or module of hotloop.
    "package_in_the_simulator": ("sim/engine.py", "from hotloop.providers import events", ALONE),
    "module_in_the_simulator": ("sim/defaults.py", "from hotloop import paths", ALONE),
    # A root module imports no layer, and no other root module either.
    "layer_in_a_root_module": ("struct_errors.py", "from hotloop.providers import events", ROOTS),
    "root_module_in_a_root_module": ("paths.py", "from hotloop import nesting", ROOTS),
}


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the package copied to `tree` (as `tree/hotloop`), with the repository's contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """The package's source, copied, so a test can plant imports in it."""
    ignore = shutil.ignore_patterns(
        "tests", "benchmarks", "screenshots", "docs", ".*", "__pycache__", "*.svg", "*.egg-info"
    )
    shutil.copytree(ROOT, tmp_path / "hotloop", ignore=ignore)
    return tmp_path


def test_the_contracts_hold(package: Path) -> None:
    result = lint_imports(package)
    assert result.returncode == 0, result.stdout
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_planting_an_import_that_breaks_a_contract_fails_it(package: Path, plant: str) -> None:
    module, line, contract = PLANTS[plant]
    path = package / "hotloop" / module
    path.write_text(path.read_text() + f"\n{line}\n")
    result = lint_imports(package)
    assert result.returncode != 0
    # A contract's row reads "NAME BROKEN", maybe followed by "(1 ignored import)".
    broken = [row for row in result.stdout.splitlines() if "BROKEN" in row and not row.startswith("Contracts:")]
    assert [row.startswith(contract) for row in broken] == [True], broken


def test_the_core_and_the_headless_cli_never_load_textual() -> None:
    code = (
        "import sys, hotloop.agent.loop, hotloop.sessions.log, hotloop.sessions.store, hotloop.sessions.resume, "
        "hotloop.sessions.replay, hotloop.sessions.export, hotloop.headless.run, hotloop.core.session, "
        "hotloop.core.runtime, hotloop.core.resumption, hotloop.cli.session_commands, hotloop.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_config_loads_only_the_simulators_defaults() -> None:
    """The one import of the simulator the config may make (pyproject's `ignore_imports`) loads constants, no server."""
    code = "import sys, hotloop.config; print(sorted(m for m in sys.modules if m.split('.')[:2] == ['hotloop', 'sim']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['hotloop.sim', 'hotloop.sim.defaults']"


def test_the_event_vocabulary_loads_at_most_five_hotloop_modules() -> None:
    """Anything that reads a session log can decode its events without the cache analysis or a provider.

    Packages (`hotloop.agent`, whose `__init__` is a docstring) are not counted; modules are.
    """
    code = (
        "import sys, hotloop.agent.events\n"
        "print(sorted(n for n, m in sys.modules.items() if n.startswith('hotloop.') and not hasattr(m, '__path__')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = result.stdout.strip()
    assert "hotloop.agent.events" in loaded and "cache_explainer" not in loaded and "anthropic" not in loaded
    assert loaded.count("hotloop.") <= 5, loaded


def test_version_imports_almost_nothing() -> None:
    code = (
        "import sys; sys.argv = ['hotloop', '--version']\n"
        "try:\n    import hotloop.cli as c; c.main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('openai', 'aiohttp', 'mcp', 'rich', 'msgspec')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
