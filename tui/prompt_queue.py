"""`PromptQueue`: prompts typed while the session can't take them, sent one per turn end.

A prompt waits while a turn runs, while the session is still connecting, or while a switch
waits for the turn to end. The queue shows under the box (`QueuedPrompts`); ↑ in an empty box
takes the last one back to edit, and a turn the user stops puts them all back in the box. A
prompt sent now (ctrl+s) cancels the turn in flight and goes before them.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.screen import Screen

from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts


class PromptQueue:
    def __init__(self, screen: Screen[None], say: Callable[[str], None]) -> None:
        self._screen = screen
        self._say = say
        self._prompts: list[str] = []
        self.interrupting: str | None = None  # a prompt sent now: the turn it cancels gives way to it

    def add(self, prompt: str) -> None:
        self._prompts.append(prompt)
        self._show()

    def next(self) -> str | None:
        """The prompt that interrupted a turn, else the first queued one; None if nothing waits."""
        if self.interrupting is not None:
            prompt, self.interrupting = self.interrupting, None
            return prompt
        if not self._prompts:
            return None
        prompt = self._prompts.pop(0)
        self._show()
        return prompt

    def recall(self) -> None:
        """↑ in an empty box: the last queued prompt, back in the box to edit or drop."""
        if self._prompts:
            box = self._box
            box.load_text(self._prompts.pop())
            box.move_cursor(box.document.end)
            self._show()

    def back_to_box(self) -> None:
        """The queued prompts, back in the box above what it holds, to edit or drop."""
        if not self._prompts:
            return
        box = self._box
        box.load_text("\n\n".join([*self._prompts, box.text] if box.text.strip() else self._prompts))
        box.move_cursor(box.document.end)
        self._say(f"{'the queued prompt is' if len(self._prompts) == 1 else 'the queued prompts are'} back in the box")
        self._prompts.clear()
        self._show()

    @property
    def _box(self) -> PromptInput:
        return self._screen.query_one(PromptInput)

    def _show(self) -> None:
        self._screen.query_one(QueuedPrompts).prompts = tuple(self._prompts)
        self._box.queued = len(self._prompts)
