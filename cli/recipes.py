"""`hotloop recipe SERVER MODEL`: a launch command suited to agents for vLLM, llama.cpp, SGLang or Ollama,
each flag explained in one line, then how to point hotloop at the server.

Flag names were checked against each project's own documentation: vLLM's `vllm serve --help`,
llama.cpp's tools/server/README.md (its generated `--help` table), SGLang's
docs/advanced_features/server_arguments.md and tool_parser.md, Ollama's docs/context-length.mdx.

`hotloop vllm recipe MODEL` is the older spelling of `hotloop recipe vllm MODEL`.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from hotloop.cli.arguments import positive_int
from hotloop.providers.server_fixes import RECIPE_CONTEXT

SERVERS = ("vllm", "llama.cpp", "sglang", "ollama")
OPTIONS = ("gpus", "spec", "context", "slots")  # every server's options, as `recipe` takes them
# Tokens: room for an agent's system prompt, tools and a long conversation. The fix a server's refusal
# suggests names the same default, so it is written once, below the CLI.
CONTEXT = RECIPE_CONTEXT
SLOTS = 2  # llama.cpp: the agent's requests and hotloop's background ones, side by side

# Tool-call parsers by model family, from vLLM's tool-calling docs; the first pattern that matches wins.
_PARSERS = (
    (r"qwen3-?coder", "qwen3_coder"),
    (r"qwen|qwq", "hermes"),
    (r"hermes", "hermes"),
    (r"llama-?4", "llama4_pythonic"),
    (r"llama", "llama3_json"),
    (r"mistral|mixtral|codestral|devstral", "mistral"),
    (r"deepseek-?v3|deepseek-?r1", "deepseek_v3"),
    (r"gpt-oss", "openai"),
    (r"granite", "granite"),
    (r"glm-?4", "glm45"),
    (r"kimi", "kimi_k2"),
    (r"internlm", "internlm"),
)
# The same families under SGLang's names: FunctionCallParser.ToolCallParserEnum in
# python/sglang/srt/function_call/function_call_parser.py and docs/advanced_features/tool_parser.md.
# Llama 4 goes to `pythonic`, which the docs list for Llama 3.2 to 4 (the parser table has no llama4 today).
_SGLANG_PARSERS = (
    (r"qwen3-?coder", "qwen3_coder"),
    (r"qwen|qwq", "qwen25"),
    (r"hermes", "hermes"),
    (r"llama-?4", "pythonic"),
    (r"llama", "llama3"),
    (r"mistral|mixtral|codestral|devstral", "mistral"),
    (r"deepseek-?v3\.2", "deepseekv32"),
    (r"deepseek-?v3\.1", "deepseekv31"),
    (r"deepseek-?v3|deepseek-?r1", "deepseekv3"),
    (r"gpt-oss", "gpt-oss"),
    (r"glm-?4", "glm45"),
    (r"kimi", "kimi_k2"),
)
EAGLE3_PLACEHOLDER = "EAGLE3_DRAFT_MODEL"
# A Hugging Face repo as llama-server's -hf takes it: user/model, maybe :quant.
_HF_REPO = re.compile(r"[\w.-]+/[\w.-]+(:[\w.-]+)?")


@dataclass(frozen=True)
class Flag:
    args: tuple[str, ...]
    why: str


def add_recipes(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`hotloop recipe SERVER MODEL`, and `hotloop vllm recipe MODEL`."""
    recipe = commands.add_parser(
        "recipe", help="print a launch command suited to agents for a self-hosted server, each flag explained"
    )
    servers = recipe.add_subparsers(dest="server", metavar="SERVER", required=True)
    _vllm_recipe(servers.add_parser("vllm", help="vLLM: prefix caching, tool parsing, priority scheduling"))
    llama = servers.add_parser("llama.cpp", help="llama-server: --jinja for tools, --metrics, slots and context")
    llama.add_argument("model", metavar="MODEL", help="a .gguf file, or a Hugging Face repo (user/model[:quant])")
    _context_option(llama)
    llama.add_argument(
        "--slots",
        type=positive_int,
        default=SLOTS,
        metavar="N",
        help="requests served at once (default %(default)s)",
    )
    sglang = servers.add_parser("sglang", help="SGLang: tool parsing, metrics and cached-token counts")
    sglang.add_argument("model", metavar="MODEL", help="a Hugging Face model id, e.g. Qwen/Qwen2.5-Coder-32B-Instruct")
    sglang.add_argument("--gpus", type=positive_int, default=1, metavar="N", help="GPUs to split the model across")
    ollama = servers.add_parser("ollama", help="Ollama: a context long enough for an agent's prompt")
    ollama.add_argument("model", metavar="MODEL", help="an Ollama model, e.g. qwen2.5-coder:7b")
    _context_option(ollama)
    recipe.set_defaults(handler=_print_recipe)
    vllm = commands.add_parser("vllm", help="self-hosting with vLLM")
    vllm_commands = vllm.add_subparsers(dest="vllm_command", metavar="COMMAND", required=True)
    _vllm_recipe(vllm_commands.add_parser("recipe", help="the same as hotloop recipe vllm"))
    vllm.set_defaults(handler=_print_recipe)


