"""`LiveUsage`: the step in flight's strip — waiting, streaming, then its usage and timings."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from hotloop.agent.events import ResponseFinished, StepStarted
from hotloop.agent.figures import counted, seconds, short_model
from hotloop.agent.text import inert
from hotloop.tui.render import Palette, response_text


class LiveUsage:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.clear()

    def clear(self) -> None:
        self.step: StepStarted | None = None
        self._first_byte: float | None = None
        self._first_token: float | None = None
        self._tokens = 0
        self._response: ResponseFinished | None = None
        self._tools_running = 0

    def start(self, step: StepStarted) -> None:
        self.clear()
        self.step = step

    def first_byte(self, ts: float) -> None:
        """The response's first byte: TTFT ends here, live as once finished (a held-back tool call streams later)."""
        if self._first_byte is None:
            self._first_byte = ts

    def token(self, ts: float) -> None:
        if self._first_token is None:
            self._first_token = ts
        self._tokens += 1

    def response(self, response: ResponseFinished) -> None:
        self._response = response

    def tools(self, running: int) -> None:
        self._tools_running = running

    def text(self, palette: Palette) -> Text | None:
        """The strip as it reads now (its waits tick with the clock), muted; None outside a step."""
        step = self.step
        if step is None:
            return None
        line = Text(f"step {step.step} · ", palette.text_muted)
        if self._response is not None:
            line.append_text(response_text(self._response, palette))
            if self._tools_running:
                line.append(f" · {self._tools_running} tool{'s' if self._tools_running != 1 else ''} running")
            return line
        first = self._first_byte if self._first_byte is not None else self._first_token
        if first is None:
            waited = seconds(max(self.clock() - step.ts, 0))
            line.append(f"{inert(short_model(step.model))} · waiting for the first token · {waited}")
        else:
            line.append(f"ttft {seconds(first - step.ts)} · streaming · {counted(self._tokens, 'chunk')}")
        return line
