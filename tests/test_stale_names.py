"""No stale pointer: every dotted `storlab.` name in the code, the tests, the benchmarks and the docs
names a module or an attribute that exists, and every link to a heading of README.md or docs/ finds it.
A module moved or renamed, or a heading reworded, fails here rather than leaving a reader at nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [*ROOT.glob("storlab/**/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py"),
         *ROOT.glob("docs/*.md"), ROOT / "README.md", ROOT / "Makefile",
         *(p for p in ROOT.glob("examples/**/*") if p.is_file())]
DOTTED = re.compile(r"(?<![\w./-])storlab(?:\.[A-Za-z_]\w*)+")
# Names that are not Python's: the shared store's catalogue tables (schema storlab, SQL's own dotted
# names, read from the statements that create them) and the files storlab names so.
CATALOGUE = set(re.findall(r"CREATE TABLE storlab\.(\w+)", (ROOT / "storlab/results/shared_store.py").read_text()))
FILES = {"storlab.sqlite", "storlab.lua"}  # a folder store's database; sysbench's launcher script


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def _python_name(name: str) -> bool:
    return name not in FILES and name.split(".")[1] not in CATALOGUE


def test_every_dotted_storlab_name_resolves():
    places: dict[str, list[str]] = {}
    for path in TEXTS:
        for found in DOTTED.finditer(path.read_text(errors="replace")):
            places.setdefault(found.group(), []).append(str(path.relative_to(ROOT)))
    assert len(places) > 100 and CATALOGUE >= {"experiments", "queue", "store"}  # the scan reads what it should
    stale = {name: where for name, where in places.items() if _python_name(name) and not _resolves(name)}
    assert not stale, stale


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: a link's text for the link, lower case, punctuation but hyphens and
    underscores dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # a # inside a code block is no heading
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_to_a_heading_finds_it():
    pages = [ROOT / "README.md", *ROOT.glob("docs/*.md")]
    links = 0
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            links += 1
            if not linked.is_file() or anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert links > 20  # the scan reads the links there are
    assert not broken, broken
