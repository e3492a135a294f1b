"""Instances copied from templates: the declared layout, independent copies, an unchanged template,
nothing left after an immediate shutdown."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from storlab.engines import provision
from storlab.engines.postgres import shared_memory
from storlab.lab import templates
from storlab.lab.layout import CellLayout, spec_for
from tests.conftest import run_load, storlab_processes

pytestmark = pytest.mark.engine


def digest(folder: Path) -> str:
    """Every file's path, size and content under a template."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def private_templates(tmp_path_factory, monkeypatch):
    root = Path("/var/tmp") / f"storlab-test-templates-{os.getpid()}"
    monkeypatch.setenv("STORLAB_TEMPLATE_DIR", str(root))
    yield root
    import shutil

    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_runs_copy_one_template_and_leave_it_as_it_was(engine, lab_root, private_templates):
    disk, fast = lab_root / "disk", lab_root / "fast"
    disk.mkdir()
    fast.mkdir()
    layout = CellLayout(data_on={"disk": 1, "fast": 1}, data_files=2, log_on="fast")
    spec = spec_for(layout, {}, {"disk": disk, "fast": fast})
    before = None
    for round_no in range(2):
        with provision(engine, spec, keep=False, connections=4) as inst:
            (made,) = private_templates.glob(f"{engine}-*")
            before = before or digest(made)
            run_load(inst, "random-insert", connections=2, rows_per_connection=2000, batch=500)
            with inst.connect() as conn:  # each copy starts empty: the previous run's rows are not in it
                assert conn.execute("SELECT count(*) FROM lab_insert").fetchone()[0] == 4000
            log = "wal" if engine == "postgres" else "redo"
            (root,) = fast.glob("storlab-*")
            assert any((root / log).iterdir())  # the log is on the log placement
            if engine == "postgres":
                (home,) = disk.glob("storlab-*")
                assert (home / "pgdata" / "pg_wal").resolve() == (root / "wal").resolve()
    assert [p.name for p in private_templates.iterdir() if not p.name.startswith(".")] == [made.name]
    assert digest(made) == before
    assert storlab_processes() == []
    assert not list(disk.glob("storlab-*")) and not list(fast.glob("storlab-*"))


def test_an_immediate_shutdown_leaves_no_shared_memory(lab_dir, private_templates):
    """The instance's own segments and /dev/shm files, found through its data directory (the other
    xdist worker's servers, and the machine's own, make and drop theirs meanwhile)."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision("postgres", spec, keep=False, connections=2) as inst:
        run_load(inst, "random-insert", connections=2, rows_per_connection=1000, batch=100)
        segments, files = shared_memory.in_use(list(inst.roots.values()))
        assert segments and files  # it had some
    left = {(s.shmid, s.creator_pid) for s in shared_memory.segments()}
    assert not [s for s in segments if (s.shmid, s.creator_pid) in left]
    assert not [path for path in files if path.exists()]


def test_templates_are_keyed_by_what_install_fixes():
    assert templates.key("postgres", {"wal_segsize_mb": 16}) != templates.key("postgres", {"wal_segsize_mb": 1})
    assert templates.key("postgres", {"wal_segsize_mb": 16}) == templates.key("postgres", {"wal_segsize_mb": 16})
