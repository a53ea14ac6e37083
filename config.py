"""hotloop's configuration: a TOML file with providers, their models, the simulator and MCP servers.

API keys never live in the file. A provider names the environment variable that holds its
key (`api_key_env`), and the key is read from the environment when the provider is used.
Every problem with the file is reported as one line naming the file and the setting.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hotloop import InputError, paths
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.providers.errors import MissingApiKey

OPENAI_URL = "https://api.openai.com/v1"
ANTHROPIC_URL = "https://api.anthropic.com"
# openai: any OpenAI-compatible server; anthropic: any Anthropic-compatible one; sim and
# sim-anthropic: the embedded simulator, over each protocol.
KINDS = ("openai", "anthropic", "sim", "sim-anthropic")
DEFAULT_KEY_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
BREAKPOINT_LIMIT = 4
CACHE_TTLS = ("5m", "1h")


class ConfigError(InputError):
    """The configuration can't be used; `str(error)` is the one-line reason."""


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    models: tuple[str, ...] = ()
    default_model: str | None = None
    max_retries: int = 2
    max_tokens: int | None = None
    # Anthropic only: extended thinking, and prompt caching's breakpoints, TTL and minimum length.
    thinking_budget: int | None = None
    cache_breakpoints: int = BREAKPOINT_LIMIT
    cache_ttl: str = "5m"
    cache_min_tokens: int | None = None
    # OpenAI: route a session's requests to one cache with `prompt_cache_key` (default: on for api.openai.com).
    prompt_cache_key: bool | None = None

    @property
    def protocol(self) -> str:
        return "anthropic" if self.kind in ("anthropic", "sim-anthropic") else "openai"

    @property
    def is_simulator(self) -> bool:
        return self.kind.startswith("sim")

    @property
    def key_required(self) -> bool:
        """Whether this is OpenAI's or Anthropic's own API, which need a key (gateways and local servers may not)."""
        if self.kind == "openai":
            return (self.base_url or OPENAI_URL).rstrip("/") == OPENAI_URL
        return self.kind == "anthropic" and (self.base_url or ANTHROPIC_URL).rstrip("/") in (
            ANTHROPIC_URL,
            ANTHROPIC_URL + "/v1",
        )

    @property
    def sends_prompt_cache_key(self) -> bool:
        if self.prompt_cache_key is not None:
            return self.prompt_cache_key
        return self.kind == "openai" and self.key_required

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class SimSettings:
    ttft_ms: float | None = None
    prefill_us_per_token: float | None = None
    decode_ms_per_token: float | None = None
    scenario: Path | None = None
    cache_blocks: int = 16_384
    cache_min_tokens: int = 1024
    max_running: int | None = None
    # Unlike vLLM's default (fcfs), so that background requests' low priority shows out of the box.
    scheduling_policy: str = "priority"
    prompt_tokens_details: bool = True


@dataclass(frozen=True)
class Tier:
    """A named quality/speed level that maps to a provider and a model."""

    name: str
    provider: str
    model: str


TIER_NAMES = ("fast", "balanced", "strong")
DEFAULT_TIERS = {name: Tier(name, "sim", f"sim-{name}") for name in TIER_NAMES}
# Not a mapping but a policy: the fast tier classifies each turn, which then goes to a real tier.
AUTO_TIER = "auto"


@dataclass(frozen=True)
class LatencySettings:
    """The latency engine's switches; the benchmark turns each off to measure what it saves."""

    early_dispatch: bool = True  # start a tool call once its arguments are complete in the stream
    memo_ttl: float = 30.0  # seconds an identical read-only call reuses a result; 0 turns it off
    prefetch: bool = False  # run predicted read-only calls (of tools that allow it) while the model thinks


@dataclass(frozen=True)
class RoutingSettings:
    """Which tier does what besides the main agent, and the priority lanes."""

    helper_tier: str = "fast"  # titles, summaries and auto's classifier
    titles: bool = True
    summarize_over_tokens: int = 0  # 0: tool results enter the context whole
    auto_simple: str = "fast"
    auto_complex: str = "strong"
    lanes: bool = True
    max_background: int = 1


