"""`hotloop run` with tools that act: nothing runs unasked, `--allow` runs only what matches, keys stay out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.cli import main


def scenario(home: Path, *steps: dict[str, Any]) -> None:
    (home / "steps.json").write_text(json.dumps(list(steps)))
    (home / "config.toml").write_text(
        f'[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\nscenario = "{home / "steps.json"}"\n'
        "[routing]\ntitles = false\n"
    )


def shell(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in commands]}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_a_call_no_one_approved_fails_the_run_in_one_line_naming_the_flag(
    here: Path, isolated_home: Path, capsys
) -> None:
    scenario(isolated_home, shell("touch made"), {"text": "done"})
    assert main(["run", "make a file"]) == 1
    err = capsys.readouterr().err
    assert not (here / "made").exists()
    refused = [line for line in err.splitlines() if "needs approval" in line]
    flag = "--allow 'run_shell:touch made' or --yes"
    assert refused == [f"  ✗ run_shell 0.00 s · error: run_shell needs approval, which only {flag} gives here"]


def test_allow_runs_only_the_commands_that_match(here: Path, isolated_home: Path, capsys) -> None:
    scenario(isolated_home, shell("touch pytest-ran", "touch other-ran"), {"text": "done"})
    assert main(["run", "--allow", "run_shell:touch pytest*", "go"]) == 1  # the other call was refused
    assert (here / "pytest-ran").exists() and not (here / "other-ran").exists()
    assert "✓ run_shell allowed by rule run_shell:touch pytest*" in capsys.readouterr().err


def test_yes_runs_them_and_the_shell_never_sees_a_provider_key(
    here: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-seen-1234567890")
    monkeypatch.setenv("HOTLOOP_PLAIN", "visible")
    scenario(isolated_home, shell("env > env.txt"), {"text": "done"})
    assert main(["run", "--yes", "go"]) == 0
    env = (here / "env.txt").read_text()
    assert "HOTLOOP_PLAIN=visible" in env and "OPENAI_API_KEY" not in env and "sk-test" not in env


def test_read_only_offers_no_tool_that_acts(here: Path, isolated_home: Path, capsys) -> None:
    scenario(isolated_home, shell("touch made"), {"text": "done"})
    main(["run", "--read-only", "go"])
    assert not (here / "made").exists()
    assert "unknown tool 'run_shell'" in capsys.readouterr().err


def test_a_bad_rule_is_a_usage_error(isolated_home: Path, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["run", "--allow", "rm -rf /", "go"])
    assert done.value.code == 2 and "is not TOOL or TOOL:PATTERN" in capsys.readouterr().err
