"""Every workload kind on both engines, against real servers storlab provisions (small scale), and
the arithmetic of the figures they report."""

from __future__ import annotations

import numpy as np
import pytest

from storlab import engines
from storlab.engines import provision
from storlab.engines.base import Engine
from storlab.errors import UserError
from storlab.experiment import file as experiment
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads import KINDS, kind, pgbench
from storlab.workloads.tool import Client
from storlab.workloads.custom import GRAMMARS, CustomParams, split
from storlab.workloads.driver import Transactions, buckets, measure, timeline
from storlab.workloads.kind import ELAPSED, Figure, UnitOfWork, Workload, registry
from tests.commands import invoke
from tests.conftest import prepared, run_load, storlab_processes
from tests.disk_experiments import on_disk

ENGINES = ["postgres", "mariadb"]


def instance(engine: str, lab_dir, data_files: int = 2, **layout):
    spec = spec_for(CellLayout(data_on="disk", data_files=data_files, **layout), {}, {"disk": lab_dir})
    return provision(engine, spec, keep=False, connections=8)


# -- the figures' arithmetic (no server) ------------------------------------------------------------


def test_a_short_last_second_is_folded_into_the_one_before():
    # 2.1 s of steady commits: the last 0.1 s must not be drawn as a collapse of throughput.
    ends = np.linspace(0.01, 2.1, 210)
    tx = Transactions(ends - 0.005, ends, np.full(210, 100.0), [])
    points = {(t, m): v for t, m, v in timeline(tx)}
    assert list(buckets(2.1)) == [0.0, 1.0, pytest.approx(2.1)]
    rates = [points[(0.0, "rows_per_s")], points[(1.0, "rows_per_s")]]
    assert rates == [pytest.approx(10_000, rel=0.02), pytest.approx(10_000, rel=0.02)]
    assert (2.0, "rows_per_s") not in points


def test_a_real_drop_in_the_last_second_stays_visible():
    ends = np.concatenate([np.linspace(0.01, 2.0, 200), np.linspace(2.1, 2.9, 10)])
    tx = Transactions(ends - 0.001, ends, np.full(len(ends), 1.0), [])
    points = {(t, m): v for t, m, v in timeline(tx)}
    assert points[(2.0, "rows_per_s")] < points[(1.0, "rows_per_s")] / 5


def test_figures_of_transactions():
    starts = np.array([0.0, 0.5, 1.0, 1.5])
    ends = starts + np.array([0.010, 0.020, 0.030, 0.040])
    measured = measure(Transactions(starts + 100, ends + 100, np.array([10.0, 10, 10, 5]), []))
    assert measured.elapsed_s == pytest.approx(1.54)
    assert measured.start_epoch == 100
    assert measured.figures["rows"] == 35 and measured.figures["transactions"] == 4
    assert measured.figures["rows_per_s"] == pytest.approx(35 / 1.54)
    assert measured.figures["latency_p50_ms"] == pytest.approx(25)


def test_sql_files_split_into_statements_that_know_their_line():
    text = "-- set up\nCREATE TABLE t (a text);\nINSERT INTO t VALUES (';');\n\nDO $$ BEGIN PERFORM 1; END $$;\n"
    statements = split(text, GRAMMARS["postgres"], "setup.sql")
    assert [s.sql for s in statements] == ["CREATE TABLE t (a text)", "INSERT INTO t VALUES (';')",
                                           "DO $$ BEGIN PERFORM 1; END $$"]
    assert [s.where for s in statements] == ["setup.sql statement 1 (line 2)", "setup.sql statement 2 (line 3)",
                                             "setup.sql statement 3 (line 5)"]
    assert [s.sql for s in split("# c\nSELECT 'a\\';' ; SELECT `x;y` FROM t", GRAMMARS["mariadb"], "m.sql")] == [
        "SELECT 'a\\';'", "SELECT `x;y` FROM t"]


def test_every_kind_is_registered_with_its_headline_first():
    assert set(KINDS) >= {"random-insert", "sequential-insert", "bulk-insert", "custom", "pgbench", "sysbench"}
    for name, work in KINDS.items():
        assert work.figures[0].better is not None
        if name not in ("pgbench", "sysbench"):  # the load generators rank by txn/s, or p99 under a rate
            assert work.figures[0].name == "elapsed_s" and work.figures[0].better == "lower"



FORGOTTEN = object()


