"""Dollars per step: recorded usage priced by hand from the price table's rates, to the exact figure.

The rates below are genai-prices 0.2.3's (the table hotloop prices with), each as the provider's
pricing page gives it, in dollars per million tokens:
- gpt-4o on api.openai.com: input 2.50, cached input 1.25, output 10 (developers.openai.com/api/docs/pricing).
- Claude Sonnet 4 on api.anthropic.com: input 3, cache read 0.30, 5-minute cache write 3.75 (1.25× input),
  1-hour cache write 6 (2× input), output 15 (platform.claude.com/docs/en/about-claude/pricing).
- Claude Sonnet 5: input 2, cache read 0.20, 5-minute write 2.50, 1-hour write 4, output 10 (same page).
The sums are worked out here from token counts and rates, never copied from hotloop's output.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from hotloop.agent.events import AgentEvent, ProviderSwitched, StepFinished, StepStarted, TurnFinished, TurnStarted
from hotloop.agent.figures import SessionTotals
from hotloop.agent.pricing import (
    PRICE_UNKNOWN,
    Cost,
    CostTotals,
    StepPricer,
    breakdown,
    dollars,
    money,
    price_step,
)
from hotloop.cli.session_commands import list_command
from hotloop.providers.events import UsageLedger
from hotloop.sessions.export import export
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import read_session, summarize
from hotloop.sessions.summary import summary_path

from support import FIXTURES

OPENAI = "https://api.openai.com/v1"
ANTHROPIC = "https://api.anthropic.com"
WHEN = datetime(2026, 11, 20, tzinfo=UTC).timestamp()  # the step's time: prices are the table's at that date

GPT_4O = {"input": "2.50", "cache_read": "1.25", "output": "10"}
SONNET_4 = {"input": "3", "cache_read": "0.30", "write_5m": "3.75", "write_1h": "6", "output": "15"}
SONNET_5 = {"input": "2", "cache_read": "0.20", "write_5m": "2.50", "write_1h": "4", "output": "10"}


def dollars_for(tokens: int, per_million: str) -> Decimal:
    return Decimal(per_million) * tokens / 1_000_000


def sse_data(name: str) -> list[dict[str, Any]]:
    """The JSON objects of a recording: SSE `data:` lines, or one object a line."""
    lines = (FIXTURES / name).read_text().splitlines()
    payloads = [line.removeprefix("data: ") for line in lines if line.startswith(("data: {", "{"))]
    return [json.loads(payload) for payload in payloads]


def openai_usage(name: str) -> UsageLedger:
    (usage,) = [chunk["usage"] for chunk in sse_data(name) if chunk.get("usage")]
    return UsageLedger.from_openai(usage)


def anthropic_usage(name: str) -> UsageLedger:
    """The usage as the provider reads it: `message_start`'s, overwritten by `message_delta`'s."""
    events = sse_data(name)
    start = next(event["message"]["usage"] for event in events if event["type"] == "message_start")
    delta = next(event["usage"] for event in events if event["type"] == "message_delta")
    return UsageLedger.from_anthropic(start, delta)


def table_total(usage: genai_prices.Usage, model: str, base_url: str) -> Decimal:
    """The price table's own total, through its public API, to check hotloop's breakdown against."""
    when = datetime.fromtimestamp(WHEN, UTC)
    return genai_prices.calc_price(usage, model, provider_api_url=base_url, genai_request_timestamp=when).total_price


def test_openai_recording_priced_by_hand() -> None:
    usage = openai_usage("openai_chat_parallel_tools.sse")  # gpt-4o-2024-08-06: prompt 149, completion 60
    assert (usage.prompt_total, usage.cache_read, usage.output) == (149, None, 60)

    cost = price_step(usage, "gpt-4o-2024-08-06", OPENAI, at=WHEN)

    # No cache figure in the recording: the whole prompt is billed as uncached input.
    uncached, output = dollars_for(149, GPT_4O["input"]), dollars_for(60, GPT_4O["output"])
    assert uncached == Decimal("0.0003725") and output == Decimal("0.0006")
    assert cost is not None and cost.source == "price table" and cost.priced_as == "openai gpt-4o"
    assert cost.total == uncached + output == Decimal("0.0009725")
    assert cost.parts() == {"uncached": uncached, "output": output}
    assert cost.total == table_total(genai_prices.Usage(input_tokens=149, output_tokens=60), "gpt-4o", OPENAI)
    assert dollars(cost) == "$0.0010"


def test_openai_cached_prompt_reads_at_the_cached_rate() -> None:
    usage = UsageLedger.from_openai(
        {"prompt_tokens": 4020, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3968}}
    )
    cost = price_step(usage, "gpt-4o", OPENAI, at=WHEN)

    expected = dollars_for(52, GPT_4O["input"]) + dollars_for(3968, GPT_4O["cache_read"]) + dollars_for(4, "10")
    assert cost is not None and cost.total == expected == Decimal("0.00513")
    assert cost.cache_read == dollars_for(3968, GPT_4O["cache_read"])


def test_anthropic_recording_priced_by_hand() -> None:
    usage = anthropic_usage("anthropic_tool_use.sse")  # claude-sonnet-4-20250514: input 377, output 65, no cache
    assert (usage.uncached, usage.cache_read, usage.cache_write, usage.output) == (377, 0, 0, 65)

    cost = price_step(usage, "claude-sonnet-4-20250514", ANTHROPIC, at=WHEN)

    expected = dollars_for(377, SONNET_4["input"]) + dollars_for(65, SONNET_4["output"])
    assert cost is not None and cost.total == expected == Decimal("0.002106")
    assert cost.priced_as == "anthropic claude-sonnet-4-0"


def test_anthropic_cache_read_and_five_minute_write_recording_priced_by_hand() -> None:
    # claude-sonnet-5, code execution: input 6, cache read 6,289, cache write 3,337 (all 5 minutes), output 198.
    usage = anthropic_usage("anthropic_prompt_cache.chunks.jsonl")
    assert (usage.uncached, usage.cache_read, usage.cache_write, usage.cache_write_1h) == (6, 6289, 3337, 0)

    cost = price_step(usage, "claude-sonnet-5", ANTHROPIC, at=WHEN)

    parts = {
        "uncached": dollars_for(6, SONNET_5["input"]),
        "cache_read": dollars_for(6289, SONNET_5["cache_read"]),
        "cache_write_5m": dollars_for(3337, SONNET_5["write_5m"]),
        "output": dollars_for(198, SONNET_5["output"]),
    }
    assert cost is not None and cost.parts() == parts
    assert cost.total == sum(parts.values()) == Decimal("0.0115923")
    billed = genai_prices.Usage(input_tokens=9632, cache_read_tokens=6289, cache_write_tokens=3337, output_tokens=198)
    assert cost.total == table_total(billed, "claude-sonnet-5", ANTHROPIC)


def test_anthropic_cache_writes_are_billed_by_their_lifetime() -> None:
    """1,000 tokens kept for an hour cost 2× input; the other 2,000, kept for 5 minutes, 1.25×."""
    start = {
        "input_tokens": 2000,
        "cache_read_input_tokens": 5000,
        "cache_creation_input_tokens": 3000,
        "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 1000},
        "output_tokens": 1,
    }
    usage = UsageLedger.from_anthropic(start, {"output_tokens": 100})
    assert (usage.cache_write, usage.cache_write_1h) == (3000, 1000)

    cost = price_step(usage, "claude-sonnet-4-20250514", ANTHROPIC, at=WHEN)

    assert cost is not None
    assert cost.cache_write_5m == dollars_for(2000, SONNET_4["write_5m"]) == Decimal("0.0075")
    assert cost.cache_write_1h == dollars_for(1000, SONNET_4["write_1h"]) == Decimal("0.006")
    assert Decimal(SONNET_4["write_1h"]) == 2 * Decimal(SONNET_4["input"])  # the rate pricing tools get wrong
    expected = (
        dollars_for(2000, SONNET_4["input"])
        + dollars_for(5000, SONNET_4["cache_read"])
        + dollars_for(2000, SONNET_4["write_5m"])
        + dollars_for(1000, SONNET_4["write_1h"])
        + dollars_for(100, SONNET_4["output"])
    )
    assert cost.total == expected == Decimal("0.0225")
    assert breakdown(cost) == (
        "$0.0225 (uncached $0.0060 · cache read $0.0015 · write 5m $0.0075 · write 1h $0.0060 · out $0.0015)"
    )
    billed = genai_prices.Usage(
        input_tokens=10000,
        cache_read_tokens=5000,
        cache_write_tokens=3000,
        cache_write_1h_tokens=1000,
        output_tokens=100,
    )
    assert cost.total == table_total(billed, "claude-sonnet-4-20250514", ANTHROPIC)


def test_unsplit_cache_writes_are_billed_at_the_configured_lifetime() -> None:
    usage = UsageLedger(prompt_total=3000, cache_read=0, cache_write=3000, uncached=0, output=0)

    five = price_step(usage, "claude-sonnet-4-20250514", ANTHROPIC, at=WHEN)
    hour = price_step(usage, "claude-sonnet-4-20250514", ANTHROPIC, at=WHEN, write_ttl="1h")

    assert five is not None and five.total == dollars_for(3000, SONNET_4["write_5m"])
    assert hour is not None and hour.total == dollars_for(3000, SONNET_4["write_1h"])


@pytest.mark.parametrize(
    ("usage", "dollars_said"),
    [
        # xAI: 10^10 ticks to the dollar (docs.x.ai/developers/cost-tracking).
        ({"prompt_tokens": 307, "completion_tokens": 26, "cost_in_usd_ticks": 37756000}, "0.0037756"),
        # OpenRouter: credits, a dollar each (openrouter.ai/docs/use-cases/usage-accounting).
        ({"prompt_tokens": 194, "completion_tokens": 2, "cost": 0.95}, "0.95"),
    ],
)
def test_the_providers_own_cost_is_used_and_said(usage: dict[str, Any], dollars_said: str) -> None:
    ledger = UsageLedger.from_openai(usage)

    cost = price_step(ledger, "gpt-4o", OPENAI, at=WHEN)  # a table price exists, but the provider's figure wins

    assert cost == Cost(Decimal(dollars_said), "provider")
    assert dollars(cost).endswith("(provider's figure)")


def test_an_unknown_price_is_never_zero() -> None:
    usage = UsageLedger(prompt_total=1000, cache_read=0, uncached=1000, output=10)

    assert price_step(usage, "no-such-model-anywhere", OPENAI, at=WHEN) is None
    assert price_step(usage, "gpt-4o", "http://localhost:8000/v1", at=WHEN) is None  # a self-hosted gpt-4o namesake
    assert price_step(usage, "gpt-4o", "", at=WHEN) is None  # the server isn't known
    assert price_step(None, "gpt-4o", OPENAI, at=WHEN) is None
    assert price_step(UsageLedger(distrust="output 9,999 for 3 characters streamed"), "gpt-4o", OPENAI) is None
    assert dollars(None) == PRICE_UNKNOWN == "price unknown"


def test_a_self_hosted_server_costs_its_gpu_time_as_an_estimate() -> None:
    usage = UsageLedger(prompt_total=1000, cache_read=0, uncached=1000, output=10)

    cost = price_step(usage, "Qwen/Qwen3-8B", "http://gpu-box:8000/v1", cost_per_hour=2.5, seconds=36.0)

    assert cost == Cost(Decimal("2.5") * 36 / 3600, "estimate") and cost.total == Decimal("0.025")
    assert dollars(cost) == "~$0.0250 (estimate)"


def test_money_reads_at_a_glance() -> None:
    assert [money(Decimal(v)) for v in ("0.0123456", "0.00004", "0", "12.345")] == [
        "$0.0123",
        "<$0.0001",
        "$0.0000",
        "$12.35",
    ]


def test_totals_sum_the_known_and_count_the_unknown() -> None:
    totals = CostTotals()
    assert str(totals) == "$0.0000"
    totals.add(None)
    assert str(totals) == PRICE_UNKNOWN
    totals.add(Cost(Decimal("0.25"), "price table"))
    totals.add(Cost(Decimal("0.0123"), "provider"))
    assert str(totals) == "$0.2623 + 1 step price unknown"
    totals.add(Cost(Decimal("1"), "estimate"))
    totals.add(None)
    assert (totals.known, totals.priced, totals.unknown) == (Decimal("1.2623"), 3, 2)
    assert str(totals) == "~$1.26 + 2 steps price unknown"


def step_finished(turn: int, step: int, usage: UsageLedger | None) -> StepFinished:
    return StepFinished(
        ts=WHEN,
        turn=turn,
        step=step,
        usage=usage,
        ttft=0.5,
        decode_tps=50.0,
        model_time=2.0,
        wall=2.0,
        tool_count=0,
        tool_sum=0.0,
        tool_wall=0.0,
        finish_reason="stop",
    )


def test_the_step_pricer_follows_switches() -> None:
    usage = anthropic_usage("anthropic_tool_use.sse")
    pricer = StepPricer(servers={"anthropic": ANTHROPIC}, hourly={"box": 3.6})
    events: list[AgentEvent] = [
        StepStarted(turn=1, step=1, provider="anthropic", model="claude-sonnet-4-20250514"),
        ProviderSwitched(
            provider="box",
            model="qwen",
            previous_provider="anthropic",
            previous_model="claude-sonnet-4-20250514",
            context_tokens=None,
            cold_tokens=None,
            base_url="http://gpu-box:8000/v1",
        ),
        StepStarted(turn=1, step=2, provider="box", model="qwen"),
    ]
    pricer.learn(events[0])
    first = pricer.cost(step_finished(1, 1, usage))
    for event in events[1:]:
        pricer.learn(event)
    second = pricer.cost(step_finished(1, 2, usage))

    assert first is not None and first.total == Decimal("0.002106")
    assert pricer.servers["box"] == "http://gpu-box:8000/v1"
    assert second == Cost(Decimal("3.6") * 2 / 3600, "estimate")  # 2 s of model time at $3.60 an hour


def write_session(folder: Path) -> Path:
    """A session on Anthropic's API: one step of the recorded usage, then one on a model without a price."""
    usage = anthropic_usage("anthropic_tool_use.sse")
    with SessionLog.create(
        folder, provider="anthropic", model="claude-sonnet-4-20250514", workspace=folder, base_url=ANTHROPIC
    ) as log:
        log.write(TurnStarted(turn=1, prompt="weather in Paris?"))
        log.write(StepStarted(turn=1, step=1, provider="anthropic", model="claude-sonnet-4-20250514"))
        log.write(step_finished(1, 1, usage))
        log.write(StepStarted(turn=1, step=2, provider="anthropic", model="claude-unreleased-9"))
        log.write(step_finished(1, 2, usage))
        log.write(TurnFinished(turn=1, reason="answer", steps=2, wall=4.0))
        return log.path


