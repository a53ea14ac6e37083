"""`ApprovalBar`: the calls waiting for the user's yes or no, above the prompt, the first one asked about.

The app sets `requests`, and `typed` (where keys that aren't an answer go); the bar posts `Answered`.

A question can't be answered by accident. It shows the whole call: the programs a command runs
in its first line, its text spelled out below (nothing invisible, padding counted, scrollable,
scrolled to its end), and the exact rules "allow for this session" adds, in that answer. It takes keys only when
its answers have focus, which the app gives it only when the prompt is empty (else ctrl+r), and
for GRACE seconds after a question appears (or after the last key typed into the prompt) every key
goes to the prompt instead, as does any key that isn't an answer: a prompt being typed as the
question pops up stays a prompt, whatever letters it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from hotloop.agent.approvals import Answer, Reply, Request
from hotloop.agent.text import SPELLED, inert, spelled_out, visible

GRACE = 0.5  # seconds after a question appears in which no key answers it
RULE_LENGTH = 48  # characters of a rule the session answer shows in its own line
ANSWERS: dict[str | None, Answer] = {"once": "once", "session": "session", "deny": "deny"}  # by option id
ANSWER_KEYS = frozenset({"y", "a", "n", "r", "enter"})  # keys typed into the answers that answer


class AnswerList(OptionList):
    BINDINGS = [
        Binding("y", "answer('once')", "Allow once"),
        Binding("a", "answer('session')", "Allow for this session", tooltip="Allow calls exactly like this one"),
        Binding("n", "answer('deny')", "Deny", tooltip="Deny; the model reads that you did"),
        Binding("r", "answer('reason')", "Deny, saying why", tooltip="Deny, with a reason the model reads"),
    ]

    def action_answer(self, answer: str) -> None:
        if answer in self._option_ids:
            self.highlighted = self.get_option_index(answer)
            self.action_select()

    @property
    def _option_ids(self) -> set[str]:
        return {option.id for option in self.options if option.id}

    def on_key(self, event: events.Key) -> None:
        """Before the bindings: typing goes to the prompt, and in the grace no key answers."""
        bar = self.parent
        if not isinstance(bar, ApprovalBar):
            return
        typing = bool(event.is_printable and event.character) or event.key in ("enter", "backspace")
        if typing and (not bar.armed or event.key not in ANSWER_KEYS):
            bar.disarm()  # keys already on their way here are this typing's too, until the focus has moved
            bar.typed(event)
        elif not bar.armed and event.key in ("up", "down"):
            pass  # a key meant for the prompt's history, not for the answers
        else:
            return
        event.stop()
        event.prevent_default()


class ApprovalBar(Vertical):
    DEFAULT_CSS = """
    ApprovalBar { height: auto; display: none; border: round $warning; padding: 0 1; }
    ApprovalBar.-asking { display: block; }
    ApprovalBar > #question { height: auto; }
    ApprovalBar > #call { height: auto; max-height: 18vh; min-height: 1; background: $boost; }
    ApprovalBar > #call > Static { height: auto; }
    ApprovalBar > #note { height: auto; color: $text-muted; }
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

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.typed: Callable[[events.Key], None] = lambda event: None
        self.clock: Callable[[], float] = time.monotonic
        self._armed_at = 0.0
        self._asked: Request | None = None

    @property
    def armed(self) -> bool:
        """Whether the grace after the question appeared is over: keys may answer it now."""
        return self.clock() >= self._armed_at

    def disarm(self) -> None:
        """Take no answer for another GRACE seconds: the user is typing."""
        self._armed_at = self.clock() + GRACE

    def compose(self) -> ComposeResult:
        yield Static(id="question")
        with VerticalScroll(id="call"):
            yield Static(id="call-text")
        yield Static(id="note")
        yield AnswerList(id="answers")
        yield Input(placeholder="why not? (the model reads it) · Enter denies · Esc goes back", id="reason")

    def watch_requests(self, requests: tuple[Request, ...]) -> None:
        self.set_class(bool(requests), "-asking")
        if not requests:
            self._asked = None
            return
        first = requests[0]
        if first is not self._asked:
            self._asked = first
            self.disarm()
        self.query_one("#question", Static).update(_headline(first, len(requests)))
        self.query_one("#call-text", Static).update(_spelled(first))
        call = self.query_one("#call", VerticalScroll)
        call.display = not first.file or not _inline(first.session_rules)  # else a path is all in the first line
        call.anchor()  # the end shows, whatever the size, until the user scrolls
        self._show_note()
        answers = self.query_one(AnswerList)
        answers.clear_options()
        answers.add_options(_options(first, len(requests)))
        answers.highlighted = 0

    def on_descendant_focus(self) -> None:
        self._show_note()

    def on_descendant_blur(self) -> None:
        self._show_note()

    def _show_note(self) -> None:
        if self._asked is None:
            return
        lines = [f"⚠ this writes {self._asked.warning}"] if self._asked.warning else []
        if self._asked.unread:
            lines.append("no rule can allow this: " + "; ".join(self._asked.unread))
        if not self.query_one(AnswerList).has_focus and not self.query_one(Input).has_focus:
            lines.append("ctrl+r answers · what you type stays in the prompt")
        note = self.query_one("#note", Static)
        note.update(Text(inert("\n".join(lines))))
        note.display = bool(lines)

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


