"""The watch app never draws one conversation's requests under another (issue 36): two conversations through a real
`Watch` on the embedded simulator, an Anthropic one and a Responses one, their requests interleaved; the highlighted
one alone is on screen, with its own requests and its own totals. And a title request that began before its
conversation moves under it, which takes the screen."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest
from textual.widget import Widget

from hotloop.agent.events import ResponseFinished
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.screens.watch import WatchScreen
from hotloop.tui.watch_app import WatchApp
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript
from hotloop.tui.widgets.watched_list import WatchedList

from support import present, wait_until
from tui_support import after_drawn, transcript_text, watch_app

pytestmark = pytest.mark.timeout(60)
ANTHROPIC_MODEL, RESPONSES_MODEL = "sim-balanced", "sim-fast"


def _app(sim: EmbeddedSimulator) -> tuple[WatchApp, asyncio.Queue[str]]:
    """The app on a real watch; the conversation of each answered request, once the app has drawn its end."""
    return watch_app(sim), asyncio.Queue()


def _observe(app: WatchApp, finished: asyncio.Queue[str]) -> None:
    after_drawn(app, ResponseFinished, lambda conversation, _event: finished.put_nowait(conversation))


def _on_screen(screen: WatchScreen) -> set[Transcript]:
    """The transcripts that own a cell of the transcripts' area: three columns of it, asked what is drawn there."""
    area = screen.query_one("#transcripts").region
    owners: set[Transcript] = set()
    for y in range(area.y, area.bottom):
        for x in (area.x + 1, area.x + area.width // 2, area.right - 2):
            widget: Widget | None = screen.get_widget_at(x, y)[0]
            while widget is not None and not isinstance(widget, Transcript):
                widget = widget.parent if isinstance(widget.parent, Widget) else None
            if widget is not None:
                owners.add(widget)
    return owners


class Conversations:
    """An Anthropic conversation and a Responses one, each request continuing its own history."""

    def __init__(self, url: str) -> None:
        self.claude = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-not-a-key", max_retries=0)
        self.codex = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-not-a-key", max_retries=0)
        self.claude_history: list[Any] = []
        self.codex_history: list[Any] = []

    async def anthropic(self, prompt: str) -> None:
        self.claude_history.append({"role": "user", "content": prompt})
        answer = await self.claude.messages.create(model=ANTHROPIC_MODEL, max_tokens=256, messages=self.claude_history)
        text = "".join(block.text for block in answer.content if block.type == "text")
        self.claude_history.append({"role": "assistant", "content": text})

    async def responses(self, prompt: str) -> None:
        self.codex_history.append({"role": "user", "content": prompt})
        async with self.codex.responses.stream(model=RESPONSES_MODEL, input=self.codex_history) as stream:
            answer = await stream.get_final_response()
        self.codex_history.append({"role": "assistant", "content": answer.output_text})

    async def close(self) -> None:
        await self.claude.close()
        await self.codex.close()


async def test_interleaved_conversations_are_each_drawn_alone_with_their_own_totals(sim: EmbeddedSimulator) -> None:
    """Requests of an Anthropic and a Responses conversation arrive interleaved: after each, the highlighted
    conversation's transcript is the only one on screen and holds only its own prompts, the status bar has its model
    and its own request count; moving down the list does the same for the other one."""
    app, finished = _app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        _observe(app, finished)
        talk = Conversations(app.url)
        asked = [
            (talk.anthropic, "claude asks about apples"),
            (talk.responses, "codex asks about bananas"),
            (talk.anthropic, "claude asks about cherries"),
            (talk.responses, "codex asks about dates"),
        ]
        steps: dict[str, int] = {}
        for number, (ask, prompt) in enumerate(asked):
            await ask(prompt)
            conversation = await asyncio.wait_for(finished.get(), 10)
            steps[conversation] = steps.get(conversation, 0) + 1
            await pilot.pause()
            claude = next(iter(steps))
            shown = present(screen.visible_transcript())
            assert _on_screen(screen) == {shown}, f"after request {number + 1}"
            text = transcript_text(shown)
            assert "apples" in text and "bananas" not in text and "dates" not in text
            status = screen.query_one(StatusBar)
            assert (status.model, status.totals.steps) == (ANTHROPIC_MODEL, steps[claude])
        await talk.close()
        assert len(steps) == 2 and set(steps.values()) == {2}
        assert "cherries" in transcript_text(present(screen.visible_transcript()))
        listed = screen.query_one(WatchedList)
        listed.focus()
        await pilot.press("down")
        await wait_until(
            lambda: "bananas" in transcript_text(present(screen.visible_transcript())), what="the Responses one"
        )
        await pilot.pause()
        shown = present(screen.visible_transcript())
        assert _on_screen(screen) == {shown}
        text = transcript_text(shown)
        assert "dates" in text and "apples" not in text and "cherries" not in text
        status = screen.query_one(StatusBar)
        assert (status.model, status.totals.steps) == (RESPONSES_MODEL, 2)


async def test_a_title_request_that_began_first_moves_under_its_conversation_which_takes_the_screen(
    sim: EmbeddedSimulator,
) -> None:
    """opencode's order: its title request (no tools) is answered before its real request (tools) under the same
    `x-session-id`. The title is listed first, then under the real conversation, which is highlighted and on screen."""
    app, finished = _app(sim)
    headers = {"x-session-id": "ses_0a1b2c3d", "User-Agent": "opencode/1.18.33"}
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        _observe(app, finished)
        async with openai.AsyncOpenAI(base_url=f"{app.url}/v1", api_key="sk-not-a-key", max_retries=0) as api:
            title_messages: Any = [
                {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
                {"role": "user", "content": "Generate a title for this conversation:\nlist the files here"},
            ]
            await api.chat.completions.create(model="sim-fast", messages=title_messages, extra_headers=headers)
            title = await asyncio.wait_for(finished.get(), 10)
            tool: Any = {"type": "function", "function": {"name": "list", "parameters": {"type": "object"}}}
            real_messages: Any = [
                {"role": "system", "content": "You are opencode."},
                {"role": "user", "content": json.dumps("list the files here")},
            ]
            await api.chat.completions.create(
                model="sim-fast", messages=real_messages, tools=[tool], extra_headers=headers
            )
            real = await asyncio.wait_for(finished.get(), 10)
        assert real != title and app.watch_.conversations[title].parent == real
        await pilot.pause()
        listed = screen.query_one(WatchedList)
        rows = [listed.get_option_at_index(n) for n in range(listed.option_count)]
        assert [row.id for row in rows] == [real, title]
        assert str(rows[1].prompt).startswith("↳ ")
        assert listed.highlighted_option is not None and listed.highlighted_option.id == real
        shown = present(screen.visible_transcript())
        assert _on_screen(screen) == {shown} and "list the files here" in transcript_text(shown)
        assert "Generate a title" not in transcript_text(shown)
        assert screen.query_one(StatusBar).totals is screen.totals[real]
