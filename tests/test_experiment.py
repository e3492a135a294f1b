import pytest

from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.lab import placements
from storlab.sizes import format_bytes

GOOD = """
name = "quick"
engine = "postgres"
repetitions = 2

[placements]
disk = "./lab/disk"
ram = "tmpfs"

[layout]
data_files = [1, 2, 4]
data_on = "disk"
log_on = ["disk", "ram"]

[workload]
kind = "random-insert"
connections = 4
rows_per_connection = 1000
batch = 100
"""


def error_of(write_experiment, body, name="quick.toml") -> str:
    with pytest.raises(UserError) as caught:
        experiment.load(write_experiment(body, name))
    return str(caught.value)


def test_good_file_has_factors_in_file_order(write_experiment):
    exp = experiment.load(write_experiment(GOOD))
    assert exp.factors == {"layout.data_files": [1, 2, 4], "layout.log_on": ["disk", "ram"]}
    assert exp.placement_path("ram") == placements.TMPFS_ROOT
    assert exp.placement_path("disk") == exp.path.parent / "lab" / "disk"


@pytest.mark.parametrize("old, new, said", [
    ("data_files = [1, 2, 4]", 'data_files = "four"',
     'quick.toml:11: layout.data_files: expected a positive integer or a list of them, got "four"'),
    ("[1, 2, 4]", "[1, 0, 4]", "quick.toml:11: layout.data_files: expected a positive integer or a list of them, got 0"),
    ('log_on = ["disk", "ram"]', 'log_on = "fast"',
     'quick.toml:13: layout.log_on: unknown placement "fast" (declared: disk, ram)'),
    ("batch = 100", "batch = 100\nbatchh = 3", "quick.toml:20: workload.batchh: unknown key"),
    ('engine = "postgres"\n', "", "quick.toml: engine: missing"),
    ('data_on = "disk"', 'data_on = "disk"\npage_size = "16k"',
     "quick.toml:13: layout.page_size: PostgreSQL's page is fixed at 8 kB when the server is built"),
    ('"postgres"', '"oracle"', 'quick.toml:3: engine: expected one of postgres, mariadb or a list of them, got "oracle"'),
], ids=["word_for_a_number", "bad_value_inside_a_list", "unknown_placement", "unknown_key", "missing_key",
        "key_an_engine_cannot_honour", "wrong_engine"])
def test_a_mistake_is_named_by_file_line_key_and_value(write_experiment, old, new, said):
    assert old in GOOD  # a case that changed nothing would load the good file
    assert error_of(write_experiment, GOOD.replace(old, new)) == said


def test_bad_toml(write_experiment):
    assert error_of(write_experiment, GOOD + "\n[layout\n").startswith("quick.toml: not valid TOML:")


def test_missing_file():
    with pytest.raises(UserError, match="no such experiment file"):
        experiment.load("/nonexistent/x.toml")


def test_ratio_placement_and_exclude(write_experiment):
    body = GOOD.replace('data_on = "disk"', 'data_on = [{ disk = 7, ram = 1 }, "disk"]')
    body = body.replace("repetitions = 2", 'repetitions = 2\nexclude = [{ data_files = 1, log_on = "ram" }]')
    exp = experiment.load(write_experiment(body))
    assert exp.factors["layout.data_on"] == [{"disk": 7, "ram": 1}, "disk"]
    message = error_of(write_experiment, GOOD.replace("repetitions = 2", "repetitions = 2\nexclude = [{ files = 1 }]"))
    assert message.startswith('quick.toml:5: exclude: "files" is not a factor')


def test_identity_ignores_repetitions(write_experiment):
    a = experiment.load(write_experiment(GOOD, "a.toml"))
    b = experiment.load(write_experiment(GOOD.replace("repetitions = 2", "repetitions = 5"), "b.toml"))
    c = experiment.load(write_experiment(GOOD.replace("batch = 100", "batch = 200"), "c.toml"))
    assert a.identity() == b.identity() != c.identity()


@pytest.mark.parametrize("n, decimals, shown", [
    (85 * 2**20, None, "85 MiB"), (1536 * 2**20, None, "1.5 GiB"), (4096, 0, "4 KiB"),
    (187.5 * 2**30, 1, "187.5 GiB"), (512, None, "512 B"), (2**40 * 3, None, "3.0 TiB"),
])
def test_measured_sizes_are_shown_in_binary_units(n, decimals, shown):
    assert format_bytes(n, decimals) == shown
