"""A kind is its module and its line in the registry: what the cells and the answer ask of a kind's keys
(a latency goal, runs sized in checkpoint cycles) goes through kind.WorkloadParams, so a toy kind
registered here, and nothing else edited, has its goal read by the answer and its runs sized by the
cell's checkpoint_timeout. And no module outside storlab/workloads names a kind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Literal

from storlab.workloads.kind import Figure, UnitOfWork, Workload, WorkloadParams
from tests.disk_experiments import on_disk

ROOT = Path(__file__).resolve().parents[1]
DONE = Figure("done", "units", "done", "higher")


class ToyParams(WorkloadParams):
    kind: Literal["toy"]
    duration_s: int | None = None
    goal: dict[str, float] | None = None
    cycles: int | None = None

    def goal_ms(self) -> dict[str, float] | None:
        return self.goal

    def cycles_per_run(self) -> int | None:
        return self.cycles


class Toy(Workload):
    name = "toy"
    Params = ToyParams
    figures = (DONE,)
    engines = {"postgres": None}
    unit_of_work = UnitOfWork("done", "unit", 1)
    throughput = None
    answer_keys = frozenset({"goal"})


FILE = on_disk('kind = "toy"\n{keys}', name="toyed", repetitions=None, disk="./disk",
               settings='checkpoint_timeout = "2min"')

# The experiment file's model takes its kinds when it is first imported: the toy is registered first,
# in a process of its own.
READ = """
import json, sys
from storlab import workloads
from storlab.workloads.kind import registry
from tests.test_kind_contract import Toy
workloads.KINDS.update(registry(Toy))
from storlab.experiment import file, matrix
loaded = file.load(sys.argv[1], check_placements=False)
print(json.dumps({"answer": loaded.answer_settings(), "identity": loaded.identity()["workload"],
                  "durations": [cell.workload.duration_s for cell in matrix.cells(loaded)]}))
"""


def read(tmp_path: Path, keys: str) -> dict:
    path = tmp_path / "toyed.toml"
    path.write_text(FILE.format(keys=textwrap.dedent(keys)))
    done = subprocess.run([sys.executable, "-c", READ, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_toy_kind_s_goal_and_cycles_are_read_with_no_edit_outside_it(tmp_path):
    read_back = read(tmp_path, "goal = { p99_ms = 20 }\ncycles = 3")
    assert read_back["answer"]["latency_goal"] == {"p99_ms": 20.0}
    assert "goal" not in read_back["identity"]  # how the answer reads the runs, not what they measure
    assert read_back["durations"] == [3 * 120]  # three cycles of checkpoint_timeout 2min


def test_a_toy_kind_without_them_runs_by_its_own_duration(tmp_path):
    read_back = read(tmp_path, "duration_s = 7")
    assert "latency_goal" not in read_back["answer"]
    assert read_back["durations"] == [7]


def test_no_module_outside_the_kinds_names_one():
    named = re.compile(r'KINDS\[\s*["\']|getattr\([^)]*["\'](latency_goal|checkpoint_cycles)["\']')
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "storlab").rglob("*.py"))
             if path.parent.name != "workloads"
             for n, line in enumerate(path.read_text().splitlines(), 1) if named.search(line)]
    assert found == []
