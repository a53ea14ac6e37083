"""`hotloop vllm recipe MODEL`: a vLLM launch command suited to agents, each flag explained in one line."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

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
EAGLE3_PLACEHOLDER = "EAGLE3_DRAFT_MODEL"


@dataclass(frozen=True)
class Flag:
    args: tuple[str, ...]
    why: str


def tool_parser(model: str) -> tuple[str, bool]:
    """The `--tool-call-parser` for a model, and whether its family was recognised."""
    name = model.lower()
    return next(((parser, True) for pattern, parser in _PARSERS if re.search(pattern, name)), ("hermes", False))


def flags(model: str, gpus: int = 1, spec: str | None = None) -> list[Flag]:
    parser, known = tool_parser(model)
    chosen = [
        Flag(
            ("--enable-prefix-caching",),
            "reuse the KV cache of repeated prompt prefixes: every agent step resends the conversation",
        ),
        Flag(("--enable-prompt-tokens-details",), "put cached-token counts in usage, so hotloop can show cache reads"),
        Flag(("--enable-auto-tool-choice",), "let the model decide when to call tools (tool_choice auto)"),
        Flag(
            ("--tool-call-parser", parser),
            "read this model family's tool-call format"
            + ("" if known else " (family not recognised: check the model card for its parser)"),
        ),
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


def recipe(model: str, gpus: int = 1, spec: str | None = None) -> str:
    chosen = flags(model, gpus, spec)
    lines = [f"vllm serve {shlex.quote(model)} \\"]
    lines += [
        f"  {' '.join(shlex.quote(a) for a in flag.args)}" + (" \\" if n < len(chosen) - 1 else "")
        for n, flag in enumerate(chosen)
    ]
    width = max(len(flag.args[0]) for flag in chosen)
    lines += ["", "Why each flag:"]
    lines += [f"  {flag.args[0]:<{width}}  {flag.why}" for flag in chosen]
    lines += [
        "",
        "Then: hotloop --provider openai --base-url http://localhost:8000/v1",
        "hotloop finds the model, shows the server panel (F2) and sends background requests at priority 10.",
    ]
    return "\n".join(lines)
