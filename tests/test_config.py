"""The config file: `hotloop config show` round-trips, every bad setting is one line, and each default is one value."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from msgspec import structs

from hotloop.agent.options import AgentOptions
from hotloop.cli import build_parser, main
from hotloop.cli.sim import sim_settings
from hotloop.config import Config, ProviderSettings, RoutingSettings, SimSettings, load_config
from hotloop.core.runtime import simulator_config
from hotloop.sim.engine import SimConfig

README = Path(__file__).parent.parent / "README.md"

EVERYTHING = """
default_provider = "local"
max_steps = 40
tool_timeout = 30

[providers.local]
kind = "openai"
base_url = "http://localhost:8000/v1"
api_key_env = "VLLM_API_KEY"
models = ["Qwen/Qwen3-8B"]
prompt_cache_key = true

[providers."claude.work"]
kind = "anthropic"
api_key_env = "WORK_ANTHROPIC_KEY"
max_tokens = 16000
thinking_budget = 2048
cache_ttl = "1h"
cache_min_tokens = 2048

[providers.openai]
max_retries = 5

[sim]
ttft_ms = 0
scenario = "scenario.json"
max_running = 2
scheduling_policy = "fcfs"

[tiers]
strong = { provider = "claude.work", model = "claude-sonnet-4-5" }

[routing]
helper_tier = "balanced"
lanes = false

[latency]
memo_ttl = 0

[approvals]
allow = ["run_shell:pytest *"]
deny = ["run_shell:rm -rf *"]

[[hooks]]
event = "PreToolUse"
matcher = "edit_file|write_file"
command = "./check.sh"

