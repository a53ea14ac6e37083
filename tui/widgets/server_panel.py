"""`ServerPanel`: what a self-hosted server says about itself, beside the transcript.

It draws the `ServerReport`s the session sends (the session scrapes `/metrics`): which server it
is, the model and its context size, the prefix cache's hit rate, KV-cache use, the queue, TTFT
percentiles and speculative decoding's acceptance. Every figure is the whole server's: the hit
rate counts every request it served (titles, other clients), over the last minute and since
hotloop started watching, so it is labelled the server's; the session's own rate is the status
bar's. A figure reads "not reported" only when the server has no such series, "no requests yet"
when it has one but nothing was asked, and the last minute's hit rate "–" when that minute holds
no request.

Two sections appear only for a server that has the series: vLLM's KV residency (`--kv-cache-metrics`:
how many sampled blocks were evicted and the medians of how long they stayed, sat idle and went between
uses) and where cached prompt tokens came from (vLLM's `prompt_tokens_by_source`, SGLang's
`cached_tokens_total{cache_source}`: GPU, host memory, storage, a KV transfer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.figures import short_model
from hotloop.agent.text import inert
from hotloop.providers.server_metrics import duration

if TYPE_CHECKING:
    from hotloop.core.server_watch import ServerReport
    from hotloop.providers.server_metrics import Evictions, ServerStats

NOT_REPORTED = "not reported"
NONE_YET = "no requests yet"
QUIET = "–"  # the last minute's hit rate, with no request (or no scrape) in that minute
NO_DRAFTS = "no drafts"
NOTHING_YET = "none yet"  # no eviction, or no token cached: requests may have come
# Not "session": the rates count every request the server served, the session's among them.
SERVER_HIT_RATE = "server hit rate"
EMPTY = (NOT_REPORTED, NONE_YET, QUIET, NO_DRAFTS, NOTHING_YET)
KV_RESIDENCY = "KV residency (sampled)"
CACHED_FROM = "cached tokens from"
# The servers' names for where cached tokens came from, in the panel's words.
_SOURCES = {"local_cache_hit": "GPU", "device": "GPU", "host": "host memory", "external_kv_transfer": "KV transfer"}
# The flag that turns a server's /metrics on, where it is off by default.
_METRICS_FLAGS = {"llama.cpp": "llama-server --metrics", "sglang": "--enable-metrics"}


PANEL_TEXT = 30  # the panel's width inside its padding
LABELS = 18  # where the values start, unless the longest would not fit there ("no requests yet")
GAP = 2  # spaces at least between a label and its value, so a reader can tell them apart
Rows = list[tuple[str, str | None]]  # a label and its value; a heading has none


class ServerPanel(Static):
    DEFAULT_CSS = f"""
    ServerPanel {{ dock: right; width: {PANEL_TEXT + 2}; height: 1fr; padding: 0 1; background: $panel; color: $text; }}
    """

    report: reactive[ServerReport | None] = reactive(None, always_update=True)

    def render(self) -> Text:
        report = self.report
        if report is None:
            return Text("server: hosted API, no metrics", "dim")
        info = report.info
        text = Text()
        text.append(f"{info.label}", "bold")
        width = self.content_size.width or PANEL_TEXT
        # The address is the config's, and the model the server's name for it.
        address = report.base_url.split("//")[-1].removesuffix("/v1")
        text.append(
            inert(f" · {address}\n" if len(info.label) + len(address) + 3 <= width else f"\n{address}\n"), "dim"
        )
        served = info.served(report.model)
        name = short_model(served.id if served is not None else report.model)
        context = f"{served.context:,} ctx" if served is not None and served.context else ""
        # A long name (a .gguf file's) gets its own line, cut in the middle to fit: its end says the quantization.
        if len(name) + len(context) + 3 <= width:
            text.append(inert(name) + (f" · {context}" if context else "") + "\n\n")
        else:
            if len(name) > width:
                name = f"{name[: width // 2]}…{name[-(width - width // 2 - 1) :]}"
            text.append(inert(name) + (f"\n{context}" if context else "") + "\n\n")
        if not info.has_metrics:
            flag = _METRICS_FLAGS.get(info.kind)
            text.append(f"no /metrics: every figure {NOT_REPORTED}" + (f" (start with {flag})" if flag else ""), "dim")
            return text
        stats = report.stats
        if stats is None:
            text.append("reading /metrics…", "dim")
            return text
        cache_empty = NONE_YET if stats.cache_reported else NOT_REPORTED
        ttft_empty = NONE_YET if stats.ttft_reported else NOT_REPORTED
        rows: Rows = [(SERVER_HIT_RATE, None)]
        rows.append(("  last 1 min", _percent(stats.hit_rate_recent, _quiet_minute(stats))))
        rows.append(("  since start", _percent(stats.hit_rate_since_start, cache_empty)))
        rows.append(("KV cache used", _percent(stats.kv_usage)))
        rows.append(("running", _number(stats.running)))
        rows.append(("waiting", _number(stats.waiting)))
        rows.append(("TTFT p50", _seconds(stats.ttft_p50, ttft_empty)))
        rows.append(("TTFT p95", _seconds(stats.ttft_p95, ttft_empty)))
        _spec_rows(rows, stats)
        _residency_rows(rows, stats.evictions)
        _source_rows(rows, stats.cache_sources)
        _draw(text, rows, width)
        return text


def _draw(text: Text, rows: Rows, width: int) -> None:
    """The rows, values in one column: at LABELS, or further left if a value would not fit the width beside it."""
    longest = max((len(value) for _, value in rows if value is not None), default=0)
    column = min(LABELS, width - longest)
    for label, value in rows:
        if value is None:
            text.append(f"{label}\n", "dim")
            continue
        text.append(label.ljust(max(column, len(label) + GAP)), "dim")
        text.append(value + "\n", "dim" if value in EMPTY else "bold")


def _residency_rows(rows: Rows, evictions: Evictions | None) -> None:
    # No rows for a server without the histograms: vLLM has them only with --kv-cache-metrics.
    if evictions is None:
        return
    rows.append((KV_RESIDENCY, None))
    if not evictions.count:
        rows.append(("  evictions", NOTHING_YET))
        return
    rows.append(("  evictions", f"{evictions.count:,}"))
    for label, value in (
        ("  evicted after", evictions.lifetime),
        ("  idle before", evictions.idle),
        ("  reuse gap", evictions.reuse_gap),
    ):
        if value is not None:
            rows.append((label, duration(value)))


def _source_rows(rows: Rows, sources: tuple[tuple[str, float], ...] | None) -> None:
    """Each source's share of the cached tokens; nothing when the server names no source ("total" is none)."""
    named = [(source, tokens) for source, tokens in sources or () if source != "total"]
    if not named:
        return
    rows.append((CACHED_FROM, None))
    cached = sum(tokens for _, tokens in named)
    if cached <= 0:
        rows.append(("  any source", NOTHING_YET))
        return
    for source, tokens in sorted(named, key=lambda item: -item[1]):
        if tokens > 0:
            # HiCache's storage tier is its L3, named by backend (`storage_mooncake`).
            name = _SOURCES.get(source, source.replace("storage_", "L3 ", 1).replace("_", " "))
            rows.append((f"  {inert(name)[:15]}", f"{tokens / cached:.0%}"))


def _quiet_minute(stats: ServerStats) -> str:
    """Why the last minute has no hit rate: no such series, no request ever, or none within the minute."""
    if not stats.cache_reported:
        return NOT_REPORTED
    return NONE_YET if stats.hit_rate_since_start is None else QUIET


def _spec_rows(rows: Rows, stats: ServerStats) -> None:
    # No rows for a server without the series: vLLM has them only when speculative decoding is on.
    if not stats.spec_reported:
        return
    if stats.spec_acceptance is None and stats.spec_length is None:
        rows.append(("spec decoding", NO_DRAFTS))
        return
    rows.append(("spec accepted", _percent(stats.spec_acceptance, NO_DRAFTS)))
    rows.append(("spec mean length", f"{stats.spec_length:.2f}" if stats.spec_length is not None else NO_DRAFTS))


def _percent(value: float | None, empty: str = NOT_REPORTED) -> str:
    return f"{value:.0%}" if value is not None else empty


def _number(value: int | None) -> str:
    return f"{value:,}" if value is not None else NOT_REPORTED


def _seconds(value: float | None, empty: str = NOT_REPORTED) -> str:
    return f"{value:.2f} s" if value is not None else empty
