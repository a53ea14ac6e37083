"""`ApprovalBar`: the calls waiting for the user's yes or no, above the prompt, the first one asked about.

The app sets `requests`; the bar posts `Answered`. Its keys are letters, and its list keeps them
(a list is where the app's "letters go to the prompt" rule steps aside).
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from hotloop.agent.approvals import Answer, Reply, Request, rule_for
from hotloop.agent.text import inert

ANSWERS: dict[str | None, Answer] = {"once": "once", "session": "session", "deny": "deny"}  # by option id


class AnswerList(OptionList):
    BINDINGS = [
        Binding("y", "answer('once')", "Allow once"),
        Binding("a", "answer('session')", "Allow for this session", tooltip="Allow calls exactly like this one"),
        Binding("n", "answer('deny')", "Deny", tooltip="Deny; the model reads that you did"),
        Binding("r", "answer('reason')", "Deny, saying why", tooltip="Deny, with a reason the model reads"),
    ]

    def action_answer(self, answer: str) -> None:
        self.highlighted = self.get_option_index(answer)
        self.action_select()


class ApprovalBar(Vertical):
    DEFAULT_CSS = """
    ApprovalBar { height: auto; display: none; border: round $warning; padding: 0 1; }
    ApprovalBar.-asking { display: block; }
    ApprovalBar > #question { height: auto; }
    ApprovalBar > AnswerList, ApprovalBar > AnswerList:focus { height: auto; max-height: 6; border: none; padding: 0; }
    ApprovalBar > Input { display: none; }
    ApprovalBar > Input.-shown { display: block; }
    """

    requests: reactive[tuple[Request, ...]] = reactive(())

    class Answered(Message):
        """The user answered the first waiting call, or (`every`) all of them at once."""

        def __init__(self, reply: Reply, every: bool = False) -> None:
            super().__init__()
            self.reply = reply
            self.every = every

    def compose(self) -> ComposeResult:
        yield Static(id="question")
        yield AnswerList(id="answers")
        yield Input(placeholder="why not? (the model reads it) · Enter denies · Esc goes back", id="reason")

    def watch_requests(self, requests: tuple[Request, ...]) -> None:
        self.set_class(bool(requests), "-asking")
        if not requests:
            return
        first = requests[0]
        question = Text()
        question.append(f"{inert(first.tool)} ", "bold")
        question.append("wants to run " if first.tool == "run_shell" else "wants to act on ")
        question.append(inert(first.subject), "bold")
        if len(requests) > 1:
            question.append(f"  (1 of {len(requests)} waiting)", "dim")
        self.query_one("#question", Static).update(question)
        answers = self.query_one(AnswerList)
        answers.clear_options()
        answers.add_options(
            [
                Option("y  allow once", id="once"),
                Option(Text(inert(f"a  allow {rule_for(first.tool, first.subject)} for this session")), id="session"),
                *([Option(f"   allow all {len(requests)} waiting once", id="every")] if len(requests) > 1 else []),
                Option("n  deny", id="deny"),
                Option("r  deny, saying why…", id="reason"),
            ]
        )
        answers.highlighted = 0

    def ask(self) -> None:
        """Put the focus on the answers."""
        self.query_one(AnswerList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        chosen = event.option.id
        if chosen == "reason":
            reason = self.query_one(Input)
            reason.add_class("-shown")
            reason.focus()
        elif chosen == "every":
            self.post_message(self.Answered(Reply("once"), every=True))
        elif chosen in ANSWERS:
            self.post_message(self.Answered(Reply(ANSWERS[chosen])))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close_reason()
        self.post_message(self.Answered(Reply("deny", event.value.strip())))

    def on_key(self, event: events.Key) -> None:
        reason = self.query_one(Input)
        if event.key == "escape" and reason.has_focus:
            event.stop()
            self._close_reason()
            self.ask()

    def _close_reason(self) -> None:
        reason = self.query_one(Input)
        reason.value = ""
        reason.remove_class("-shown")
