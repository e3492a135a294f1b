"""A probe's part of the answer goes by one route (storlab.probes.part): a toy probe registered here, and
nothing else edited, records with a real run, and its part is in `show --json` under the probe's name,
its sentences in `show --details` and its section in the report. The answer's model holds the parts
without reaching the lab."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pydantic
import pytest

from storlab.answer import model
from storlab.lab import caps
from storlab.probes import kept, limits_part, registry
from storlab.probes.part import Part, PartTable, Section
from tests.commands import invoke, run_here
from tests.experiments import random_insert
from tests.page_tables import tables

ROOT = Path(__file__).resolve().parents[1]
TITLE = "The toy's sessions"


class ToyPart(Part):
    """The sessions the toy's recorder was started with, each cell's mean per run."""

    sessions: dict[str, float]  # cell id -> sessions a run
    labels: dict[str, str]

    def sentences(self) -> list[str]:
        return [f"toy: {self.labels[cell]} watched {n:g} sessions a run" for cell, n in self.sessions.items()]

    def section(self) -> Section:
        rows = [[self.labels[cell], f"{n:g}"] for cell, n in self.sessions.items()]
        return Section(TITLE, [PartTable(["cell", "sessions a run"], rows, "as the toy's recorder was started")])


class _Recording:
    def __init__(self) -> None:
        self.sessions = 0

    def start(self, sessions: list[int], t0: float) -> None:
        self.sessions = len(sessions)

    def stop(self) -> int:
        return self.sessions


def _write(db: kept.Db, run_id: int, sessions: int) -> None:
    db.execute("INSERT INTO toy_sessions (run_id, sessions) VALUES (?, ?)", (run_id, sessions))


def _read(db: kept.Db, run_id: int) -> int | None:
    row = db.execute("SELECT sessions FROM toy_sessions WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else row[0]


def _summary(cells: list[kept.KeptCell]) -> ToyPart | None:
    counted = {c.cell: [n for n in c.runs if n is not None] for c in cells}
    if not any(counted.values()):
        return None
    return ToyPart(sessions={cell: sum(n) / len(n) for cell, n in counted.items() if n},
                   labels={c.cell: c.label for c in cells})


TOY = kept.Probe("toy_sessions", ("CREATE TABLE toy_sessions (run_id INTEGER NOT NULL REFERENCES runs(id), "
                                  "sessions INTEGER NOT NULL);",),
                 _write, _read, recorder=lambda run: _Recording(), summary=_summary)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(registry, "PROBES", (*registry.PROBES, TOY))


@pytest.mark.engine
def test_the_toys_part_is_in_show_json_details_and_the_report_of_a_real_run(toy, write_experiment, lab_dir, tmp_path):
    path = write_experiment(random_insert("parts", repetitions="1", disk=str(lab_dir), data_files="[1, 2]", rows="100",
                                          connections=3))
    folder = tmp_path / "r"
    assert run_here(path, folder) is not None
    answer = json.loads(invoke("show", folder, "--json").stdout)
    part = answer["toy_sessions"]
    assert part["sessions"] == {cell: 3 for cell in answer["labels"]}  # three connections, each watched
    assert part["labels"] == answer["labels"]
    # The schema holds a part it does not type as an object of its probe's; it still refuses a key that is no part.
    schema = json.loads(invoke("schema", "--answer").stdout)
    jsonschema.validate(answer, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**answer, "toy_sessions": 3}, schema)

    detailed = invoke("show", folder, "--details").stdout
    for cell, label in answer["labels"].items():
        assert f"toy: {label} watched 3 sessions a run" in " ".join(detailed.split())
    assert "watched" not in invoke("show", folder).stdout  # a part's sentences are details

    assert invoke("report", folder).exit_code == 0
    page = (folder / "report.html").read_text()
    assert tables(page)[TITLE] == [["cell", "sessions a run"]] + [[label, "3"] for label in answer["labels"].values()]
    assert "as the toy's recorder was started" in html.unescape(page)


@pytest.fixture
def recorded(tmp_path) -> Path:
    """The recorded quickstart (a real PostgreSQL run), copied: reading it migrates its store."""
    shutil.copytree(ROOT / "tests" / "data" / "explain", tmp_path / "explain")
    return tmp_path / "explain" / "quickstart"


def test_without_the_probe_its_key_is_not_there(recorded):
    """The route is the registry: read without the toy, the answer holds no key of its name."""
    answer = json.loads(invoke("show", recorded, "--json").stdout)
    assert "toy_sessions" not in answer and set(answer) <= set(model.Answer.model_fields)


def test_the_answer_holds_a_part_by_its_probes_name_and_refuses_what_is_not_a_part(recorded):
    answer = json.loads(invoke("show", recorded, "--json").stdout)
    part = ToyPart(sessions={"c1": 2}, labels={"c1": "a=1"})
    held = model.Answer.model_validate({**answer, "toy_sessions": part})
    assert held.parts() == {"toy_sessions": part}  # the recorded runs had no caps and read no kernel counters
    assert json.loads(held.model_dump_json())["toy_sessions"] == {"sessions": {"c1": 2.0}, "labels": {"c1": "a=1"}}
    for wrong in (3, {"sessions": {}}):
        with pytest.raises(pydantic.ValidationError, match="toy_sessions"):
            model.Answer.model_validate({**answer, "toy_sessions": wrong})


def test_the_answers_model_reaches_no_module_of_the_lab():
    """Each part is typed in a module that imports only the ground: the model, and so the terminal, load
    none of what the probes record with."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, storlab.answer.model, storlab.show.terminal; "
                             "print(' '.join(m for m in sys.modules if m.startswith('storlab.')))"],
                            capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    assert "storlab.answer.model" in loaded and [m for m in loaded if m.startswith("storlab.lab.")] == []


@pytest.mark.parametrize("unit, start", [("iops", 900.0), ("mb_s", 0.0), ("iops", 300.0)])
def test_the_limits_part_words_caps_and_buckets_as_the_lab_does(unit, start):
    assert (limits_part.UNITS, limits_part.CREDIT) == (caps.UNITS, caps.CREDIT)
    bucket = caps.Bucket(unit, 20.0, 200.0, 900.0, start)
    row = limits_part.BucketRow(cell="c", label="a", device="loop3", placements=["disk"], unit=unit, **bucket.as_dict(),
                                runs=1, dry=[], dry_share=0.0, spent_per_run=0.0, said="")
    assert row.text() == bucket.text()
