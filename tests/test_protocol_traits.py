"""Each wire protocol's traits (`providers/protocols.py`) hold on the wire: the real recorded streams, the requests the
providers send, the simulator's refusal; and no module outside `providers/` and `sim/` compares a protocol's name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import msgspec
import openai
import pytest

from hotloop.config.settings import KIND_WIRES, Kind, ProviderSettings
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.events import Finished
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.protocols import BY_PATH, Wire
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.watch.reading import ResponseReader
from hotloop.watch.wire import read_request

from support import (
    FIXTURES,
    close_clients,  # noqa: F401 (autouse: closes the SDK clients a test opens)
    openai_client,
)

ROOT = Path(__file__).resolve().parent.parent
# Where protocol names are the subject: the protocols themselves, and the simulator, which stands alone.
OWNERS = {"providers", "sim", "tests", "benchmarks", "screenshots", ".venv", "build"}
# Every spelling a protocol has had: the logged names, the watch's old one, the config's simulator kinds.
NAMES = {wire.value for wire in Wire} | {"openai-chat", "sim-anthropic", "sim-responses"}

# Real recordings (tests/fixtures/PROVENANCE.md) by the protocol they speak. Plain text answers: a tool call's
# arguments stream in pieces of any size on every protocol, so only text shows what a delta carries.
TEXT = {
    Wire.OPENAI_CHAT: ["llamacpp/01_plain_stream.sse", "llamacpp/02_long_prompt_first.sse"],
    Wire.OPENAI_RESPONSES: ["llamacpp/06_responses_plain.sse"],
}
ANTHROPIC_API = ["anthropic_tool_use.sse", "anthropic_compaction.sse"]  # from api.anthropic.com itself
TOOL_CALLS = {
    Wire.OPENAI_CHAT: ["llamacpp/05_tool_call_stream_hermes_template.sse", "openai_chat_parallel_tools.sse"],
    Wire.OPENAI_RESPONSES: ["llamacpp/07_responses_tool_call.sse", "openai_responses_tool_call.sse"],
}
RECORDED = {
    Wire.OPENAI_CHAT: [*TEXT[Wire.OPENAI_CHAT], *TOOL_CALLS[Wire.OPENAI_CHAT]],
    Wire.OPENAI_RESPONSES: [*TEXT[Wire.OPENAI_RESPONSES], *TOOL_CALLS[Wire.OPENAI_RESPONSES]],
    Wire.ANTHROPIC: [*ANTHROPIC_API, "llamacpp/09_anthropic_plain.sse", "llamacpp/10_anthropic_tool_call.sse"],
}


def replayed(wire: Wire, name: str) -> ResponseReader:
    """A recording read as the watch reads a stream (the providers' parsers), a block at a time."""
    reader = ResponseReader(wire, "recorded", name, started=0.0, streamed=True)
    data = (FIXTURES / name).read_bytes()
    for at, start in enumerate(range(0, len(data), 64), 1):
        reader.feed(data[start : start + 64], at / 1000)
    reader.end(1.0)
    assert not reader.problem, reader.problem
    return reader


@pytest.mark.parametrize(("wire", "name"), [(wire, name) for wire, names in TEXT.items() for name in names])
def test_a_per_delta_protocol_streams_a_token_a_delta(wire: Wire, name: str) -> None:
    """On Chat Completions and Responses a text delta is one token: the deltas count the tokens that streamed, the
    reported count holding at most the end-of-turn token besides, so `per_delta` rates count deltas."""
    assert wire.traits.per_delta
    step = replayed(wire, name).step
    assert step.usage is not None and step.usage.output is not None
    assert step.usage.output - 1 <= step.streamed <= step.usage.output


@pytest.mark.parametrize("name", ANTHROPIC_API)
def test_anthropic_streams_several_tokens_a_delta(name: str) -> None:
    """Anthropic's API sends several tokens a delta: counting deltas would give a fraction of the rate, so its rate
    comes from the reported output count (`per_delta` false)."""
    assert not Wire.ANTHROPIC.traits.per_delta
    step = replayed(Wire.ANTHROPIC, name).step
    assert step.usage is not None and step.usage.output is not None
    assert 0 < step.streamed * 3 < step.usage.output


@pytest.mark.parametrize("wire", list(Wire))
def test_what_usage_each_protocol_reports_is_what_its_recordings_carry(wire: Wire) -> None:
    """Beside input and output, the recordings of a protocol carry exactly the counts its trait names: Anthropic
    cache reads and writes and no reasoning count; both OpenAI protocols cached reads and reasoning tokens."""
    carried: set[str] = set()
    for name in RECORDED[wire]:
        usage = replayed(wire, name).step.usage
        assert usage is not None
        carried |= {field for field in ("cache_read", "cache_write", "reasoning") if getattr(usage, field) is not None}
    assert carried == wire.traits.reports


def provider(
    wire: Wire, sim: EmbeddedSimulator, max_tokens: int | None = None, ttl: str = "5m"
) -> AnthropicProvider | OpenAIChatProvider | OpenAIResponsesProvider:
    if wire is Wire.ANTHROPIC:
        options = ProviderOptions(name="sim-anthropic", model="sim-fast", base_url=sim.url, max_retries=0)
        return AnthropicProvider(options, max_tokens=max_tokens, cache_ttl=ttl)
    options = ProviderOptions(name="sim", model="sim-fast", base_url=sim.base_url, max_retries=0)
    if wire is Wire.OPENAI_RESPONSES:
        return OpenAIResponsesProvider(options, max_tokens=max_tokens, prompt_cache_key=True)
    return OpenAIChatProvider(options, max_tokens=max_tokens, prompt_cache_key=True)


async def sent(
    sending: AnthropicProvider | OpenAIChatProvider | OpenAIResponsesProvider, request: ChatRequest
) -> bytes:
    """The body `sending` would post for `request`; its client closed."""
    try:
        return sending.request_body(request)
    finally:
        await sending.aclose()


@pytest.mark.parametrize("wire", list(Wire))
async def test_every_protocol_answers_a_one_token_request_raised_to_its_minimum(
    wire: Wire, sim: EmbeddedSimulator
) -> None:
    """A pre-warm asks for one token: each provider sends at least its protocol's minimum cap, which the server
    takes (the simulator refuses what the real APIs refuse), and the answer finishes."""
    sending = provider(wire, sim)
    request = ChatRequest("", (), (UserMessage("hi"),), max_tokens=1)
    try:
        assert sending.cap(request) == wire.traits.min_cap
        events = [event async for event in sending.stream(request)]
    finally:
        await sending.aclose()
    assert any(isinstance(event, Finished) for event in events)


async def test_the_responses_minimum_is_the_apis_own(sim: EmbeddedSimulator) -> None:
    """One token under the Responses minimum, sent on the official SDK, is refused with OpenAI's 400 naming it."""
    api = openai_client(sim)
    minimum = Wire.OPENAI_RESPONSES.traits.min_cap
    with pytest.raises(openai.BadRequestError) as refused:
        await api.responses.create(model="sim-fast", input="hi", max_output_tokens=minimum - 1)
    assert f"Expected a value >= {minimum}" in str(refused.value)
    answered = await api.responses.create(model="sim-fast", input="hi", max_output_tokens=minimum)
    assert answered.status in ("completed", "incomplete")


@pytest.mark.parametrize("wire", list(Wire))
async def test_the_cap_a_provider_sends_is_a_field_the_watch_reads_back(wire: Wire, sim: EmbeddedSimulator) -> None:
    """Each provider writes its cap in one of its protocol's cap fields, and the watch, reading a request by the
    same trait, finds it: the two ends of the wire agree on the field's name."""
    body = await sent(provider(wire, sim, max_tokens=512), ChatRequest("system", (), (UserMessage("hi"),)))
    document = msgspec.json.decode(body)
    assert any(document.get(field) == 512 for field in wire.traits.cap_fields)
    assert read_request(wire, body, {}).cap == 512
    assert BY_PATH[wire.traits.path] is wire


@pytest.mark.parametrize("wire", list(Wire))
@pytest.mark.parametrize("ttl", ["5m", "1h"])
async def test_cache_marks_and_keys_are_the_protocols_own(wire: Wire, ttl: str, sim: EmbeddedSimulator) -> None:
    """Anthropic's requests carry its breakpoints (no more than it allows), each with the lifetime asked for, and
    no cache key; the OpenAI protocols carry no marks, and the key that names their cache."""
    messages = tuple(UserMessage(f"turn {n}") for n in range(6))
    body = await sent(provider(wire, sim, ttl=ttl), ChatRequest("system", (), messages, cache_key="k"))
    marks = body.count(b'"cache_control"')
    cache = wire.traits.cache
    assert (marks > 0) == bool(cache.breakpoints) and marks <= cache.breakpoints
    assert (b'"ttl":"1h"' in body) == (ttl == "1h" and "1h" in cache.lifetimes)
    assert (b'"prompt_cache_key"' in body) == cache.keyed


# Each kind users write: the protocol on a server of their own, and on the vendor's API (the simulator has none).
KINDS: dict[Kind, tuple[Wire, Wire | None]] = {
    "openai": (Wire.OPENAI_CHAT, Wire.OPENAI_RESPONSES),
    "openai-chat": (Wire.OPENAI_CHAT, Wire.OPENAI_CHAT),
    "openai-responses": (Wire.OPENAI_RESPONSES, Wire.OPENAI_RESPONSES),
    "anthropic": (Wire.ANTHROPIC, Wire.ANTHROPIC),
    "sim": (Wire.OPENAI_CHAT, None),
    "sim-responses": (Wire.OPENAI_RESPONSES, None),
    "sim-anthropic": (Wire.ANTHROPIC, None),
}


def test_every_kind_is_mapped_once() -> None:
    """Every spelling the config accepts has its one mapping to a protocol, or to "auto"."""
    assert set(KIND_WIRES) == set(get_args(Kind)) == set(KINDS)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_config_kind_names_its_protocol(kind: Kind) -> None:
    """`openai` is the Responses API on OpenAI's own API and Chat Completions elsewhere; every other kind names one
    protocol wherever it points, spoken through that protocol's SDK."""
    local, hosted = KINDS[kind]
    here = ProviderSettings("x", kind, base_url="http://localhost:8000/v1")
    assert here.protocol is local and here.sdk == local.traits.sdk
    if hosted is not None:
        assert ProviderSettings("x", kind).protocol is hosted


def _named(node: ast.expr) -> bool:
    """A string naming a protocol, or a tuple, list or set holding one (`x in ("anthropic", …)`)."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(_named(item) for item in node.elts)


def _pattern_named(pattern: ast.pattern) -> bool:
    if isinstance(pattern, ast.MatchValue):
        return _named(pattern.value)
    return isinstance(pattern, ast.MatchOr) and any(_pattern_named(each) for each in pattern.patterns)


def comparisons(root: Path) -> Iterator[str]:
    """Every comparison, `in` test and match case on a protocol's name in the product code under `root`."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in OWNERS:
            continue
        tree = ast.parse(path.read_text(), str(relative))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(_named(side) for side in (node.left, *node.comparators)):
                yield f"{relative}:{node.lineno}: {ast.unparse(node)}"
            elif isinstance(node, ast.match_case) and _pattern_named(node.pattern):
                yield f"{relative}:{node.pattern.lineno}: case {ast.unparse(node.pattern)}"


def test_the_scan_finds_each_form_of_comparison(tmp_path: Path) -> None:
    """The scan bites: a planted `==`, `in` tuple and match case on a protocol's name are each found."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "planted.py").write_text(
        "def f(p: str) -> int:\n"
        "    if p == 'anthropic':\n        return 1\n"
        "    if p in ('x', 'openai-responses'):\n        return 2\n"
        "    match p:\n        case 'openai' | 'y':\n            return 3\n"
        "    return 0\n"
    )
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "own.py").write_text("ok = 'openai' == 'openai'\n")
    assert [line.split(":")[1] for line in comparisons(tmp_path)] == ["2", "4", "7"]


def test_nothing_outside_the_providers_compares_a_protocols_name() -> None:
    """Each protocol says what it is through its traits; a module that compared its name would decide for it."""
    found = list(comparisons(ROOT))
    assert not found, "\n".join(found)
