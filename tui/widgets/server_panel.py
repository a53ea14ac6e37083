"""`ServerPanel`: what a self-hosted server says about itself, beside the transcript.

It draws the `ServerReport`s the session sends (the session scrapes `/metrics`): the prefix
cache's hit rate (this session's and the last minute's), KV-cache use, the queue, TTFT
percentiles and speculative decoding's acceptance. A figure the server does not report
reads "not reported".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.core.session import ServerReport

NOT_REPORTED = "not reported"
NONE_YET = "no requests yet"


class ServerPanel(Static):
    DEFAULT_CSS = """
    ServerPanel { dock: right; width: 32; height: 1fr; padding: 0 1; background: $panel; color: $text; }
    """

    report: reactive[ServerReport | None] = reactive(None, always_update=True)

    def render(self) -> Text:
        report = self.report
        if report is None:
            return Text("server: hosted API, no metrics", "dim")
        info = report.info
        text = Text()
        text.append(f"{info.label}", "bold")
        # The address is the config's, and the model a server's name for it.
        text.append(inert(f" · {report.base_url.split('//')[-1].removesuffix('/v1')}\n"), "dim")
        length = info.max_model_len(report.model)
        text.append(inert(report.model) + (f" · {length:,} ctx" if length else "") + "\n\n")
        if not info.has_metrics:
            text.append(f"no /metrics: every figure {NOT_REPORTED}", "dim")
            return text
        stats = report.stats
        if stats is None:
            text.append("reading /metrics…", "dim")
            return text
        cache_empty = NONE_YET if stats.cache_reported else NOT_REPORTED
        ttft_empty = NONE_YET if stats.ttft_reported else NOT_REPORTED
        _row(text, "hit rate, session", _percent(stats.hit_rate_session, cache_empty))
        _row(text, "hit rate, 1 min", _percent(stats.hit_rate_recent, cache_empty))
        _row(text, "KV cache used", _percent(stats.kv_usage))
        _row(text, "running", _number(stats.running))
        _row(text, "waiting", _number(stats.waiting))
        _row(text, "TTFT p50", _seconds(stats.ttft_p50, ttft_empty))
        _row(text, "TTFT p95", _seconds(stats.ttft_p95, ttft_empty))
        if stats.spec_acceptance is not None or stats.spec_length is not None:
            _row(text, "spec accepted", _percent(stats.spec_acceptance))
            _row(
                text, "spec mean length", f"{stats.spec_length:.2f}" if stats.spec_length is not None else NOT_REPORTED
            )
        return text


def _row(text: Text, label: str, value: str) -> None:
    text.append(f"{label:<18}", "dim")
    text.append(value + "\n", "dim" if value in (NOT_REPORTED, NONE_YET) else "bold")


def _percent(value: float | None, empty: str = NOT_REPORTED) -> str:
    return f"{value:.0%}" if value is not None else empty


def _number(value: int | None) -> str:
    return f"{value:,}" if value is not None else NOT_REPORTED


def _seconds(value: float | None, empty: str = NOT_REPORTED) -> str:
    return f"{value:.2f} s" if value is not None else empty