def _vllm_recipe(recipe: argparse.ArgumentParser) -> None:
    recipe.add_argument("model", metavar="MODEL", help="a Hugging Face model id, e.g. Qwen/Qwen2.5-Coder-32B-Instruct")
    recipe.add_argument("--gpus", type=positive_int, default=1, metavar="N", help="GPUs to split the model across")
    recipe.add_argument("--spec", choices=("ngram", "eagle3"), help="add speculative decoding")
    recipe.set_defaults(server="vllm")


def _context_option(recipe: argparse.ArgumentParser) -> None:
    recipe.add_argument(
        "--context", type=positive_int, default=CONTEXT, metavar="N", help="context in tokens (default %(default)s)"
    )


def _print_recipe(args: argparse.Namespace) -> int:
    options = {name: value for name, value in vars(args).items() if name in OPTIONS}
    print(recipe(args.server, args.model, **options))
    return 0


def recipe(
    server: str,
    model: str,
    *,
    gpus: int = 1,
    spec: str | None = None,
    context: int = CONTEXT,
    slots: int = SLOTS,
) -> str:
    """The recipe for one of SERVERS; each takes the options that mean something to it."""
    if server == "vllm":
        return _vllm(model, gpus, spec)
    if server == "llama.cpp":
        return _llama_cpp(model, context, slots)
    if server == "sglang":
        return _sglang(model, gpus)
    if server == "ollama":
        return _ollama(model, context)
    raise ValueError(f"no recipe for {server!r}: choose one of {', '.join(SERVERS)}")


def tool_parser(model: str, parsers: Sequence[tuple[str, str]] = _PARSERS) -> tuple[str, bool]:
    """The `--tool-call-parser` for a model, and whether its family was recognised."""
    name = model.lower()
    return next(((parser, True) for pattern, parser in parsers if re.search(pattern, name)), ("hermes", False))


def _vllm(model: str, gpus: int, spec: str | None) -> str:
    chosen = _vllm_flags(model, gpus, spec)
    return _explained(
        _continued(("vllm", "serve", model), chosen),
        chosen,
        (
            "Then: hotloop --provider openai --base-url http://localhost:8000/v1",
            "hotloop finds the model, shows the server panel (F2) and sends background requests at priority 10.",
        ),
    )


def _vllm_flags(model: str, gpus: int, spec: str | None) -> list[Flag]:
    chosen = [
        Flag(
            ("--enable-prefix-caching",),
            "reuse the KV cache of repeated prompt prefixes: every agent step resends the conversation",
        ),
        Flag(("--enable-prompt-tokens-details",), "put cached-token counts in usage, so hotloop can show cache reads"),
        Flag(("--enable-auto-tool-choice",), "let the model decide when to call tools (tool_choice auto)"),
        _parser_flag(model, _PARSERS),
        Flag(
            ("--scheduling-policy", "priority"),
            "serve hotloop's interactive requests (priority 0) before its background ones (10)",
        ),
    ]
    if gpus > 1:
        chosen.append(Flag(("--tensor-parallel-size", str(gpus)), f"split the model across {gpus} GPUs"))
    if spec == "ngram":
        config = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 5, "prompt_lookup_min": 3}
        chosen.append(
            Flag(
                ("--speculative-config", json.dumps(config, separators=(",", ":"))),
                "draft tokens by matching n-grams of the prompt: cheap, and agents repeat file contents a lot",
            )
        )
    elif spec == "eagle3":
        config = {"method": "eagle3", "model": EAGLE3_PLACEHOLDER, "num_speculative_tokens": 3}
        chosen.append(
            Flag(
                ("--speculative-config", json.dumps(config, separators=(",", ":"))),
                f"draft tokens with an EAGLE-3 head trained for this model: replace {EAGLE3_PLACEHOLDER}",
            )
        )
    return chosen


def _llama_cpp(model: str, context: int, slots: int) -> str:
    chosen = _llama_cpp_flags(model, context, slots)
    return _explained(
        _continued(("llama-server",), chosen),
        chosen,
        (
            "Then: hotloop --provider openai --base-url http://localhost:8080/v1",
            "If the model's own template drops tools (GET /props: chat_template_caps.supports_tools is false), add",
            "--chat-template-file with a tool-use template from llama.cpp's models/templates/, e.g.",
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja.",
        ),
    )


