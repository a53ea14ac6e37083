"""The one line that says which launch flag fixes a self-hosted server that refused, or cut, what an agent sent.

Pure functions over what a server answered, for the providers to call: `fix_for` when a request
is refused, `room_left` when its output cap was, `template_fix` on llama.cpp's /props and
`truncated_prompt` on the usage a response reports (those two servers fail silently there). Each
text matched is quoted below with where it comes from; matching is case-insensitive and avoids
quotes, so a message read raw or still JSON-escaped in an error body matches alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

RECIPE_CONTEXT = 32768  # the context `hotloop recipe` starts a server with (Ollama among them)
BYTES_PER_TOKEN = 4  # a rough figure for English and JSON; the truncation test allows 1.5× for its error
_TRUNCATION_SLACK = 16  # tokens around a power of two (Ollama's num_keep, 4 by default, shifts the cut)

# llama.cpp, examples/server/utils.hpp (since tools/server/), oaicompat chat params: a server started without
# --jinja throws "tools param requires --jinja flag" for a request with tools, "Unsupported param: tool_choice" for
# one with tool_choice. The status is 500 (server_error), 400 in some builds, 200 when it arrives inside a stream.
_NO_JINJA = re.compile(r"requires --jinja|unsupported param: tool_choice", re.IGNORECASE)
# Builds from before Jinja templates (ggml-org/llama.cpp#11016, January 2025): "Unsupported param: tools" (#10920).
_PRE_JINJA = re.compile(r"unsupported param: tools\b", re.IGNORECASE)
# Builds from before streamed tool calls (#12379, May 2025), the same function: "Cannot use tools with stream".
_NO_STREAMED_TOOLS = re.compile(r"cannot use tools with stream", re.IGNORECASE)
# vLLM, vllm/entrypoints/openai/serving_chat.py create_chat_completion (400): "\"auto\" tool choice requires
# --enable-auto-tool-choice and --tool-call-parser to be set"; a request with tools and no tool_choice is "auto".
_VLLM_NO_AUTO_TOOLS = re.compile(r"requires --enable-auto-tool-choice", re.IGNORECASE)
# transformers' apply_chat_template, under vLLM and SGLang (400): "As of transformers v4.44, default chat template
# is no longer allowed, so you must provide a chat template if the tokenizer does not define one."
_NO_TEMPLATE = re.compile(r"default chat template is no longer allowed", re.IGNORECASE)
# Ollama, server/images.go CheckCapabilities (400), for a model whose template takes no tools:
# "registry.ollama.ai/library/gemma3:4b does not support tools".
_OLLAMA_NO_TOOLS = re.compile(r"([\w./:-]+) does not support tools", re.IGNORECASE)
# llama.cpp, tools/server/server-context.cpp (400, exceed_context_size_error): "request (5274 tokens) exceeds the
# available context size (4096 tokens), try increasing it", the size being a slot's; older builds "the request
# exceeds the available context size, try increasing it". Ollama builds that run llama-server pass it on.
_OVER_CONTEXT = re.compile(
    r"(?:request \((\d+) tokens\) )?exceeds the available context size(?: \((\d+) tokens\))?", re.IGNORECASE
)
# Ollama's own: runner/ollamarunner/runner.go "the input length exceeds the context length" (errorInputTooLong) and
# llm/llama_server.go "the prompt is longer than the context length currently available to the model; …".
_OLLAMA_OVER_CONTEXT = re.compile(
    r"input length exceeds the context length|prompt is longer than the context length", re.IGNORECASE
)

# vLLM, vllm/entrypoints/openai/serving_engine.py _validate_input (400): "'max_tokens' or 'max_completion_tokens' is
# too large: 8192. This model's maximum context length is 4096 tokens and your request has 2778 input tokens
# (8192 > 4096 - 2778)." SGLang (400): "Requested token count exceeds the model's maximum context length of 4096
# tokens. You requested a total of 10970 tokens: 2778 tokens from the input messages and 8192 tokens for the
# completion."
_VLLM_ROOM = re.compile(r"\((\d+) > (\d+) - (\d+)\)")
_SGLANG_ROOM = re.compile(r"maximum context length of (\d+) tokens.{0,80}?: (\d+) tokens from the input", re.IGNORECASE)


def room_left(message: str) -> int | None:
    """The output tokens a server that refused a request's cap says its window has left: the window minus
    the prompt, both as it counted them; None if the refusal is about something else, or nothing is left."""
    if (found := _VLLM_ROOM.search(message)) is not None:
        room = int(found[2]) - int(found[3])
    elif (found := _SGLANG_ROOM.search(message)) is not None:
        room = int(found[1]) - int(found[2])
    else:
        return None
    return room if room > 0 else None


def fix_for(server_kind: str | None, status: int | None, message: str) -> str | None:
    """The one line saying what to restart a server with so it takes the request it refused; None if unknown.

    `server_kind` is ServerInfo.kind (vllm, sglang, llama.cpp, ollama, openai-compatible) or None.
    The text decides, not `status`: one refusal arrives as 400, 500 or inside a 200 stream, by build.
    """
    return next((fix for rule in _RULES if (fix := rule(server_kind, message)) is not None), None)


def template_fix(props: Mapping[str, object]) -> str | None:
    """From llama.cpp's /props: a chat template with no place for tools, which llama-server then drops unsaid."""
    caps = props.get("chat_template_caps")
    if isinstance(caps, Mapping) and caps.get("supports_tools") is False:
        return (
            "this model's chat template has no place for tools, so llama-server drops them: start it with "
            "--chat-template-file and a tool-use template from llama.cpp's models/templates/"
        )
    return None