[mcp.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_TOKEN = "ghp_0123456789abcdefWXYZ", LOG_LEVEL = "warn" }
"""


def write_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(text, encoding="utf-8")


def show(capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """`hotloop config show`: its `# path` line, the TOML after it, and stderr."""
    assert main(["config", "show"]) == 0
    out, err = capsys.readouterr()
    header, _, body = out.partition("\n")
    return header, body, err


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """`hotloop config show` on a bad config: exit 2 and the one line it printed."""
    assert main(["config", "show"]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def settings_of(kind: type) -> set[str]:
    return {f.name for f in structs.fields(kind)} - {"name"}


def test_config_show_prints_every_setting_as_toml_that_loads_back_the_same(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret-key-5678")
    write_config(isolated_home, EVERYTHING)
    header, body, err = show(capsys)
    assert header == f"# {isolated_home / 'config.toml'}" and err == ""
    shown = tomllib.loads(body)
    config = load_config()
    for name, settings in config.providers.items():  # the built-ins too, each with every field that has a value
        set_fields = {field for field in settings_of(ProviderSettings) if getattr(settings, field) is not None}
        assert set(shown["providers"][name]) == set_fields, name
    assert list(shown["providers"]) == [
        "sim",
        "sim-anthropic",
        "sim-responses",
        "openai",
        "anthropic",
        "local",
        "claude.work",
    ]
    assert shown["providers"]["openai"]["max_retries"] == 5 and shown["providers"]["local"]["prompt_cache_key"] is True
    claude = shown["providers"]["claude.work"]
    assert (claude["thinking_budget"], claude["cache_min_tokens"], claude["cache_ttl"]) == (2048, 2048, "1h")
    assert set(shown["sim"]) == settings_of(SimSettings) - {"prefill_us_per_token", "decode_ms_per_token"}
    assert (
        shown["sim"]["scenario"] == str(isolated_home / "scenario.json") and shown["sim"]["scheduling_policy"] == "fcfs"
    )
    assert set(shown["routing"]) == settings_of(RoutingSettings) and shown["routing"]["helper_tier"] == "balanced"
    assert shown["latency"] == {"early_dispatch": True, "memo_ttl": 0.0, "prefetch": True}
    assert shown["tiers"]["strong"] == {"provider": "claude.work", "model": "claude-sonnet-4-5"}
    assert set(shown["tiers"]) == {"fast", "balanced", "strong"}
    assert shown["mcp"]["github"]["args"] == ["-y", "@modelcontextprotocol/server-github"]
    assert shown["approvals"] == {"allow": ["run_shell:pytest *"], "deny": ["run_shell:rm -rf *"]}
    hook = {"event": "PreToolUse", "matcher": "edit_file|write_file", "command": "./check.sh", "timeout": 10.0}
    assert shown["hooks"] == [hook]  # a list of tables, as TOML (it was written as JSON, which doesn't load)
    assert (shown["default_provider"], shown["max_steps"], shown["tool_timeout"]) == ("local", 40, 30.0)

    write_config(isolated_home, body)
    _, again, _ = show(capsys)
    assert again == body
    # Nothing but the masked MCP env changed what the config means.
    assert structs.replace(load_config(), mcp=()) == structs.replace(config, mcp=())


def test_config_show_masks_every_secret(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret-key-5678")
    write_config(isolated_home, EVERYTHING)
    _, body, _ = show(capsys)
    assert "vllm-secret-key" not in body and "ghp_0123456789" not in body
    assert 'api_key_env = "VLLM_API_KEY"  # set: ••••5678\n' in body
    assert 'api_key_env = "WORK_ANTHROPIC_KEY"  # not set\n' in body
    assert (
        '[mcp.github.env]  # values masked: they may hold tokens\nGITHUB_TOKEN = "••••WXYZ"\nLOG_LEVEL = "••••"\n'
        in body
    )


def test_the_defaults_show_and_load_back_as_the_defaults(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, body, _ = show(capsys)
    assert header == f"# {isolated_home / 'config.toml'} (not found: defaults)"
    write_config(isolated_home, body)
    _, again, _ = show(capsys)
    assert again == body
    loaded = load_config()
    assert loaded.loaded and structs.replace(loaded, loaded=False) == Config(path=loaded.path, loaded=False)


def test_a_capped_setting_warns_on_stderr_and_shows_what_is_used(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_home, '[providers.claude]\nkind = "anthropic"\ncache_breakpoints = 6\n')
    _, body, err = show(capsys)
    assert tomllib.loads(body)["providers"]["claude"]["cache_breakpoints"] == 4
    assert err.endswith("providers.claude.cache_breakpoints = 6 is more than the 4 Anthropic allows; using 4\n")


@pytest.mark.parametrize(
    ("text", "where", "known"),
    [
        (
            "colour = 1\n",
            "colour",
            "default_provider, max_steps, tool_timeout, providers, sim, mcp, tiers, routing, latency",
        ),
        (
            'path = "/tmp"\n',
            "path",
            "default_provider, max_steps, tool_timeout, providers, sim, mcp, tiers, routing, latency",
        ),
        (
            '[providers.sim]\nmodel = "x"\n',
            "providers.sim.model",
            "kind, base_url, api_key_env, models, default_model, ",
        ),
        ('[providers.x]\nkind = "openai"\nname = "y"\n', "providers.x.name", "kind, base_url, api_key_env, models, "),
        ("[sim]\nttft = 1\n", "sim.ttft", "ttft_ms, prefill_us_per_token, decode_ms_per_token, scenario, "),
        ("[routing]\nhelper = 1\n", "routing.helper", "helper_tier, titles, summarize_over_tokens, auto_simple, "),
        ("[latency]\nmemo = 1\n", "latency.memo", "early_dispatch, memo_ttl, prefetch"),
        ('[tiers.fast]\nprovider = "sim"\nmodel = "m"\nspeed = 1\n', "tiers.fast.speed", "provider, model"),
        ('[mcp.fs]\ncommand = "npx"\ncwd = "/"\n', "mcp.fs.cwd", "command, args, env"),
    ],
)
def test_an_unknown_setting_anywhere_is_refused_in_one_line(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], text: str, where: str, known: str
) -> None:
    write_config(isolated_home, text)
    line = one_line_error(capsys)
    assert line.startswith(f"hotloop: config {isolated_home / 'config.toml'}: {where} is not a setting (known: {known}")
    assert line.endswith(")")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('max_steps = "x"', "max_steps must be a whole number (got 'x')"),
        ("max_steps = true", "max_steps must be a whole number (got True)"),
        ("tool_timeout = 0", "tool_timeout must be positive"),
        ("[routing]\ntitles = 'yes'", "routing.titles must be true or false (got 'yes')"),
        ("[routing]\nmax_background = 0", "routing.max_background must be at least 1"),
        ("[sim]\nscheduling_policy = 'lifo'", "sim.scheduling_policy must be one of fcfs, priority (got 'lifo')"),
        ("[sim]\nttft_ms = -5", "sim.ttft_ms must be 0 or more"),
        ("[sim]\nmax_running = 0", "sim.max_running must be at least 1"),
        ("sim = 3", "sim must be a table (got 3)"),
        (
            "[providers.claude]\nkind = 'anthropic'\napi_key = 'sk-ant-1'",
            "providers.claude.api_key is not allowed: "
            "keep keys in the environment and name the variable with api_key_env",
        ),
        (
            "[providers.x]\nkind = 'grpc'",
            "providers.x.kind must be one of openai, openai-chat, openai-responses, anthropic, sim, sim-responses, "
            "sim-anthropic (got 'grpc')",
        ),
        ("[providers.x]\nbase_url = 'http://x'", "providers.x.kind is required"),
        ("[providers.x]\nkind = 'openai'\nmodels = ['a', 3]", "providers.x.models must be a list of model names"),
        ("[providers.x]\nkind = 'openai'\nmax_tokens = 0", "providers.x.max_tokens must be positive"),
        (
            "[providers.sim-anthropic]\ncache_ttl = '2h'",
            "providers.sim-anthropic.cache_ttl must be one of auto, 5m, 1h (got '2h')",
        ),
        (
            "[providers.claude]\nkind = 'anthropic'\nmax_tokens = 2048\nthinking_budget = 4096",
            "providers.claude.thinking_budget must be at least 1024 and less than max_tokens (default 8192)",
        ),
        (
            "default_provider = 'nope'",
            "default_provider names an unknown provider 'nope' "
            "(configured: anthropic, openai, sim, sim-anthropic, sim-responses)",
        ),
        ("[tiers.fast]\nprovider = 'nope'\nmodel = 'm'", "tiers.fast.provider names an unknown provider 'nope'"),
        ("[tiers.turbo]\nprovider = 'sim'\nmodel = 'm'", "tiers.turbo is not a tier (tiers: fast, balanced, strong)"),
        ("[tiers.fast]\nprovider = 'sim'\nmodel = ''", "tiers.fast.model is required"),
        ("[mcp.fs]\ncommand = ''", "mcp.fs.command is required"),
        ("[mcp.fs]\ncommand = 'npx'\nenv = { TOKEN = 1 }", "mcp.fs.env must be a table of strings"),
        (
            "[[hooks]]\nevent = 'PreToolUse'\ncommand = 'x'\n[[hooks]]\nevent = 'Later'\ncommand = 'y'",
            "hooks[1].event must be one of PreToolUse, PostToolUse, UserPromptSubmit, Stop (got 'Later')",
        ),
        (
            "[[hooks]]\nevent = 'Stop'\ncommand = 'x'\nshell = 'sh'",
            "hooks[0].shell is not a setting (known: event, matcher, command, timeout)",
        ),
        ("[approvals]\nallow = ['read_file', 'rm -rf *']", "approvals.allow[1] must be TOOL or TOOL:PATTERN"),
    ],
)
def test_a_bad_setting_is_named_in_one_line(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    write_config(isolated_home, text + "\n")
    assert one_line_error(capsys) == f"hotloop: config {isolated_home / 'config.toml'}: {problem}"


# The config rows of the README's "Bad input" table, and a config file that does what each says.
README_ROWS = {
    "invalid TOML": "[sim\nttft_ms = 0\n",
    "`cache_breakpoints = 6`": '[providers.claude]\nkind = "anthropic"\ncache_breakpoints = 6\n',
    '`[routing] helper_tier = "huge"`': '[routing]\nhelper_tier = "huge"\n',
    "`[latency] memo_ttl = -1`": "[latency]\nmemo_ttl = -1\n",
}


def documented(row: str) -> tuple[str, int]:
    """The README's line for a Bad input row, as a pattern (… stands for anything), and its exit code."""
    bad_input = README.read_text(encoding="utf-8").split("## Bad input", 1)[1]
    result = next(line for line in bad_input.splitlines() if line.startswith(f"| {row} |")).split(" | ", 1)[1]
    line = re.search(r"`([^`]+)`", result)
    code = re.search(r"exit (\d)", result)
    assert line is not None
    return ".*".join(map(re.escape, line[1].split("…"))), int(code[1]) if code else 0


