"""Finding a session again: `-c` continues the one last used, the exit line names it, `--json` carries its id,
the sidebar's search never fires an action, `sessions delete` asks first, and counts read as English."""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from hotloop.agent.events import Notice, TurnStarted, decode
from hotloop.cli import main
from hotloop.headless.printer import Printer
from hotloop.headless.saved import saved_line
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import SessionError, last_written, list_sessions, session_id_of
from hotloop.sessions.summary import summary_path
from hotloop.tui.widgets.sessions_sidebar import LIST_HINT, SEARCH_HINT, SessionList, SessionsSidebar

from tui_support import press, wait_until

FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> Path:
    """The folder hotloop runs in, with a simulator that answers at once."""
    root = tmp_path / "here"
    root.mkdir()
    monkeypatch.chdir(root)
    (isolated_home / "config.toml").write_text(FAST_SIM)
    return root


def sessions_folder(home: Path) -> Path:
    return home / "data" / "sessions"


def only_log(home: Path, before: set[Path]) -> Path:
    """The one session log written since `before` was taken."""
    (path,) = set(sessions_folder(home).glob("*.jsonl")) - before
    return path


def logs(home: Path) -> set[Path]:
    return set(sessions_folder(home).glob("*.jsonl"))


def prompts_of(path: Path) -> list[str]:
    lines = path.read_bytes().splitlines()[1:]
    return [event.prompt for event in map(decode, lines) if isinstance(event, TurnStarted)]


def logged(folder: Path, workspace: Path, prompt: str = "hello") -> Path:
    """A one-turn session run in `workspace`, written straight through the log."""
    with SessionLog.create(folder, provider="sim", model="sim-fast", workspace=workspace) as log:
        log.write(TurnStarted(turn=1, prompt=prompt, ts=1.0))
    return log.path


def written_at(path: Path, seconds: float) -> None:
    os.utime(path, (seconds, seconds))


# -- "latest" is the session written to last ------------------------------------------------


def test_latest_is_the_last_written_in_the_workspace_else_anywhere(tmp_path: Path) -> None:
    folder, ours, theirs = tmp_path / "sessions", tmp_path / "ours", tmp_path / "theirs"
    older, newer, elsewhere = logged(folder, ours), logged(folder, ours), logged(folder, theirs)
    written_at(newer, 1_000)
    written_at(older, 2_000)  # the older session was continued after the newer one was last used
    written_at(elsewhere, 3_000)
    (folder / "99999999T999999_deadbeef.jsonl").write_text("not a session\n")  # newest, unreadable: passed over

    latest = last_written(folder, ours)
    assert latest.path == older and latest.here and latest.workspace == str(ours)
    fallback = last_written(folder, tmp_path / "unused")
    assert fallback.path == elsewhere and not fallback.here and fallback.workspace == str(theirs)
    assert last_written(folder).path == elsewhere
    with pytest.raises(SessionError, match="no sessions yet"):
        last_written(tmp_path / "none")


def test_c_continues_the_session_last_used_here_not_the_last_started(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "first, older session"]) == 0
    older = only_log(isolated_home, set())
    assert main(["run", "second, newer session"]) == 0
    newer = only_log(isolated_home, {older})
    assert main(["run", "--resume", session_id_of(older), "using the older one again"]) == 0
    capsys.readouterr()

    assert main(["run", "-c", "and on"]) == 0
    assert prompts_of(older) == ["first, older session", "using the older one again", "and on"]
    assert prompts_of(newer) == ["second, newer session"]
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"session {session_id_of(older)} saved · hotloop -c"
    assert "latest anywhere" not in err


