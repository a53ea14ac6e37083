"""`ServerPanel`: what a self-hosted server says about itself, beside the transcript.

It scrapes the server's `/metrics` every second while a turn runs and every five seconds
otherwise, and shows the prefix cache's hit rate (this session's and the last minute's),
KV-cache use, the queue, TTFT percentiles and speculative decoding's acceptance. A figure
the server does not report reads "not reported".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.reactive import reactive
from textual.widgets import Static

if TYPE_CHECKING:
    from hotloop.providers.openai_chat import OpenAIChatProvider
    from hotloop.providers.server_metrics import ServerStats, ServerWatch
    from hotloop.providers.vllm import ServerInfo

BUSY_INTERVAL = 1.0
IDLE_INTERVAL = 5.0
NOT_REPORTED = "not reported"
NONE_YET = "no requests yet"


class ServerPanel(Static):
    DEFAULT_CSS = """
    ServerPanel { dock: right; width: 32; height: 1fr; padding: 0 1; background: $panel; color: $text; }
    """

    busy: reactive[bool] = reactive(False)
    stats: reactive[ServerStats | None] = reactive(None, always_update=True)

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.provider: OpenAIChatProvider | None = None
        self.info: ServerInfo | None = None
        self._watch: ServerWatch | None = None
        self._since_scrape = 0.0

    def watch_server(self, provider: OpenAIChatProvider, info: ServerInfo) -> None:
        """Follow this server from now on; its figures start over."""
        from hotloop.providers.server_metrics import ServerWatch

        self.provider, self.info, self._watch = provider, info, ServerWatch()
        self.stats = None
        self.scrape()

    def on_mount(self) -> None:
        self.set_interval(BUSY_INTERVAL, self._tick)

    def watch_busy(self, busy: bool) -> None:
        if not busy:
            self.scrape()  # the turn just ended: show the queue as it is now, not as it was mid-turn

    def _tick(self) -> None:
        self._since_scrape += BUSY_INTERVAL
        if self.busy or self._since_scrape >= IDLE_INTERVAL:
            self.scrape()

    @work(exclusive=True, group="scrape", exit_on_error=False)
    async def scrape(self) -> None:
        from hotloop.providers.vllm import scrape

        self._since_scrape = 0.0
        if self.provider is None or self._watch is None or not (self.info and self.info.has_metrics):
            self.refresh()
            return
        sample = await scrape(self.provider)
        if sample is not None:
            self.stats = self._watch.observe(sample)

    def render(self) -> Text:
        info = self.info
        if info is None or self.provider is None:
            return Text("server: hosted API, no metrics", "dim")
        text = Text()
        text.append(f"{info.label}", "bold")
        text.append(f" · {self.provider.base_url.split('//')[-1].removesuffix('/v1')}\n", "dim")
        length = info.max_model_len(self.provider.model)
        text.append(f"{self.provider.model}" + (f" · {length:,} ctx" if length else "") + "\n\n")
        if not info.has_metrics:
            text.append(f"no /metrics: every figure {NOT_REPORTED}", "dim")
            return text
        stats = self.stats
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
            _row(text, "spec mean length", f"{stats.spec_length:.2f}" if stats.spec_length is not None else NOT_REPORTED)
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
