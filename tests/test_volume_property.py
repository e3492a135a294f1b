"""A volume's property is its module and one registry line (storlab.volume): a toy property registered
here, and nothing else edited, is in the experiment's schema, its refusals, `storlab io` (its option,
its fio job and its verdict) and the answer of a real run."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from storlab import factors
from storlab.answer import analysis
from storlab.answer.compose import compose
from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.experiment.schema import experiment_schema
from storlab.factors import KeyProblem
from storlab.results.store import Store
from storlab.volume import registry
from storlab.volume.property import Calibrated, Job, Key, Observed, Part, Property
from tests.commands import invoke, run_here
from tests.experiments import random_insert


class ToyDepth(Property):
    """Reads kept at a queue depth: a key, a conflict, a job, a verdict and a part, each the least it can be."""

    name = "toy"
    directory = True
    keys = (Key("toy_depth", "a whole number from 1 to 4", factors.at_most(4), {"type": "integer", "minimum": 1},
                "toy-depth", int, "Keep this many reads in flight (a toy's).", "N"),)

    def conflicts(self, given: Mapping[str, Any]) -> KeyProblem | None:
        if given.get("toy_depth") is not None and given.get("iops") is not None:
            return KeyProblem(("toy_depth",), "a toy depth cannot stand beside iops")
        return None

    def io_jobs(self, declared: Mapping[str, Any], direct: bool) -> list[Job]:
        return [Job("4k-toy", "randread", 4096, declared["toy_depth"], direct)] if declared.get("toy_depth") else []

    def io_flags(self, declared: Mapping[str, Any], calibrated: Calibrated) -> list[str]:
        if calibrated.job.name != "4k-toy":
            return []
        return [f"toy: depth {declared['toy_depth']} at {calibrated.measured.iops:,.0f} IOPS"]

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        given = self.given(declared)
        return self.made(observed, declared, f"toy depth {given['toy_depth']} over {len(observed.conditions)} runs",
                         {"runs": len(observed.conditions)}) if given else None


def _toy_file(lab_dir, keys: str, rows: str = "100") -> str:
    """One repetition of the small random-insert experiment, its disk a directory's table with `keys`."""
    return random_insert("toy", repetitions="1", data_files=None, rows=rows).replace(
        'disk = "{disk}"', f'disk = {{ path = "{lab_dir}", {keys} }}')


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(registry, "PROPERTIES", [*registry.PROPERTIES, ToyDepth()])


def test_the_toy_is_in_the_schema_of_both_placements(toy):
    tables = experiment_schema()["$defs"]
    for table in ("DevicePlacement", "DirectoryPlacement"):
        said = tables[table]["properties"]["toy_depth"]
        assert said["anyOf"][0] == {"type": "integer", "minimum": 1}
        assert said["description"] == "Keep this many reads in flight (a toy's)."
        assert "volume" not in tables[table]["properties"]  # where storlab keeps the keys is not the file's


def test_without_the_toy_its_key_is_unknown(write_experiment, lab_dir):
    path = write_experiment(_toy_file(lab_dir, "toy_depth = 2", rows="100"))
    with pytest.raises(UserError, match=r"placements.disk.toy_depth: unknown key; a directory placement takes path, "):
        experiment.load(path)


@pytest.mark.parametrize("table, said", [
    ("toy_depth = 9", "placements.disk.toy_depth: 9 is more than the limit of 4"),
    ("toy_depth = [1, true]", "placements.disk.toy_depth: expected a whole number from 1 to 4 or a list of them, got true"),
    ("toy_depth = 2, iops = 100", "placements.disk.toy_depth: a toy depth cannot stand beside iops"),
])
def test_the_toys_values_and_conflicts_are_refused_in_one_line_naming_the_key(toy, write_experiment, lab_dir, table, said):
    path = write_experiment(_toy_file(lab_dir, table))
    with pytest.raises(UserError) as refused:
        experiment.load(path)
    assert str(refused.value) == f"exp.toml:7: {said}"


def test_a_list_of_toy_depths_is_a_factor(toy, write_experiment, lab_dir):
    path = write_experiment(_toy_file(lab_dir, "toy_depth = [1, 2]", rows="100"))
    assert experiment.load(path).factors == {"placements.disk.toy_depth": [1, 2]}


def test_storlab_io_takes_the_toys_option_runs_its_job_and_says_its_verdict(toy, tmp_path):
    refused = invoke("io", tmp_path, "--toy-depth", "7")
    assert refused.exit_code == 2 and refused.stderr == "storlab: --toy-depth '7': 7 is more than the limit of 4\n"
    done = invoke("io", tmp_path, "--toy-depth", "2", "--size", "8M", "--duration", "1s", "--out", tmp_path / "r")
    assert done.exit_code == 0, done.stderr
    table = done.stdout.split("\njob ", 1)[1].splitlines()[1:]  # after the progress bars, the table's rows
    jobs = [line.split()[0] for line in table if not line.startswith(("*", "results:"))]
    assert jobs == ["4k-toy"]  # the declared property's job, not seed 004's matrix
    assert "* toy: depth 2 at " in done.stdout


def test_the_toys_part_is_in_the_answer_of_a_real_run(toy, write_experiment, lab_dir, tmp_path):
    path = write_experiment(_toy_file(lab_dir, "toy_depth = [1, 2]", rows="200"))
    folder = tmp_path / "r"
    outcome = run_here(path, folder)
    assert outcome is not None
    with Store.open(folder, create=False) as store:
        answer = compose(analysis.load(store))
    parts = {(p.cell, p.property): p for p in answer.volumes}
    labels = {cell: label for cell, label in answer.labels.items()}
    assert len(parts) == 2 and all(prop == "toy" for _, prop in parts)
    for (cell, _), part in parts.items():
        depth = part.declared["toy_depth"]
        assert f"toy_depth={depth}" in labels[cell] and part.placement == "disk"
        assert part.said == f"toy depth {depth} over 1 runs" and part.observed == {"runs": 1}
