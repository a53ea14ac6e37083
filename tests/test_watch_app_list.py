"""The watch app's list is updated row by row (issue 36: a busy fleet spent its time redrawing it): after a mix of new
conversations, side requests inserted in their parent's place, figures changing and a `SideOf` correction, its rows
are the conversations in order, and the highlight stays on the conversation on screen."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import openai
import pytest
from textual.app import App, ComposeResult

from hotloop.agent.events import ResponseFinished
from hotloop.agent.figures import SessionTotals
from hotloop.agent.pricing import StepPricer
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.screens.watch import WatchScreen
from hotloop.tui.watch_app import WatchApp
from hotloop.tui.widgets.watched_list import WatchedList
from hotloop.watch import ConversationInfo

from support import wait_until
from tui_support import after_drawn, watch_app

pytestmark = pytest.mark.timeout(60)


def _listed(screen: WatchScreen) -> list[tuple[str, str]]:
    """The list's rows: each conversation's id and the start of its first line."""
    listed = screen.query_one(WatchedList)
    rows = [listed.get_option_at_index(n) for n in range(listed.option_count)]
    return [(row.id or "", str(row.prompt)[:3]) for row in rows]


def _expected(app: WatchApp, screen: WatchScreen) -> list[str]:
    """The conversations in the order the screen first saw them, each followed by its side requests (and theirs)."""
    seen = list(screen.events)
    parents = {key: app.watch_.conversations[key].parent for key in seen}

    def subtree(key: str) -> list[str]:
        return [key, *(row for side in seen if parents[side] == key for row in subtree(side))]

    return [row for key in seen if parents[key] not in parents for row in subtree(key)]


async def test_rows_follow_inserts_updates_and_a_correction_and_the_highlight_stays(sim: EmbeddedSimulator) -> None:
    """Two conversations, B highlighted and on screen; then side requests of A (and one of that side request) are
    inserted under A above B, B grows, opencode's title request comes before its real request (which adopts it: the
    title's row moves under it) and B gets a side request. After each, the rows are the conversations in order, side
    requests indented under their parent, and the highlight is on B, which is on screen."""
    app = watch_app(sim)
    answered: asyncio.Queue[str] = asyncio.Queue()
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        after_drawn(app, ResponseFinished, lambda conversation, _event: answered.put_nowait(conversation))
        api = openai.AsyncOpenAI(base_url=f"{app.url}/v1", api_key="sk-not-a-key", max_retries=0)

        async def ask(messages: list[dict[str, str]], **more: Any) -> tuple[str, str]:
            answer = await api.chat.completions.create(model="sim-fast", messages=messages, **more)  # type: ignore[arg-type]
            conversation = await asyncio.wait_for(answered.get(), 10)
            await pilot.pause()
            return conversation, answer.choices[0].message.content or ""

        def user(text: str) -> dict[str, str]:
            return {"role": "user", "content": text}

        async def check(rows: list[str], b: str) -> None:
            listed = screen.query_one(WatchedList)
            await wait_until(lambda: len(screen.events) == len(rows), what="every conversation listed")
            assert [key for key, _ in _listed(screen)] == rows == _expected(app, screen)
            assert listed.highlighted_option is not None and listed.highlighted_option.id == b
            assert screen.visible_transcript() is screen.query_one(f"#c-{b}")

        a, _ = await ask([user("apples")])
        b, b_answer = await ask([user("bananas")])
        listed = screen.query_one(WatchedList)
        listed.focus()
        await pilot.press("down")
        await wait_until(lambda: screen.visible_transcript() is screen.query_one(f"#c-{b}"), what="B on screen")
        await check([a, b], b)

        a1, _ = await ask([user("apples"), user("summarize the apples")])
        await check([a, a1, b], b)
        a2, _ = await ask([user("apples"), user("summarize the apples"), user("shorter")])
        await check([a, a1, a2, b], b)
        grown, _ = await ask([user("bananas"), {"role": "assistant", "content": b_answer}, user("more bananas")])
        assert grown == b
        await check([a, a1, a2, b], b)
        assert "2 requests" in str(listed.get_option(b).prompt)

        headers = {"x-session-id": "ses_0a1b2c3d", "User-Agent": "opencode/1.18.33"}
        title_asked = [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            user("Generate a title for this conversation:\nlist the files here"),
        ]
        title, _ = await ask(title_asked, extra_headers=headers)
        await check([a, a1, a2, b, title], b)
        tool: Any = {"type": "function", "function": {"name": "list", "parameters": {"type": "object"}}}
        real_asked = [{"role": "system", "content": "You are opencode."}, user('"list the files here"')]
        real, _ = await ask(real_asked, tools=[tool], extra_headers=headers)
        assert app.watch_.conversations[title].parent == real
        await check([a, a1, a2, b, real, title], b)
        b1, _ = await ask([user("bananas"), user("a title for the bananas")])
        await check([a, a1, a2, b, b1, real, title], b)
        await api.close()

        indents = dict(_listed(screen))
        assert not indents[a].startswith(("↳", " ")) and not indents[real].startswith(("↳", " "))
        assert indents[a1].startswith("↳ ") and indents[b1].startswith("↳ ") and indents[title].startswith("↳ ")
        assert indents[a2].startswith(" ↳ ")
        await pilot.press("up")
        await wait_until(lambda: screen.visible_transcript() is screen.query_one(f"#c-{a2}"), what="the row above")


class _Listing(App[None]):
    def compose(self) -> ComposeResult:
        yield WatchedList(id="conversations")


def _info(key: str, parent: str) -> ConversationInfo:
    return ConversationInfo(
        key, "claude-cli/2.1.332", "watch:claude-cli/2.1.332", parent, f"task {key}", "sim", "sim-fast", "", None, ""
    )


def _in_order(seen: list[str], parents: dict[str, str]) -> list[tuple[str, int]]:
    """The rows a list rebuilt from scratch has: roots in the order seen, each followed by its side requests (and
    theirs), with their depth; a parent not listed yet lists its side request at the top."""

    def subtree(key: str, depth: int) -> list[tuple[str, int]]:
        return [(key, depth), *(row for side in seen if parents[side] == key for row in subtree(side, depth + 1))]

    return [row for key in seen if parents[key] not in parents for row in subtree(key, 0)]


async def test_a_random_mix_of_new_rows_updates_and_corrections_keeps_the_order_and_the_highlight() -> None:
    """300 steps of a seeded mix: new conversations (at the top, under a listed one, or under one not listed yet, which
    adopts it when it comes), figures changing, and corrections moving a row and its subtree under another (or back to
    the top). After each step the rows, their indents and the highlighted conversation are what they should be."""
    chance = random.Random(36)
    parents: dict[str, str] = {}
    seen: list[str] = []
    totals = SessionTotals(StepPricer())
    async with _Listing().run_test(size=(120, 40)) as pilot:
        listed = pilot.app.query_one(WatchedList)
        highlighted = ""
        for step in range(300):
            roll = chance.random()
            if roll < 0.45 or not seen:
                key = f"c{len(seen):03d}"
                later = f"c{len(seen) + chance.randint(1, 3):03d}"
                choices = ["", *(row for row in seen[-8:] if not _under(row, key, parents)), later]  # no cycle
                parents[key] = chance.choice(choices)
                seen.append(key)
                info = _info(key, parents[key])
            elif roll < 0.75:
                info = _info(key := chance.choice(seen), parents[key])
            else:
                key = chance.choice(seen)
                below = {row for row, _ in _in_order(seen, parents) if _under(row, key, parents)}
                parents[key] = chance.choice(["", *(other for other in seen if other not in below)])
                info = _info(key, parents[key])
            listed.update(info, totals)
            if step % 25 == 0:
                highlighted = chance.choice(seen)
                listed.highlight(highlighted)
            rows = [listed.get_option_at_index(n) for n in range(listed.option_count)]
            expected = _in_order(seen, parents)
            assert [row.id for row in rows] == [key for key, _ in expected], f"step {step}"
            indents = [str(row.prompt).partition("↳ ")[0] if "↳ " in str(row.prompt) else None for row in rows]
            assert indents == [" " * min(depth - 1, 6) if depth else None for _, depth in expected], f"step {step}"
            assert listed.highlighted_option is not None and listed.highlighted_option.id == (highlighted or seen[0])
            if step % 10 == 0:
                await pilot.pause()
                _assert_drawn(listed)


def _assert_drawn(listed: WatchedList) -> None:
    """Each line drawn is its row's line, and a click there picks that row: what the list holds is what it shows."""
    for y in range(listed.scrollable_content_region.height):
        line = listed.scroll_offset.y + y
        if line >= 2 * listed.option_count:
            break
        strip = listed.render_line(y)
        expected = str(listed.get_option_at_index(line // 2).prompt).split("\n")[line % 2]
        assert strip.text.rstrip() == expected.rstrip(), f"line {line}"
        clicked = {segment.style.meta.get("option") for segment in strip if segment.style is not None}
        assert clicked == {line // 2}, f"line {line}"


def _under(row: str, key: str, parents: dict[str, str]) -> bool:
    """Whether a row is `key` or listed under it."""
    while row:
        if row == key:
            return True
        row = parents.get(row, "")
    return False


async def test_a_parent_under_its_own_side_request_lists_both_and_a_long_chain_lines_up() -> None:
    """A correction that would list a conversation under its own side request (a cycle) leaves it at the top: both
    listed, once each. A chain of 1,200 side requests each under the last is listed in order without recursion,
    indented to the deepest indent and no further."""
    totals = SessionTotals(StepPricer())
    async with _Listing().run_test(size=(120, 40)) as pilot:
        listed = pilot.app.query_one(WatchedList)
        listed.update(_info("a", ""), totals)
        listed.update(_info("b", "a"), totals)
        listed.update(_info("a", "b"), totals)
        assert [listed.get_option_at_index(n).id for n in range(listed.option_count)] == ["a", "b"]
        chain = [f"d{n:04d}" for n in range(1_200)]
        for number, key in enumerate(chain):
            listed.update(_info(key, chain[number - 1] if number else ""), totals)
        rows = [listed.get_option_at_index(n) for n in range(listed.option_count)]
        assert [row.id for row in rows] == ["a", "b", *chain]
        assert str(rows[-1].prompt).startswith(" " * 6 + "↳ task")
        await pilot.pause()


async def test_rows_are_cut_again_at_a_new_width_and_drawn_as_held_at_a_new_height() -> None:
    """A narrower terminal narrows the list: every row is cut again at its new width (an ellipsis, no wrapped line
    pushing the next conversation down), and a shorter one, same width, draws the rows as the list holds them."""
    totals = SessionTotals(StepPricer())
    async with _Listing().run_test(size=(160, 40)) as pilot:
        listed = pilot.app.query_one(WatchedList)
        for number in range(30):
            info = _info(f"c{number:02d}", "c00" if number % 3 == 1 else "")
            info.title = f"conversation {number}: " + "a long prompt, " * 10
            listed.update(info, totals)
        await pilot.pause()
        wide = listed.scrollable_content_region.width
        await pilot.resize_terminal(100, 40)
        await pilot.pause()
        narrow = listed.scrollable_content_region.width
        assert narrow < wide
        for n in range(listed.option_count):
            lines = str(listed.get_option_at_index(n).prompt).split("\n")
            assert len(lines) == 2 and all(len(line) <= narrow for line in lines) and lines[0].endswith("…")
        _assert_drawn(listed)
        await pilot.resize_terminal(100, 12)
        await pilot.pause()
        assert listed.scrollable_content_region.width == narrow
        _assert_drawn(listed)
