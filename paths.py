"""Where hotloop keeps its files. `HOTLOOP_CONFIG` and `HOTLOOP_DATA_DIR` override the platform defaults."""

from __future__ import annotations

import os
from pathlib import Path


def config_file() -> Path:
    override = os.environ.get("HOTLOOP_CONFIG")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_config_path

    return user_config_path("hotloop") / "config.toml"


def data_dir() -> Path:
    override = os.environ.get("HOTLOOP_DATA_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_data_path

    return user_data_path("hotloop")


def sessions_dir() -> Path:
    return data_dir() / "sessions"