@pytest.mark.parametrize("row", README_ROWS)
def test_each_config_row_of_the_readme_bad_input_table(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], row: str
) -> None:
    pattern, code = documented(row)
    write_config(isolated_home, README_ROWS[row])
    assert main(["config", "show"]) == code
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.fullmatch(f"(hotloop: )?{pattern}", lines[0]), (pattern, lines)


def test_the_readme_example_config_loads(tmp_path: Path) -> None:
    readme = README.read_text(encoding="utf-8")
    example = readme.split("The config file is TOML", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "config.toml").write_text(example, encoding="utf-8")
    config = load_config(tmp_path / "config.toml")
    assert config.default_provider == "local" and config.provider("claude").thinking_budget == 2048
    assert config.tiers["strong"].provider == "claude" and config.mcp[0].env == {"LOG_LEVEL": "warn"}
    assert config.sim.scenario == tmp_path / "scenario.json" and config.warnings == ()


def test_sim_serve_converts_its_flags_as_the_runtime_converts_the_config() -> None:
    flags = build_parser().parse_args(["sim", "serve", "--no-latency", "--ttft-ms", "5", "--max-running", "3"])
    served = simulator_config(sim_settings(flags))
    configured = simulator_config(SimSettings(ttft_ms=5, prefill_us_per_token=0, decode_ms_per_token=0, max_running=3))
    assert served == configured
    assert {(p.ttft, p.prefill_per_token, p.decode_per_token) for p in served.models.values()} == {(0.005, 0, 0)}


