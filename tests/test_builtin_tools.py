"""Built-in tools stay inside the workspace and cap what they return."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hotloop.agent.tools.builtins import GREP_MATCHES, builtin_tools
from hotloop.agent.tools.registry import OUTPUT_LIMIT, ToolContext, ToolError, ToolRegistry, cap_output

TOOLS = {tool.name: tool for tool in builtin_tools()}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 42  # TODO tidy\n")
    (root / "README.md").write_text("# Title\n\nline\n")
    (tmp_path / "secret.txt").write_text("outside")
    return root


async def call(workspace: Path, name: str, **args: object) -> str:
    return await TOOLS[name].handler(dict(args), ToolContext("c1", workspace))


async def test_read_list_and_grep_work_inside_the_workspace(workspace: Path) -> None:
    assert await call(workspace, "read_file", path="README.md") == "# Title\n\nline\n"
    assert await call(workspace, "list_dir") == "src/\nREADME.md  14 B"
    assert await call(workspace, "grep", pattern="TODO") == "src/app.py:2:     return 42  # TODO tidy"
    assert await call(workspace, "grep", pattern="title", ignore_case=True, glob="*.md") == "README.md:1: # Title"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../secret.txt", "'..' is not allowed"),
        ("src/../../secret.txt", "'..' is not allowed"),
        ("/etc/passwd", "outside the workspace"),
        ("", "path must be a non-empty string"),
    ],
)
async def test_paths_that_leave_the_workspace_are_refused(workspace: Path, path: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await call(workspace, "read_file", path=path)


async def test_symlinks_out_are_refused_and_symlinks_in_are_followed(workspace: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "leak.txt")
    os.symlink(workspace / "README.md", workspace / "readme-link.md")
    with pytest.raises(ToolError, match="leads outside the workspace through a symlink"):
        await call(workspace, "read_file", path="leak.txt")
    assert (await call(workspace, "read_file", path="readme-link.md")).startswith("# Title")
    # grep walks past the escaping link instead of reading its target.
    assert await call(workspace, "grep", pattern="outside") == "no matches for 'outside'"


async def test_an_absolute_path_inside_the_workspace_is_fine(workspace: Path) -> None:
    assert await call(workspace, "read_file", path=str(workspace / "README.md")) == "# Title\n\nline\n"


async def test_reading_pages_and_clear_errors(workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 101)))
    page = await call(workspace, "read_file", path="long.txt", offset=10, limit=3)
    assert page == "line 10\nline 11\nline 12\n\n[lines 10-12 of 100; pass offset and limit to read more]"
    (workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary file"):
        await call(workspace, "read_file", path="blob.bin")
    with pytest.raises(ToolError, match=r"no such file: missing\.txt"):
        await call(workspace, "read_file", path="missing.txt")
    with pytest.raises(ToolError, match="src is a directory"):
        await call(workspace, "read_file", path="src")
    with pytest.raises(ToolError, match="invalid regular expression"):
        await call(workspace, "grep", pattern="(")
    with pytest.raises(ToolError, match="offset must be an integer"):
        await call(workspace, "read_file", path="README.md", offset="two")


async def test_grep_stops_at_its_match_cap(workspace: Path) -> None:
    (workspace / "many.txt").write_text("hit\n" * (GREP_MATCHES + 50))
    result = await call(workspace, "grep", pattern="hit")
    assert result.count("many.txt:") == GREP_MATCHES and result.endswith("narrow the pattern or path]")


def test_output_is_capped_keeping_its_head_and_tail_with_a_notice() -> None:
    text = "head" + "x" * OUTPUT_LIMIT + "tail"
    capped = cap_output(text)
    assert capped.startswith("headx") and capped.endswith("xtail") and len(capped) <= OUTPUT_LIMIT
    assert "\n[output truncated: " in capped
    assert cap_output("short") == "short"


def test_registry_lists_tools_sorted_with_canonical_schemas() -> None:
    registry = ToolRegistry(list(reversed(builtin_tools())))
    assert [spec.name for spec in registry.specs()] == ["grep", "list_dir", "read_file"]
    grep = registry.specs()[0].parameters
    assert list(grep) == sorted(grep) and list(grep["properties"]) == sorted(grep["properties"])
    assert all(tool.read_only for tool in registry)