def _toy(**declared) -> type[Workload]:
    """A kind that declares what the contract asks, but for what `declared` takes out (FORGOTTEN) or changes."""
    body = {"name": "toy", "Params": CustomParams, "figures": (ELAPSED, Figure("transactions", "txn", "transactions")),
            "engines": {}, "unit_of_work": UnitOfWork("transactions", "transaction", 1), "throughput": None,
            "answer_keys": frozenset()}
    body.update(declared)
    return type("Toy", (Workload,), {k: v for k, v in body.items() if v is not FORGOTTEN})


@pytest.mark.parametrize(("declared", "refused"), [
    ({"unit_of_work": FORGOTTEN}, " declares no unit_of_work (what its waits are counted per, to explain a difference)"),
    ({"throughput": None, "answer_keys": FORGOTTEN}, " declares no answer_keys (its keys that only say how the answer reads runs)"),
    ({"unit_of_work": UnitOfWork("rows", "1,000 rows", 1000)}, ": its unit of work counts 'rows', none of its figures"),
    ({"answer_keys": frozenset({"latency_goals"})}, ": its answer key 'latency_goals' is none of its Params' keys"),
])
def test_a_kind_that_forgets_part_of_its_contract_is_refused_in_one_line_when_storlab_loads(declared, refused):
    assert registry(_toy()).keys() == {"toy"}
    with pytest.raises(TypeError) as raised:
        registry(_toy(**declared))
    assert str(raised.value) == f"workload kind Toy ({__name__}){refused}"


# -- the experiment file, per kind ------------------------------------------------------------------

HEAD = """
name = "w"
engine = "{engine}"
[placements]
disk = "/var/tmp/storlab-w"
[layout]
data_on = "disk"
{layout}
[workload]
"""


def load_error(write_experiment, workload: str, engine: str = "postgres", layout: str = "", files=()) -> str:
    for name, text in files:
        write_experiment(text, name)
    path = write_experiment(HEAD.format(engine=engine, layout=layout) + workload, "w.toml")
    with pytest.raises(UserError) as caught:
        experiment.load(path)
    return str(caught.value)


@pytest.mark.parametrize("workload, expected", [
    ('kind = "bulk-insert"\nrows = 1000\nbatch = 10\n', "w.toml:12: workload.batch: unknown key"),
    ('kind = "random-insert"\ntransaction = "t.sql"\n', "w.toml:11: workload.transaction: unknown key"),
    ('kind = "custom"\nconnections = 2\n', "w.toml:9: workload.transaction: missing"),
    ('kind = "scan-everything"\n', 'w.toml:10: workload.kind: expected one of'),
    ('connections = 2\n', "w.toml:9: workload.kind: missing (one of"),
    ('kind = "sequential-insert"\nbatch = [10, 0]\n', 'w.toml:11: workload.batch: expected a positive integer or a list of them, got 0'),
    ('kind = "random-insert"\nrows_per_connection = 100_000_000\nbatch = 1\n',
     "w.toml:12: workload.batch: up to 1,600,000,000 transactions in one run; the limit is 10,000,000"),
    ('kind = "custom"\ntransaction = "missing.sql"\n', "w.toml:11: workload.transaction: cannot read SQL file"),
])
def test_workload_keys_are_checked_per_kind(write_experiment, workload, expected):
    assert load_error(write_experiment, workload).startswith(expected)


@pytest.mark.parametrize("engine, layout, expected", [
    ("mariadb", 'log_growth = "16MB"', "w.toml:8: layout.log_growth: MariaDB's redo log is one fixed, circular file"),
    ("postgres", 'log_growth = "3MB"', "w.toml:8: layout.log_growth: the WAL segment size must be a power of two"),
    ("postgres", 'log_growth = "2GB"', "w.toml:8: layout.log_growth: the WAL segment size must be a power of two"),
    ("postgres", 'log_growth = "64MB"\nlog_size = "64MB"', 'w.toml:9: layout.log_size: "64MB" is less than two WAL segments of 64MB'),
    ("postgres", 'log_size = "16MB"', 'w.toml:8: layout.log_size: "16MB" is less than two WAL segments of 16MB'),
])
def test_log_growth_is_checked_per_engine(write_experiment, engine, layout, expected):
    message = load_error(write_experiment, 'kind = "sequential-insert"\n', engine, layout)
    assert message.startswith(expected), message