SIM_MODELS = ("sim-fast", "sim-balanced", "sim-strong")
BUILTIN_PROVIDERS = {
    "sim": ProviderSettings("sim", "sim", models=SIM_MODELS, default_model="sim-balanced"),
    "sim-anthropic": ProviderSettings(
        "sim-anthropic", "sim-anthropic", models=SIM_MODELS, default_model="sim-balanced"
    ),
    "openai": ProviderSettings("openai", "openai", OPENAI_URL, "OPENAI_API_KEY", default_model="gpt-5-mini"),
    "anthropic": ProviderSettings(
        "anthropic", "anthropic", ANTHROPIC_URL, "ANTHROPIC_API_KEY", default_model="claude-sonnet-4-5"
    ),
}


@dataclass(frozen=True)
class Config:
    path: Path
    loaded: bool
    default_provider: str = "sim"
    max_steps: int = 25
    tool_timeout: float = 120.0
    providers: dict[str, ProviderSettings] = field(default_factory=lambda: dict(BUILTIN_PROVIDERS))
    sim: SimSettings = SimSettings()
    mcp: tuple[McpServer, ...] = ()
    tiers: dict[str, Tier] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    routing: RoutingSettings = RoutingSettings()
    latency: LatencySettings = LatencySettings()
    warnings: tuple[str, ...] = ()  # settings that were adjusted to something usable

    def provider(self, name: str | None = None) -> ProviderSettings:
        name = name or self.default_provider
        if name not in self.providers:
            known = ", ".join(sorted(self.providers))
            raise ConfigError(f"unknown provider {name!r} (configured: {known})")
        return self.providers[name]

    def tier(self, name: str) -> Tier:
        """The tier `name`; `auto` starts on balanced until its first turn is classified."""
        if name == AUTO_TIER:
            name = "balanced"
        if name not in self.tiers:
            raise ConfigError(f"unknown tier {name!r} (tiers: {', '.join(self.tiers)}, {AUTO_TIER})")
        return self.tiers[name]

    def tier_of(self, provider: str, model: str) -> str | None:
        """The tier that names this provider and model, if any."""
        return next((t.name for t in self.tiers.values() if (t.provider, t.model) == (provider, model)), None)

    def pointed_at(self, choice: Choice) -> tuple[Config, Choice]:
        """With `--base-url`: the chosen provider moved to that server for the whole session, and the choice without it.

        Tiers left at their defaults follow it, model names unchanged, so `/tier fast` stays on the
        server the user named (a server that lacks the model says so when asked for it).
        """
        if not choice.base_url:
            return self, choice
        name = choice.provider or self.default_provider
        settings = self.provider(name)
        if settings.is_simulator:
            raise ConfigError(
                "--base-url does not apply to the embedded simulator; use --provider openai (or anthropic) --base-url URL"
            )
        # The configured models belong to the configured server; another server is asked what it serves.
        moved = replace(settings, base_url=choice.base_url, models=(), default_model=None)
        tiers = {
            tier.name: Tier(tier.name, name, tier.model) if tier == DEFAULT_TIERS.get(tier.name) else tier
            for tier in self.tiers.values()
        }
        config = replace(self, providers={**self.providers, name: moved}, tiers=tiers, default_provider=name)
        return config, replace(choice, base_url=None, provider=None if choice.tier else name)

    def key_env_names(self) -> set[str]:
        """Every environment variable that holds a provider key, configured or default."""
        return set(DEFAULT_KEY_ENVS) | {p.api_key_env for p in self.providers.values() if p.api_key_env}


def load_config(path: Path | None = None) -> Config:
    """The configuration at `path` (default: the user config file); defaults if there is no file."""
    path = path or paths.config_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config(path=path, loaded=False)
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"invalid TOML in {path}: {error}") from None
    return _Reader(path).config(data)


