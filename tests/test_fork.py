"""Forks: a new session holding a session's first turns, reading the parent's cache, listed under the parent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.agent.events import AgentEvent, Notice, StepFinished, TurnFinished, TurnStarted
from hotloop.cli import main
from hotloop.core.slash import SlashError, parse
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import read_session, session_id_of
from hotloop.sim.cache import BLOCK_SIZE
from hotloop.sim.template import ASSISTANT_HEADER, END
from hotloop.sim.tokenizer import count
from hotloop.tui.widgets.sessions_sidebar import SessionList

from support import present
from tui_support import idle, press, running_app, send, sessions_sidebar, wait_until, write_config

FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
PROMPTS = ("read README.md then grep for TODO", "read notes.txt", "list the files in .")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> Path:
    """The folder hotloop runs in, with a simulator that answers at once."""
    root = tmp_path / "here"
    root.mkdir()
    (root / "README.md").write_text("# Demo\n\nTODO: write the docs.\n")
    (root / "notes.txt").write_text("TODO: more tests\n")
    monkeypatch.chdir(root)
    (isolated_home / "config.toml").write_text(FAST_SIM)
    return root


def sessions_folder(home: Path) -> Path:
    return home / "data" / "sessions"


def first_step_of(events: list[AgentEvent], turn: int) -> StepFinished:
    return next(e for e in events if isinstance(e, StepFinished) and e.turn == turn)


def prompts_of(path: Path) -> list[str]:
    return [e.prompt for e in read_session(path).events if isinstance(e, TurnStarted)]


# -- the cache ----------------------------------------------------------------------------


async def test_a_forks_first_request_reads_the_parents_prefix_and_the_forked_turns_from_the_cache(
    isolated_home: Path,
) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        for prompt in PROMPTS:
            await send(app, pilot, prompt)
            await idle(app, pilot)
        assert app.session.log is not None
        parent = app.session.log.path
        before = parent.read_bytes()

        await send(app, pilot, "/fork 9")
        await wait_until(lambda: any("has no turn 9" in str(n.message) for n in app._notifications))
        assert app.session.log.path == parent  # a fork that can't be made leaves the conversation where it was

        press(app, "ctrl+b")  # the sidebar stays open while the fork is made
        listed = (await sessions_sidebar(app)).query_one(SessionList)
        await wait_until(lambda: listed.option_count == 1)

        await send(app, pilot, "/fork 2")
        await wait_until(lambda: app.session.log is not None and app.session.log.path != parent, what="the fork")
        assert app.agent is not None and app.agent.turn == 2
        assert app.agent.cache_key == session_id_of(parent)  # the parent's prompt_cache_key, not the fork's id
        await wait_until(lambda: listed.option_count == 2, what="the fork in the open sidebar")
        await send(app, pilot, "what did you find?")
        await idle(app, pilot)
        fork = app.session.log.path
        # The fork started later, so newest first would put it on top: it sits under its parent instead.
        assert session_id_of(parent) in str(listed.get_option_at_index(0).prompt)
        under = str(listed.get_option_at_index(1).prompt)
        assert under.startswith("↳ ") and session_id_of(fork) in under

    assert parent.read_bytes() == before  # forking only read the parent
    logged, forked = read_session(parent), read_session(fork)
    assert (forked.header.parent, forked.header.forked_at_turn) == (session_id_of(parent), 2)
    assert forked.header.system == logged.header.system
    assert prompts_of(fork) == [*PROMPTS[:2], "what did you find?"]
    assert f"forked from session {session_id_of(parent)} at turn 2" in [
        e.message for e in forked.events if isinstance(e, Notice)
    ]

    # The system prompt, tools and turns 1–2 are the prefix of the parent's turn-3 request: its prompt less
    # what turn 3 added (the user message, rendered as the simulator's chat template renders it, and the
    # assistant header that asks for the answer).
    opening = next(e for e in logged.events if isinstance(e, TurnStarted) and e.turn == 3)
    parent_usage = first_step_of(logged.events, 3).usage
    assert parent_usage is not None and parent_usage.prompt_total is not None
    added = count(f"<|im_start|>user\n{opening.prompt}{opening.context}{END}") + count(ASSISTANT_HEADER)
    prefix = parent_usage.prompt_total - added
    assert parent_usage.cache_read is not None and parent_usage.cache_read <= prefix  # the measure is no overstatement
    fork_usage = first_step_of(forked.events, 3).usage
    assert fork_usage is not None and fork_usage.cache_read is not None
    # Whole 16-token blocks only: the prefix's last partial block is prefilled again.
    assert fork_usage.cache_read >= prefix - prefix % BLOCK_SIZE > 0


# -- hotloop sessions fork ------------------------------------------------------------------


def test_sessions_fork_writes_a_new_session_that_resumes_and_leaves_the_parent_alone(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *PROMPTS]) == 0
    (parent,) = sessions_folder(isolated_home).glob("*.jsonl")
    parent_id = session_id_of(parent)
    before = parent.read_bytes()
    capsys.readouterr()

    assert main(["sessions", "fork", parent_id[:5], "--turn", "1"]) == 0
    out, err = capsys.readouterr()
    fork_id = out.strip()
    assert err == f"forked session {parent_id} at turn 1 · hotloop --resume {fork_id}\n"
    (fork,) = sessions_folder(isolated_home).glob(f"*_{fork_id}.jsonl")
    header = read_session(fork).header
    assert (header.parent, header.forked_at_turn, header.routing_key) == (parent_id, 1, parent_id)
    assert prompts_of(fork) == [PROMPTS[0]]
    assert main(["sessions", "export", fork_id, "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert (exported["id"], exported["parent"], exported["forked_at_turn"]) == (fork_id, parent_id, 1)

    assert main(["run", "--resume", fork_id, "and now?"]) == 0
    capsys.readouterr()
    assert prompts_of(fork) == [PROMPTS[0], "and now?"]
    finished = [(e.turn, e.reason) for e in read_session(fork).events if isinstance(e, TurnFinished)]
    assert finished == [(1, "answer"), (2, "answer")]
    assert parent.read_bytes() == before

    # Without --turn, the whole conversation; a fork of a fork keeps the first parent's cache key.
    assert main(["sessions", "fork", fork_id]) == 0
    grandchild = capsys.readouterr().out.strip()
    (path,) = sessions_folder(isolated_home).glob(f"*_{grandchild}.jsonl")
    header = read_session(path).header
    assert (header.parent, header.forked_at_turn, header.routing_key) == (fork_id, 2, parent_id)

    assert main(["sessions", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    # Newest first would put the forks on top: they sit under their parent, a fork of a fork one step further in.
    assert len(rows) == 3 and rows[0].startswith(f"{parent_id} ")
    assert rows[1].startswith(f"↳ {fork_id} ") and rows[2].startswith(f"  ↳ {grandchild} ")


def test_a_fork_whose_parent_is_gone_says_whose_fork_it_is(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "hello"]) == 0
    (parent,) = sessions_folder(isolated_home).glob("*.jsonl")
    assert main(["sessions", "fork", session_id_of(parent)]) == 0
    assert main(["sessions", "delete", "--yes", session_id_of(parent)]) == 0
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[1:]
    assert not row.startswith("↳") and f"(fork of {session_id_of(parent)}) hello" in row


def test_a_session_in_use_can_be_forked_and_its_cut_turn_is_ended(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process holds the parent and is mid-turn: the fork reads it unlocked, and ends that turn itself."""
    folder = sessions_folder(isolated_home)
    with SessionLog.create(folder, provider="sim", model="sim-fast", workspace=here) as log:
        log.write(TurnStarted(turn=1, prompt="first", ts=1.0))
        log.write(TurnFinished(turn=1, reason="answer", steps=0, wall=1.0, ts=2.0))
        log.write(TurnStarted(turn=2, prompt="still running", ts=3.0))
        log.flush()
        before = log.path.read_bytes()
        assert main(["sessions", "fork", log.id]) == 0
        fork_id = capsys.readouterr().out.strip()
        assert log.path.read_bytes() == before
    (fork,) = folder.glob(f"*_{fork_id}.jsonl")
    events = read_session(fork).events
    assert [(e.turn, e.reason) for e in events if isinstance(e, TurnFinished)] == [(1, "answer"), (2, "interrupted")]
    assert isinstance(events[-1], Notice) and events[-1].ts == events[-2].ts  # a replay doesn't wait for the fork


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nosuch"], "hotloop: no session id starts with 'nosuch' (hotloop sessions list shows them)\n"),
        (["{id}", "--turn", "2"], "hotloop: session {id} has no turn 2 (its turns are 1 to 1)\n"),
    ],
)
def test_forking_what_isnt_there_is_one_line(
    args: list[str], said: str, here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "hello"]) == 0
    (parent,) = sessions_folder(isolated_home).glob("*.jsonl")
    capsys.readouterr()
    session_id = session_id_of(parent)
    assert main(["sessions", "fork", *(arg.format(id=session_id) for arg in args)]) == 2
    assert capsys.readouterr().err == said.format(id=session_id)
    assert list(sessions_folder(isolated_home).glob("*.jsonl")) == [parent]