def test_custom_files_are_read_with_the_experiment(write_experiment):
    write_experiment("CREATE TABLE t (a int);\n", "setup.sql")
    write_experiment("INSERT INTO t VALUES (1);\n", "txn.sql")
    path = write_experiment(HEAD.format(engine="postgres", layout="") +
                            'kind = "custom"\nsetup = "setup.sql"\ntransaction = "txn.sql"\n', "w.toml")
    exp = experiment.load(path)
    assert exp.sql == {"setup.sql": "CREATE TABLE t (a int);\n", "txn.sql": "INSERT INTO t VALUES (1);\n"}
    before = exp.identity()["sql"]
    write_experiment("INSERT INTO t VALUES (2);\n", "txn.sql")
    assert experiment.load(path).identity()["sql"] != before  # an edited file is another experiment


# -- every kind against real servers ------------------------------------------------------------------



@pytest.mark.engine
@pytest.mark.parametrize("engine", ENGINES)
def test_random_and_sequential_inserts(engine, lab_dir):
    with instance(engine, lab_dir) as inst:
        for name, sequential in (("random-insert", False), ("sequential-insert", True)):
            with inst.connect() as conn:
                conn.execute("DROP TABLE IF EXISTS lab_insert")
                conn.execute("DROP PROCEDURE IF EXISTS lab_insert_loop")
            measured, _ = run_load(inst, name, connections=3, rows_per_connection=2_500, batch=1000)
            assert measured.figures["rows"] == 7_500 and measured.figures["transactions"] == 9  # 1000, 1000, 500 each
            with inst.connect() as conn:
                assert conn.execute("SELECT count(*), count(DISTINCT c1) FROM lab_insert").fetchone() == (7_500, 7_500)
                if sequential:  # ever-increasing; MariaDB's interleaved auto-increment may leave gaps
                    low, high = conn.execute("SELECT min(c1), max(c1) FROM lab_insert").fetchone()
                    assert low == 1 and (high == 7_500 if engine == "postgres" else 7_500 <= high < 15_000)
    assert storlab_processes() == []


@pytest.mark.engine
@pytest.mark.parametrize("engine", ENGINES)
def test_bulk_insert_fills_the_wide_heap_over_the_data_files(engine, lab_dir):
    with instance(engine, lab_dir, data_files=2) as inst:
        measured, _ = run_load(inst, "bulk-insert", rows=20_000)
        figures = measured.figures
        assert figures["rows"] == 20_000 and figures["table_mb"] > 2
        assert figures["mb_per_s"] == pytest.approx(figures["table_mb"] / measured.elapsed_s)
        with inst.connect() as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT id), max(col11) FROM lab_wide").fetchone() == (
                20_000, 20_000, "AW00020000")
            table = "lab_wide_1" if engine == "postgres" else "lab_wide PARTITION (p1)"
            share = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert 8_000 < share < 12_000  # the second data file holds its half


@pytest.mark.engine
@pytest.mark.parametrize("engine", ENGINES)
def test_custom_sql_runs_and_names_its_mistakes(engine, lab_dir):
    files = {"setup.sql": "CREATE TABLE kv (k int PRIMARY KEY, v int);\nINSERT INTO kv VALUES (1, 0);\n",
             "txn.sql": "UPDATE kv SET v = v + 1 WHERE k = 1;\nINSERT INTO kv SELECT max(k) + 1, 0 FROM kv;\n"}
    with instance(engine, lab_dir, data_files=1) as inst:
        measured, _ = run_load(inst, "custom", files, setup="setup.sql", transaction="txn.sql",
                               connections=2, transactions_per_connection=50)
        assert measured.figures["transactions"] == 100
        with inst.connect() as conn:
            assert conn.execute("SELECT v FROM kv WHERE k = 1").fetchone()[0] == 100  # the try was rolled back
        broken = {"setup.sql": "CREATE TABLE kv2 (k int);\n\nSELEC 1;\n", "txn.sql": "SELECT 1;\n"}
        with pytest.raises(UserError, match=r"^setup.sql statement 2 \(line 3\): .*"):
            prepared(inst, "custom", broken, setup="setup.sql", transaction="txn.sql", connections=1,
                     transactions_per_connection=1)
        with pytest.raises(UserError, match=r"^txn.sql statement 1 \(line 1\): "):
            prepared(inst, "custom", {"txn.sql": "INSERT INTO nowhere VALUES (1);"}, transaction="txn.sql",
                     connections=1, transactions_per_connection=1)


@pytest.mark.engine
@pytest.mark.parametrize("engine", ENGINES)
def test_the_servers_times_agree_with_the_clients_view(engine, lab_dir):
    """Each session's CALL, timed by the client, holds the server's first start and last commit of
    that session (by how much it exceeds them is a duration, and the machine's: not asserted here)."""
    with instance(engine, lab_dir, data_files=1) as inst:
        work, params = prepared(inst, "random-insert", connections=4, rows_per_connection=3_000, batch=10)
        load = work.load(inst, params, {})
        try:
            load.open()
            tx = load.transactions()
        finally:
            load.close()
    assert len(tx.ends) == 4 * 300 and np.all(tx.ends >= tx.starts)
    for client_start, client_end, server_first, server_last in tx.sessions:
        assert client_start <= server_first + 0.005 and server_last <= client_end + 0.005


@pytest.mark.engine
def test_log_growth_is_the_wal_segment_size(lab_dir):
    with instance("postgres", lab_dir, data_files=1, log_growth_bytes=2**20, log_size_bytes=4 * 2**20) as inst:
        with inst.connect() as conn:
            assert conn.execute("SHOW wal_segment_size").fetchone()[0] == "1MB"
            assert conn.execute("SHOW min_wal_size").fetchone()[0] == "4MB"
        run_load(inst, "sequential-insert", connections=2, rows_per_connection=20_000, batch=5000)
        with inst.admin() as conn:
            segments = conn.execute("SELECT count(*) FROM pg_ls_waldir()").fetchone()[0]
        assert segments >= 4  # 40,000 rows of the seeds' table need more than a few 1 MB segments
    assert kind("sequential-insert").figures[0].name == "elapsed_s"


class _Toy(Engine):
    """An engine storlab does not have: only what the checks at load time ask of one."""

    name, title = "toy", "Toy"
    layout_keys = frozenset({"data_files", "data_on", "log_on"})
    unhonoured: dict = {}
    parallel_query = False
    catalog_bytes = 0

    def __init__(self):
        self.settings = engines.engine("postgres").settings

    def installed(self, version=None):
        pass

    def provision(self, spec, keep, connections):
        raise AssertionError("nothing is provisioned at load time")

    def log_bytes(self, log_size, written, settings):
        return 0


def test_a_kind_on_an_engine_it_does_not_declare_is_refused_in_one_line(write_experiment, monkeypatch):
    """Each kind says, per engine, what it runs there: a third engine that no kind has declared yet is
    refused when the file loads, naming the kind and the engines it runs on, not met as a KeyError mid-run."""
    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))
    engines.register(_Toy())
    path = write_experiment(on_disk('kind = "random-insert"', name="toy", engine="toy", repetitions=None, disk="./disk"))
    done = invoke("run", path, "--dry-run")
    assert done.exit_code == 2
    assert done.output == ("storlab: exp.toml:11: workload.kind: random-insert does not run on Toy "
                           "(it runs on postgres, mariadb)\n")
    # Declared for the toy engine, the same kind passes the load.
    kind = KINDS["random-insert"]
    monkeypatch.setattr(type(kind), "engines", {**kind.engines, "toy": kind.engines["postgres"]})
    assert experiment.load(path).engine == "toy"


class _Sessions:
    """An instance whose client sessions are, at each look, the next of `seen` (the last one after)."""

    def __init__(self, *seen: list[int]):
        self.seen = list(seen)

    def client_sessions(self, tag: str) -> list[int]:
        return self.seen.pop(0) if len(self.seen) > 1 else self.seen[0]


def test_a_client_s_own_session_that_closes_as_its_load_s_open_is_not_taken_for_one_of_them():
    """pgbench opens a session for the server's version and its tables, under its load's name, and
    closes it before its clients connect: with one client, that session alone looks like the load's."""
    client = Client(argv=[], env={}, clients=None, folder=None)
    client._reap = lambda: None  # still running
    settle = pgbench.OWN_SESSION_S
    assert client.sessions(_Sessions([11], [], [], [22]), "tag", 1, settle_s=settle) == [22]
    # A load's sessions that stay are taken at once, each looked at again once.
    assert client.sessions(_Sessions([21, 22]), "tag", 2, settle_s=settle) == [21, 22]
    # Seen beside the load's while it closes: left out, and the load's one not yet open waited for.
    assert client.sessions(_Sessions([11, 21], [21], [21, 22]), "tag", 2, settle_s=settle) == [21, 22]
    # A client without a session of its own (sysbench, pgreplay) has its sessions taken at the first look.
    assert client.sessions(_Sessions([31], []), "tag", 1) == [31]
