"""Every import points down the README's map of the code: a folder imports only the folders listed below
it (and the ground's modules), in code and in functions alike. The map's order is read from the README
itself, the one place it is written."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "storlab"


def _order() -> list[str]:
    """The map's rows from the top down: `storlab/cli/`, `running/` … `lab/` (the ground is the rest)."""
    rows = re.findall(r"^\| `([^`]+)` \|", (ROOT / "README.md").read_text(), re.M)
    return [row.rstrip("/").removeprefix("storlab/").removesuffix(".py") for row in rows]


ORDER = _order()


def _floor(parts: tuple[str, ...] | list[str]) -> int:
    """Where a module stands: its folder's row, the entry point above all, the ground below all."""
    if parts[0] == "__main__":
        return -1
    return ORDER.index(parts[0]) if parts[0] in ORDER else len(ORDER)


def _imports(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """(line, storlab's module as its parts after "storlab") for each import of storlab's own."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "storlab":
            parts = node.module.split(".")[1:]
            found += [(node.lineno, parts)] if parts else [(node.lineno, [a.name]) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1:]) for a in node.names if a.name.startswith("storlab.")]
    return found


def test_the_map_names_every_folder_of_the_package():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert folders <= set(ORDER), f"folders missing from the README's map: {sorted(folders - set(ORDER))}"


@pytest.mark.parametrize("module", sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")))
def test_every_import_points_down_the_map(module):
    path = PACKAGE / module
    mine = _floor(Path(module).with_suffix("").parts)
    up = [f"{module}:{line} imports storlab.{'.'.join(parts)}" for line, parts in _imports(ast.parse(path.read_text()))
          if _floor(parts) < mine]
    assert up == []


def test_an_import_up_the_map_is_seen():
    """The check can fail: a module of lab/ importing answer/ is found, one of answer/ importing lab/ is not."""
    up = ast.parse("from storlab.answer import compose\nimport storlab.running.plan\n")
    assert [_floor(parts) < _floor(("lab",)) for _, parts in _imports(up)] == [True, True]
    down = ast.parse("from storlab.lab import caps\nfrom storlab import errors\n")
    assert [_floor(parts) < _floor(("answer",)) for _, parts in _imports(down)] == [False, False]
