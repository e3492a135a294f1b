"""What show, waits, compare and export print and write, compared whole (pyperf's manner) on a results
store kept as test data: tests/data/explain, a real PostgreSQL run recorded by
tests/data/record-explain.sh. The expected texts are in tests/data/explain-expected. Also the
experiment file's JSON Schema (the examples validate against it, a broken file does not) and the
parquet export's typed columns (tests/test_export.py reads every format back against the store)."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storlab.results import export
from storlab.experiment.schema import experiment_schema
from storlab.workloads import KINDS
from tests.commands import invoke

DATA = Path(__file__).parent / "data"
EXPECTED = DATA / "explain-expected"
EXAMPLES = Path(__file__).parent.parent / "examples"



@pytest.fixture
def store(tmp_path) -> Path:
    shutil.copytree(DATA / "explain", tmp_path / "results")
    return tmp_path / "results" / "quickstart"


@pytest.mark.parametrize("args, expected", [
    (["show"], "show.txt"),
    (["show", "--details"], "show-details.txt"),
    (["waits"], "waits.txt"),
    (["waits", "--cell", "4ca", "--resources"], "waits-resources-4ca.txt"),
    (["compare"], "compare.txt"),
    (["compare", "--baseline", "0e0"], "compare-baseline-0e0.txt"),
])
def test_terminal_output_is_exactly_as_expected(store, args, expected):
    done = invoke(args[0], store, *args[1:])
    assert done.exit_code == 0, done.output
    assert done.stdout == (EXPECTED / expected).read_text()


def test_export_is_exactly_as_expected(store):
    done = invoke("export", store, "--format", "json")
    assert done.exit_code == 0, done.output
    assert done.stdout == f"wrote {store / 'runs.json'}\n"
    assert (store / "runs.json").read_text() == (EXPECTED / "runs.json").read_text()
    done = invoke("export", store, "--format", "csv")
    assert done.exit_code == 0, done.output
    names = ["runs.csv", *(f"{t.name}.csv" for t in export.run_tables())]
    assert names == ["runs.csv", "waits.csv", "timeline.csv", "waiting_tasks.csv", "io_sizes.csv", "traced_waits.csv",
                     "file_io.csv", "pressure.csv", "pressure_unavailable.csv", "io_caps.csv", "memory_limit.csv", "io_buckets.csv",
                     "checkpoints.csv"]
    assert done.stdout == "".join(f"wrote {store / name}\n" for name in names)
    for name in names:
        assert (store / name).read_text() == (EXPECTED / name).read_text(), name


def test_parquet_has_the_factors_as_typed_columns_and_the_same_rows_as_json(store):
    assert invoke("export", store, "--format", "json").exit_code == 0
    done = invoke("export", store, "--format", "parquet")
    assert done.exit_code == 0, done.output
    table = pq.read_table(store / "runs.parquet")
    schema = table.schema
    assert schema.field("data_files").type == pa.int64() and schema.field("log_on").type == pa.string()
    assert schema.field("repetition").type == pa.int64() and schema.field("elapsed_s").type == pa.float64()
    assert schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("host").type == pa.string() and schema.field("run_id").type == pa.int64()
    tasks = schema.field("waiting_tasks").type.value_type
    assert tasks.field("resource").type == pa.string() and tasks.field("samples").type == pa.int64()
    rows = table.to_pylist()
    as_json = json.loads((store / "runs.json").read_text())
    assert len(rows) == len(as_json) == 8
    for row, want in zip(rows, as_json):
        assert row["started_at"].timestamp() == pytest.approx(want.pop("started_at"), abs=1e-6)
        assert {k: v for k, v in row.items() if k != "started_at"} == want


def test_schema_is_the_models_and_checks_the_examples():
    done = invoke("schema")
    assert done.exit_code == 0
    schema = json.loads(done.stdout)
    assert schema == experiment_schema()
    workload = schema["properties"]["workload"]
    assert workload["discriminator"]["propertyName"] == "kind"
    assert set(workload["discriminator"]["mapping"]) == set(KINDS)
    validator = jsonschema.Draft202012Validator(schema)
    examples = sorted(EXAMPLES.glob("*.toml"))
    assert len(examples) >= 4
    for example in examples:
        errors = list(validator.iter_errors(tomllib.loads(example.read_text())))
        assert errors == [], (example.name, [e.message for e in errors])


@pytest.mark.parametrize("change, where", [
    (lambda e: e["workload"].update(batch="1000"), "batch"),  # a number as text
    (lambda e: e["workload"].update(setup="x.sql"), "setup"),  # a key of another kind
    (lambda e: e["layout"].update(data_on={"disk": "7"}), "data_on"),  # a ratio's weight as text
    (lambda e: e.update(engine="oracle"), "engine"),
    (lambda e: e.update(repetition=3), "repetition"),  # a misspelt key
])
def test_schema_refuses_what_storlab_refuses(change, where):
    experiment = tomllib.loads((EXAMPLES / "quickstart.toml").read_text())
    validator = jsonschema.Draft202012Validator(experiment_schema())
    assert list(validator.iter_errors(experiment)) == []
    change(experiment)
    errors = list(validator.iter_errors(experiment))
    assert errors, where
    assert any(where in json.dumps(list(e.absolute_path)) + e.message + json.dumps([list(c.absolute_path) for c in e.context])
               for e in errors), [e.message for e in errors]


def test_parquet_without_pyarrow_says_how_to_install_it(store, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)  # as on a machine without it
    done = invoke("export", store, "--format", "parquet")
    assert done.exit_code == 2 and not (store / "runs.parquet").exists()
    assert done.output == "storlab: --format parquet needs pyarrow, which is not installed: pip install 'storlab[parquet]'\n"
