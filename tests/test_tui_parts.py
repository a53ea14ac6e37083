"""The TUI's pure parts: folding events into items, slash commands, and what items draw."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.text import Text
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    StepFinished,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import SessionTotals
from hotloop.core.slash import Slash, SlashError, parse
from hotloop.providers.events import (
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    UsageLedger,
)
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import AnswerItem, Item, NoticeItem, ToolCallsItem, UsageItem, UserItem
from hotloop.tui.live_answer import LiveAnswer
from hotloop.tui.render import Palette, RenderContext, markdown_lines, usage_text

PALETTE = Palette("#ffa62b", "#8d8d8d", "#a0a0a0", "#4ebf71", "#ffa62b", "#b93c5b", "#1e1e1e", "#2b4a6b", dark=True)


def fold_session(events: list[AgentEvent]) -> list[tuple[Item, int]]:
    """A whole logged session as transcript items, as a saved session is drawn."""
    fold = TranscriptFold()
    return fold.apply_all(events) + fold.flush()


def context(width: int = 80) -> RenderContext:
    return RenderContext(Console(width=width, color_system=None), width, PALETTE)


def step(n: int, usage: UsageLedger | None, tools: int = 0) -> StepFinished:
    return StepFinished(
        turn=1,
        step=n,
        usage=usage,
        ttft=0.1,
        decode_tps=50.0,
        model_time=1.0,
        wall=1.5,
        tool_count=tools,
        tool_sum=2.0 * tools,
        tool_wall=1.0 if tools else 0.0,
        finish_reason="stop",
    )


def test_a_step_folds_into_answer_tool_calls_and_usage() -> None:
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="go"),
        ReasoningDelta("think "),
        ReasoningDelta("first"),
        TextDelta("Reading."),
        ToolCallStarted(0, "c1", "read_file"),
        ToolCallArgsDelta(0, "c1", '{"path": '),
        ToolCallArgsDelta(0, "c1", '"a"}'),
        ToolCallReady(0, "c1", "read_file", '{"path": "a"}'),
        ToolStarted(call_id="c1", name="read_file", arguments='{"path": "a"}', ts=10.0),
        ToolOutput(call_id="c1", text="line 1"),
        ToolFinished(call_id="c1", name="read_file", status="ok", duration=0.5, result="A"),
        step(1, UsageLedger(prompt_total=100, output=9), tools=1),
    ]
    items = fold_session(events)
    kinds = [(type(item).__name__, gap) for item, gap in items]
    assert kinds == [("UserItem", 1), ("AnswerItem", 1), ("ToolCallsItem", 1), ("UsageItem", 0)]
    answer, tools = items[1][0], items[2][0]
    assert isinstance(answer, AnswerItem) and isinstance(tools, ToolCallsItem)
    assert (answer.text, answer.reasoning, answer.interrupted) == ("Reading.", "think first", False)
    (call,) = tools.calls
    assert (call.name, call.arguments, call.status, call.started, call.output, call.result) == (
        "read_file",
        '{"path": "a"}',
        "ok",
        10.0,
        ["line 1"],
        "A",
    )


def test_a_cancelled_turn_keeps_the_partial_answer_and_cancels_open_calls() -> None:
    fold = TranscriptFold()
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="go"),
        TextDelta("half an ans"),
        ToolCallStarted(0, "c1", "grep"),
        ToolCallReady(0, "c1", "grep", "{}"),
        ToolStarted(call_id="c1", name="grep", arguments="{}"),
    ]
    for event in events:
        fold.apply(event)
    items = [item for item, _ in fold.apply(TurnFinished(turn=1, reason="cancelled", steps=1, wall=1.0))]
    answer, tools, notice = items
    assert isinstance(answer, AnswerItem) and answer.interrupted and answer.text == "half an ans"
    assert isinstance(tools, ToolCallsItem) and tools.calls[0].status == "cancelled"
    assert (
        isinstance(notice, NoticeItem)
        and notice.message == "turn cancelled; 1 unfinished tool call got a cancelled result"
    )
    assert fold.apply(TurnFinished(turn=2, reason="answer", steps=1, wall=1.0)) == []
    assert fold.apply(Notice(level="error", message="boom"))[0][0] == NoticeItem("error", "boom")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/model sim-fast", Slash("/model", ("sim-fast",))),
        ("  /tier strong ", Slash("/tier", ("strong",))),
        ("/provider openai gpt-5-mini", Slash("/provider", ("openai", "gpt-5-mini"))),
        ("/new", Slash("/new")),
        ("read /etc/hosts please", None),
        ("//not a command", None),
    ],
)
def test_slash_commands_parse(text: str, expected: Slash | None) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("/bogus", "unknown command /bogus"), ("/model", "/model needs an argument"), ("/tier a b", "too many arguments")],
)
def test_bad_slash_commands_say_why(text: str, message: str) -> None:
    with pytest.raises(SlashError, match=message):
        parse(text)


def plain(text: Text) -> str:
    return text.plain


def test_usage_never_shows_a_missing_figure_as_zero() -> None:
    assert plain(usage_text(None, PALETTE)) == "prompt not reported"
    assert plain(usage_text(UsageLedger(prompt_total=500, output=None), PALETTE)) == (
        "prompt 500 · cache not reported · out not reported"
    )
    full = plain(
        usage_text(UsageLedger(prompt_total=1000, cache_read=750, cache_write=200, uncached=50, output=7), PALETTE)
    )
    assert full == "prompt 1,000 ▕████████▏ read 750 · write 200 · uncached 50 · out 7"
    assert plain(usage_text(UsageLedger(prompt_total=100, cache_read=0, uncached=100, output=3), PALETTE)).startswith(
        "prompt 100 ▕░░░░░░░░▏ read 0 ·"
    )


def test_a_prompt_below_the_cache_minimum_is_not_shown_as_a_miss() -> None:
    from hotloop.agent.figures import prompt_breakdown

    short = UsageLedger(prompt_total=900, cache_read=0, cache_write=0, uncached=900, output=3).with_cache_minimum(1024)
    assert (
        plain(usage_text(short, PALETTE)) == "prompt 900 · below cache minimum (1,024): not cached, not a miss · out 3"
    )
    assert prompt_breakdown(short) == "prompt 900 (below cache minimum 1,024: not cached)"
    # A long enough prompt that read nothing is a miss, and says so.
    long = UsageLedger(prompt_total=2000, cache_read=0, cache_write=0, uncached=2000, output=3).with_cache_minimum(1024)
    assert long.below_cache_min is None and "▕░░░░░░░░▏ read 0" in plain(usage_text(long, PALETTE))
    totals = SessionTotals()
    totals.add(step(1, short))
    totals.add(step(2, UsageLedger(prompt_total=2000, cache_read=1000, cache_write=0, uncached=1000, output=3)))
    assert totals.cache_hit == 0.5  # the uncacheable step is not counted as a miss


def test_switches_and_server_tools_fold_into_notes() -> None:
    from hotloop.agent.events import ProviderSwitched
    from hotloop.providers.events import ServerToolUsed

    events: list[AgentEvent] = [
        ProviderSwitched(
            provider="sim-anthropic",
            model="m2",
            previous_provider="sim",
            previous_model="m1",
            context_tokens=3412,
            cold_tokens=3412,
        ),
        TurnStarted(turn=1, prompt="sum squares"),
        ServerToolUsed("srv_1", "bash_code_execution", '{"command": "seq 3"}'),
        TextDelta("It is 14."),
        step(1, UsageLedger(prompt_total=10, output=3)),
    ]
    items = [item for item, _ in fold_session(events)]
    assert [type(item).__name__ for item in items] == [
        "NoticeItem",
        "UserItem",
        "AnswerItem",
        "NoticeItem",
        "UsageItem",
    ]
    switched, ran = items[0], items[3]
    assert isinstance(switched, NoticeItem) and isinstance(ran, NoticeItem)
    assert switched.message == (
        "switched sim · m1 → sim-anthropic · m2: ~3,412 prompt tokens to prefill uncached "
        "(its cache is cold for this conversation)"
    )
    assert ran.message == '⚙ bash_code_execution ran on the provider\'s side: {"command": "seq 3"}'


def test_items_render_and_expand() -> None:
    ctx = context()
    user = UserItem("a long question " * 10).render(ctx).lines
    assert len(user) == 3 and all(line.text.startswith("▌ ") for line in user)

    answer = AnswerItem("# Title\n\nSome *text*.", reasoning="I thought about it")
    rendered = answer.render(ctx)
    assert rendered.targets == {0: "reasoning"} and rendered.lines[0].text.startswith("▸ reasoning · 4 words")
    answer.toggle("reasoning")
    assert "I thought about it" in "".join(line.text for line in answer.render(ctx).lines)

    tools = ToolCallsItem([], 0.0, 0.0)
    assert [line.text.rstrip() for line in tools.render(ctx).lines] == ["0 tools ran for 0.00 s"]
    usage = UsageItem(step(2, UsageLedger(prompt_total=10, cache_read=8, uncached=2, output=1))).render(ctx).lines
    assert usage[0].text.startswith("step 2 · prompt 10 ")


def test_markdown_renders_block_by_block_like_the_stream() -> None:
    source = "# Head\n\n- one\n- two\n\n```python\nx = 1\n```\n\nEnd."
    lines = [line.text.rstrip() for line in markdown_lines(source, context(60))]
    # One blank line between each pair of the four blocks, none at the edges.
    assert lines == ["Head".center(60).rstrip(), "", " • one", " • two", "", " x = 1", "", "End."]


@pytest.mark.parametrize(("budget", "rows"), [(None, 0), (0.0, 0), (0.0, 4)])
def test_a_streamed_answer_ends_in_the_lines_of_its_finished_item(budget: float | None, rows: int) -> None:
    """Token by token, flushed now and then (with no time budget at all: one finished block a flush),
    the live answer never shows less than it did and ends with the finished answer's lines. While
    the view follows the end (`rows` > 0), every flush shows the newest text, as the last lines of
    the whole answer rendered at once, however many blocks above it wait."""
    source = "# Head\n\nSome *text* here.\n\n- one\n- two\n\n```python\nx = 1\ny = 2\n```\n\nEnd " * 5
    shown: list[list[Strip]] = []
    # Flushed by hand here: its timer is never started.
    timer = lambda delay, callback: Timer(Widget(), delay)  # noqa: E731
    answer = LiveAnswer(lambda: context(60), shown.append, timer, lambda: rows)
    on_screen, behind = 0, False
    for n, token in enumerate(source.split(" ")):
        answer.write(token if n == 0 else " " + token)
        if n % 7 == 0:
            answer._render(context(60), budget)
            assert answer.shown_to >= on_screen
            on_screen = answer.shown_to
            if rows:
                assert answer.shown_to == len(answer.text)
                whole = [line.text for line in markdown_lines(answer.text, context(60))]
                assert [line.text for line in shown[-1][-rows:]] == whole[-rows:]
                behind |= not answer.complete
    assert behind or not rows  # some flushes left blocks above the view to later ones
    answer.flush(everything=True)
    assert answer.complete and answer.shown_to == len(source)
    assert [line.text for line in shown[-1]] == [line.text for line in markdown_lines(source, context(60))]


def test_session_totals_count_a_missing_read_as_a_miss_from_a_server_that_reports_reads() -> None:
    totals = SessionTotals()
    totals.add(step(1, UsageLedger(prompt_total=100, output=10)))  # vLLM's total miss: no figure
    assert (totals.cache_hit, totals.cache_unknown) == (None, 1)  # not yet known to be a miss
    totals.add(step(2, UsageLedger(prompt_total=200, cache_read=150, uncached=50, output=20)))
    totals.add(step(3, None))
    assert (totals.steps, totals.prompt, totals.output, totals.unreported) == (3, 300, 30, 1)
    assert totals.cache_hit == 150 / 300 and totals.cache_unknown == 1  # step 3 reported no usage at all
    assert SessionTotals().cache_hit is None