_TYPE_NAMES = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    list: "a list",
    dict: "a table",
    bool: "true or false",
}


class _Reader:
    """Validates the parsed TOML, naming the file and the setting in every error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warnings: list[str] = []

    def fail(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"config {self.path}: {where} {problem}")

    def table(self, value: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "must be a table")
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise self.fail(
                f"{where}.{unknown[0]}" if where else unknown[0], f"is not a setting (known: {', '.join(known)})"
            )
        return value

    def named_tables(self, value: Any, where: str) -> dict[str, Any]:
        """A table of tables keyed by user-chosen names, such as [providers.NAME]."""
        if not isinstance(value, dict):
            raise self.fail(where, "must be a table")
        return value

    def typed(
        self, table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None
    ) -> Any:
        value = table.get(key, default)
        if value is default:
            return value
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            expected = _TYPE_NAMES[kind if isinstance(kind, type) else kind[-1]]
            raise self.fail(f"{where}{key}", f"must be {expected} (got {value!r})")
        return value

    def config(self, data: dict[str, Any]) -> Config:
        top = self.table(
            data,
            "",
            ("default_provider", "max_steps", "tool_timeout", "providers", "sim", "mcp", "tiers", "routing", "latency"),
        )
        providers = dict(BUILTIN_PROVIDERS)
        for name, raw in self.named_tables(top.get("providers", {}), "providers").items():
            providers[name] = self.provider(name, raw, providers.get(name))
        default = self.typed(top, "default_provider", str, "", "sim")
        if default not in providers:
            raise self.fail(
                "default_provider",
                f"names an unknown provider {default!r} (configured: {', '.join(sorted(providers))})",
            )
        max_steps = self.typed(top, "max_steps", int, "", 25)
        timeout = self.typed(top, "tool_timeout", (int, float), "", 120.0)
        if max_steps < 1 or timeout <= 0:
            raise self.fail("max_steps" if max_steps < 1 else "tool_timeout", "must be positive")
        return Config(
            path=self.path,
            loaded=True,
            default_provider=default,
            max_steps=max_steps,
            tool_timeout=float(timeout),
            providers=providers,
            sim=self.sim(top.get("sim", {})),
            mcp=tuple(self.mcp_server(name, raw) for name, raw in self.named_tables(top.get("mcp", {}), "mcp").items()),
            tiers=self.tiers(top.get("tiers", {}), providers),
            routing=self.routing(top.get("routing", {})),
            latency=self.latency(top.get("latency", {})),
            warnings=tuple(self.warnings),
        )

    def provider(self, name: str, raw: Any, base: ProviderSettings | None) -> ProviderSettings:
        where = f"providers.{name}."
        if isinstance(raw, dict) and "api_key" in raw:
            raise self.fail(
                f"{where}api_key", "is not allowed: keep keys in the environment and name the variable with api_key_env"
            )
        known = (
            "kind",
            "base_url",
            "api_key_env",
            "models",
            "default_model",
            "max_retries",
            "max_tokens",
            "thinking_budget",
            "cache_breakpoints",
            "cache_ttl",
            "cache_min_tokens",
            "prompt_cache_key",
        )
        table = self.table(raw, where.rstrip("."), known)
        kind = self.typed(table, "kind", str, where, base.kind if base else None)
        if kind not in KINDS:
            raise self.fail(f"{where}kind", f"must be one of {', '.join(KINDS)} (got {kind!r})")
        models = self.typed(table, "models", list, where, None)
        if models is not None and not all(isinstance(m, str) and m for m in models):
            raise self.fail(f"{where}models", "must be a list of model names")
        settings = base if base is not None and base.kind == kind else ProviderSettings(name, kind)
        changes = {
            key: self.typed(table, key, str, where)
            for key in ("base_url", "api_key_env", "default_model")
            if key in table
        }
        if models is not None:
            changes["models"] = tuple(models)
        for key in ("max_retries", "max_tokens", "thinking_budget", "cache_breakpoints", "cache_min_tokens"):
            if key in table:
                changes[key] = self.typed(table, key, int, where)
        if "cache_ttl" in table:
            changes["cache_ttl"] = self.typed(table, "cache_ttl", str, where)
        if "prompt_cache_key" in table:
            changes["prompt_cache_key"] = self.typed(table, "prompt_cache_key", bool, where)
        return self.checked(replace(settings, **changes), where)

    def checked(self, settings: ProviderSettings, where: str) -> ProviderSettings:
        """Provider settings that make sense together; a breakpoint count above the API's limit is capped."""
        if settings.max_retries < 0 or any(
            value is not None and value < 1 for value in (settings.max_tokens, settings.cache_min_tokens)
        ):
            raise self.fail(where.rstrip("."), "max_retries, max_tokens and cache_min_tokens must be positive")
        if settings.cache_ttl not in CACHE_TTLS:
            raise self.fail(f"{where}cache_ttl", f"must be one of {', '.join(CACHE_TTLS)} (got {settings.cache_ttl!r})")
        if settings.cache_breakpoints < 0:
            raise self.fail(f"{where}cache_breakpoints", "must be 0 (no caching) or more")
        if settings.cache_breakpoints > BREAKPOINT_LIMIT:
            self.warnings.append(
                f"config {self.path}: {where}cache_breakpoints = {settings.cache_breakpoints} is more than the "
                f"{BREAKPOINT_LIMIT} Anthropic allows; using {BREAKPOINT_LIMIT}"
            )
            settings = replace(settings, cache_breakpoints=BREAKPOINT_LIMIT)
        budget = settings.thinking_budget
        if budget is not None and not 1024 <= budget < (settings.max_tokens or 8192):
            raise self.fail(f"{where}thinking_budget", "must be at least 1024 and less than max_tokens (default 8192)")
        return settings

    def latency(self, raw: Any) -> LatencySettings:
        table = self.table(raw, "latency", ("early_dispatch", "memo_ttl", "prefetch"))
        ttl = self.typed(table, "memo_ttl", (int, float), "latency.", 30.0)
        if ttl < 0:
            raise self.fail("latency.memo_ttl", "must be 0 (off) or more seconds")
        return LatencySettings(
            self.typed(table, "early_dispatch", bool, "latency.", True),
            float(ttl),
            self.typed(table, "prefetch", bool, "latency.", False),
        )

    def routing(self, raw: Any) -> RoutingSettings:
        known = (
            "helper_tier",
            "titles",
            "summarize_over_tokens",
            "auto_simple",
            "auto_complex",
            "lanes",
            "max_background",
        )
        table = self.table(raw, "routing", known)
        tiers = {key: self.typed(table, key, str, "routing.") for key in ("helper_tier", "auto_simple", "auto_complex")}
        for key, tier in tiers.items():
            if tier is not None and tier not in TIER_NAMES:
                raise self.fail(f"routing.{key}", f"must be one of {', '.join(TIER_NAMES)} (got {tier!r})")
        over = self.typed(table, "summarize_over_tokens", int, "routing.", 0)
        background = self.typed(table, "max_background", int, "routing.", 1)
        if over < 0 or background < 1:
            raise self.fail("routing", "summarize_over_tokens must be 0 (off) or more, and max_background at least 1")
        return RoutingSettings(
            **{key: tier for key, tier in tiers.items() if tier is not None},
            titles=self.typed(table, "titles", bool, "routing.", True),
            summarize_over_tokens=over,
            lanes=self.typed(table, "lanes", bool, "routing.", True),
            max_background=background,
        )

    def sim(self, raw: Any) -> SimSettings:
        known = (
            "ttft_ms",
            "prefill_us_per_token",
            "decode_ms_per_token",
            "scenario",
            "cache_blocks",
            "cache_min_tokens",
            "max_running",
            "scheduling_policy",
            "prompt_tokens_details",
        )
        table = self.table(raw, "sim", known)
        figures = {
            key: self.typed(table, key, (int, float), "sim.")
            for key in ("ttft_ms", "prefill_us_per_token", "decode_ms_per_token")
        }
        if any(value is not None and value < 0 for value in figures.values()):
            raise self.fail("sim", "latency figures must not be negative")
        scenario = self.typed(table, "scenario", str, "sim.")
        return SimSettings(
            **figures,
            scenario=(self.path.parent / Path(scenario).expanduser()) if scenario else None,
            cache_blocks=self.typed(table, "cache_blocks", int, "sim.", 16_384),
            cache_min_tokens=self.typed(table, "cache_min_tokens", int, "sim.", 1024),
            max_running=self._max_running(table),
            scheduling_policy=self._policy(table),
            prompt_tokens_details=self.typed(table, "prompt_tokens_details", bool, "sim.", True),
        )

    def _max_running(self, table: dict[str, Any]) -> int | None:
        value = self.typed(table, "max_running", int, "sim.")
        if value is not None and value < 1:
            raise self.fail("sim.max_running", "must be at least 1")
        return value

    def _policy(self, table: dict[str, Any]) -> str:
        policy = self.typed(table, "scheduling_policy", str, "sim.", "priority")
        if policy not in ("fcfs", "priority"):
            raise self.fail("sim.scheduling_policy", f"must be fcfs or priority (got {policy!r})")
        return policy

    def tiers(self, raw: Any, providers: dict[str, ProviderSettings]) -> dict[str, Tier]:
        tiers = dict(DEFAULT_TIERS)
        for name, value in self.named_tables(raw, "tiers").items():
            if name not in TIER_NAMES:
                raise self.fail(f"tiers.{name}", f"is not a tier (tiers: {', '.join(TIER_NAMES)})")
            table = self.table(value, f"tiers.{name}", ("provider", "model"))
            provider = self.typed(table, "provider", str, f"tiers.{name}.")
            model = self.typed(table, "model", str, f"tiers.{name}.")
            if provider not in providers:
                raise self.fail(f"tiers.{name}.provider", f"names an unknown provider {provider!r}")
            if not model:
                raise self.fail(f"tiers.{name}.model", "is required")
            tiers[name] = Tier(name, provider, model)
        return tiers

    def mcp_server(self, name: str, raw: Any) -> McpServer:
        where = f"mcp.{name}."
        table = self.table(raw, f"mcp.{name}", ("command", "args", "env"))
        command = self.typed(table, "command", str, where)
        if not command:
            raise self.fail(f"{where}command", "is required")
        args = self.typed(table, "args", list, where, [])
        env = self.typed(table, "env", dict, where, {})
        if not all(isinstance(a, str) for a in args) or not all(isinstance(v, str) for v in env.values()):
            raise self.fail(where.rstrip("."), "args and env values must be strings")
        return McpServer(name, command, tuple(args), dict(env))


@dataclass(frozen=True)
class Choice:
    """What the user picked on the command line or in the app; `None` means "as configured"."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    tier: str | None = None


@dataclass(frozen=True)
class Target:
    """A provider and a model to use; `model=None` means "ask the server what it serves"."""

    settings: ProviderSettings
    model: str | None


def resolve(config: Config, choice: Choice) -> Target:
    """The provider and model for `choice`, or a one-line ConfigError / MissingApiKey.

    Choosing a provider or tier that doesn't exist, or one whose key is missing, fails here,
    before anything starts.
    """
    model = choice.model
    provider = choice.provider
    if choice.tier:
        if choice.provider or choice.model:
            raise ConfigError("pick a tier, or a provider and model, not both")
        tier = config.tier(choice.tier)
        provider, model = tier.provider, tier.model
    settings = config.provider(provider)
    if choice.base_url:
        config, _ = config.pointed_at(replace(choice, provider=settings.name))
        settings = config.provider(settings.name)
    if settings.key_required and not settings.api_key():
        raise MissingApiKey(f"missing API key for provider {settings.name!r}: set {settings.api_key_env}")
    return Target(settings, model or settings.default_model or (settings.models[0] if settings.models else None))
