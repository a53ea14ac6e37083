"""edit_file and write_file: exact edits, atomic writes, previews that write nothing, the workspace's bounds."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotloop.agent.tools.edit import change_summary, edit_tools
from hotloop.agent.tools.registry import ToolContext, ToolError

TOOLS = {tool.name: tool for tool in edit_tools()}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    (root / "README.md").write_text("# Title\n\nTODO one\nTODO two\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    (tmp_path / "outside").mkdir()
    return root


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def call(workspace: Path, name: str, **args: object) -> str:
    return await TOOLS[name].handler(dict(args), ToolContext("c1", workspace))


async def preview(workspace: Path, name: str, **args: object) -> str:
    shown = TOOLS[name].preview
    assert shown is not None
    return await shown(dict(args), ToolContext("c1", workspace))


async def refusal(workspace: Path, name: str, **args: object) -> str:
    with pytest.raises(ToolError) as error:
        await call(workspace, name, **args)
    return str(error.value)


def listing(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def test_edit_replaces_the_one_match_keeps_the_mode_and_returns_the_diff(workspace: Path) -> None:
    app = workspace / "src" / "app.py"
    app.chmod(0o751)
    result = await call(workspace, "edit_file", path="src/app.py", old_string="return 42", new_string="return 43")
    assert app.read_text() == "def main():\n    return 43\n"
    assert stat.S_IMODE(app.stat().st_mode) == 0o751
    assert result == (
        "edited src/app.py: +1 −1\n"
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n-    return 42\n+    return 43\n"
    )
    assert listing(workspace / "src") == ["app.py"]  # no temporary file left


async def test_the_preview_is_the_diff_and_writes_nothing(workspace: Path, umask_022: None) -> None:
    before = (workspace / "README.md").read_text()
    diff = await preview(workspace, "edit_file", path="README.md", old_string="# Title", new_string="# Name\nmore")
    assert (
        diff == "--- a/README.md\n+++ b/README.md\n@@ -1,4 +1,5 @@\n-# Title\n+# Name\n+more\n \n TODO one\n TODO two\n"
    )
    assert change_summary("README.md", diff) == "edit README.md +2 −1"
    new = await preview(workspace, "write_file", path="docs/new/guide.md", content="hello\nworld")
    assert (
        new == "--- /dev/null\n+++ b/docs/new/guide.md\n@@ -0,0 +1,2 @@\n+hello\n+world\n\\ No newline at end of file\n"
    )
    assert change_summary("docs/new/guide.md", new) == "create docs/new/guide.md +2 −0"
    assert (workspace / "README.md").read_text() == before
    assert not (workspace / "docs").exists()


async def test_no_match_says_so_and_points_at_a_whitespace_near_miss(workspace: Path) -> None:
    missing = await refusal(workspace, "edit_file", path="src/app.py", old_string="return 41", new_string="x")
    assert missing.startswith("old_string not found in src/app.py; it must match exactly")
    near = await refusal(
        workspace, "edit_file", path="src/app.py", old_string="def main():\n  return 42", new_string="x"
    )
    assert "old_string not found in src/app.py; the text at line 1 matches but for whitespace" in near
    assert (workspace / "src" / "app.py").read_text() == "def main():\n    return 42\n"


async def test_several_matches_need_context_or_replace_all(workspace: Path) -> None:
    several = await refusal(workspace, "edit_file", path="README.md", old_string="TODO", new_string="DONE")
    assert several == (
        "old_string found 2 times in README.md; give more surrounding context to make it unique, "
        "or set replace_all to change every one"
    )
    result = await call(
        workspace, "edit_file", path="README.md", old_string="TODO", new_string="DONE", replace_all=True
    )
    assert result.startswith("edited README.md: +2 −2\n")
    assert (workspace / "README.md").read_text() == "# Title\n\nDONE one\nDONE two\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "README.md", "old_string": "TODO one", "new_string": "TODO one"}, "are the same"),
        ({"path": "README.md", "old_string": "", "new_string": "x"}, "old_string must not be empty"),
        ({"path": "README.md", "old_string": 3, "new_string": "x"}, "old_string must be a string"),
        ({"path": "README.md", "old_string": "a", "new_string": "b", "replace_all": "yes"}, "replace_all must be"),
        ({"path": "gone.txt", "old_string": "a", "new_string": "b"}, "no such file: gone.txt; to create it"),
        ({"path": "src", "old_string": "a", "new_string": "b"}, "src is a directory"),
    ],
)
async def test_edit_errors_the_model_can_act_on(workspace: Path, args: dict[str, object], message: str) -> None:
    assert message in await refusal(workspace, "edit_file", **args)


async def test_binary_and_non_utf8_files_are_refused(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"abc\0def")
    (workspace / "latin1.txt").write_bytes(b"caf\xe9\n")
    binary = await refusal(workspace, "edit_file", path="blob.bin", old_string="abc", new_string="x")
    assert binary == "blob.bin is a binary file (7 bytes); only text files can be changed"
    assert "latin1.txt is not UTF-8 text" in await refusal(workspace, "write_file", path="latin1.txt", content="x")
    assert (workspace / "blob.bin").read_bytes() == b"abc\0def"


async def test_a_crlf_file_is_matched_and_kept_crlf(workspace: Path) -> None:
    (workspace / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await call(workspace, "edit_file", path="win.txt", old_string="one\ntwo", new_string="uno\ndos")
    assert (workspace / "win.txt").read_bytes() == b"uno\r\ndos\r\nthree\r\n"


async def test_write_creates_folders_and_new_files_get_the_umask_mode(workspace: Path, umask_022: None) -> None:
    result = await call(workspace, "write_file", path="docs/api/index.md", content="# API\n")
    made = workspace / "docs" / "api" / "index.md"
    assert result == "created docs/api/index.md: +1 −0"
    assert made.read_text() == "# API\n"
    assert stat.S_IMODE(made.stat().st_mode) == 0o644
    assert stat.S_IMODE((workspace / "docs").stat().st_mode) == 0o755


async def test_overwrite_keeps_the_mode_and_same_content_changes_nothing(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo a\n")
    script.chmod(0o700)
    result = await call(workspace, "write_file", path=str(script), content="echo b\n")  # absolute, inside
    assert result.startswith("edited run.sh: +1 −1\n--- a/run.sh")
    assert script.read_text() == "echo b\n" and stat.S_IMODE(script.stat().st_mode) == 0o700
    inode = script.stat().st_ino
    assert (
        await call(workspace, "write_file", path="run.sh", content="echo b\n")
        == "run.sh unchanged: it already has this content"
    )
    assert script.stat().st_ino == inode


async def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary_file(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    failed = await refusal(workspace, "edit_file", path="src/app.py", old_string="42", new_string="43")
    assert failed == "cannot write 'src/app.py': No space left on device"
    assert (workspace / "src" / "app.py").read_text() == "def main():\n    return 42\n"
    assert listing(workspace / "src") == ["app.py"]
    await refusal(workspace, "write_file", path="new.txt", content="x")
    assert not (workspace / "new.txt").exists()
    assert listing(workspace) == ["README.md", "src"]


@pytest.mark.parametrize("name", ["edit_file", "write_file"])
async def test_paths_outside_the_workspace_are_refused(workspace: Path, tmp_path: Path, name: str) -> None:
    (workspace / "out").symlink_to(tmp_path / "secret.txt")
    (workspace / "away").symlink_to(tmp_path / "outside")
    args = {"old_string": "outside", "new_string": "inside"} if name == "edit_file" else {"content": "inside\n"}
    assert "'..' is not allowed" in await refusal(workspace, name, path="../secret.txt", **args)
    assert "outside the workspace" in await refusal(workspace, name, path=str(tmp_path / "secret.txt"), **args)
    assert "through a symlink" in await refusal(workspace, name, path="out", **args)
    assert "through a symlink" in await refusal(workspace, name, path="away/new.txt", **args)
    assert "through a symlink" in await refusal(workspace, name, path="away/deeper/new.txt", **args)
    assert (tmp_path / "secret.txt").read_text() == "outside\n"
    assert listing(tmp_path / "outside") == []
    assert (workspace / "out").is_symlink() and (workspace / "away").is_symlink()


async def test_a_symlink_inside_edits_its_target_and_stays_a_link(workspace: Path) -> None:
    (workspace / "link.py").symlink_to("src/app.py")
    result = await call(workspace, "edit_file", path="link.py", old_string="42", new_string="7")
    assert result.startswith("edited src/app.py: +1 −1")
    assert (workspace / "link.py").is_symlink()
    assert (workspace / "src" / "app.py").read_text() == "def main():\n    return 7\n"


async def test_parallel_edits_of_one_file_all_land(workspace: Path) -> None:
    (workspace / "many.txt").write_text("".join(f"line {n}\n" for n in range(8)))
    edits = [
        call(workspace, "edit_file", path="many.txt", old_string=f"line {n}\n", new_string=f"LINE {n}\n")
        for n in range(8)
    ]
    await asyncio.gather(*edits)
    assert (workspace / "many.txt").read_text() == "".join(f"LINE {n}\n" for n in range(8))


def test_the_tools_act_only_once_approved() -> None:
    for tool in TOOLS.values():
        assert tool.side_effects and not tool.read_only and tool.preview is not None
