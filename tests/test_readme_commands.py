"""The README's two commands are the truth: CI runs the test command exactly as the README gives it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The shell blocks of the README's Quick start: the install-and-run command, then the test command."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    quick = readme[start : readme.index("\n## ", start + 1)]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quick, re.DOTALL)]


def test_ci_runs_the_readmes_test_command_as_written() -> None:
    install, tests = readme_commands()
    assert install.endswith(".venv/bin/hotloop") and tests.endswith("-m pytest")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci  # a line of its own, not a paraphrase


def test_the_test_command_installs_what_every_test_needs() -> None:
    """`.[test]` alone: tests/test_architecture.py runs lint-imports, so the test extra brings import-linter, and
    the suite's workers (tests/conftest.py) come with pytest-xdist."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    test_extra = pyproject[pyproject.index("test = [") : pyproject.index("]", pyproject.index("test = ["))]
    assert "import-linter" in test_extra and "pytest-xdist" in test_extra


def test_the_run_under_load_is_the_readmes_test_command() -> None:
    """`.ci/under-load` runs the suite as the README's command does, beside its busy loops: no option of its own."""
    _, tests = readme_commands()
    script = [line.strip() for line in (ROOT / ".ci" / "under-load").read_text().splitlines()]
    assert tests.split(" && ")[-1] in script
