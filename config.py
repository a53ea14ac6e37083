"""hotloop's configuration: a TOML file with providers, their models, the simulator and MCP servers.

Each setting is declared once, with its type, default and limits, in the Structs below; msgspec
checks a file against them and refuses a key they don't declare. API keys never live in the file.
A provider names the environment variable that holds its key (`api_key_env`), and the key is read
from the environment when the provider is used. Every problem with the file is reported as one
line naming the file and the setting.
"""

from __future__ import annotations

import json
import os
import re
import types
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec
from msgspec import Meta, Struct, structs

from hotloop import InputError, paths
from hotloop.agent.approvals import ApprovalRules
from hotloop.agent.hooks import Hook
from hotloop.agent.options import COMPACT_AT, MAX_STEPS, MEMO_TTL, TOOL_TIMEOUT, AgentOptions
from hotloop.agent.pricing import StepPricer
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.agent.tools.shell import ShellSettings
from hotloop.providers.anthropic import ANTHROPIC_URL as ANTHROPIC_URL
from hotloop.providers.anthropic import BREAKPOINT_LIMIT, DEFAULT_MAX_TOKENS
from hotloop.providers.errors import MissingApiKey
from hotloop.providers.sim import defaults as sim
from hotloop.providers.transport import RequestTimeout
from hotloop.secret_policy import is_secret_name, secret_values

OPENAI_URL = "https://api.openai.com/v1"
# openai: any OpenAI-compatible server; anthropic: any Anthropic-compatible one; sim and
# sim-anthropic: the embedded simulator, over each protocol.
# `openai` is the Responses API on api.openai.com and Chat Completions elsewhere; `openai-chat` and
# `openai-responses` choose one for any server.
Kind = Literal["openai", "openai-chat", "openai-responses", "anthropic", "sim", "sim-responses", "sim-anthropic"]
_OPENAI_KINDS = ("openai", "openai-chat", "openai-responses")
KINDS: tuple[str, ...] = get_args(Kind)
TierName = Literal["fast", "balanced", "strong"]
TIER_NAMES: tuple[str, ...] = get_args(TierName)
# Not a mapping but a policy: the fast tier classifies each turn, which then goes to a real tier.
AUTO_TIER = "auto"
DEFAULT_KEY_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
MIN_THINKING_BUDGET = 1024  # the least extended thinking Anthropic accepts


class ConfigError(InputError):
    """The configuration can't be used; `str(error)` is the one-line reason."""


def _rule(problem: str, **limits: Any) -> Meta:
    """Limits on a setting and the words for breaking them, e.g. `must be positive`."""
    return Meta(**limits, extra={"problem": problem})


Positive = Annotated[int, _rule("must be positive", ge=1)]
AtLeastOne = Annotated[int, _rule("must be at least 1", ge=1)]
Figure = Annotated[float, _rule("must be 0 or more", ge=0)]  # a latency figure of the simulator
# RFC 9110's token characters, or nothing.
HeaderName = Annotated[
    str, _rule("must be an HTTP header name, or empty for none", pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]*$")
]


# Fields the program fills in, never the file: a table's name is its key ([providers.NAME]).
_NOT_IN_FILE = frozenset({"name", "path", "loaded", "warnings"})


class RequestTimeoutSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """Seconds a request may wait for its first byte, and then between two chunks of its stream."""

    first_byte: Annotated[float, _rule("must be positive", gt=0)] = RequestTimeout.first_byte
    idle: Annotated[float, _rule("must be positive", gt=0)] = RequestTimeout.idle

    def limits(self) -> RequestTimeout:
        return RequestTimeout(self.first_byte, self.idle)