def test_a_sessions_cost_is_kept_in_its_summary_and_listed(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = isolated_home / "data" / "sessions"
    path = write_session(folder)

    costs = summarize(path).costs
    assert costs is not None and (costs.known, costs.priced, costs.unknown) == (Decimal("0.002106"), 1, 1)
    summary_path(path).unlink()  # scanned whole, the header says which server the provider is
    rescanned = summarize(path).costs
    assert rescanned is not None and (rescanned.known, rescanned.unknown) == (Decimal("0.002106"), 1)

    assert list_command(10, None) == 0
    heading, row = capsys.readouterr().out.splitlines()
    assert heading.split()[:5] == ["id", "started", "turns", "tokens", "cost"]
    assert "≥$0.0021" in row  # at least: one step has no price


def test_exports_show_each_steps_cost_and_the_total(tmp_path: Path) -> None:
    session = read_session(write_session(tmp_path))

    exported = json.loads(export(session, "json"))
    first, second = exported["turns"][0]["steps"]
    assert first["cost"] == {"total": "0.002106", "source": "price table", "uncached": "0.001131", "output": "0.000975"}
    assert second["cost"] is None  # price unknown, not $0
    assert exported["cost"] == {"total": "0.002106", "priced_steps": 1, "unpriced_steps": 1}

    markdown = export(session, "md")
    assert "· $0.0021 + 1 step price unknown" in markdown.splitlines()[2]
    assert "out 65 · ttft 0.50 s · 50 tok/s measured · $0.0021*" in markdown
    assert "· price unknown*" in markdown
    assert "$0.0021 + 1 step price unknown" in export(session, "html")


def test_session_totals_add_up_the_steps_dollars() -> None:
    usage = anthropic_usage("anthropic_tool_use.sse")
    totals = SessionTotals(StepPricer(servers={"anthropic": ANTHROPIC}))

    for model in ("claude-sonnet-4-20250514", "claude-sonnet-4-20250514", "claude-unreleased-9"):
        totals.add(StepStarted(turn=1, step=1, provider="anthropic", model=model))
        totals.add(step_finished(1, 1, usage))

    assert (totals.cost.known, totals.cost.priced, totals.cost.unknown) == (2 * Decimal("0.002106"), 2, 1)
    assert str(totals.cost) == "$0.0042 + 1 step price unknown"


def test_the_transcripts_usage_strips_say_each_steps_dollars(tmp_path: Path) -> None:
    """The strip under each step ends in its cost, priced as the headless lines are; a step with no
    price says nothing there (the status bar's total says `price unknown`), and never $0."""
    from rich.console import Console

    from hotloop.tui.fold import TranscriptFold
    from hotloop.tui.items import UsageItem
    from hotloop.tui.render import Palette, RenderContext

    session = read_session(write_session(tmp_path))
    palette = Palette("#ffa62b", "#8d8d8d", "#a0a0a0", "#4ebf71", "#ffa62b", "#b93c5b", "#1e1e1e", "#2b4a6b", dark=True)
    ctx = RenderContext(Console(width=200, color_system=None), 200, palette)

    def strips(fold: TranscriptFold) -> list[str]:
        items = [item for item, _ in fold.apply_all(session.events) if isinstance(item, UsageItem)]
        return [item.render(ctx).lines[0].text.rstrip() for item in items]

    priced = strips(TranscriptFold(session.header.pricer()))
    assert priced[0].endswith(" · $0.0021") and "$" not in priced[1] and PRICE_UNKNOWN not in priced[1]
    assert priced[1] == strips(TranscriptFold())[1]  # as without a pricer: no dollars said


def test_headless_replay_prices_each_step_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hotloop.cli.session_commands import print_replay

    assert print_replay(read_session(write_session(tmp_path)), 0) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("turn ")]
    assert [line.rsplit(" · ", 1)[1] for line in lines] == ["$0.0021", "price unknown"]


