"""Against real MariaDB instances that storlab provisions (never the system's own server)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.engines.mariadb import instance as mariadb
from storlab.errors import UserError
from storlab.lab import os_users, owned
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads.random_insert import RANDOM_UUID
from tests.conftest import prepared, run_load, storlab_processes

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not Path("/usr/sbin/mariadbd").exists() and shutil.which("mariadbd") is None,
                       reason="mariadb-server is not installed"),
]

DATA_FILE_WAIT = "wait/io/file/innodb/innodb_data_file"
GLOBAL_WAIT = "SELECT COUNT_STAR FROM performance_schema.events_waits_summary_global_by_event_name WHERE EVENT_NAME = %s"
BACKGROUND_WAIT = """
    SELECT COALESCE(SUM(w.COUNT_STAR), 0)
    FROM performance_schema.events_waits_summary_by_thread_by_event_name w
    JOIN performance_schema.threads t USING (THREAD_ID)
    WHERE t.PROCESSLIST_USER IS NULL AND w.EVENT_NAME = %s"""


def system_mariadb_pid() -> int | None:
    """The machine's own server (not one of storlab's): its pid must never change."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith((b"mariadbd", b"mysqld")) and b"storlab-" not in b" ".join(argv):
            return int(entry.name)
    return None


@pytest.fixture(autouse=True)
def system_server_untouched():
    before = system_mariadb_pid()
    yield
    assert system_mariadb_pid() == before


@pytest.fixture
def two_placements(lab_root, lab_dir):
    fast = lab_root / "fast"
    fast.mkdir()
    return {"disk": lab_dir, "fast": fast}


@pytest.fixture
def tmp_placement():
    """A placement under /tmp (sticky, world-traversable), as a test's scratch directory would be."""
    path = Path(tempfile.mkdtemp(prefix="storlab-test-", dir="/tmp"))
    path.chmod(0o755)
    yield {"disk": path}
    shutil.rmtree(path, ignore_errors=True)


def _root(placement: Path) -> Path:
    (root,) = placement.glob("storlab-ma*")
    return root


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_partitions_and_redo_log_are_where_declared(two_placements):
    spec = spec_for(CellLayout(data_on={"disk": 1, "fast": 1}, data_files=4, log_on="fast", log_size_bytes=64 * 2**20),
                    {}, two_placements)
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        (pid,) = storlab_processes()
        socket = inst.socket
        assert socket.is_socket()
        run_load(inst, "random-insert", connections=1, rows_per_connection=8000, batch=1000)
        with inst.connect() as conn:
            per_partition = [conn.execute(f"SELECT COUNT(*) FROM lab_insert PARTITION (p{i})").fetchone()[0]
                             for i in range(4)]
            assert conn.execute("SELECT @@innodb_log_file_size").fetchone()[0] == 64 * 1024 * 1024
        for i, placement in enumerate(spec.data_files):
            ibd = _root(two_placements[placement.name]) / "tables" / "lab" / f"lab_insert#P#p{i}.ibd"
            assert ibd.exists(), ibd
        assert [p.name for p in spec.data_files] == ["disk", "fast", "disk", "fast"]
        assert (_root(two_placements["fast"]) / "redo" / "ib_logfile0").stat().st_size == 64 * 1024 * 1024
        assert not list(_root(two_placements["disk"]).rglob("ib_logfile*"))
        assert (_root(two_placements["disk"]) / "datadir" / "ibdata1").exists()
        # Equal ranges of a random key: every file takes its share of the inserts.
        assert sum(per_partition) == 8000 and min(per_partition) > 1500, per_partition
    assert _gone(pid) and not socket.exists()
    assert storlab_processes() == []
    assert not list(two_placements["disk"].glob("storlab-*")) and not list(two_placements["fast"].glob("storlab-*"))
    assert owned.Manifest.all() == []


def test_system_tablespace_files_in_order_across_placements(two_placements):
    spec = spec_for(CellLayout(data_on={"disk": 2, "fast": 1}, data_files=3, striping="contiguous",
                               file_kind="system-tablespace"), {}, two_placements)
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        prepared(inst, "random-insert", batch=100)
        with inst.connect() as conn:
            assert conn.execute("SELECT @@innodb_file_per_table").fetchone()[0] == 0
        for i, placement in enumerate(spec.data_files, start=1):
            assert (_root(two_placements[placement.name]) / "ibdata" / f"ibdata{i}").exists()
        assert [p.name for p in spec.data_files] == ["disk", "disk", "fast"]
        assert not list(_root(two_placements["disk"]).rglob("lab_insert*.ibd"))  # the table is in ibdata
        assert (_root(two_placements["disk"]) / "redo" / "ib_logfile0").exists()
    assert storlab_processes() == []


@pytest.mark.parametrize("page_size, expected", [("4k", 4096), ("32k", 32768), ("64k", 65536)])
def test_page_size_is_honoured(tmp_placement, page_size, expected):
    spec = spec_for(CellLayout(data_on="disk", data_files=2, page_size=page_size), {}, tmp_placement)
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        run_load(inst, "random-insert", connections=1, rows_per_connection=500, batch=200)
        with inst.connect() as conn:
            assert conn.execute("SELECT @@innodb_page_size").fetchone()[0] == expected
            assert conn.execute("SELECT COUNT(*) FROM lab_insert").fetchone()[0] == 500
    assert storlab_processes() == []


