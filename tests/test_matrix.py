from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab.layout import assign_files

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
    assert cells[3].layout["data_files"] == 1 and cells[3].workload["connections"] == 8



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