def _llama_cpp_flags(model: str, context: int, slots: int) -> list[Flag]:
    return [
        _gguf_flag(model),
        # On by default in builds since late 2025 (ggml-org/llama.cpp#17524); older ones, and forks, need it.
        Flag(
            ("--jinja",),
            "use the model's chat template, which tools need: without it llama-server refuses any request carrying "
            "tools (recent builds turn it on anyway)",
        ),
        Flag(("--metrics",), "serve /metrics, which hotloop's server panel (F2) reads"),
        Flag(
            ("--ctx-size", str(context)),
            "the context in tokens (-c): room for an agent's growing prompt (the default, the model's full length, "
            "may not fit)",
        ),
        *_slot_flags(slots),
        # README: "min chunk size to attempt reusing from the cache via KV shifting" (default 0, off).
        Flag(
            ("--cache-reuse", "256"),
            "reuse cached chunks of 256+ tokens even after the prompt's prefix shifted, instead of recomputing them",
        ),
        Flag(("--port", "8080"), "where --base-url below points (llama-server's usual default)"),
    ]


def _sglang(model: str, gpus: int) -> str:
    chosen = _sglang_flags(model, gpus)
    return _explained(
        _continued(("python", "-m", "sglang.launch_server"), chosen),
        chosen,
        (
            "Then: hotloop --provider openai --base-url http://localhost:30000/v1",
            "hotloop finds the model and shows the server panel (F2); SGLang serves on port 30000 unless --port says.",
        ),
    )


def _sglang_flags(model: str, gpus: int) -> list[Flag]:
    chosen = [
        Flag(("--model-path", model), "a Hugging Face model id or a local directory"),
        _parser_flag(model, _SGLANG_PARSERS),
        Flag(("--enable-metrics",), "serve /metrics, which hotloop's server panel (F2) reads"),
        Flag(
            ("--enable-cache-report",),
            "put cached-token counts in usage (prompt_tokens_details), so hotloop can show cache reads",
        ),
    ]
    if gpus > 1:
        # `--tp` as SGLang's server_arguments.md writes it (the option is --tensor-parallel-size, alias --tp-size).
        chosen.append(Flag(("--tp", str(gpus)), f"split the model across {gpus} GPUs"))
    return chosen


def _ollama(model: str, context: int) -> str:
    setting = f"OLLAMA_CONTEXT_LENGTH={context}"
    chosen = [
        Flag(
            (setting,),
            "the context every model loads with: Ollama's default (2048 or 4096 tokens unless the GPU is big) "
            "silently truncates an agent's prompt, cutting the system prompt and tools, which come first",
        )
    ]
    return _explained(
        f"{setting} ollama serve\nollama pull {shlex.quote(model)}  # in another terminal",
        chosen,
        (
            f"Then: hotloop --provider openai --base-url http://localhost:11434/v1 --model {shlex.quote(model)}",
            "Ollama takes no launch flags for the rest. It has no /metrics, so the server panel (F2) stays empty,",
            "and it may report no cached tokens. `ollama ps` shows the context a loaded model got (CONTEXT).",
        ),
    )


def _parser_flag(model: str, parsers: Sequence[tuple[str, str]]) -> Flag:
    parser, known = tool_parser(model, parsers)
    return Flag(
        ("--tool-call-parser", parser),
        "read this model family's tool-call format"
        + ("" if known else " (family not recognised: check the model card for its parser)"),
    )


def _gguf_flag(model: str) -> Flag:
    """A .gguf file is served from disk; a Hugging Face repo is downloaded first (-hf)."""
    if not model.lower().endswith(".gguf") and _HF_REPO.fullmatch(model):
        return Flag(("-hf", model), "download the GGUF from this Hugging Face repo (:QUANT picks one; default Q4_K_M)")
    return Flag(("-m", model), "the GGUF file to serve")


def _slot_flags(slots: int) -> list[Flag]:
    if slots == 1:
        return [Flag(("--parallel", "1"), "one request at a time: hotloop's background requests wait for the agent's")]
    # With an explicit --parallel, llama-server splits the context: each slot gets ctx/N unless the KV cache is
    # unified (ggml-org/llama.cpp#16736; only an automatic slot count turns that on by itself, #17997).
    return [
        Flag(
            ("--parallel", str(slots)),
            f"{slots} slots, so hotloop's background requests need not wait for the agent's (-np)",
        ),
        Flag(
            ("--kv-unified",),
            "one KV cache shared by the slots, so one request may use the whole context; without it each slot "
            f"gets ctx/{slots}",
        ),
    ]


def _continued(head: Sequence[str], flags: Sequence[Flag]) -> str:
    """A shell command over several lines: the program, then a flag a line."""
    lines = [f"{shlex.join(head)} \\"]
    lines += [f"  {shlex.join(flag.args)}" + (" \\" if n < len(flags) - 1 else "") for n, flag in enumerate(flags)]
    return "\n".join(lines)


def _explained(command: str, flags: Sequence[Flag], then: Sequence[str]) -> str:
    width = max(len(flag.args[0]) for flag in flags)
    lines = [command, "", "Why each flag:"]
    lines += [f"  {flag.args[0]:<{width}}  {flag.why}" for flag in flags]
    return "\n".join([*lines, "", *then])
