"""`UsageStrip`: the step in flight — waiting, streaming, then its usage and timings."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static

from hotloop.agent.events import ResponseFinished, StepStarted
from hotloop.agent.figures import seconds, short_model
from hotloop.agent.text import inert
from hotloop.tui.render import Palette, inert_text, response_text


class UsageStrip(Static):
    DEFAULT_CSS = """
    UsageStrip { height: auto; color: $text-muted; }
    UsageStrip.-idle { display: none; }
    """

    def __init__(
        self,
        clock: Callable[[], float],
        palette: Callable[[], Palette],
        *,
        name: str | None = None,
        id: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(classes="-idle", name=name, id=id, disabled=disabled)
        self.clock = clock
        self.palette = palette
        self._timer: Timer | None = None
        self._step: StepStarted | None = None
        self._first_token: float | None = None
        self._tokens = 0
        self._response: ResponseFinished | None = None
        self._tools_running = 0

    def start(self, step: StepStarted) -> None:
        self._step, self._first_token, self._tokens, self._response = step, None, 0, None
        self._tools_running = 0
        self.set_class(False, "-idle")
        if self._timer is None:
            self._timer = self.set_interval(0.1, self.show)
        self.show()

    def token(self, ts: float) -> None:
        if self._first_token is None:
            self._first_token = ts
        self._tokens += 1

    def response(self, response: ResponseFinished) -> None:
        self._response = response
        self.show()

    def tools(self, running: int) -> None:
        self._tools_running = running
        self.show()

    def clear(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._step = None
        self.update("")
        self.add_class("-idle")

    def show(self) -> None:
        step = self._step
        if step is None:
            return
        line = Text(f"step {step.step} · ")
        if self._response is not None:
            line.append_text(response_text(self._response, self.palette()))
            if self._tools_running:
                line.append(f" · {self._tools_running} tool{'s' if self._tools_running != 1 else ''} running")
            self.update(inert_text(line))  # it names the tier, from the config
            return
        if self._first_token is None:
            waited = seconds(max(self.clock() - step.ts, 0))
            line.append(f"{inert(short_model(step.model))} · waiting for the first token · {waited}")
        else:
            line.append(f"ttft {seconds(self._first_token - step.ts)} · streaming · {self._tokens:,} chunks")
        # These short lines tick ten times a second and never wrap: no layout pass for them.
        self.update(line, layout=False)