def test_each_default_is_one_value_everywhere(tmp_path: Path) -> None:
    config = Config(path=tmp_path / "config.toml", loaded=False)
    sim, engine, embedded = config.sim, SimConfig(), simulator_config(config.sim)
    serve = build_parser().parse_args(["sim", "serve"])
    expected = (16_384, 1024, "priority", True, None)  # priority, unlike stock vLLM: lanes send background at 10
    assert (
        sim.cache_blocks,
        sim.cache_min_tokens,
        sim.scheduling_policy,
        sim.prompt_tokens_details,
        sim.max_running,
    ) == (expected)
    for simulator in (engine, embedded):
        figures = simulator.cache_blocks, simulator.cache_min_tokens, simulator.scheduling
        assert (*figures, simulator.prompt_tokens_details, simulator.max_running) == expected
    figures = serve.cache_blocks, serve.cache_min_tokens, serve.scheduling_policy
    assert (*figures, not serve.no_prompt_tokens_details, serve.max_running) == expected
    assert sim.batch_slowdown == engine.batch_slowdown == embedded.batch_slowdown == serve.batch_slowdown == 0.02
    assert sim_settings(serve) == sim  # `sim serve`'s flags are the [sim] settings, converted by the same function

    assert config.agent_options() == AgentOptions()  # an agent built without the config runs as the config says
    (tmp_path / "config.toml").write_text("", encoding="utf-8")  # an empty file means the same
    assert structs.replace(load_config(tmp_path / "config.toml"), loaded=False) == config
