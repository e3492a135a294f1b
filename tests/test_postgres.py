"""Against real PostgreSQL instances that storlab provisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.engines.postgres import instance as postgres
from storlab.errors import RunFailed, UserError
from storlab.lab import os_users, owned
from storlab.lab.layout import CellLayout, spec_for
from storlab.running import cleanup
from tests.conftest import prepared, run_load, storlab_processes

pytestmark = pytest.mark.engine


@pytest.fixture
def two_placements(lab_root, lab_dir):
    fast = lab_root / "fast"
    fast.mkdir()
    return {"disk": lab_dir, "fast": fast}


def test_layout_puts_files_where_declared(two_placements):
    spec = spec_for(CellLayout(data_on={"disk": 1, "fast": 1}, data_files=4, log_on="fast"), {}, two_placements)
    with provision("postgres", spec, keep=False, connections=4) as inst:
        prepared(inst, "random-insert", batch=100)
        with inst.admin() as conn:
            rows = conn.execute(
                "SELECT c.relname, t.spcname, pg_relation_filepath(c.oid) FROM pg_class c "
                "JOIN pg_tablespace t ON t.oid = c.reltablespace WHERE c.relname LIKE 'lab_insert_%'"
            ).fetchall()
            locations = dict(conn.execute(
                "SELECT spcname, pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname LIKE 'ts_%'"
            ).fetchall())
            data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        assert len(rows) == 8  # 4 partitions and their 4 indexes
        assert sorted(name for name, _, _ in rows if not name.endswith("_idx")) == [f"lab_insert_{i}" for i in range(4)]
        assert {space for _, space, _ in rows} == {"ts_disk", "ts_fast"}
        for name, space, relpath in rows:
            file = Path(data_directory) / relpath
            assert file.resolve().is_relative_to(two_placements[space.removeprefix("ts_")]), (name, file.resolve())
            assert file.exists()
        assert Path(locations["ts_disk"]).is_relative_to(two_placements["disk"])
        wal = Path(data_directory, "pg_wal").resolve()
        assert wal.is_relative_to(two_placements["fast"]) and any(wal.iterdir())
        assert Path(data_directory).is_relative_to(two_placements["disk"])
    assert storlab_processes() == []
    assert not list(two_placements["disk"].glob("storlab-*")) and not list(two_placements["fast"].glob("storlab-*"))
    assert owned.Manifest.all() == []


def test_server_runs_unprivileged_and_stops_on_error(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with pytest.raises(ZeroDivisionError):
        with provision("postgres", spec, keep=False, connections=2):
            pids = storlab_processes()
            assert pids
            owner = Path(f"/proc/{pids[0]}").stat().st_uid
            assert owner != 0
            1 / 0
    assert storlab_processes() == []
    assert not list(lab_dir.glob("storlab-*"))


def test_random_insert_records_rows_latency_and_waits(lab_dir):
    spec = spec_for(CellLayout(data_on="disk", data_files=2), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=4) as inst:
        work, params = prepared(inst, "random-insert", connections=4, rows_per_connection=20_000, batch=1000)
        for probe in (inst.wait_probe(), postgres.ActivityProbe(inst)):
            load = work.load(inst, params, {})
            try:
                probe.start(load.open())
                measured = load.run()
                capture = probe.stop()
            finally:
                load.close()
            figures = measured.figures
            assert figures["rows"] == 80_000 and figures["transactions"] == 80
            assert 0 < figures["latency_p50_ms"] <= figures["latency_p99_ms"]
            assert measured.elapsed_s * 1000 >= figures["latency_p99_ms"]
            names = {w.wait_type for w in capture.waits}
            assert names  # sampled or profiled, a run of 80 transactions leaves waits or CPU time
            if capture.source.startswith("pg_wait_sampling"):  # "+ bpftrace counts" where traced
                assert "CPU" in names  # from the sessions' schedstat, always there
            assert not any(n.startswith(("Activity:", "Client:ClientRead")) for n in names)
        assert inst.wait_probe().source == "pg_wait_sampling"
        with inst.connect() as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT c1) FROM lab_insert").fetchone() == (160_000, 160_000)


def test_keep_leaves_directories_and_clean_removes_them(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=True, connections=2):
        pass
    kept = list(lab_dir.glob("storlab-*"))
    assert len(kept) == 1 and (kept[0] / "pgdata" / "PG_VERSION").exists()
    assert storlab_processes() == []
    cleaned = cleanup.clean()
    assert [c.refused for c in cleaned] == [[]]
    assert not kept[0].exists()


def test_never_removes_a_directory_it_did_not_make(lab_dir):
    foreign = lab_dir / "storlab-po00000000"
    foreign.mkdir()
    (foreign / "precious").write_text("x")
    assert owned.remove_owned_dir(foreign, "po00000000") is False
    assert (foreign / "precious").exists()
    manifest = owned.Manifest("po00000000", "postgres", owner_pid=1, dirs=[str(foreign)])
    manifest.save()
    assert cleanup.clean(live=True)[0].refused == [f"{foreign} (not storlab's folder now; nothing there was touched)"]
    assert (foreign / "precious").exists()
    with pytest.raises(RunFailed, match="will not reuse"):
        owned.make_owned_dir(foreign, manifest, os_users.server_user())


def test_no_configuration_file_can_open_it_to_the_network(lab_dir):
    """What keeps an instance private is on the server's command line: lines added to its
    postgresql.auto.conf (a file the servers' user can write) change nothing at the next start."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=2) as inst:
        conf = inst.roots["disk"] / "pgdata" / "postgresql.auto.conf"
        with open(conf, "a") as f:
            f.write("listen_addresses = '127.0.0.1'\nport = 55499\nunix_socket_directories = '/tmp'\n")
        inst.restart()
        with inst.admin() as conn:
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""
            assert conn.execute("SHOW port").fetchone()[0] == str(postgres.PORT)
            assert conn.execute("SHOW unix_socket_directories").fetchone()[0] == str(inst.socket_dir)
    assert storlab_processes() == []


def test_a_placement_path_with_a_quote_is_quoted_or_refused_in_one_line(lab_root):
    """The log's placement may hold a quote (its path is quoted wherever it is written); PostgreSQL
    refuses one in a tablespace's location, so a data placement with one is refused before anything starts."""
    placements = {"disk": lab_root / "disk", "log": lab_root / "o'neil's \\ log"}
    for path in placements.values():
        path.mkdir()
    spec = spec_for(CellLayout(data_on="disk", data_files=2, log_on="log"), {}, placements)
    with provision("postgres", spec, keep=False, connections=2) as inst:
        run_load(inst, "random-insert", connections=2, rows_per_connection=500, batch=100)
        with inst.admin() as conn:
            assert conn.execute("SELECT count(*) FROM lab_insert").fetchone()[0] == 1000
            wal = Path(conn.execute("SHOW data_directory").fetchone()[0], "pg_wal").resolve()
    assert wal.is_relative_to(placements["log"])
    quoted = spec_for(CellLayout(data_on="log", data_files=2), {}, placements)
    with pytest.raises(UserError, match=r"^placement log: .*o'neil's .* cannot hold a tablespace \(PostgreSQL refuses "
                                        r"a ' in a tablespace's location\); choose another directory$"):
        with provision("postgres", quoted, keep=False, connections=2):
            pass
    assert storlab_processes() == [] and owned.Manifest.all() == []
    assert not list(placements["log"].iterdir())
