"""docs/architecture.md's Layout is the tree: every package has its entry, every module of a package is named in it,
and every module it explains (a name with its note in parentheses) exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_THE_PACKAGE = {"tests", "benchmarks", "docs", "screenshots"}


def layout() -> dict[str, str]:
    """Each entry of the Layout block, by its name (`cli/`, `paths.py`), with its description on one line."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Layout\n\n```\n", 1)[1].split("```", 1)[0]
    entries: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line and not line.startswith(" "):
            name, _, line = line.partition(" ")
            entries[name] = ""
        entries[name] += " " + line
    return entries


def outside_parentheses(text: str) -> str:
    """`text` with what is inside parentheses blanked, so a note's words aren't read as module names."""
    kept, depth = [], 0
    for char in text:
        depth += char == "("
        kept.append(" " if depth else char)
        depth -= char == ")" and depth > 0
    return "".join(kept)


def packages() -> list[Path]:
    found = [path.parent for path in ROOT.rglob("__init__.py") if ".venv" not in path.parts]
    return sorted(p for p in found if p != ROOT and p.relative_to(ROOT).parts[0] not in NOT_THE_PACKAGE)


def test_every_package_and_root_module_has_its_entry() -> None:
    entries = layout()
    missing = [f"{p.relative_to(ROOT)}/" for p in packages() if f"{p.relative_to(ROOT)}/" not in entries]
    missing += [p.name for p in ROOT.glob("*.py") if p.name not in entries]
    assert not missing, f"not in docs/architecture.md's Layout: {missing}"


def test_every_module_of_a_package_is_named_in_its_entry() -> None:
    entries, unnamed = layout(), []
    for package in packages():
        words = set(re.findall(r"\w+", entries.get(f"{package.relative_to(ROOT)}/", "")))
        modules = [p for p in package.iterdir() if p.suffix in (".py", ".tcss") and p.name != "__init__.py"]
        unnamed += [str(p.relative_to(ROOT)) for p in modules if p.stem not in words]
    assert not unnamed, f"modules docs/architecture.md's Layout doesn't name: {sorted(unnamed)}"


def test_every_module_the_layout_explains_exists() -> None:
    gone = []
    for name, description in layout().items():
        folder = ROOT / name
        if not name.endswith("/") or folder.name in NOT_THE_PACKAGE:
            continue
        plain = re.sub(r"`[^`]*`", lambda quoted: " " * len(quoted.group()), description)
        top = outside_parentheses(plain)
        for found in re.finditer(r"(?<![\w.])([a-z_]\w*)(?:\.py|\.tcss)?\s+(?=\()", plain):
            module = found.group(1)
            if top[found.start()] != " " and not any((folder / f"{module}{end}").exists() for end in (".py", "")):
                gone.append(f"{name}{module}")
    assert not gone, f"docs/architecture.md's Layout explains modules that aren't there: {gone}"