def test_fork_takes_nothing_or_one_turn_number() -> None:
    assert parse("/fork") is not None and present(parse("/fork 3")).args == ("3",)
    for bad in ("/fork 0", "/fork two", "/fork 1 2", "/fork ²"):
        with pytest.raises(SlashError, match="/fork takes nothing, or a turn number"):
            parse(bad)


def test_a_forks_summary_counts_only_what_the_fork_spent(here: Path, isolated_home: Path) -> None:
    """The parent's turns copied into a fork are the parent's tokens and dollars: the fork's summary
    (what `sessions list` and the sidebar show) counts only its own steps, written live or read again."""
    from hotloop.sessions.store import list_sessions
    from hotloop.sessions.summary import summary_path

    def spent(folder: Path) -> dict[str, int | None]:
        return {s.id: s.tokens for s in list_sessions(folder).sessions}

    assert main(["run", *PROMPTS]) == 0
    (parent,) = sessions_folder(isolated_home).glob("*.jsonl")
    parent_id = session_id_of(parent)
    parent_tokens = spent(sessions_folder(isolated_home))[parent_id]
    assert main(["sessions", "fork", parent_id, "--turn", "2"]) == 0
    (fork,) = [p for p in sessions_folder(isolated_home).glob("*.jsonl") if p != parent]
    fork_id = session_id_of(fork)
    assert spent(sessions_folder(isolated_home)) == {parent_id: parent_tokens, fork_id: None}

    assert main(["run", "--resume", fork_id, "and now?"]) == 0
    own = [e for e in read_session(fork).events if isinstance(e, StepFinished) and e.turn == 3]
    expected = sum(present(e.usage.prompt_total) + present(e.usage.output) for e in own if e.usage is not None)
    assert expected > 0 and spent(sessions_folder(isolated_home))[fork_id] == expected
    summary_path(fork).unlink()  # read again from the log alone
    assert spent(sessions_folder(isolated_home)) == {parent_id: parent_tokens, fork_id: expected}
