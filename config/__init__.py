"""hotloop's configuration: a TOML file with providers, their models, the simulator and MCP servers.

Each setting is declared once, with its type, default and limits, in `settings`' Structs; msgspec
checks a file against them and refuses a key they don't declare. API keys never live in the file.
A provider names the environment variable that holds its key (`api_key_env`), and the key is read
from the environment when the provider is used. Every problem with the file is reported as one
line naming the file and the setting.

`settings` holds the Structs and `Config`, `choice` turns what the user picked into a provider and
a model, `loader` reads and checks the file, and `toml_writer` writes a config back out (`hotloop
config`). Callers import from here.

It may import `sessions`, `agent`, `providers` and the top-level modules; never `core`, a frontend
or Textual.
"""

from hotloop.config.choice import Choice, Target, resolve
from hotloop.config.loader import load_config
from hotloop.config.settings import (
    ANTHROPIC_URL,
    AUTO_TIER,
    BUILTIN_PROVIDERS,
    DEFAULT_KEY_ENVS,
    OPENAI_BASE_URL,
    TIER_NAMES,
    CacheSettings,
    Config,
    ConfigError,
    ContextSettings,
    KeepaliveSettings,
    LatencySettings,
    ProviderSettings,
    RoutingSettings,
    SimSettings,
    TelemetrySettings,
    Tier,
)

__all__ = [
    "ANTHROPIC_URL",
    "AUTO_TIER",
    "BUILTIN_PROVIDERS",
    "DEFAULT_KEY_ENVS",
    "OPENAI_BASE_URL",
    "TIER_NAMES",
    "CacheSettings",
    "Choice",
    "Config",
    "ConfigError",
    "ContextSettings",
    "KeepaliveSettings",
    "LatencySettings",
    "ProviderSettings",
    "RoutingSettings",
    "SimSettings",
    "Target",
    "TelemetrySettings",
    "Tier",
    "load_config",
    "resolve",
]