def test_pytest_tmp_path_placement_works_or_fails_clearly(tmp_path):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": tmp_path})
    blocked = os_users.unreachable_ancestor(tmp_path, os_users.server_user())
    if blocked is not None:  # as root: pytest's base temp dir is private to root
        with pytest.raises(UserError, match=str(blocked)):
            with provision("mariadb", spec, keep=False, connections=2):
                pass
    else:
        with provision("mariadb", spec, keep=False, connections=2) as inst:
            assert inst.version.startswith("10.")
    assert storlab_processes() == [] and not list(tmp_path.glob("storlab-*"))


def test_waits_count_reads_from_disk_for_the_workload_user_only(lab_dir):
    # A buffer pool far smaller than the table: the sessions read the pages they insert into.
    spec = spec_for(CellLayout(data_on="disk", data_files=2), {"innodb_buffer_pool_size": "8M"}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=4) as inst:
        work, params = prepared(inst, "random-insert", connections=4, rows_per_connection=12_000, batch=1000)
        probe = inst.wait_probe()
        assert probe.source == "performance_schema"
        load = work.load(inst, params, {})
        try:
            sessions = load.open()
            threads = inst.session_os_pids(sessions)
            assert len(threads) == 4 and all(Path(f"/proc/{tid}/schedstat").exists() for tid in threads)
            probe.start(sessions)
            measured = load.run()
            capture = probe.stop()

            waits = {w.wait_type: w for w in capture.waits}
            assert measured.figures["rows"] == 48_000 and measured.figures["transactions"] == 48
            assert waits[DATA_FILE_WAIT].wait_count > 0 and waits[DATA_FILE_WAIT].wait_s > 0
            assert waits["CPU"].wait_s > 0 and capture.extras["sessions_cpu_s"] == waits["CPU"].wait_s
            assert not set(waits) & mariadb.BENIGN
            assert capture.extras["log.Innodb_os_log_written"] > 0
            assert {"log.Innodb_log_waits", "log.Innodb_data_fsyncs"} <= set(capture.extras)

            # Now only the admin user and the background threads work, the workload's sessions idle:
            # the server's data files see IO, the probe must report none of it.
            quiet = inst.wait_probe()
            quiet.start(sessions)
            with inst.admin() as admin:
                global_before = admin.execute(GLOBAL_WAIT, (DATA_FILE_WAIT,)).fetchone()[0]
                background_before = admin.execute(BACKGROUND_WAIT, (DATA_FILE_WAIT,)).fetchone()[0]
                admin.execute("INSERT INTO lab.lab_insert (c1) SELECT " + RANDOM_UUID + " FROM lab.seq_1_to_5000")
                admin.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")  # the page cleaner writes it all
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    if admin.execute(BACKGROUND_WAIT, (DATA_FILE_WAIT,)).fetchone()[0] > background_before:
                        break
                    time.sleep(0.2)
                global_moved = admin.execute(GLOBAL_WAIT, (DATA_FILE_WAIT,)).fetchone()[0] - global_before
                background_moved = admin.execute(BACKGROUND_WAIT, (DATA_FILE_WAIT,)).fetchone()[0] - background_before
            idle = quiet.stop()
            assert global_moved > 0 and background_moved > 0
            assert [w.wait_type for w in idle.waits if w.wait_type != "CPU"] == []
        finally:
            load.close()

        with inst.connect() as conn:
            total, distinct, v4 = conn.execute(
                "SELECT COUNT(*), COUNT(DISTINCT c1), SUM(SUBSTR(c1, 15, 1) = '4') FROM lab_insert").fetchone()
        assert total == distinct == v4 == 53_000


def test_server_is_unprivileged_and_stops_on_error(lab_dir):
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with pytest.raises(ZeroDivisionError):
        with provision("mariadb", spec, keep=False, connections=2) as inst:
            (pid,) = storlab_processes()
            socket = inst.socket
            assert Path(f"/proc/{pid}").stat().st_uid != 0
            with inst.admin() as conn:
                assert conn.execute("SELECT @@skip_networking, @@port").fetchone()[0] == 1
            1 / 0
    assert _gone(pid) and not socket.exists()
    assert storlab_processes() == []
    assert not list(lab_dir.glob("storlab-*"))


def test_no_option_file_can_open_it_to_the_network(lab_dir):
    """skip-networking and the socket are on the server's command line, after its option file: lines
    added to my.cnf change nothing at the next start."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("mariadb", spec, keep=False, connections=2) as inst:
        with open(inst.roots["disk"] / "my.cnf", "a") as f:
            f.write("skip-networking = 0\nport = 33999\nbind-address = 127.0.0.1\nsocket = /tmp/storlab-test.sock\n")
        inst.restart()
        with inst.admin() as conn:
            assert conn.execute("SELECT @@skip_networking, @@socket").fetchone() == (1, str(inst.socket))
    assert storlab_processes() == []