def test_run_prices_its_step_lines_and_json_from_the_sessions_server(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A self-hosted server with cost_per_hour: each line says its estimate, and --json carries the dollars."""
    from hotloop.cli import main

    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
        '[providers.sim]\nkind = "sim"\ncost_per_hour = 3600\n'
    )
    monkeypatch.chdir(workspace)
    assert main(["run", "read README.md"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("turn ")]
    assert len(lines) == 2 and all(line.endswith(" (estimate)") and " · ~$" in line for line in lines)

    assert main(["run", "--json", "hi"]) == 0
    finished = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"step_finished"' in line]
    (step,) = finished
    # $3,600 an hour is a dollar a second of model time.
    assert step["cost"] == {"usd": pytest.approx(step["model_time"]), "source": "estimate"}


def test_the_log_prices_a_self_hosted_server_as_the_run_did(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """cost_per_hour is written in the log (the header's, a switch's), so an export and the session list price each
    step as the run did, after the config no longer says it."""
    from hotloop.cli import main

    fast = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    (isolated_home / "config.toml").write_text(
        f'{fast}[providers.sim]\nkind = "sim"\ncost_per_hour = 3600\n'
        '[providers.sim-anthropic]\nkind = "sim-anthropic"\ncost_per_hour = 7200\n'
    )
    monkeypatch.chdir(workspace)
    assert main(["run", "--json", "hi", "/provider sim-anthropic", "again"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"step_finished"' in line]
    # $3,600 an hour is a dollar a second of model time; after the switch, two.
    live = [step["cost"]["usd"] for step in steps]
    assert live == [pytest.approx(steps[0]["model_time"]), pytest.approx(2 * steps[1]["model_time"])]

    (isolated_home / "config.toml").write_text(fast)  # the prices are gone: only the log can say them
    assert main(["sessions", "export", "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    logged = [float(step["cost"]["total"]) for turn in exported["turns"] for step in turn["steps"]]
    assert logged == [pytest.approx(cost) for cost in live]
    assert float(exported["cost"]["total"]) == pytest.approx(sum(live))

    (path,) = (isolated_home / "data" / "sessions").glob(f"*_{exported['id']}.jsonl")
    summary_path(path).unlink()  # scanned whole: the header and the switch say what each server costs
    costs = summarize(path).costs
    assert costs is not None and float(costs.known) == pytest.approx(sum(live))
    assert (costs.priced, costs.unknown) == (2, 0)


def test_the_waterfall_says_what_the_cache_saved_in_dollars() -> None:
    """8,000 tokens read at gpt-4o's cached rate ($1.25/M) instead of its input rate ($2.50/M): $0.0100 saved."""
    from hotloop.agent.events import ResponseFinished
    from hotloop.sessions.waterfall import render, waterfalls

    usage = UsageLedger(prompt_total=10_000, cache_read=8_000, uncached=2_000, output=100)
    finished = step_finished(1, 1, usage)
    events: list[AgentEvent] = [
        TurnStarted(ts=WHEN - 3, turn=1, prompt="go"),
        StepStarted(ts=WHEN - 2, turn=1, step=1, provider="openai", model="gpt-4o"),
        ResponseFinished(
            ts=WHEN - 1, turn=1, step=1, usage=usage, ttft=0.5, decode_tps=50.0, model_time=1.0, finish_reason="stop"
        ),
        finished,
        TurnFinished(ts=WHEN, turn=1, reason="answer", steps=1, wall=3.0),
    ]
    (turn,) = waterfalls(events, StepPricer(servers={"openai": OPENAI}))
    assert turn.cache_dollars == Decimal("0.01")
    assert "no cache reads" not in render(turn, 100, None).plain
    assert " · $0.0100 at the price table's rates" in render(turn, 100, None).plain
    # Without a price (the simulator), the time saved is all it says.
    (unpriced,) = waterfalls(events)
    assert unpriced.cache_dollars is None and "price table" not in render(unpriced, 100, None).plain
