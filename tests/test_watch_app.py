"""`hotloop watch` in the app: the real pass-through on the embedded simulator, driven by the official SDK, drawn
by the real screen (Pilot)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from textual.widgets import OptionList

from hotloop.agent.events import AgentEvent, StepFinished
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.screens.watch import WatchScreen
from hotloop.tui.screens.watch_help import WatchHelp
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.watch_app import WatchApp
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript
from hotloop.tui.widgets.watched_list import WatchedList

from support import present, wait_until
from tui_support import after_drawn, drawn, press, transcript_text, watch_app

pytestmark = pytest.mark.timeout(60)


def _finished_steps(app: WatchApp) -> asyncio.Queue[AgentEvent]:
    """The watch's steps as they finish, once the app has drawn them: the app's own sink, then the queue."""
    finished: asyncio.Queue[AgentEvent] = asyncio.Queue()
    after_drawn(app, StepFinished, lambda _conversation, event: finished.put_nowait(event))
    return finished


async def _ask(url: str, prompt: str) -> str:
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-not-a-key", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="sim-balanced",
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def _answered(app: WatchApp, *prompts: str) -> WatchScreen:
    """Each prompt through the app's watch, in turn, its step finished and drawn; the watch screen."""
    screen = app.screen
    assert isinstance(screen, WatchScreen)
    finished = _finished_steps(app)
    for prompt in prompts:
        await _ask(app.url, prompt)
        await asyncio.wait_for(finished.get(), 10)
    return screen


async def test_a_watched_request_is_a_conversation_with_its_step(sim: EmbeddedSimulator) -> None:
    """An SDK's request through the watch: listed as a conversation, its answer and usage strip in the transcript,
    the status bar on its provider and model with its totals, the address line counting it."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        finished = _finished_steps(app)
        answer = await _ask(app.url, "say hello to the watcher")
        await asyncio.wait_for(finished.get(), 10)
        await pilot.pause()
        listed = screen.query_one(WatchedList)
        assert listed.option_count == 1
        line = str(listed.get_option_at_index(0).prompt)
        assert "say hello to the watcher" in line and "1 request" in line
        shown = transcript_text(screen.query_one(Transcript))
        first_line = answer.strip().splitlines()[0].strip("#*` ")
        assert shown.startswith("▌ say hello to the watcher") and shown.count(first_line) == 2  # prompt, answer
        (request,) = [r for r in sim.server.requests if r.path.endswith("/chat/completions")]
        assert f"step 1 · prompt {request.prompt_tokens:,} · cache not reported" in shown
        status = screen.query_one(StatusBar)
        assert (status.provider, status.model, status.totals.steps) == ("sim", "sim-balanced", 1)
        address = str(screen.query_one("#address").render())
        assert app.url in address and "1 conversation · 1 request" in address


async def test_each_conversation_keeps_its_own_transcript_and_totals(sim: EmbeddedSimulator) -> None:
    """Two unrelated prompts are two conversations; moving down the list puts the second one's on screen."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = await _answered(app, "first conversation here", "second conversation there")
        await pilot.pause()
        assert screen.query_one(WatchedList).option_count == 2
        first = present(screen.visible_transcript())
        assert "first conversation" in transcript_text(first)
        screen.query_one(WatchedList).focus()
        await pilot.press("down")
        await wait_until(lambda: screen.visible_transcript() is not first, what="the other conversation on screen")
        second = present(screen.visible_transcript())
        assert "second conversation" in transcript_text(second)
        assert screen.query_one(StatusBar).totals.steps == 1  # the conversation on screen, not the whole traffic


async def test_f3_draws_the_waterfall_and_f1_says_how_to_point_an_agent_here(sim: EmbeddedSimulator) -> None:
    app = watch_app(sim)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("f3")
        await pilot.pause()
        assert not isinstance(app.screen, WaterfallScreen)  # nothing watched yet: said, not drawn empty
        await _answered(app, "time me")
        await pilot.press("f3")
        await wait_until(lambda: isinstance(app.screen, WaterfallScreen) and "time me" in app.screen.plain)
        await pilot.press("escape", "f1")
        await wait_until(lambda: isinstance(app.screen, WatchHelp), what="the help screen")
        assert f"ANTHROPIC_BASE_URL={app.url}" in "".join(str(s.render()) for s in app.screen.query("Static"))


