from pathlib import Path

from storlab.answer import explain
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab.devices import DeviceFormat, DeviceSpec
from storlab.lab.layout import CellLayout, assign_files
from storlab.results.experiment_record import StoredExperiment
from storlab.running import stall
from storlab.workloads.random_insert import RandomInsertParams

BODY = """
name = "m"
engine = "postgres"
repetitions = 2
[placements]
disk = "/var/tmp/x"
ram = "tmpfs"
[layout]
data_files = [1, 2]
data_on = "disk"
log_on = ["disk", "ram"]
[workload]
kind = "random-insert"
connections = [4, 8]
"""


def test_product_order_and_stable_ids(write_experiment):
    exp = experiment.load(write_experiment(BODY))
    cells = matrix.cells(exp)
    assert [c.label for c in cells][:3] == [
        "data_files=1 log_on=disk connections=4",
        "data_files=1 log_on=disk connections=8",
        "data_files=1 log_on=ram connections=4",
    ]
    assert len(cells) == 8 and len({c.id for c in cells}) == 8
    again = matrix.cells(experiment.load(write_experiment(BODY.replace("repetitions = 2", "repetitions = 9"), "b.toml")))
    assert [c.id for c in again] == [c.id for c in cells]
    assert cells[3].layout.data_files == 1 and cells[3].workload.connections == 8


def test_cells_carry_typed_values_one_each(write_experiment):
    """A cell's layout has its sizes in bytes, its workload is the kind's own parameters with the
    cell's value of each factor, its device placement a device spec; the ids stay the factors' hashes."""
    body = BODY.replace('ram = "tmpfs"', 'ram = "tmpfs"\nfast = { loop = "64MB", sector = [512, 4096], image_dir = "/var/tmp/img" }')
    body = body.replace('data_on = "disk"', 'data_on = { disk = 3, fast = 1 }\nlog_size = ["64MB", "1GB"]')
    body = body.replace("connections = [4, 8]", "connections = [4, 8]\nwarmup_s = 2\nstall_after_s = 9")
    cells = matrix.cells(experiment.load(write_experiment(body), check_placements=False))
    cell = next(c for c in cells if c.label == "fast.sector=4096 data_files=2 log_on=ram log_size=1GB connections=8")
    assert cell.layout == CellLayout(data_on={"disk": 3, "fast": 1}, data_files=2, log_on="ram", log_size_bytes=2**30)
    assert type(cell.workload) is RandomInsertParams
    assert (cell.workload.connections, cell.workload.rows_per_connection, cell.workload.warmup_s) == (8, 100_000, 2.0)
    assert stall.stall_after(cell.workload) == 9
    assert cell.devices == {"fast": DeviceSpec(DeviceFormat(64 * 2**20, 4096, "ext4", "", Path("/var/tmp/img")), 128)}
    assert cell.id == matrix.cell_id(cell.factors) and len({c.id for c in cells}) == len(cells) == 32


def stored(workload: dict) -> StoredExperiment:
    return StoredExperiment.model_validate({"name": "e", "engine": "postgres", "source": "", "repetitions": 1,
                                            "factors": {}, "identity": {"workload": workload}})


def test_explain_counts_a_cells_sessions_from_its_stored_parameters():
    declared = stored({"kind": "random-insert", "connections": [4, 8], "batch": 10})
    assert explain.sessions(declared, {"workload.connections": 8}) == 8
    assert explain.sessions(stored({"kind": "bulk-insert", "rows": 10}), {}) == 1
    assert explain.sessions(stored({"kind": "a-kind-of-later"}), {}) == 1
    assert explain.sessions(None, {}) == 1



def test_an_engine_of_one_version_gets_each_cell_once(write_experiment):
    """MariaDB has no engine_version: its factors are crossed once, never again as if nested in a version."""
    cells = matrix.cells(experiment.load(write_experiment(BODY.replace('"postgres"', '"mariadb"'))))
    assert len(cells) == 8 and len({c.id for c in cells}) == 8


def test_exclude_removes_matching_cells(write_experiment):
    body = BODY.replace("repetitions = 2", 'repetitions = 2\nexclude = [{ data_files = 2, log_on = "ram" }]')
    exp = experiment.load(write_experiment(body))
    labels = [c.label for c in matrix.cells(exp)]
    assert len(labels) == 6
    assert not any("data_files=2 log_on=ram" in label for label in labels)


def test_plan_interleaves_repetitions_and_skips_done(write_experiment):
    cells = matrix.cells(experiment.load(write_experiment(BODY)))[:3]
    plan = matrix.plan(cells, 2, done={(cells[1].id, 1)})
    assert [(c.id, r) for c, r in plan] == [
        (cells[0].id, 1), (cells[2].id, 1), (cells[0].id, 2), (cells[1].id, 2), (cells[2].id, 2),
    ]


def test_assign_files_by_ratio():
    assert assign_files(8, {"disk": 7, "ram": 1}, "contiguous") == ["disk"] * 7 + ["ram"]
    spread = assign_files(8, {"a": 1, "b": 1}, "round-robin")
    assert spread == ["a", "b"] * 4
    six_two = assign_files(8, {"a": 3, "b": 1}, "round-robin")
    assert six_two.count("a") == 6 and six_two.count("b") == 2
    assert six_two[:4].count("b") == 1  # spread, not bunched at the end
    assert assign_files(1, {"disk": 1}, "round-robin") == ["disk"]
