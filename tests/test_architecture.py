"""The layers depend one way (tui → sessions → agent → providers), and the core never loads Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = (
    "hotloop.cli",
    "hotloop.headless.run",
    "hotloop.core.runtime",
    "hotloop.core.resumption",
    "hotloop.headless.session_commands",
)
FORBIDDEN = {
    "providers": ("hotloop.agent", "hotloop.sessions", "hotloop.tui", "hotloop.config", *CORE),
    "agent": ("hotloop.sessions", "hotloop.tui", "hotloop.config", *CORE),
    "sessions": ("hotloop.tui", *CORE),
}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_only_import_downwards(layer: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for name in imported_modules(path)
        if name.startswith(FORBIDDEN[layer])
    ]
    assert offenders == []


def test_the_core_and_the_headless_cli_never_load_textual() -> None:
    code = (
        "import sys, hotloop.agent.loop, hotloop.sessions.log, hotloop.sessions.store, hotloop.sessions.resume, "
        "hotloop.sessions.replay, hotloop.sessions.export, hotloop.headless.run, hotloop.core.runtime, hotloop.core.resumption, "
        "hotloop.headless.session_commands, hotloop.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_version_imports_almost_nothing() -> None:
    code = (
        "import sys; sys.argv = ['hotloop', '--version']\ntry:\n    import hotloop.cli as c; c.main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'aiohttp', 'mcp', 'rich', 'msgspec')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
