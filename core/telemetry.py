"""OpenTelemetry: a session's event stream (and each watched conversation's) as spans, exported over OTLP.

A sink beside the log: `Session.emit` hands it every event, and `spans.py` turns them into spans (a turn, its
model requests, side requests too, and their tool calls), named by the GenAI semantic conventions.

The official SDK exports them over OTLP/HTTP (protobuf) through a `BatchSpanProcessor`: a
bounded queue emptied by its own thread, so a step never waits on the collector. An unreachable
collector is one warning (a `Notice`), and closing waits a bounded time. Nothing of the SDK is
imported unless telemetry is configured: `[telemetry] otlp_endpoint`, the standard
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variables, or `--otel`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from hotloop import __version__
from hotloop.agent.events import AgentEvent, Notice
from hotloop.core.spans import Spans
from hotloop.sessions.masking import Masker

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Tracer

    from hotloop.agent.pricing import StepPricer
    from hotloop.config import Config

ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"  # a base URL: /v1/traces is added
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"  # the whole URL
LOCAL_COLLECTOR = "http://localhost:4318"  # `--otel` without an endpoint: OTLP/HTTP's default port here
TRACES_PATH = "/v1/traces"
EXPORT_TIMEOUT = 3.0  # seconds one batch may take, retries included
CLOSE_WAIT = 5.0  # seconds closing waits for the last batch, whatever the collector does
QUEUE_SIZE = 2048  # spans held for export; beyond that the oldest are dropped, never a step slowed


def traces_endpoint(config: Config, asked: bool, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go, or None for nowhere: the config's, the standard variables', or with `--otel` the local one."""
    if configured := config.telemetry.otlp_endpoint.strip():
        return _signal_url(configured)
    if whole := environ.get(ENV_TRACES_ENDPOINT, "").strip():
        return whole
    if base := environ.get(ENV_ENDPOINT, "").strip():
        return _signal_url(base)
    return _signal_url(LOCAL_COLLECTOR) if asked else None


def _signal_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def start_telemetry(
    config: Config, asked: bool, notify: Callable[[AgentEvent], None], conversation: Callable[[], str | None]
) -> Telemetry | None:
    """The session's telemetry if configured (None otherwise, with nothing of the SDK imported); in the event loop."""
    endpoint = traces_endpoint(config, asked)
    return None if endpoint is None else Telemetry(endpoint, config, notify, conversation)


class Telemetry:
    """Exports a session's spans (and any other stream's); `observe` is the session's sink, `close` the end."""

    def __init__(
        self,
        endpoint: str,
        config: Config,
        notify: Callable[[AgentEvent], None],
        conversation: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`notify` takes the one warning of a failed export (in the event loop); `conversation` names the session."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # The SDK logs each failed export with its retries; the user gets one Notice instead (`_failed`).
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
        self.endpoint = endpoint
        self._config = config
        self._masker = Masker(config.secrets())
        self._notify = notify
        self._loop = asyncio.get_running_loop()
        self._warned = False
        exporter = _reporting(OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT), self._failed)
        resource = Resource.create({"service.name": "hotloop", "service.version": __version__})
        # Not the global provider: MCP's SDK traces through that one, and its spans aren't hotloop's to send.
        self._provider: TracerProvider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=QUEUE_SIZE))
        self._tracer: Tracer = self._provider.get_tracer("hotloop", __version__)
        self.spans = Spans(self._tracer, config, config.pricer(), self._masker, conversation)
        self._streams: dict[str, Spans] = {}

    def observe(self, event: AgentEvent) -> None:
        """One event of the session's stream."""
        self.spans.observe(event)

    def stream(self, conversation: str, pricer: Callable[[], StepPricer]) -> Spans:
        """The spans of another stream of events (a watched conversation, its id), sent by this exporter."""
        if conversation not in self._streams:
            spans = Spans(self._tracer, self._config, pricer(), self._masker, lambda: conversation)
            self._streams[conversation] = spans
        return self._streams[conversation]

    # -- export ---------------------------------------------------------------------------------

    def _failed(self) -> None:
        """An export failed (in the exporter's thread): one warning for the session, then silence."""
        if self._warned:
            return
        self._warned = True
        notice = Notice(
            level="warning",
            message=f"telemetry: no OTLP collector answered at {self.endpoint}; spans are not being exported",
        )
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            self._loop.call_soon_threadsafe(self._notify, notice)

    async def close(self) -> None:
        """End what is open, send what is queued, and stop, waiting at most `CLOSE_WAIT` seconds."""
        for spans in (self.spans, *self._streams.values()):
            spans.end_open("the session closed")
        done = threading.Event()

        def shut_down() -> None:
            self._provider.shutdown()
            done.set()

        # A daemon thread: a collector that never answers can't hold the process up at exit.
        threading.Thread(target=shut_down, name="hotloop-telemetry-close", daemon=True).start()
        await asyncio.to_thread(done.wait, CLOSE_WAIT)


def _reporting(exporter: SpanExporter, failed: Callable[[], None]) -> SpanExporter:
    """`exporter`, calling `failed` when a batch couldn't be sent (the SDK's exporter itself, unchanged)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Reporting(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = exporter.export(spans)
            except Exception:
                result = SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                failed()
            return result

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Reporting()
