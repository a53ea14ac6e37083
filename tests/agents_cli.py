"""The real agent CLIs, Claude Code, Codex and opencode, for tests that run them: where they are (HOTLOOP_AGENTS_DIR, by
default /work/agents/node_modules/.bin, then PATH; a skip saying what to install where they aren't), and the
environment that points each at a server with a HOME of its own, so nothing of the user's is read or written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

AGENTS_DIR = Path(os.environ.get("HOTLOOP_AGENTS_DIR", "/work/agents/node_modules/.bin"))
PACKAGES = {
    "claude": "@anthropic-ai/claude-code@2.1.332",
    "codex": "@openai/codex@0.171.0",
    "opencode": "opencode-ai@1.18.33",
    # 20.0.26 ships no linux-x64 binary: npm installs it, and it refuses to run.
    "ccusage": "ccusage@20.0.24 @ccusage/ccusage-linux-x64@20.0.24",
}


def cli(name: str) -> str:
    """The CLI's path, or a skip saying how to get it."""
    local = AGENTS_DIR / name
    found = str(local) if os.access(local, os.X_OK) else shutil.which(name)
    if found is None:
        pytest.skip(f"needs {name} from npm: npm install --prefix /work/agents {PACKAGES[name]}")
    return found


def claude_env(home: Path) -> dict[str, str]:
    """Claude Code's environment as interop.md gives it, but for ANTHROPIC_BASE_URL (the caller's)."""
    return {
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-sim-not-a-key",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "sim-fast",  # its helper requests, if any, go to a model the sim has
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def codex_env(home: Path, base_url: str) -> dict[str, str]:
    """Codex's environment: a CODEX_HOME whose config.toml sends it to `base_url` (…/v1) over Responses. Its
    built-in OpenAI provider ignores OPENAI_BASE_URL (interop.md), so the address must be in the file."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "sim-fast"\nmodel_provider = "sim"\n\n[model_providers.sim]\nname = "hotloop sim"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "SIM_API_KEY"\n'
    )
    return {"HOME": str(home), "CODEX_HOME": str(codex_home), "SIM_API_KEY": "sk-sim-not-a-key"}


def opencode_env(home: Path, base_url: str) -> dict[str, str]:
    """opencode's environment: its config file in `home` sends it to `base_url` (…/v1, the AI SDK's form) through its
    Anthropic provider, with sim-fast for its title requests too; every XDG folder under `home`, and no update or
    model-catalogue fetch."""
    config = home / ".config" / "opencode"
    config.mkdir(parents=True)
    provider = {"options": {"baseURL": base_url, "apiKey": "sk-ant-sim-not-a-key"}, "models": {"sim-fast": {}}}
    settings = {"provider": {"anthropic": provider}, "model": "anthropic/sim-fast", "small_model": "anthropic/sim-fast"}
    (config / "opencode.json").write_text(json.dumps(settings))
    folders = {"CONFIG": ".config", "DATA": ".local/share", "STATE": ".local/state", "CACHE": ".cache"}
    return {
        "HOME": str(home),
        **{f"XDG_{name}_HOME": str(home / folder) for name, folder in folders.items()},
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }
