"""`hotloop recipe SERVER MODEL`, and the one-line fixes for a server that refuses or cuts what an agent sends.

The recipes run through the real command line. The fixes are fed what servers really answer:
each text below is quoted with where it was found.
"""

from __future__ import annotations

import json

import pytest

from hotloop.cli import main
from hotloop.providers.server_fixes import fix_for, template_fix, truncated_prompt

from support import FIXTURES


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[list[str], list[str], list[str]]:
    """A recipe's three parts: the command's lines, the flags explained, and what follows."""
    assert main(list(argv)) == 0
    command, _, rest = capsys.readouterr().out.partition("\n\nWhy each flag:\n")
    why, _, then = rest.partition("\n\n")
    return command.splitlines(), [line.split()[0] for line in why.splitlines()], then.splitlines()


def flag_lines(command: list[str]) -> list[str]:
    """The flags of a command written a flag a line, without the line continuations."""
    return [line.strip().removesuffix(" \\") for line in command[1:]]


def test_recipe_vllm_prints_what_the_older_vllm_recipe_does(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["Qwen/Qwen3-Coder-30B-A3B-Instruct", "--gpus", "2", "--spec", "eagle3"]
    assert main(["recipe", "vllm", *args]) == 0
    new = capsys.readouterr().out
    assert main(["vllm", "recipe", *args]) == 0
    assert capsys.readouterr().out == new
    assert new.startswith("vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct \\\n")
    assert "--tool-call-parser qwen3_coder" in new and "--tensor-parallel-size 2" in new
    assert "Then: hotloop --provider openai --base-url http://localhost:8000/v1" in new


def test_llama_cpp_from_a_gguf_file_turns_on_tools_metrics_slots_and_cache_reuse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command, why, then = run(capsys, "recipe", "llama.cpp", "models/qwen2.5-coder-7b-q4_k_m.gguf")
    assert command[0] == "llama-server \\"
    assert flag_lines(command) == [
        "-m models/qwen2.5-coder-7b-q4_k_m.gguf",
        "--jinja",
        "--metrics",
        "--ctx-size 32768",
        "--parallel 2",
        "--kv-unified",
        "--cache-reuse 256",
        "--port 8080",
    ]
    assert why == [line.split()[0] for line in flag_lines(command)]
    assert then[0] == "Then: hotloop --provider openai --base-url http://localhost:8080/v1"
    assert "--chat-template-file" in " ".join(then)


def test_llama_cpp_downloads_a_hugging_face_repo_and_one_slot_needs_no_shared_cache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = "ggml-org/Qwen2.5-Coder-7B-Instruct-Q8_0-GGUF:Q8_0"
    command, why, _ = run(capsys, "recipe", "llama.cpp", repo, "--context", "65536", "--slots", "1")
    flags = flag_lines(command)
    assert flags[0] == f"-hf {repo}"
    assert "--ctx-size 65536" in flags and "--parallel 1" in flags and "--kv-unified" not in flags
    assert len(why) == len(flags)


def test_llama_cpp_says_what_slots_do_to_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "llama.cpp", "m.gguf", "--slots", "4"]) == 0
    out = capsys.readouterr().out
    assert "--parallel 4 \\" in out and "without it each slot gets ctx/4" in out


def test_sglang_reports_metrics_and_cached_tokens_and_parses_the_family_s_tool_calls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command, why, then = run(capsys, "recipe", "sglang", "Qwen/Qwen2.5-Coder-32B-Instruct", "--gpus", "2")
    assert command[0] == "python -m sglang.launch_server \\"
    assert flag_lines(command) == [
        "--model-path Qwen/Qwen2.5-Coder-32B-Instruct",
        "--tool-call-parser qwen25",
        "--enable-metrics",
        "--enable-cache-report",
        "--tp 2",
    ]
    assert len(why) == 5
    assert then[0] == "Then: hotloop --provider openai --base-url http://localhost:30000/v1"


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "pythonic"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseekv31"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseekv3"),
        ("openai/gpt-oss-20b", "gpt-oss"),
        ("mistralai/Devstral-Small-2505", "mistral"),
    ],
)
def test_sglang_uses_its_own_parser_names(capsys: pytest.CaptureFixture[str], model: str, parser: str) -> None:
    command, _, _ = run(capsys, "recipe", "sglang", model)
    assert f"--tool-call-parser {parser}" in flag_lines(command)


def test_sglang_says_when_it_does_not_know_the_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "sglang", "acme/unknown-7b"]) == 0
    out = capsys.readouterr().out
    assert "--tool-call-parser hermes" in out and "family not recognised" in out and "--tp" not in out


def test_ollama_needs_a_context_long_enough_for_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    command, why, then = run(capsys, "recipe", "ollama", "qwen2.5-coder:7b")
    assert command[0] == "OLLAMA_CONTEXT_LENGTH=32768 ollama serve"
    assert command[1].startswith("ollama pull qwen2.5-coder:7b")
    assert why == ["OLLAMA_CONTEXT_LENGTH=32768"]
    assert then[0] == "Then: hotloop --provider openai --base-url http://localhost:11434/v1 --model qwen2.5-coder:7b"
    assert "no /metrics" in " ".join(then)
    command, _, _ = run(capsys, "recipe", "ollama", "qwen2.5-coder:7b", "--context", "65536")
    assert command[0] == "OLLAMA_CONTEXT_LENGTH=65536 ollama serve"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["recipe", "tgi", "m"], "argument SERVER: invalid choice: 'tgi'"),
        (["recipe", "vllm"], "the following arguments are required: MODEL"),
        (["recipe", "ollama", "m", "--gpus", "2"], "unrecognized arguments: --gpus 2"),  # another server's option
        (["recipe", "llama.cpp", "m.gguf", "--slots", "0"], "argument --slots: must be at least 1"),
    ],
)
def test_a_bad_recipe_request_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


# --- fix_for ------------------------------------------------------------------------------------------------------

# llama.cpp's refusal as the server sends it: the body quoted in defilantech/LLMKube#126 and g0t4/ask-openai.nvim,
# thrown in llama.cpp's examples/server/utils.hpp when a request carries tools and --jinja is off.
NO_JINJA = '{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}'


@pytest.mark.parametrize("status", [500, 400, 200, None])
def test_llama_cpp_without_jinja_is_told_to_restart_with_it(status: int | None) -> None:
    fix = fix_for("llama.cpp", status, NO_JINJA)
    assert fix is not None and "--jinja" in fix and "hotloop recipe llama.cpp" in fix


def test_the_jinja_refusal_is_recognised_whatever_the_server_was_taken_for() -> None:
    assert fix_for(None, 500, "tools param requires --jinja flag") == fix_for("llama.cpp", 500, NO_JINJA)
    # The same function, for a request carrying tool_choice.
    assert fix_for("openai-compatible", 500, "Unsupported param: tool_choice") == fix_for("llama.cpp", 500, NO_JINJA)


def test_older_llama_cpp_builds_are_told_to_update() -> None:
    # ggml-org/llama.cpp#10920 (build 4369, before Jinja templates).
    old = fix_for("llama.cpp", 500, '{"code":500,"message":"Unsupported param: tools","type":"server_error"}')
    assert old is not None and "update llama.cpp" in old and "--jinja" in old
    # simonw/llm-llama-server#3: a build from before streamed tool calls (ggml-org/llama.cpp#12379).
    body = "{'error': {'code': 500, 'message': 'Cannot use tools with stream', 'type': 'server_error'}}"
    no_stream = fix_for("llama.cpp", 500, body)
    assert no_stream is not None and "stream tool calls" in no_stream


def test_vllm_without_auto_tool_choice_is_told_both_flags() -> None:
    # vllm/entrypoints/openai/serving_chat.py create_chat_completion, as its error body carries it.
    message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    body = json.dumps({"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400})
    for text in (message, body):  # read out of the body, or still JSON-escaped in it
        fix = fix_for("vllm", 400, text)
        assert fix is not None and "--enable-auto-tool-choice --tool-call-parser" in fix and "recipe vllm" in fix


def test_a_model_with_no_chat_template_is_told_to_bring_one() -> None:
    # transformers' apply_chat_template under vLLM, as openai.BadRequestError printed it (a blog quoting the 400).
    message = (
        "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template "
        "if the tokenizer does not define one. None"
    )
    fix = fix_for("vllm", 400, message)
    assert fix is not None and "--chat-template" in fix


def test_an_ollama_model_whose_template_takes_no_tools_is_named() -> None:
    # Ollama's CheckCapabilities, as an HTTP 400 reported by a tool-calling probe against gemma3:4b.
    fix = fix_for("ollama", 400, '{"error":"registry.ollama.ai/library/gemma3:4b does not support tools"}')
    assert fix is not None and "gemma3:4b" in fix and "registry.ollama.ai" not in fix and "ollama show" in fix


def test_llama_cpp_over_its_context_is_told_about_the_context_and_its_slots() -> None:
    # tools/server/server-context.cpp, the body as a user posted it (exceed_context_size_error).
    body = (
        '{"error":{"code":400,"message":"request (5274 tokens) exceeds the available context size (4096 tokens), '
        'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5274,"n_ctx":4096}}'
    )
    fix = fix_for("llama.cpp", 400, body)
    assert fix is not None
    assert "5274 tokens" in fix and "4096 tokens a slot" in fix and "--ctx-size" in fix and "--kv-unified" in fix
    # Older builds say it without the figures.
    older = fix_for("llama.cpp", 400, "the request exceeds the available context size, try increasing it")
    assert older is not None and older.startswith("the prompt is over llama-server's context: raise --ctx-size")


def test_ollama_over_its_context_is_told_the_context_to_start_with() -> None:
    # Ollama builds that run llama-server pass its error on (a user's log, 4096 being Ollama's default).
    fix = fix_for("ollama", 400, "request (5274 tokens) exceeds the available context size (4096 tokens)")
    assert fix == (
        "the prompt (5274 tokens) is over Ollama's context: start it with OLLAMA_CONTEXT_LENGTH=32768 "
        "(hotloop recipe ollama MODEL)"
    )
    # A 41,796-token prompt (a coding agent's system prompt, in a user's write-up) needs more than the recipe's.
    bigger = fix_for("ollama", 400, "request (41796 tokens) exceeds the available context size (32768 tokens)")
    assert bigger is not None and "OLLAMA_CONTEXT_LENGTH=131072" in bigger and "--context 131072" in bigger
    # Ollama's own runners: errorInputTooLong, and llm/llama_server.go with context shift off.
    for message in (
        "the input length exceeds the context length",
        "the prompt is longer than the context length currently available to the model; shorten the prompt, "
        "adjust the context length in settings, or use a model with a longer context length",
    ):
        assert fix_for(None, 400, message) == "the prompt is over Ollama's context: " + (
            "start it with OLLAMA_CONTEXT_LENGTH=32768 (hotloop recipe ollama MODEL)"
        )


@pytest.mark.parametrize(
    "message",
    [
        "Connection refused",
        'model "qwen3:8b" not found, try pulling it first',  # Ollama, a model not pulled
        # vLLM over its context: the fix is a shorter prompt or a bigger GPU, not a flag.
        "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens",
        "Rate limit reached for requests",
        "",
    ],
)
def test_other_refusals_have_no_fix(message: str) -> None:
    assert fix_for("vllm", 400, message) is None


# --- template_fix -------------------------------------------------------------------------------------------------


def test_a_llama_cpp_template_with_no_place_for_tools_is_noticed_in_props() -> None:
    # Recorded from a real llama-server serving SmolLM2-135M-Instruct (tests/fixtures/llamacpp/PROVENANCE.md):
    # its own template drops tools, which took --chat-template-file to fix.
    props = json.loads((FIXTURES / "llamacpp" / "props.json").read_text())
    assert props["chat_template_caps"]["supports_tools"] is False
    fix = template_fix(props)
    assert fix is not None and "--chat-template-file" in fix
    assert template_fix({**props, "chat_template_caps": {"supports_tools": True}}) is None
    assert template_fix({}) is None  # a build older than chat_template_caps says nothing


# --- truncated_prompt ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "sent"),
    [
        # "truncating input prompt limit=2050 prompt=8707 keep=4 new=2050": Ollama's default 4096 context, llama-server
        # runner (a 33-tool agent prompt, quoted in a user's debugging notes).
        (2050, 8707),
        # "limit=2051 prompt=4398 keep=5 new=2051": the same context, a benchmark's log (JavaFixBench).
        (2051, 4398),
        # "limit=4096 prompt=71828": an older runner keeps the whole context (a recommender's troubleshooting notes).
        (4096, 71828),
        # "limit=4095 prompt=5000 keep=4 new=4095": one under (Open WebUI behind Ollama, a deployment's notes).
        (4095, 6500),
    ],
)
def test_ollama_truncating_a_prompt_is_noticed_from_its_usage(reported: int, sent: int) -> None:
    fix = truncated_prompt("ollama", reported, sent * 4)
    assert fix is not None and fix.startswith(f"Ollama truncated the prompt to {reported} tokens: start it with ")


def test_the_truncation_fix_asks_for_a_context_the_prompt_fits() -> None:
    assert truncated_prompt("ollama", 2050, 8707 * 4) == (
        "Ollama truncated the prompt to 2050 tokens: start it with OLLAMA_CONTEXT_LENGTH=32768 "
        "(hotloop recipe ollama MODEL)"
    )
    fix = truncated_prompt("ollama", 4096, 71828 * 4)
    assert fix is not None and fix.endswith(
        "OLLAMA_CONTEXT_LENGTH=262144 (hotloop recipe ollama MODEL --context 262144)"
    )


@pytest.mark.parametrize(
    ("kind", "reported", "request_bytes"),
    [
        ("vllm", 2050, 8707 * 4),  # only Ollama truncates silently
        (None, 2050, 8707 * 4),
        ("ollama", 3000, 8707 * 4),  # nowhere near a power of two: Ollama dropped old messages, or it is no cut
        ("ollama", 2048, 2048 * 4),  # a prompt that happens to be 2048 tokens long
        ("ollama", 4096, 4938 * 4),  # limit=4096 prompt=4938: a cut, but too small to tell from a rough estimate
        ("ollama", 0, 10_000),
    ],
)
def test_a_prompt_that_is_not_clearly_cut_says_nothing(kind: str | None, reported: int, request_bytes: int) -> None:
    assert truncated_prompt(kind, reported, request_bytes) is None
