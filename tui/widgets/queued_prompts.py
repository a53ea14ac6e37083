"""`QueuedPrompts`: the prompts waiting for the turn in flight, under the input, each on a line."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.text import inert

SHOWN = 3  # queued prompts listed; the rest are counted


class QueuedPrompts(Static):
    DEFAULT_CSS = """
    QueuedPrompts { height: auto; padding: 0 1; color: $text-muted; display: none; }
    QueuedPrompts.-queued { display: block; }
    """

    prompts: reactive[tuple[str, ...]] = reactive(())

    def watch_prompts(self, prompts: tuple[str, ...]) -> None:
        self.set_class(bool(prompts), "-queued")

    def render(self) -> Text:
        """`⏵ queued: fix the tests` per prompt, then how to edit or cancel them."""
        text = Text()
        for prompt in self.prompts[:SHOWN]:
            first = prompt.strip().splitlines()[0] if prompt.strip() else ""
            text.append("⏵ queued: ", "bold")
            text.append(inert(first[:200]) + (" …" if len(first) > 200 or "\n" in prompt.strip() else "") + "\n")
        if len(self.prompts) > SHOWN:
            text.append(f"  and {len(self.prompts) - SHOWN} more\n")
        text.append("sent when the turn ends · ↑ in an empty box takes the last one back to edit or drop", "dim")
        return text
