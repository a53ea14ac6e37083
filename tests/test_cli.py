"""`hotloop` on the command line: the happy paths, and one clear line for every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hotloop import __version__
from hotloop.agent.events import SessionTitled, StepFinished, ToolFinished, TurnFinished, decode
from hotloop.cli import main
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import TIERS, SimConfig

from support import scenario_file, start_sim

MCP_SERVER = Path(__file__).parent / "mcp_server.py"
FAST_SIM = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("# Demo project\n\nHello.\n")
    monkeypatch.chdir(root)
    write_config(isolated_home, FAST_SIM)
    return root


def write_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(text)


def session_lines(home: Path) -> list[list[bytes]]:
    """Every session file's lines, oldest session first; each line must be valid JSON."""
    logs = []
    for path in (home / "data" / "sessions").glob("*.jsonl"):
        header, *lines = path.read_bytes().splitlines()
        assert json.loads(header)["type"] == "session"
        for line in lines:
            decode(line)
        logs.append((json.loads(header)["started"], lines))
    return [lines for _, lines in sorted(logs)]


def one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"hotloop {__version__}\n"


def test_run_streams_the_answer_and_logs_the_session(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "Read README.md"]) == 0
    out, err = capsys.readouterr()
    assert "First lines of `README.md`" in out and "# Demo project" in out
    assert "step 1 ·" not in out  # status goes to stderr, the answer alone to stdout
    steps = [line for line in err.splitlines() if line.startswith("turn 1 · step ")]
    assert len(steps) == 2 and "1 tool ran for" in steps[0] and "cache read" in steps[1]
    assert "✓ read_file" in err
    (log,) = session_lines(isolated_home)
    finished, titled = decode(log[-2]), decode(log[-1])  # the fast tier titles the session after its first turn
    assert isinstance(finished, TurnFinished)
    assert finished == TurnFinished(turn=1, reason="answer", steps=2, wall=finished.wall, ts=finished.ts)
    assert titled == SessionTitled(title="Read README.md", model="sim-fast", ts=titled.ts)


def test_several_prompts_are_one_conversation_and_stdin_works(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["run", "hello", "Read README.md"]) == 0
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("list the files\n"))
    assert main(["run"]) == 0
    first, second = session_lines(isolated_home)
    assert sum(b'"type":"turn_started"' in line for line in first) == 2
    assert b'"prompt":"list the files\\n"' in b"".join(second)
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    table = capsys.readouterr().out
    assert table.index("List the files") < table.index("Hello")  # newest first, under their titles


def test_json_mode_prints_every_event(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--json", "Read README.md"]) == 0
    events = [decode(line) for line in capsys.readouterr().out.splitlines()]
    steps = [e for e in events if isinstance(e, StepFinished)]
    assert len(steps) == 2 and all(s.usage is not None and s.usage.prompt_total for s in steps)
    assert isinstance(events[-2], TurnFinished) and isinstance(events[-1], SessionTitled)


def test_unknown_provider(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", "nope", "hi"]) == 2
    assert (
        one_line_error(capsys.readouterr().err)
        == "hotloop: unknown provider 'nope' (configured: anthropic, openai, sim, sim-anthropic, sim-responses)"
    )


def test_missing_api_key_fails_before_any_session(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--provider", "openai", "hi"]) == 2
    assert (
        one_line_error(capsys.readouterr().err) == "hotloop: missing API key for provider 'openai': set OPENAI_API_KEY"
    )
    assert session_lines(isolated_home) == []


def test_invalid_toml(workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(isolated_home, "[sim\nttft_ms = 0\n")
    assert main(["run", "hi"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"hotloop: invalid TOML in {isolated_home / 'config.toml'}: ")


def test_an_unusable_data_folder(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_home / "a-file").write_text("")
    monkeypatch.setenv("HOTLOOP_DATA_DIR", str(isolated_home / "a-file"))
    assert main(["run", "hi"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == f"hotloop: cannot create a session log in {isolated_home / 'a-file' / 'sessions'}: Not a directory"


def test_unreachable_base_url_leaves_no_session(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt no provider answered is not a session: nothing to find, continue or replay."""
    write_config(isolated_home, FAST_SIM + "[providers.openai]\nmax_retries = 0\n")  # no back-off between tries
    assert (
        main(["run", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "hi", "again"]) == 1
    )
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("error: cannot reach openai (http://127.0.0.1:9/v1): ")
    assert list((isolated_home / "data" / "sessions").iterdir()) == []  # no log, no summary


def test_unknown_model(workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--model", "gpt-9", "hi"]) == 1
    line = one_line_error(capsys.readouterr().err)
    assert line == (
        "hotloop: unknown model 'gpt-9' at sim (the embedded simulator) (available: sim-balanced, sim-fast, sim-strong)"
    )
    assert session_lines(isolated_home) == []  # refused before the session starts, not at its first request


def test_model_is_discovered_when_none_is_configured(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_sim()
    try:
        assert main(["run", "--json", "--provider", "openai", "--base-url", server.base_url, "hello"]) == 0
    finally:
        server.stop()
    assert server.server.requests[0].model == "sim-fast"


def test_a_one_model_server_gets_every_request_on_its_model(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tiers, titles and auto's classifier all go to the one model a server lists, and the run says so."""
    server = start_sim(SimConfig(models={"/models/SmolLM2-135M-Instruct-Q8_0.gguf": TIERS["sim-balanced"]}))
    url = server.base_url
    try:
        assert main(["run", "--provider", "openai", "--base-url", url, "--tier", "auto", "hi", "Read README.md"]) == 0
        assert main(["run", "--provider", "openai", "--base-url", url, "--tier", "strong", "hello"]) == 0
        assert main(["run", "--provider", "openai", "--base-url", url, "--model", "sim-strong", "hello"]) == 1
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert f"fast = balanced = strong = SmolLM2-135M-Instruct-Q8_0.gguf: the only model {url} serves" in err
    assert f"unknown model 'sim-strong' at openai ({url}) (available: /models/SmolLM2-135M-Instruct-Q8_0.gguf)" in err
    asked = [r for r in server.server.requests if r.path.endswith("/chat/completions")]
    assert len(asked) >= 5  # two turns with a classifier request and a title, and one more turn
    assert {r.model for r in asked} == {"/models/SmolLM2-135M-Instruct-Q8_0.gguf"}
    assert main(["sessions", "list"]) == 0
    assert "openai/SmolLM2-135M-" in capsys.readouterr().out


def test_bad_tool_calls_become_error_results_and_the_run_goes_on(
    workspace: Path, isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = scenario_file(
        tmp_path,
        [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": '{"path": "README'},
                    {"name": "add", "arguments": {"a": "not a number", "b": 1}},
                    {"name": "nap", "arguments": {"seconds": 30}},
                ]
            },
            {"tool_calls": [{"name": "crash", "arguments": {}}]},
            {"text": "survived"},
        ],
    )
    write_config(isolated_home, f'tool_timeout = 0.5\n{FAST_SIM}scenario = "{scenario}"\n')
    # --yes: a server's readOnlyHint is believed only when the config trusts it, and these servers come from --mcp.
    code = main(
        ["run", "--yes", "--mcp", f"{sys.executable} {MCP_SERVER}", "--mcp", "/nonexistent/server --stdio", "go"]
    )
    out, err = capsys.readouterr()

    assert code == 0 and out.strip() == "survived"
    assert "Traceback" not in err
    assert "warning: MCP server 'server' failed to start: command not found: /nonexistent/server" in err
    (log,) = session_lines(isolated_home)
    finished = {e.name: e for e in map(decode, log) if isinstance(e, ToolFinished)}
    assert "are not valid JSON" in finished["read_file"].result
    assert finished["add"].status == "error" and "validation error" in finished["add"].result
    assert finished["nap"].result == "error: nap timed out after 0.5 s"
    assert finished["crash"].result == (
        "error: MCP server 'mcp_server' exited during the call (/mcp restart mcp_server starts it again)"
    )
    assert (
        "warning: MCP server 'mcp_server' stopped: the server exited; its tools are gone (add, crash, getenv, nap)"
        in err
    )


def test_config_show_masks_keys_and_path_honours_the_override(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdefghijklmnop1234")
    assert main(["config", "show"]) == 0
    shown = capsys.readouterr().out
    assert "sk-proj" not in shown and "set: ••••1234" in shown
    assert main(["config", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(isolated_home / "config.toml")


def test_the_installed_entry_point_runs_from_a_fresh_process(workspace: Path, isolated_home: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    result = subprocess.run(
        [sys.executable, "-m", "hotloop", "run", "Read README.md"],
        capture_output=True,
        text=True,
        env=env,
        cwd=workspace,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "# Demo project" in result.stdout and "Traceback" not in result.stderr


def test_the_app_refuses_a_bad_starting_point_before_taking_the_screen(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {
        (
            "--provider",
            "nope",
        ): "hotloop: unknown provider 'nope' (configured: anthropic, openai, sim, sim-anthropic, sim-responses)",
        ("--tier", "turbo"): "hotloop: unknown tier 'turbo' (tiers: fast, balanced, strong, auto)",
        ("--provider", "openai"): "hotloop: missing API key for provider 'openai': set OPENAI_API_KEY",
        ("--tier", "fast", "--model", "x"): "hotloop: pick a tier, or a provider and model, not both",
    }
    for argv, message in cases.items():
        assert main(list(argv)) == 2
        assert one_line_error(capsys.readouterr().err) == message


def test_run_takes_a_tier(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hotloop.agent.events import StepStarted

    assert main(["run", "--json", "--tier", "strong", "hello"]) == 0
    events = [decode(line) for line in capsys.readouterr().out.splitlines()]
    assert {e.model for e in events if isinstance(e, StepStarted)} == {"sim-strong"}


def test_run_switches_provider_between_prompts(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hotloop.agent.events import ProviderSwitched, StepStarted

    assert (
        main(
            ["run", "--json", "Read README.md", "/provider sim-anthropic", "Read README.md again", "/tier fast", "bye"]
        )
        == 0
    )
    events = [decode(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e.provider, e.model) for e in events if isinstance(e, StepStarted)] == [
        ("sim", "sim-balanced"),
        ("sim", "sim-balanced"),
        ("sim-anthropic", "sim-balanced"),
        ("sim-anthropic", "sim-balanced"),
        ("sim", "sim-fast"),
    ]
    switches = [e for e in events if isinstance(e, ProviderSwitched)]
    assert [(s.previous_provider, s.provider) for s in switches] == [("sim", "sim-anthropic"), ("sim-anthropic", "sim")]
    assert all(s.cold_tokens and s.context_tokens for s in switches)
    assert [e.reason for e in events if isinstance(e, TurnFinished)] == ["answer"] * 3
    (log,) = session_lines(isolated_home)
    assert sum(b'"type":"provider_switched"' in line for line in log) == 2


def test_the_switch_and_its_cost_are_printed(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hello", "/provider sim-anthropic", "hello again"]) == 0
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("switched ")]
    assert line.startswith("switched sim · sim-balanced → sim-anthropic · sim-balanced: ~")
    assert line.endswith("prompt tokens to prefill uncached (its cache is cold for this conversation)")


def test_run_rejects_commands_it_cannot_run_before_starting(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {
        (
            "hi",
            "/new",
            "again",
        ): "hotloop: /new works in the app; between prompts, hotloop run takes /model, /tier, /provider, /compact",
        (
            "hi",
            "/provider nope",
        ): "hotloop: unknown provider 'nope' (configured: anthropic, openai, sim, sim-anthropic, sim-responses)",
        (
            "hi",
            "/provider",
        ): (
            "hotloop: /provider needs an argument: /provider NAME [MODEL]: switch provider (and model); "
            "the conversation continues"
        ),
        ("/tier fast",): "hotloop: give a prompt to run, not only commands",
    }
    for prompts, message in cases.items():
        assert main(["run", *prompts]) == 2
        assert one_line_error(capsys.readouterr().err) == message
    assert session_lines(isolated_home) == []


def test_any_anthropic_compatible_endpoint_without_a_config_file(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str], sim: EmbeddedSimulator
) -> None:
    (isolated_home / "config.toml").unlink()
    assert main(["run", "--provider", "anthropic", "--base-url", sim.url, "--model", "sim-fast", "Read README.md"]) == 0
    out, err = capsys.readouterr()
    assert "# Demo project" in out and "✓ read_file" in err
    assert {r.path for r in sim.server.requests} == {"/v1/messages"}
    # The official endpoint needs a key; a gateway or proxy may not.
    assert main(["run", "--provider", "anthropic", "hi"]) == 2
    assert (
        one_line_error(capsys.readouterr().err)
        == "hotloop: missing API key for provider 'anthropic': set ANTHROPIC_API_KEY"
    )


def test_too_many_breakpoints_are_capped_with_a_warning(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_home, FAST_SIM + "[providers.sim-anthropic]\ncache_breakpoints = 6\n")
    assert main(["run", "--provider", "sim-anthropic", "hello"]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: config " in err
        and "providers.sim-anthropic.cache_breakpoints = 6 is more than the 4 Anthropic allows; using 4" in err
    )
    (log,) = session_lines(isolated_home)
    assert any(b'"type":"notice"' in line and b"cache_breakpoints = 6" in line for line in log)

    write_config(isolated_home, FAST_SIM + '[providers.sim-anthropic]\ncache_ttl = "2h"\n')
    assert main(["run", "--provider", "sim-anthropic", "hello"]) == 2
    assert one_line_error(capsys.readouterr().err).endswith(
        "providers.sim-anthropic.cache_ttl must be one of auto, 5m, 1h (got '2h')"
    )


def test_an_unknown_model_at_a_base_url_is_one_line_every_time(workspace: Path, sim: EmbeddedSimulator) -> None:
    """The server's discovery runs beside the refusal; its client used to close under it mid-way, a 50-line
    traceback about half the time. Six runs at once, each one line."""
    command = ["run", "--provider", "openai", "--base-url", sim.base_url, "--model", "nosuchmodel", "hi"]
    runs = [
        subprocess.Popen([sys.executable, "-m", "hotloop", *command], stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    said = [(run.communicate(timeout=60)[1], run.returncode) for run in runs]
    for err, code in said:
        assert code == 1
        assert one_line_error(err) == (
            f"hotloop: unknown model 'nosuchmodel' at openai ({sim.base_url}) "
            "(available: sim-balanced, sim-fast, sim-strong)"
        )


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_sim_serve_on_a_port_that_cannot_be_is_one_line(workspace: Path, port: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hotloop", "sim", "serve", "--port", port], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert (
        one_line_error(result.stderr) == f"hotloop: --port {port} is not a port: give 0 to 65535 (0 picks a free one)"
    )
