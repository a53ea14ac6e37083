"""Reading the config file: TOML checked against the settings' Structs, every problem one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec
from msgspec import Struct, structs

from hotloop import paths
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.config.settings import (
    BUILTIN_PROVIDERS,
    DEFAULT_TIERS,
    MIN_THINKING_BUDGET,
    NOT_IN_FILE,
    TIER_NAMES,
    Config,
    ConfigError,
    ProviderSettings,
    SimSettings,
    Tier,
)
from hotloop.nesting import decoded
from hotloop.providers.anthropic import BREAKPOINT_LIMIT
from hotloop.providers.base import DEFAULT_MAX_TOKENS
from hotloop.secret_policy import is_secret_name
from hotloop.struct_errors import explained, known_keys


def load_config(path: Path | None = None) -> Config:
    """The configuration at `path` (default: the user config file); defaults if there is no file."""
    path = path or paths.config_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config(path=path, loaded=False)
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text") from None
    try:
        data = decoded(_toml_table, text, "toml")
    except msgspec.DecodeError as error:
        raise ConfigError(f"invalid TOML in {path}: {error}") from None
    return _Loader(path).config(data)


_S = TypeVar("_S", bound=Struct)


class _Loader:
    """Checks the parsed file against the Structs, naming the file and the setting in every error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warnings: list[str] = []

    def fail(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"config {self.path}: {where} {problem}")

    def config(self, data: dict[str, Any]) -> Config:
        top = self.table(data, "", Config)
        providers = dict(BUILTIN_PROVIDERS)
        for name, raw in self.named(top, "providers").items():
            providers[name] = self.provider(name, raw)
        tiers = dict(DEFAULT_TIERS)
        for name, raw in self.named(top, "tiers").items():
            tiers[name] = self.tier(name, raw, providers)
        servers = tuple(self.mcp_server(name, raw) for name, raw in self.named(top, "mcp").items())
        given = {**top, "path": self.path, "loaded": True, "providers": providers, "tiers": tiers, "mcp": servers}
        config = self.convert(given, Config, "")
        self.shell_env(config)
        if config.default_provider not in providers:
            raise self.fail(
                "default_provider",
                f"names an unknown provider {config.default_provider!r} (configured: {', '.join(sorted(providers))})",
            )
        return structs.replace(config, sim=self.located(config.sim), warnings=tuple(self.warnings))

    def table(self, value: Any, where: str, kind: type[Struct]) -> dict[str, Any]:
        """`value` as a table for `kind`; a key the program fills in (a name, the path) is no setting."""
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a table (got {value!r})")
        for key in value:
            if key in NOT_IN_FILE:
                setting = f"{where}.{key}" if where else key
                raise self.fail(setting, f"is not a setting (known: {', '.join(known_keys(kind, NOT_IN_FILE))})")
        return value

    def named(self, top: dict[str, Any], section: str) -> dict[str, Any]:
        """A table of tables keyed by user-chosen names, such as [providers.NAME]."""
        value = top.get(section, {})
        if not isinstance(value, dict):
            raise self.fail(section, f"must be a table (got {value!r})")
        return value

    def convert(self, given: dict[str, Any], kind: type[_S], where: str) -> _S:
        try:
            return msgspec.convert(given, kind, dec_hook=_decode_path)
        except msgspec.ValidationError as error:
            raise self.fail(*explained(error, given, kind, where, filled_in=NOT_IN_FILE)) from None

    def provider(self, name: str, raw: Any) -> ProviderSettings:
        """[providers.NAME]: a built-in's settings changed, or a new provider (one of another kind starts afresh)."""
        where = f"providers.{name}"
        if isinstance(raw, dict) and "api_key" in raw:
            raise self.fail(
                f"{where}.api_key",
                "is not allowed: keep keys in the environment and name the variable with api_key_env",
            )
        table = self.table(raw, where, ProviderSettings)
        builtin = BUILTIN_PROVIDERS.get(name)
        base = structs.asdict(builtin) if builtin and table.get("kind", builtin.kind) == builtin.kind else {}
        return self.checked(self.convert({**base, **table, "name": name}, ProviderSettings, where), where)

    def checked(self, settings: ProviderSettings, where: str) -> ProviderSettings:
        """Settings that make sense together; a breakpoint count above the API's limit is capped."""
        budget = settings.thinking_budget
        if budget is not None and not MIN_THINKING_BUDGET <= budget < (settings.max_tokens or DEFAULT_MAX_TOKENS):
            raise self.fail(
                f"{where}.thinking_budget",
                f"must be at least {MIN_THINKING_BUDGET} and less than max_tokens (default {DEFAULT_MAX_TOKENS})",
            )
        if settings.cache_breakpoints > BREAKPOINT_LIMIT:
            self.warnings.append(
                f"config {self.path}: {where}.cache_breakpoints = {settings.cache_breakpoints} is more than the "
                f"{BREAKPOINT_LIMIT} Anthropic allows; using {BREAKPOINT_LIMIT}"
            )
            settings = structs.replace(settings, cache_breakpoints=BREAKPOINT_LIMIT)
        return settings

    def shell_env(self, config: Config) -> None:
        """`[shell] env` never names a key hotloop holds; a secret-named variable is passed, with a warning."""
        if keys := sorted(set(config.shell.env) & config.key_env_names()):
            raise self.fail(
                "shell.env", f"must not name {', '.join(keys)}: commands never get hotloop's provider or MCP keys"
            )
        if named := [name for name in config.shell.env if is_secret_name(name)]:
            self.warnings.append(
                f"config {self.path}: shell.env passes {', '.join(named)} to every command, and so maybe to the "
                "model (named like a secret; the session log masks its value)"
            )

    def tier(self, name: str, raw: Any, providers: dict[str, ProviderSettings]) -> Tier:
        where = f"tiers.{name}"
        if name not in TIER_NAMES:
            raise self.fail(where, f"is not a tier (tiers: {', '.join(TIER_NAMES)})")
        tier = self.convert({**self.table(raw, where, Tier), "name": name}, Tier, where)
        if tier.provider not in providers:
            raise self.fail(f"{where}.provider", f"names an unknown provider {tier.provider!r}")
        return tier

    def mcp_server(self, name: str, raw: Any) -> McpServer:
        where = f"mcp.{name}"
        return self.convert({**self.table(raw, where, McpServer), "name": name}, McpServer, where)

    def located(self, sim: SimSettings) -> SimSettings:
        """A scenario named relative to the config file's folder, found from anywhere."""
        if sim.scenario is None:
            return sim
        return structs.replace(sim, scenario=self.path.parent / sim.scenario.expanduser())


def _toml_table(text: str) -> dict[str, Any]:
    return msgspec.toml.decode(text, type=dict[str, Any])


def _decode_path(kind: type, value: Any) -> Any:
    """A path is a string in the file (msgspec has no Path type of its own)."""
    if kind is Path and isinstance(value, str | Path):
        return Path(value)
    raise TypeError(f"Expected `str`, got `{type(value).__name__}`")  # msgspec's wording, which the explainer reads