class ProviderSettings(Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    kind: Kind
    base_url: str | None = None
    api_key_env: str | None = None
    models: Annotated[tuple[Annotated[str, Meta(min_length=1)], ...], _rule("must be a list of model names")] = ()
    default_model: str | None = None
    max_retries: Annotated[int, _rule("must be 0 or more", ge=0)] = 2
    max_tokens: Positive | None = None
    # Anthropic only: extended thinking, and prompt caching's breakpoints, TTL and minimum length.
    thinking_budget: int | None = None  # checked against max_tokens once both are known
    cache_breakpoints: Annotated[int, _rule("must be 0 (no caching) or more", ge=0)] = BREAKPOINT_LIMIT
    cache_ttl: Literal["5m", "1h"] = "5m"
    cache_min_tokens: Positive | None = None
    # OpenAI: route a session's requests to one cache with `prompt_cache_key` (default: on for api.openai.com).
    prompt_cache_key: bool | None = None
    # The header every request carries the session's key in, for a router that keeps a session on one replica
    # (vLLM's production-stack router: --session-key); "" sends none.
    affinity_header: HeaderName = sim.AFFINITY_HEADER
    user: bool = False  # OpenAI-compatible: the session's key as `user` too, for routers and gateways that key on it
    # Responses API only: reasoning summaries streamed as they are written, and sending only what a request
    # adds to the last one, naming it (`previous_response_id`, for a server that stores responses).
    reasoning_summary: bool = False
    previous_response_id: bool = False
    request_timeout: RequestTimeoutSettings = RequestTimeoutSettings()
    # Dollars an hour the server's GPUs cost (self-hosted): each step's model time is priced at it, as an estimate.
    cost_per_hour: Annotated[float, _rule("must be 0 or more", ge=0)] | None = None

    @property
    def server(self) -> str:
        """The URL requests go to ("" for the simulator); without base_url, the protocol's own API."""
        if self.base_url or self.is_simulator:
            return self.base_url or ""
        return ANTHROPIC_URL if self.kind == "anthropic" else OPENAI_URL

    @property
    def protocol(self) -> str:
        """The wire protocol: `openai` (Chat Completions), `openai-responses` or `anthropic`."""
        if self.kind in ("anthropic", "sim-anthropic"):
            return "anthropic"
        if self.kind in ("openai-responses", "sim-responses"):
            return "openai-responses"
        # OpenAI's own API carries reasoning across steps only on the Responses API.
        return "openai-responses" if self.kind == "openai" and self.server == OPENAI_URL else "openai"

    @property
    def sdk(self) -> str:
        """The official SDK the protocol is spoken through."""
        return "anthropic" if self.protocol == "anthropic" else "openai"

    @property
    def is_simulator(self) -> bool:
        return self.kind.startswith("sim")

    @property
    def key_required(self) -> bool:
        """Whether this is OpenAI's or Anthropic's own API, which need a key (gateways and local servers may not)."""
        if self.kind in _OPENAI_KINDS:
            return (self.base_url or OPENAI_URL).rstrip("/") == OPENAI_URL
        return self.kind == "anthropic" and (self.base_url or ANTHROPIC_URL).rstrip("/") in (
            ANTHROPIC_URL,
            ANTHROPIC_URL + "/v1",
        )

    @property
    def sends_prompt_cache_key(self) -> bool:
        if self.prompt_cache_key is not None:
            return self.prompt_cache_key
        return self.kind in _OPENAI_KINDS and self.key_required

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class SimSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """The embedded simulator; its defaults are the simulator's own (providers/sim/defaults.py)."""

    ttft_ms: Figure | None = None
    prefill_us_per_token: Figure | None = None
    decode_ms_per_token: Figure | None = None
    scenario: Path | None = None  # relative to the config file's folder
    cache_blocks: Positive = sim.CACHE_BLOCKS
    cache_min_tokens: Positive = sim.CACHE_MIN_TOKENS
    max_model_len: Positive = sim.MAX_MODEL_LEN
    max_running: AtLeastOne | None = None
    scheduling_policy: sim.Policy = sim.SCHEDULING_POLICY
    prompt_tokens_details: bool = sim.PROMPT_TOKENS_DETAILS
    batch_slowdown: Figure = sim.BATCH_SLOWDOWN  # continuous batching: see providers/sim/engine.py


class Tier(Struct, frozen=True, forbid_unknown_fields=True):
    """A named quality/speed level that maps to a provider and a model."""

    name: str
    provider: str
    model: Annotated[str, _rule("is required", min_length=1)]


DEFAULT_TIERS = {name: Tier(name, "sim", f"sim-{name}") for name in TIER_NAMES}


class LatencySettings(Struct, frozen=True, forbid_unknown_fields=True):
    """The latency engine's switches; the benchmark turns each off to measure what it saves."""

    early_dispatch: bool = True  # start a tool call once its arguments are complete in the stream
    # Seconds an identical read-only call reuses a result; 0 turns it off.
    memo_ttl: Annotated[float, _rule("must be 0 (off) or more seconds", ge=0)] = MEMO_TTL
    prefetch: bool = False  # run predicted read-only calls (of tools that allow it) while the model thinks


class RoutingSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """Which tier does what besides the main agent, and the priority lanes."""

    helper_tier: TierName = "fast"  # titles, summaries and auto's classifier
    titles: bool = True
    summarize_over_tokens: Annotated[int, _rule("must be 0 (off) or more", ge=0)] = 0  # 0: results enter whole
    auto_simple: TierName = "fast"
    auto_complex: TierName = "strong"
    lanes: bool = True
    max_background: AtLeastOne = 1


class ContextSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[context]`: when the conversation is compacted on its own (`/compact` works either way)."""

    auto_compact: bool = True
    # The share of the context window that, once the last step used it, compacts before the next turn.
    compact_at: Annotated[float, _rule("must be a share of the window above 0, at most 1", gt=0, le=1)] = COMPACT_AT


SIM_MODELS = ("sim-fast", "sim-balanced", "sim-strong")
BUILTIN_PROVIDERS = {
    "sim": ProviderSettings("sim", "sim", models=SIM_MODELS, default_model="sim-balanced"),
    "sim-anthropic": ProviderSettings(
        "sim-anthropic", "sim-anthropic", models=SIM_MODELS, default_model="sim-balanced"
    ),
    "sim-responses": ProviderSettings(
        "sim-responses", "sim-responses", models=SIM_MODELS, default_model="sim-balanced"
    ),
    "openai": ProviderSettings("openai", "openai", OPENAI_URL, "OPENAI_API_KEY", default_model="gpt-5-mini"),
    "anthropic": ProviderSettings(
        "anthropic", "anthropic", ANTHROPIC_URL, "ANTHROPIC_API_KEY", default_model="claude-sonnet-4-5"
    ),
}


class Config(Struct, frozen=True, forbid_unknown_fields=True):
    path: Path
    loaded: bool
    default_provider: str = "sim"
    max_steps: Positive = MAX_STEPS
    tool_timeout: Annotated[float, _rule("must be positive", gt=0)] = TOOL_TIMEOUT
    providers: dict[str, ProviderSettings] = msgspec.field(default_factory=lambda: dict(BUILTIN_PROVIDERS))
    sim: SimSettings = SimSettings()
    mcp: tuple[McpServer, ...] = ()
    tiers: dict[str, Tier] = msgspec.field(default_factory=lambda: dict(DEFAULT_TIERS))
    routing: RoutingSettings = RoutingSettings()
    latency: LatencySettings = LatencySettings()
    context: ContextSettings = ContextSettings()
    approvals: ApprovalRules = ApprovalRules()
    hooks: tuple[Hook, ...] = ()
    shell: ShellSettings = ShellSettings()  # [shell]: run_shell's timeout, output limit and sandbox
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
        """The tiers that name this provider and model, if any: `strong`, or `fast = balanced = strong` on one model."""
        names = [t.name for t in self.tiers.values() if (t.provider, t.model) == (provider, model)]
        return " = ".join(names) or None

    def fitted_to(self, provider: str, served: list[str], preferred: str | None) -> tuple[Config, dict[str, str]]:
        """Tiers on `provider` that name a model its server doesn't list, moved to one it does.

        They move to `preferred` (the session's model) when the server lists it, else to the
        server's first model. Returns the config and, for each tier moved, the model it named.
        """
        to = preferred if preferred in served else served[0]
        moved = {t.name: t.model for t in self.tiers.values() if t.provider == provider and t.model not in served}
        tiers = {name: Tier(name, provider, to) if name in moved else tier for name, tier in self.tiers.items()}
        return structs.replace(self, tiers=tiers), moved

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
                "--base-url does not apply to the embedded simulator; "
                "use --provider openai (or anthropic) --base-url URL"
            )
        # The configured models belong to the configured server; another server is asked what it serves.
        moved = structs.replace(settings, base_url=choice.base_url, models=(), default_model=None)
        tiers = {
            tier.name: Tier(tier.name, name, tier.model) if tier == DEFAULT_TIERS.get(tier.name) else tier
            for tier in self.tiers.values()
        }
        config = structs.replace(self, providers={**self.providers, name: moved}, tiers=tiers, default_provider=name)
        return config, replace(choice, base_url=None, provider=None if choice.tier else name)

    def with_timeout(self, timeout: RequestTimeoutSettings) -> Config:
        """Every provider with this request timeout (`--timeout`)."""
        providers = {name: structs.replace(p, request_timeout=timeout) for name, p in self.providers.items()}
        return structs.replace(self, providers=providers)

    def pricer(self) -> StepPricer:
        """Prices each step by its provider: the server it reaches, and what a self-hosted one costs an hour."""
        providers = self.providers.values()
        return StepPricer(
            servers={p.name: p.server for p in providers if p.server},
            hourly={p.name: p.cost_per_hour for p in providers if p.cost_per_hour is not None},
            write_ttl={p.name: p.cache_ttl for p in providers},
        )

    def agent_options(self, max_steps: int | None = None) -> AgentOptions:
        """How every agent runs, as this config says (`max_steps`: a command line's own cap)."""
        latency, context = self.latency, self.context
        return AgentOptions(
            max_steps=max_steps or self.max_steps,
            tool_timeout=self.tool_timeout,
            early_dispatch=latency.early_dispatch,
            memo_ttl=latency.memo_ttl,
            prefetch=latency.prefetch,
            compact_at=context.compact_at if context.auto_compact else None,
        )

    def secrets(self) -> list[str]:
        """What logs and error lines must never show: the keys' values and the environment's other secrets.

        The others are what `secret_policy` calls secret: a secret-named variable's value, a URL's password.
        """
        keys = [value for name in sorted(self.key_env_names()) if (value := os.environ.get(name))]
        return list(dict.fromkeys([*keys, *secret_values(os.environ)]))

    def key_env_names(self) -> set[str]:
        """Every environment variable that holds a secret: a provider key, configured or default, or an MCP header's."""
        keys = set(DEFAULT_KEY_ENVS) | {p.api_key_env for p in self.providers.values() if p.api_key_env}
        return keys | {variable for server in self.mcp for variable in server.headers_env.values()}

    def to_toml(self) -> str:
        """Every setting, as a config file that loads back to the same text; no secret in it.

        Keys are never in the file: a comment after `api_key_env` says whether the variable is set,
        masked. MCP `env` values may hold tokens, so they are masked too.
        """
        servers = tuple(structs.replace(s, env={k: _masked(v) for k, v in s.env.items()}) for s in self.mcp)
        view = {**_as_table(self), "mcp": {s.name: _as_table(s) for s in servers}}  # [mcp.NAME] tables
        notes: dict[tuple[str, ...], str] = {
            ("providers", p.name, "api_key_env"): _key_note(p) for p in self.providers.values() if p.api_key_env
        }
        notes |= {("mcp", s.name, "env"): "values masked: they may hold tokens" for s in servers if s.env}
        return "\n".join(_toml_lines(view, notes)) + "\n"


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
        data = msgspec.toml.decode(text, type=dict[str, Any])
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
            if key in _NOT_IN_FILE:
                raise self.fail(_join(where, key), f"is not a setting (known: {', '.join(_settings(kind))})")
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
            raise self.fail(*_explained(str(error), given, kind, where)) from None

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


def _decode_path(kind: type, value: Any) -> Any:
    """A path is a string in the file (msgspec has no Path type of its own)."""
    if kind is Path and isinstance(value, str | Path):
        return Path(value)
    raise TypeError(f"Expected `str`, got `{type(value).__name__}`")  # msgspec's wording, which _explained reads


def _settings(kind: type[Struct]) -> tuple[str, ...]:
    """The keys a table for `kind` may hold."""
    return tuple(f.encode_name for f in structs.fields(kind) if f.name not in _NOT_IN_FILE)


def _join(*names: str) -> str:
    return ".".join(name for name in names if name)


# msgspec's ValidationError: "Expected `int`, got `str` - at `$.latency.memo_ttl`" (no "at" for the root).
_ERROR = re.compile(r"(?P<message>.*?)(?: - at `\$(?P<at>.*)`)?", re.DOTALL)
_STEP = re.compile(r"\.(\w+)|\[([^\]]*)\]")  # .field or [index] ([...] for a table's key)
_KEY_ERROR = re.compile(r"Object (?P<kind>contains unknown|missing required) field `(?P<key>[^`]*)`")
_TYPE_ERROR = re.compile(r"Expected `(?P<expected>[^`| ]+)[^`]*`, got `")
_TYPE_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "array": "a list",
    "object": "a table",
}


@dataclass
class _Spot:
    """The setting a msgspec error points at."""

    names: list[str]  # its dotted name
    table: type[Struct]  # the Struct it belongs to (or is)
    parts: list[Any]  # its declared type, unwrapped: types, Literals and Meta
    value: Any  # what the file gave
    inside: bool  # the error is in one of its elements, not in the setting itself


def _explained(message: str, given: dict[str, Any], kind: type[Struct], where: str) -> tuple[str, str]:
    """A msgspec error in the config's own words: the setting's dotted name, and its problem."""
    found = _ERROR.fullmatch(message)
    assert found is not None  # the pattern matches any text
    spot = _spot(kind, given, found["at"] or "", where)
    message = found["message"]
    setting = _join(*spot.names)
    if key_error := _KEY_ERROR.fullmatch(message):
        if key_error["kind"] == "missing required":
            return _join(setting, key_error["key"]), "is required"
        return _join(setting, key_error["key"]), f"is not a setting (known: {', '.join(_settings(spot.table))})"
    if message.startswith("Invalid enum value"):
        choices = next(get_args(part) for part in spot.parts if get_origin(part) is Literal)
        return setting, f"must be one of {', '.join(choices)} (got {spot.value!r})"
    if (type_error := _TYPE_ERROR.match(message)) and not spot.inside:
        expected = _TYPE_WORDS.get(type_error["expected"], type_error["expected"])
        return setting, f"must be {expected} (got {spot.value!r})"
    # A limit broken, or a bad element of a list or table: the setting's own words for it.
    rule = next((m.extra.get("problem") for m in spot.parts if isinstance(m, Meta) and m.extra), None)
    return setting, rule or f"is invalid ({message})"


def _spot(kind: type[Struct], given: dict[str, Any], at: str, where: str) -> _Spot:
    """Follows msgspec's path (`.sim.ttft_ms`, `.models[1]`) through the Structs and the given values."""
    spot = _Spot([where], kind, [kind], given, inside=False)
    for name, index in _STEP.findall(at):
        if name and not spot.inside:
            declared = next(f for f in structs.fields(spot.table) if f.encode_name == name)
            spot.names.append(name)
            spot.parts = _unwrapped(declared.type)
            spot.value = spot.value.get(name) if isinstance(spot.value, dict) else None
            spot.table = next((p for p in spot.parts if isinstance(p, type) and issubclass(p, Struct)), spot.table)
        else:
            spot.inside = True
            listed = isinstance(spot.value, list | tuple) and index.isdigit() and int(index) < len(spot.value)
            spot.value = spot.value[int(index)] if listed else None
    return spot


def _unwrapped(declared: Any) -> list[Any]:
    """A field's type as a flat list: `Annotated[int, Meta(ge=1)] | None` is [int, Meta(ge=1), None]."""
    if get_origin(declared) is Annotated:
        base, *metadata = get_args(declared)
        return [*_unwrapped(base), *metadata]
    if get_origin(declared) in (Union, types.UnionType):
        return [part for option in get_args(declared) for part in _unwrapped(option)]
    return [declared]


def _masked(secret: str) -> str:
    """A secret as shown: its last 4 characters only if it has 12 or more.

    A value already masked stays as it is, so a shown config saved and shown again reads the same.
    """
    if secret.startswith("••••"):
        return secret
    return f"••••{secret[-4:]}" if len(secret) >= 12 else "••••"


def _key_note(settings: ProviderSettings) -> str:
    key = settings.api_key()
    return f"set: {_masked(key)}" if key else "not set"


def _as_table(struct: Struct) -> dict[str, Any]:
    """A Struct's settings as the file holds them: nested Structs as tables, None where a setting is unset."""
    return {
        f.encode_name: _as_value(getattr(struct, f.name)) for f in structs.fields(struct) if f.name not in _NOT_IN_FILE
    }


def _as_value(value: Any) -> Any:
    if isinstance(value, Struct):
        return _as_table(value)
    if isinstance(value, dict):
        return {key: _as_value(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_as_value(item) for item in value]
    return str(value) if isinstance(value, Path) else value


def _toml_lines(table: dict[str, Any], notes: dict[tuple[str, ...], str], at: tuple[str, ...] = ()) -> list[str]:
    """`table` in TOML: its values under its [header], then its subtables; an unset (None) value is left out."""
    values = {key: value for key, value in table.items() if value is not None and not isinstance(value, dict)}
    lines = [
        f"{_toml_key(key)} = {_toml_value(value)}{_comment(notes.get((*at, key)))}" for key, value in values.items()
    ]
    if at and values:
        lines = ["", f"[{'.'.join(map(_toml_key, at))}]{_comment(notes.get(at))}", *lines]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += _toml_lines(value, notes, (*at, key))
    return lines


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _toml_value(value: str | bool | int | float | list[Any]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _comment(note: str | None) -> str:
    return f"  # {note}" if note else ""


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