def _headline(request: Request, waiting: int) -> Text:
    """The question's first line: who wants to do what, with the programs a command runs named."""
    line = Text()
    line.append(f"{visible(request.tool)} ", "bold")
    lines = request.subject.count("\n") + 1
    size = f" ({lines:,} lines)" if lines > 1 else ""
    if request.commands:
        count = f"{len(request.commands)} commands" if len(request.commands) > 1 else "a command"
        line.append(f"wants to run {count}{size}: ")
        line.append(visible(", ".join(request.programs)), "bold")
    elif request.file:
        line.append(f"wants to {'edit' if request.tool == 'edit_file' else 'write'} ")
        if request.given:
            line.append(visible(request.given), "bold")
            line.append(" → ")
            line.append(visible(request.subject), "bold reverse")
            line.append(" (through a symlink)", "dim")
        else:
            line.append(visible(request.subject), "bold")
    else:
        line.append(f"wants to act on{size}: " if request.tool != "run_shell" else f"wants to run{size}: ")
        line.append(visible(request.subject.splitlines()[0][:120] if request.subject else ""), "bold")
    if waiting > 1:
        line.append(f"  (1 of {waiting} waiting)", "dim")
    return line


def _spelled(request: Request) -> Text:
    """The call's whole text, nothing hidden, its stand-ins marked as not being the text's own; above it, the rules
    a session answer adds, when they are more than its option shows."""
    rules = request.session_rules
    listed = not _inline(rules)
    lines = ["allow for this session adds:", *(f"  {visible(rule)}" for rule in rules), ""] if listed else []
    text = Text("\n".join([*lines, *spelled_out(request.subject)]))
    for match in SPELLED.finditer(text.plain, len("\n".join(lines))):
        text.stylize("dim reverse", match.start(), match.end())
    return text


def _inline(rules: tuple[str, ...]) -> bool:
    """Whether the rules fit in the session answer's one line (else they are listed above the call)."""
    return len(rules) <= 1 and all(len(rule) <= RULE_LENGTH for rule in rules)


def _options(request: Request, waiting: int) -> list[Option]:
    rules = request.session_rules
    if not rules:
        session = Option(Text("   no rule can allow this for the session", "dim"), id="none", disabled=True)
    else:
        shown = visible(rules[0]) if _inline(rules) else "the rules listed above the call"
        session = Option(Text(f"a  allow for this session: {shown}"), id="session")
    return [
        Option("y  allow once", id="once"),
        session,
        *([Option(f"   allow all {waiting} waiting once", id="every")] if waiting > 1 else []),
        Option("n  deny", id="deny"),
        Option("r  deny, saying why…", id="reason"),
    ]
