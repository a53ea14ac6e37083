"""`PendingApprovals`: the calls waiting for the user's yes or no, asked on the approval bar.

The session asks (`ask`) and waits; the turn's other calls go on meanwhile. The bar shows the
waiting calls and asks about the first; it takes the focus only from an empty prompt, so a
prompt being typed stays a prompt (ctrl+r goes to the question on purpose).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from textual.screen import Screen

from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.prompt_input import PromptInput

if TYPE_CHECKING:
    from hotloop.agent.approvals import Reply, Request


class PendingApprovals:
    def __init__(self, screen: Screen[None]) -> None:
        self._screen = screen
        self._asks: list[tuple[Request, asyncio.Future[Reply]]] = []

    async def ask(self, request: Request) -> Reply:
        """Ask the user whether a call may run; the answer, once given."""
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._asks.append((request, answer))
        self._show()
        try:
            return await answer
        finally:  # answered, or the turn was cancelled while it waited
            self._asks = [(r, f) for r, f in self._asks if f is not answer]
            self._show()

    def answered(self, reply: Reply, every: bool) -> None:
        """The user's answer: to the first waiting call, or to `every` one."""
        for _, answer in self._asks if every else self._asks[:1]:
            if not answer.done():
                answer.set_result(reply)

    def go_to_question(self) -> None:
        if self._asks:
            self._screen.query_one(ApprovalBar).ask()

    def _show(self) -> None:
        bar = self._screen.query_one(ApprovalBar)
        box = self._screen.query_one(PromptInput)
        bar.requests = tuple(request for request, _ in self._asks)
        if self._asks and not bar.has_focus_within and not box.text:
            bar.ask()
        elif not self._asks and bar.has_focus_within:
            box.focus()
