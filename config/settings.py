"""The settings, each declared once with its type, default and limits, and `Config`, the whole.

A limit's `problem` (`_rule`) is how an error words its breach; fields in `NOT_IN_FILE` are the
program's to fill in. `Config`'s methods answer what the rest of hotloop asks of the settings.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta, Struct, structs

from hotloop import InputError
from hotloop.agent.approvals import ApprovalRules
from hotloop.agent.hooks import Hook
from hotloop.agent.keepalive import MARGIN, Budget, KeepAlive, PingCosts
from hotloop.agent.options import COMPACT_AT, MAX_STEPS, MEMO_TTL, TOOL_TIMEOUT, AgentOptions
from hotloop.agent.pricing import StepPricer
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.agent.tools.shell import ShellSettings
from hotloop.config.toml_writer import as_table, masked, toml_text
from hotloop.providers.anthropic import BREAKPOINT_LIMIT
from hotloop.providers.protocols import Wire
from hotloop.providers.transport import ANTHROPIC_URL as ANTHROPIC_URL
from hotloop.providers.transport import RequestTimeout
from hotloop.secret_policy import secret_values
from hotloop.sim import defaults as sim  # constants only: the one import of the simulator the config may make

if TYPE_CHECKING:
    from hotloop.config.choice import Choice

OPENAI_BASE_URL = "https://api.openai.com/v1"  # what the SDK takes; the origin alone is `transport.OPENAI_URL`
# openai: any OpenAI-compatible server; anthropic: any Anthropic-compatible one; sim and
# sim-anthropic: the embedded simulator, over each protocol.
# `openai` is the Responses API on api.openai.com and Chat Completions elsewhere; `openai-chat` and
# `openai-responses` choose one for any server.
Kind = Literal["openai", "openai-chat", "openai-responses", "anthropic", "sim", "sim-responses", "sim-anthropic"]
# Each kind's protocol, read here once; "auto" chooses by the server (`ProviderSettings.protocol`).
KIND_WIRES: dict[Kind, Wire | Literal["auto"]] = {
    "openai": "auto",
    "openai-chat": Wire.OPENAI_CHAT,
    "openai-responses": Wire.OPENAI_RESPONSES,
    "anthropic": Wire.ANTHROPIC,
    "sim": Wire.OPENAI_CHAT,
    "sim-responses": Wire.OPENAI_RESPONSES,
    "sim-anthropic": Wire.ANTHROPIC,
}
TierName = Literal["fast", "balanced", "strong"]
TIER_NAMES: tuple[str, ...] = get_args(TierName)
# Not a mapping but a policy: the fast tier classifies each turn, which then goes to a real tier.
AUTO_TIER = "auto"
DEFAULT_KEY_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
MIN_THINKING_BUDGET = 1024  # the least extended thinking Anthropic accepts
KEEPALIVE_MODES = r"^(off|adaptive|every-[0-9]+(\.[0-9]+)?m)$"


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
NOT_IN_FILE = frozenset({"name", "path", "loaded", "warnings"})


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
    # "auto": 5-minute writes until the session's own pauses make 1-hour ones cheaper (agent/cache_lifetime.py).
    cache_ttl: Literal["auto", "5m", "1h"] = "auto"
    cache_min_tokens: Positive | None = None
    # Anthropic's cache-diagnostics beta (`cache-diagnosis-2026-04-07`): the server says why a step missed its cache,
    # shown beside hotloop's own verdict. A beta feature, so off unless the config turns it on.
    cache_diagnostics: bool = False
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
    request_timeout: RequestTimeout = RequestTimeout()
    # Dollars an hour the server's GPUs cost (self-hosted): each step's model time is priced at it, as an estimate.
    cost_per_hour: Annotated[float, _rule("must be 0 or more", ge=0)] | None = None

    @property
    def server(self) -> str:
        """The URL requests go to ("" for the simulator); without base_url, the protocol's own API."""
        if self.base_url or self.is_simulator:
            return self.base_url or ""
        return ANTHROPIC_URL if KIND_WIRES[self.kind] is Wire.ANTHROPIC else OPENAI_BASE_URL

    @property
    def protocol(self) -> Wire:
        """The wire protocol the kind names, or for `openai`, the one its server is spoken to in."""
        named = KIND_WIRES[self.kind]
        if isinstance(named, Wire):
            return named
        # OpenAI's own API carries reasoning across steps only on the Responses API.
        return Wire.OPENAI_RESPONSES if self.server == OPENAI_BASE_URL else Wire.OPENAI_CHAT

    @property
    def sdk(self) -> str:
        """The official SDK the protocol is spoken through."""
        return self.protocol.traits.sdk

    @property
    def is_simulator(self) -> bool:
        return self.kind.startswith("sim")

    @property
    def key_required(self) -> bool:
        """Whether this is OpenAI's or Anthropic's own API, which need a key (gateways and local servers may not)."""
        if self.is_simulator:
            return False
        hosted = (ANTHROPIC_URL, ANTHROPIC_URL + "/v1") if self.protocol is Wire.ANTHROPIC else (OPENAI_BASE_URL,)
        return (self.base_url or hosted[0]).rstrip("/") in hosted

    @property
    def sends_prompt_cache_key(self) -> bool:
        if self.prompt_cache_key is not None:
            return self.prompt_cache_key
        return self.protocol.traits.cache.keyed and self.key_required

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class SimSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """The embedded simulator; its defaults are the simulator's own (sim/defaults.py)."""

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
    batch_slowdown: Figure = sim.BATCH_SLOWDOWN  # continuous batching: see sim/engine.py


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
    prefetch: bool = True  # run predicted read-only calls (of tools that allow it) while the model thinks


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


class CacheSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[cache]`: what hotloop does for the provider's prefix cache beyond keeping the prefix stable."""

    # "auto": the static prefix is sent ahead (session start, a switch, an idle gap past the cache's lifetime)
    # where it saves more than it costs: self-hosted servers and the simulator, not hosted APIs (core/prewarm.py).
    prewarm: Literal["auto", "off"] = "auto"


class KeepaliveSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[keepalive]`: pings that keep a timed prompt cache (Anthropic's) warm through a pause (core/keepalive.py)."""

    # "adaptive": whether and when to ping, learned from your own pauses (agent/keepalive.py); "every-4.5m": at a
    # fixed interval (at most the cache's lifetime less a margin), as keep-alive plugins do; "off": no pings.
    mode: Annotated[str, _rule('must be "off", "adaptive" or "every-Nm"', pattern=KEEPALIVE_MODES)] = "off"
    max_pings_per_pause: Annotated[int, _rule("must be 0 or more", ge=0)] = 12
    max_usd_per_day: Annotated[float, _rule("must be 0 or more", ge=0)] | None = None  # where the price is known

    def fixed_plan(self, lifetime: float) -> list[float]:
        """`every-Nm`'s pings after a prefix's last use: every N minutes, but at most the lifetime less the margin
        apart (a later one would find the prefix gone); none for the other modes."""
        if not self.mode.startswith("every-"):
            return []
        every = min(float(self.mode.removeprefix("every-").removesuffix("m")) * 60, lifetime - MARGIN)
        return [every * k for k in range(1, self.max_pings_per_pause + 1)] if every > 0 else []

    def policy(self, costs: PingCosts, priced: bool) -> KeepAlive:
        """A new adaptive policy within this budget: in dollars where the price is known (`priced`: the daily cap
        applies there), else in input-token equivalents."""
        budget = Budget(self.max_pings_per_pause, self.max_usd_per_day if priced else None)
        return KeepAlive(costs, budget=budget, rng=random.Random())


class TelemetrySettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[telemetry]`: OpenTelemetry spans of each turn, model request and tool call, sent over OTLP/HTTP."""

    # The collector: its base URL (http://localhost:4318) or its /v1/traces; "" sends nothing, unless the
    # OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables or `--otel` ask for spans.
    otlp_endpoint: str = ""
    capture_content: bool = False  # prompts, answers, tool arguments and results on the spans, masked like the log


SIM_MODELS = ("sim-fast", "sim-balanced", "sim-strong")
BUILTIN_PROVIDERS = {
    "sim": ProviderSettings("sim", "sim", models=SIM_MODELS, default_model="sim-balanced"),
    "sim-anthropic": ProviderSettings(
        "sim-anthropic", "sim-anthropic", models=SIM_MODELS, default_model="sim-balanced"
    ),
    "sim-responses": ProviderSettings(
        "sim-responses", "sim-responses", models=SIM_MODELS, default_model="sim-balanced"
    ),
    "openai": ProviderSettings("openai", "openai", OPENAI_BASE_URL, "OPENAI_API_KEY", default_model="gpt-5-mini"),
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
    cache: CacheSettings = CacheSettings()
    keepalive: KeepaliveSettings = KeepaliveSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
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
        """The tiers that name this provider and model, if any: `strong`, or `fast = balanced = strong` on one model.

        The simulator's sides (Chat, Responses, Anthropic) are one server serving the same models: a
        tier naming a model on one side names it on the others too.
        """
        here = self.providers.get(provider)
        sides = {provider} | (
            {p.name for p in self.providers.values() if p.is_simulator and p.server == here.server}
            if here is not None and here.is_simulator
            else set()
        )
        names = [t.name for t in self.tiers.values() if t.provider in sides and t.model == model]
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
        server the user named (a server that lacks the model says so when asked for it); they follow
        a configured server someone runs too (not a hosted API, whose models cost), so titles never
        go to the simulator, and the simulator's other protocols, so `/tier fast` on `sim-anthropic`
        stays on Anthropic's. `Runtime.fit_tiers` then moves them to models the server lists.
        """
        name = choice.provider or self.default_provider
        if not choice.base_url:
            settings = self.providers.get(name)
            if settings is None or settings.key_required:
                return self, choice
            return structs.replace(self, tiers=self._defaults_on(name)), choice
        settings = self.provider(name)
        if settings.is_simulator:
            raise ConfigError(
                "--base-url does not apply to the embedded simulator; "
                "use --provider openai (or anthropic) --base-url URL"
            )
        # The configured models belong to the configured server; another server is asked what it serves.
        moved = structs.replace(settings, base_url=choice.base_url, models=(), default_model=None)
        providers = {**self.providers, name: moved}
        config = structs.replace(self, providers=providers, tiers=self._defaults_on(name), default_provider=name)
        return config, replace(choice, base_url=None, provider=None if choice.tier else name)

    def _defaults_on(self, provider: str) -> dict[str, Tier]:
        """The tiers, those left at their defaults (the simulator's) moved to `provider`, model names unchanged."""
        return {
            tier.name: Tier(tier.name, provider, tier.model) if tier == DEFAULT_TIERS.get(tier.name) else tier
            for tier in self.tiers.values()
        }

    def with_timeout(self, timeout: RequestTimeout) -> Config:
        """Every provider with this request timeout (`--timeout`)."""
        providers = {name: structs.replace(p, request_timeout=timeout) for name, p in self.providers.items()}
        return structs.replace(self, providers=providers)

    def pricer(self) -> StepPricer:
        """Prices each step by its provider: the server it reaches, and what a self-hosted one costs an hour."""
        providers = self.providers.values()
        return StepPricer(
            servers={p.name: p.server for p in providers if p.server},
            hourly={p.name: p.cost_per_hour for p in providers if p.cost_per_hour is not None},
            # "auto" writes are billed as the server splits them; where it doesn't, at the 5-minute price it starts at.
            write_ttl={p.name: "1h" if p.cache_ttl == "1h" else "5m" for p in providers},
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
        servers = tuple(structs.replace(s, env={k: masked(v) for k, v in s.env.items()}) for s in self.mcp)
        # The servers are a list here and tables in the file, each named by its key ([mcp.NAME]).
        view = {**as_table(self, NOT_IN_FILE), "mcp": {s.name: as_table(s, NOT_IN_FILE) for s in servers}}
        notes: dict[tuple[str, ...], str] = {
            ("providers", p.name, "api_key_env"): _key_note(p) for p in self.providers.values() if p.api_key_env
        }
        notes |= {("mcp", s.name, "env"): "values masked: they may hold tokens" for s in servers if s.env}
        return toml_text(view, notes)


def _key_note(settings: ProviderSettings) -> str:
    key = settings.api_key()
    return f"set: {masked(key)}" if key else "not set"