def truncated_prompt(server_kind: str | None, prompt_tokens_reported: int, request_bytes: int) -> str | None:
    """Ollama cuts a prompt longer than its context without a word; the prompt tokens it reports give it away.

    Ollama keeps num_ctx tokens (older runners) or num_keep and half the rest (those built on llama-server,
    whose log reads "truncating input prompt limit=2050 prompt=8707 keep=4 new=2050" for a 4096 context):
    either way a count at, or just past half, a power of two, for a request clearly larger than that.
    Its other cut, dropping whole old messages to fit, leaves no such mark.
    """
    if server_kind != "ollama" or prompt_tokens_reported <= 0:
        return None
    estimate = request_bytes // BYTES_PER_TOKEN
    if estimate <= 1.5 * prompt_tokens_reported or not _near_a_power_of_two(prompt_tokens_reported):
        return None
    return f"Ollama truncated the prompt to {prompt_tokens_reported} tokens: {_restart_ollama(estimate)}"


def _llama_cpp_tools(server_kind: str | None, message: str) -> str | None:
    if _NO_JINJA.search(message):
        return (
            "llama-server takes tools only when started with --jinja: restart it with --jinja "
            "(hotloop recipe llama.cpp MODEL)"
        )
    if _PRE_JINJA.search(message):
        return (
            "this llama-server predates tool calling: update llama.cpp and start it with --jinja "
            "(hotloop recipe llama.cpp MODEL)"
        )
    if _NO_STREAMED_TOOLS.search(message):
        return "this llama-server cannot stream tool calls: update llama.cpp (they stream since May 2025)"
    return None


def _vllm_tools(server_kind: str | None, message: str) -> str | None:
    if _VLLM_NO_AUTO_TOOLS.search(message):
        return (
            "vLLM refuses tools unless started with --enable-auto-tool-choice --tool-call-parser PARSER "
            "(hotloop recipe vllm MODEL names the parser)"
        )
    return None


def _no_template(server_kind: str | None, message: str) -> str | None:
    if _NO_TEMPLATE.search(message):
        return "the model has no chat template: start the server with --chat-template FILE, one that renders tools"
    return None


def _ollama_tools(server_kind: str | None, message: str) -> str | None:
    found = _OLLAMA_NO_TOOLS.search(message)
    if found is None:
        return None
    model = found[1].removeprefix("registry.ollama.ai/library/")
    return f"Ollama's template for {model} takes no tools: choose a model whose `ollama show` lists tools"


def _over_context(server_kind: str | None, message: str) -> str | None:
    if _OLLAMA_OVER_CONTEXT.search(message):
        return f"the prompt is over Ollama's context: {_restart_ollama(None)}"
    found = _OVER_CONTEXT.search(message)
    if found is None:
        return None
    needed = int(found[1]) if found[1] else None
    prompt = f"the prompt ({needed} tokens)" if needed else "the prompt"
    if server_kind == "ollama":
        return f"{prompt} is over Ollama's context: {_restart_ollama(needed)}"
    slot = f" ({found[2]} tokens a slot)" if found[2] else ""
    return (
        f"{prompt} is over llama-server's context{slot}: raise --ctx-size, or add --kv-unified so one request "
        "may use all of it (hotloop recipe llama.cpp MODEL)"
    )


_RULES: tuple[Callable[[str | None, str], str | None], ...] = (
    _llama_cpp_tools,
    _vllm_tools,
    _no_template,
    _ollama_tools,
    _over_context,
)


def _restart_ollama(tokens: int | None) -> str:
    """Start Ollama with a context twice the prompt, as a power of two, and never below the recipe's."""
    context = RECIPE_CONTEXT if tokens is None else max(RECIPE_CONTEXT, 1 << (2 * tokens - 1).bit_length())
    recipe = "hotloop recipe ollama MODEL" + ("" if context == RECIPE_CONTEXT else f" --context {context}")
    return f"start it with OLLAMA_CONTEXT_LENGTH={context} ({recipe})"


def _near_a_power_of_two(tokens: int) -> bool:
    """Within a few tokens of 1024, 2048, … 131072: where Ollama's cut leaves a prompt."""
    return any(abs(tokens - (1 << power)) <= _TRUNCATION_SLACK for power in range(10, 18))