async def test_a_request_the_watch_cannot_read_is_one_line_and_the_app_goes_on(sim: EmbeddedSimulator) -> None:
    """A body that isn't JSON goes on to the server unread; the app says so once and keeps watching."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        async with openai.AsyncOpenAI(base_url=f"{app.url}/v1", api_key="k", max_retries=0) as client:
            with pytest.raises(openai.APIStatusError):
                await client.post("/chat/completions", cast_to=object, content=b"\xff{not json")
        await wait_until(
            lambda: any("not JSON" in n.message or "not UTF-8" in n.message for n in app._notifications),
            what="the line about the unreadable body",
        )
        await _answered(app, "still watching?")


async def test_a_self_hosted_upstream_has_its_server_panel(sim: EmbeddedSimulator) -> None:
    """The upstream describes itself (the simulator, in vLLM's dialect): the panel names it and counts what it
    served, as beside a session; F2 hides it."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        await _answered(app, "count me")
        await wait_until(lambda: app.screen.query(ServerPanel) and "hotloop's simulator" in _panel(app))
        assert "server hit rate" in _panel(app)
        await pilot.press("f2")
        assert not app.screen.query_one(ServerPanel).display


def _panel(app: WatchApp) -> str:
    return str(app.screen.query_one(ServerPanel).render())


async def test_the_top_line_keeps_the_whole_traffics_totals_as_steps_finish(sim: EmbeddedSimulator) -> None:
    """The traffic's counts and dollars are kept up to date by each finished step, not summed over every conversation
    at each event: after three conversations (one of two requests) they equal the sum of the conversations' own
    totals, and the line beside the address says so."""
    app = watch_app(sim)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = await _answered(app, "one", "two", "three", "one")
        totals = list(screen.totals.values())
        assert len(totals) == 3 and screen.traffic_steps == sum(t.steps for t in totals) == 4
        cost = screen.traffic_cost
        assert (cost.known, cost.priced, cost.unknown) == (
            sum(t.cost.known for t in totals),
            sum(t.cost.priced for t in totals),
            sum(t.cost.unknown for t in totals),
        )
        assert cost.priced + cost.unknown == 4
        address = str(screen.query_one("#address").render())
        assert f"3 conversations · 4 requests · {cost}" in address


def _top_line(app: WatchApp) -> str:
    return drawn(app).splitlines()[0].strip()


async def test_at_80_columns_the_top_line_keeps_the_traffics_counts_and_dollars(sim: EmbeddedSimulator) -> None:
    """At 80×24, after three conversations (one of two requests), the top line as drawn ends with the traffic's
    counts and its dollars whole (`price unknown`: the simulator's models have no price), after the address; the
    upstream, given on the command line, is what gave way. The line used to be cut at "price"."""
    app = watch_app(sim)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = await _answered(app, "one", "two", "three", "one")
        assert (screen.traffic_cost.priced, screen.traffic_cost.unknown) == (0, 4)
        await wait_until(lambda: "4 requests" in _top_line(app), what="the line counting the fourth request")
        top = _top_line(app)
        assert top.startswith(app.url) and top.endswith("  │  3 conversations · 4 requests · price unknown")


async def test_an_upstream_priced_by_its_hour_has_its_dollars_on_screen(sim: EmbeddedSimulator) -> None:
    """A self-hosted upstream with a cost per hour (`--provider` with `cost_per_hour`): the app prices each request by
    its model time, as the headless table does, so the top line at 80 columns says the estimate (`~$…`), where the app
    said `price unknown` whatever the upstream."""
    app = watch_app(sim, cost_per_hour=3600.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = await _answered(app, "what does this cost?")
        cost = screen.traffic_cost
        assert (cost.priced, cost.unknown, cost.estimated) == (1, 0, True) and str(cost).startswith("~")
        await wait_until(lambda: "1 request" in _top_line(app), what="the line counting the request")
        assert _top_line(app).endswith(f"1 conversation · 1 request · {cost}")


async def test_beside_the_server_panel_the_top_line_gives_way_before_it_and_f2_gives_it_back(
    sim: EmbeddedSimulator,
) -> None:
    """At 120 columns the server panel docks on the right, over the top line's end (docks overlap): the line fits in
    what the panel leaves, so the upstream gives way rather than run under the panel cut; widened to 200 columns,
    the panel beside it moved, the upstream is back (it stayed out, fitted to where the panel had been); F2 hides
    the panel and the upstream is there, whole."""
    app = watch_app(sim)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await _answered(app, "count me")
        await wait_until(lambda: "hotloop's simulator" in _top_line(app), what="the panel beside the top line")
        await wait_until(lambda: "→" not in _top_line(app), what="the upstream given way")
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        own = drawn(app).splitlines()[0][: screen.query_one(ServerPanel).region.x].strip()
        assert own == f"watching {app.url}  │  1 conversation · 1 request · {screen.traffic_cost}"
        await pilot.resize_terminal(200, 30)
        await pilot.pause()  # the resize laid out: no scrape of the server's needed for the line to fit again
        assert screen.query_one(ServerPanel).display and f"→ sim ({sim.url})" in str(screen.top_line.render())
        await pilot.press("f2")
        await wait_until(lambda: _top_line(app).endswith(f"→ sim ({sim.url})"), what="the upstream back")


async def test_two_moves_in_one_frame_put_the_last_on_screen_and_then_stop(sim: EmbeddedSimulator) -> None:
    """Two keys read in one frame queue two highlight messages. The first, stale by the time it is handled, used to
    highlight its row again, whose message undid the second's, for ever: the screen flipped between two transcripts
    (seen with 1,200 conversations, where a frame is long). Now the row moved to last is on screen, and the messages
    stop at the two the keys made."""
    highlights: list[str] = []
    seen: dict[int, object] = {}  # held, so that no other message takes an id seen

    def hook(message: object) -> None:
        if isinstance(message, OptionList.OptionHighlighted) and id(message) not in seen:  # each hop as it bubbles
            seen[id(message)] = message
            highlights.append(message.option.id or "")

    app = watch_app(sim)
    async with app.run_test(size=(160, 45), message_hook=hook) as pilot:
        await pilot.pause()
        screen = await _answered(app, "first", "second", "third")
        await pilot.pause()
        listed = screen.query_one(WatchedList)
        listed.focus()
        await pilot.pause()
        highlights.clear()
        press(app, "down", "down")
        await wait_until(lambda: len(highlights) >= 2, what="both moves handled")
        await pilot.pause()
        last = present(listed.get_option_at_index(2).id)
        assert highlights == [present(listed.get_option_at_index(1).id), last]
        assert screen.visible_transcript() is screen.transcripts[last]
        assert present(listed.highlighted_option).id == last