def test_c_falls_back_to_the_latest_anywhere_and_says_so(
    here: Path, isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = logged(sessions_folder(isolated_home), elsewhere, "from another folder")
    assert main(["sessions", "show"]) == 0
    out, err = capsys.readouterr()
    assert "from another folder" in out
    assert err == (
        f"hotloop: no session has run in {here} yet; showing {session_id_of(path)}, the latest anywhere"
        f" (it ran in {elsewhere})\n"
    )


def test_replay_and_show_default_to_the_session_last_used_here(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = sessions_folder(isolated_home)
    used, started_later = logged(folder, here, "used last"), logged(folder, here, "started last")
    written_at(started_later, 1_000)
    written_at(used, 2_000)
    assert main(["sessions", "show"]) == 0
    out, err = capsys.readouterr()
    assert "used last" in out and "started last" not in out and err == ""
    assert main(["replay", "--headless", "--speed", "0"]) == 0
    assert main(["sessions", "export", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "used last" in out and "started last" not in out


# -- the exit line ----------------------------------------------------------------------------


def test_run_says_which_session_it_saved(here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hello"]) == 0
    path = only_log(isolated_home, set())
    assert capsys.readouterr().err.splitlines()[-1] == f"session {session_id_of(path)} saved · hotloop -c"
    assert main(["run", "--model", "no-such-model", "hello"]) == 1  # refused before a session starts
    assert "saved" not in capsys.readouterr().err
    assert logs(isolated_home) == {path}


def test_the_exit_line_names_the_id_when_c_would_pick_another(tmp_path: Path) -> None:
    folder, ours = tmp_path / "sessions", tmp_path / "ours"
    older, newer = logged(folder, ours), logged(folder, ours)
    written_at(older, 1_000)
    written_at(newer, 2_000)
    assert saved_line(newer, ours) == f"session {session_id_of(newer)} saved · hotloop -c"
    assert saved_line(older, ours) == f"session {session_id_of(older)} saved · hotloop --resume {session_id_of(older)}"


def test_the_app_says_which_session_it_saved(
    here: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hotloop` (the app) ends with the line, after the screen is given back."""
    from hotloop.tui.app import HotloopApp

    from tui_support import connected, idle, send

    async def drive(app: HotloopApp) -> None:
        async with app.run_test() as pilot:
            await connected(app)
            await send(app, pilot, "hello")
            await idle(app, pilot)

    monkeypatch.setattr(HotloopApp, "run", lambda app: asyncio.run(drive(app)))
    assert main([]) == 0
    path = only_log(isolated_home, set())
    assert capsys.readouterr().err == f"session {session_id_of(path)} saved · hotloop -c\n"


def test_an_app_that_ran_no_turn_says_nothing(
    here: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hotloop.tui.app import HotloopApp

    from tui_support import connected

    async def drive(app: HotloopApp) -> None:
        async with app.run_test():
            await connected(app)

    monkeypatch.setattr(HotloopApp, "run", lambda app: asyncio.run(drive(app)))
    assert main([]) == 0
    assert capsys.readouterr().err == "" and logs(isolated_home) == set()


# -- --json carries the session id ------------------------------------------------------------


def test_json_carries_the_session_id_in_its_first_line_in_the_logged_order(
    here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A config warning is said before the log exists: the first line, held until the id is known.
    (isolated_home / "config.toml").write_text(FAST_SIM + "[providers.sim-anthropic]\ncache_breakpoints = 6\n")
    assert main(["run", "--json", "--provider", "sim-anthropic", "hello"]) == 0
    path = only_log(isolated_home, set())
    lines = capsys.readouterr().out.splitlines()
    first = json.loads(lines[0])
    assert first["type"] == "notice" and "cache_breakpoints = 6" in first["message"]
    assert first["session"] == session_id_of(path)
    assert not any("session" in json.loads(line) for line in lines[1:])
    printed = [type(decode(line)).__name__ for line in lines]  # the id doesn't stop a line from decoding
    assert printed == [type(decode(line)).__name__ for line in path.read_bytes().splitlines()[1:]]


def test_json_lines_with_no_session_are_written_at_close_without_an_id() -> None:
    out = io.StringIO()
    printer = Printer(out=out, err=io.StringIO(), json_lines=True)
    printer(Notice(level="info", message="before any log", ts=1.0))
    assert out.getvalue() == ""  # held: the id may come with the next line
    printer.close()
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"type": "notice", "level": "info", "message": "before any log", "ts": 1.0}
    ]
    printer(Notice(level="info", message="after", ts=2.0))  # once closed, nothing more is held
    assert "after" in out.getvalue().splitlines()[-1]


# -- sessions list and delete -----------------------------------------------------------------


def test_list_shows_the_model_last_used(here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hello", "/tier strong", "and again"]) == 0
    path = only_log(isolated_home, set())
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    assert "sim/sim-strong" in capsys.readouterr().out  # the session started on sim-balanced

    summary = summary_path(path)
    old = json.loads(summary.read_text())
    del old["provider"], old["model"]  # a summary written before these fields: the header's model
    summary.write_text(json.dumps(old))
    [session] = list_sessions(sessions_folder(isolated_home)).sessions
    assert (session.provider, session.model) == ("sim", "sim-balanced")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_delete_asks_on_a_terminal(
    here: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "hello there"]) == 0
    path = only_log(isolated_home, set())
    session_id = session_id_of(path)
    capsys.readouterr()

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert main(["sessions", "delete", session_id[:4]]) == 1
    out, err = capsys.readouterr()
    assert err == f"delete session {session_id} (1 turn, “hello there”)? [y/N] kept session {session_id}\n"
    assert path.exists() and out == ""

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert main(["sessions", "delete", session_id]) == 0
    assert not path.exists() and not summary_path(path).exists()
    assert capsys.readouterr().out == f"deleted session {session_id} ({path})\n"


def test_delete_off_a_terminal_needs_yes(
    here: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = logged(sessions_folder(isolated_home), here)
    session_id = session_id_of(path)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # a pipe's yes is not an answer
    assert main(["sessions", "delete", session_id]) == 2
    out, err = capsys.readouterr()
    assert err == f"hotloop: not deleting session {session_id} unasked: stdin is not a terminal (add --yes)\n"
    assert path.exists() and out == ""
    assert main(["sessions", "delete", "--yes", session_id]) == 0
    assert not path.exists()


def test_counts_read_as_english(here: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = sessions_folder(isolated_home)
    for n in range(3):
        logged(folder, here, f"prompt {n}")
    assert main(["sessions", "list", "--limit", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "… 1 older session (--limit N shows more)"


# -- the sidebar -------------------------------------------------------------------------------


class SidebarHost(App[None]):
    """The sidebar as the app opens and closes it."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.picked: list[tuple[Path, str]] = []

    def compose(self) -> ComposeResult:
        yield SessionsSidebar()

    def toggle(self) -> None:
        sidebar = self.query_one(SessionsSidebar)
        sidebar.toggle_class("-open")
        if sidebar.has_class("-open"):
            sidebar.show(list_sessions(self.folder).sessions)
            sidebar.opened()
        else:
            sidebar.closed()
            self.set_focus(None)

    def on_sessions_sidebar_picked(self, message: SessionsSidebar.Picked) -> None:
        self.picked.append((message.path, message.action))


def shown(sidebar: SessionsSidebar, selector: str) -> str:
    return str(sidebar.query_one(selector).render())


async def test_typing_in_the_sidebar_only_searches(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    replayed = logged(folder, tmp_path, "about replays")
    logged(folder, tmp_path, "about caches")
    app = SidebarHost(folder)
    async with app.run_test(size=(80, 24)) as pilot:
        sidebar = app.query_one(SessionsSidebar)
        search, sessions = sidebar.search, sidebar.query_one(SessionList)
        app.toggle()
        await wait_until(lambda: app.focused is search)
        assert shown(sidebar, "#hint") == SEARCH_HINT and shown(sidebar, "#heading") == "Sessions · 2 sessions"
        assert "1 turn ·" in str(sessions.get_option_at_index(0).prompt)
        press(app, "r", "c")
        await wait_until(lambda: search.value == "rc")
        await pilot.pause()
        assert app.picked == []

        press(app, "backspace", "backspace", "down")  # ↓ leaves the search box for the list
        # The hint follows the focus once the sidebar hears of it, a message later.
        await wait_until(lambda: app.focused is sessions and shown(sidebar, "#hint") == LIST_HINT)
        press(app, *"eplay")  # on the list, letters that aren't its keys go back to the search box
        await wait_until(lambda: search.value == "eplay" and sessions.option_count == 1 and app.focused is search)
        assert app.picked == []
        assert shown(sidebar, "#heading") == "Sessions · 1 of 2 sessions"

        press(app, "enter")  # from the search box to the list, where r replays
        await wait_until(lambda: app.focused is sessions)
        press(app, "r")
        await wait_until(lambda: bool(app.picked))
        assert app.picked == [(replayed, "replay")]

        app.toggle()
        await wait_until(lambda: search.value == "")  # closing forgets the search
        app.toggle()
        await wait_until(lambda: app.focused is search and sessions.option_count == 2)
