"""Shared fixtures: experiment files written into a temporary directory, a private state dir so tests
never see (or clean) instances of a real storlab run on the same machine, a shared store's server, and
root's own file that a link planted by the servers' user must never reach (`victim`); and the fast
tier's marker. Test modules never import each other: what two of them share is here, in commands.py
(the command line), experiments.py (experiment files) or devicetools.py (devices)."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
import pytest

from storlab.engines import provision
from storlab.engines.postgres import instance as postgres
from storlab.lab import owned
from storlab.lab.layout import CellLayout, spec_for
from storlab.running import cleanup
from tests.commands import start
from tests.devicetools import mounted


SLOW = ("engine", "device", "fio")


def pytest_collection_modifyitems(items):
    """`-m fast`, the fast tier, is every test marked none of SLOW: what starts a server, makes a device
    or a mount, or runs fio or bpftrace carries its marker; everything else is fast without saying so."""
    for item in items:
        if not any(item.get_closest_marker(name) for name in SLOW):
            item.add_marker(pytest.mark.fast)


# A test marked `alone` needs the machine's IO to itself (a bound on throughput it must reach); every
# other test shares it, as the other xdist workers' (and another session's suite) do. A readers-writer
# lock over files: the turnstile lets a test marked alone wait for the running tests to end while no new
# one starts. It is taken before a test's fixtures are set up and let go once they are torn down: a
# module's or a session's fixture (a report rendered, a template or a server built) is work on the
# machine too, and once two other workers built theirs beside a test marked alone.
TURNSTILE = Path(tempfile.gettempdir()) / "storlab-tests-turnstile.lock"
SHARE = Path(tempfile.gettempdir()) / "storlab-tests-share.lock"
_HELD = pytest.StashKey[tuple]()  # a test's two lock files, open while it holds them


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    alone = item.get_closest_marker("alone") is not None
    turnstile, share = open(TURNSTILE, "a"), open(SHARE, "a")
    item.stash[_HELD] = (turnstile, share)
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(share, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for held in item.stash.get(_HELD, ()):
        held.close()  # closing lets go of its lock


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STORLAB_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def write_experiment(lab_root):
    """Files in a folder the servers' OS user can reach, so relative placements pass the load checks."""

    def write(body: str, name: str = "exp.toml") -> Path:
        path = lab_root / name
        path.write_text(textwrap.dedent(body))
        return path

    return write


def storlab_processes() -> list[int]:
    """Server processes of any storlab instance made under this test session's state dir (servers
    inherit STORLAB_STATE_DIR; other sessions' tests on the same machine have their own)."""
    session = Path(os.environ["STORLAB_STATE_DIR"]).parent  # this session's pytest base directory
    mine = f"STORLAB_STATE_DIR={session}/".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if "storlab-" in cmdline and ("postgres" in cmdline or "mariadbd" in cmdline) and mine in environ:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def lab_root():
    """A directory the servers' OS user can reach: pytest's own tmp dirs are private to root."""
    path = Path(tempfile.mkdtemp(prefix="storlab-test-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lab_dir(lab_root):
    path = lab_root / "disk"
    path.mkdir()
    return path


@pytest.fixture
def image_dir():
    """A directory on this machine's disk (pytest's tmp dirs may be anywhere); whatever a failing
    test left is cleaned through storlab's own manifest before the directory goes."""
    path = Path(tempfile.mkdtemp(prefix="storlab-test-img-", dir="/var/tmp"))
    yield path
    cleanup.clean(live=True)
    if not mounted(path):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def images(image_dir):
    """`image_dir` open to the servers' OS user, which reaches the mount inside it."""
    image_dir.chmod(0o755)
    return image_dir


SECRET = "root-only SECRET 7f3a9c\n"


class Victim:
    """Root's own file, mode 0600, in a folder the servers' user can reach but not write."""

    def __init__(self, folder: Path, name: str = "secret"):
        folder.mkdir(exist_ok=True)
        folder.chmod(0o755)
        self.path = folder / name
        self.path.write_text(SECRET)
        self.path.chmod(0o600)
        self.before = (self.path.read_bytes(), os.stat(self.path).st_mtime_ns, os.stat(self.path).st_uid)

    def untouched(self) -> bool:
        st = os.stat(self.path)
        return (self.path.read_bytes(), st.st_mtime_ns, st.st_uid) == self.before


@pytest.fixture
def victim() -> Victim:
    """Outside the experiments' folder (lab_root), as /etc/shadow would be."""
    folder = Path(tempfile.mkdtemp(prefix="storlab-test-root-only-", dir="/var/tmp"))
    yield Victim(folder)
    shutil.rmtree(folder)


@dataclass
class StoreServer:
    """A shared store's server (the `store_server` fixture)."""

    socket_dir: Path
    password: str
    passfile: Path
    server_pid: int

    @property
    def dsn(self) -> str:
        return f"postgresql://fleet@/fleet?host={self.socket_dir}&port={postgres.PORT}"

    def env(self, **more: str) -> dict[str, str]:
        """The workers' environment: the password only in the password file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        return {**env, "PGPASSFILE": str(self.passfile), **more}

    def admin(self) -> psycopg.Connection:
        """storlab's superuser on the store server (trust over the socket), to look at what is stored."""
        return psycopg.connect(host=str(self.socket_dir), port=postgres.PORT, user=postgres.SUPERUSER,
                               dbname="fleet", autocommit=True)


def start_worker(server: StoreServer, host: str, cwd: Path, *more: str) -> subprocess.Popen:
    cwd.mkdir(exist_ok=True)
    cwd.chmod(0o755)
    return start("worker", "--store", server.dsn, "--host", host, "--until-done", "--no-trace", *more, cwd=cwd,
                 env=server.env(), stdout=subprocess.PIPE)


def recorded(server: StoreServer) -> list[tuple]:
    with server.admin() as conn:
        return conn.execute("SELECT cell_id, repetition, host FROM storlab_experiment_1.runs ORDER BY id").fetchall()


@pytest.fixture
def store_server(lab_root, monkeypatch):
    """A throwaway PostgreSQL as a fleet's shared store: a role `fleet` that owns the database `fleet`
    and must give its password (scram), written only in a password file."""
    place = lab_root / "store"
    place.mkdir()
    password = f"pw-{secrets.token_hex(12)}"
    passfile = lab_root / "pgpass"
    passfile.write_text(f"*:*:*:fleet:{password}\n")
    passfile.chmod(0o600)
    with provision("postgres", spec_for(CellLayout(data_on="store"), {}, {"store": place}), False, 40) as instance:
        with instance.admin() as conn:
            conn.execute(f"CREATE ROLE fleet LOGIN PASSWORD '{password}'")
            conn.execute("CREATE DATABASE fleet OWNER fleet")
            hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
            hba.write_text("local all fleet scram-sha-256\n" + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
        mine = [m for m in owned.Manifest.all() if m.owner_pid == os.getpid()]
        monkeypatch.setenv("PGPASSFILE", str(passfile))
        yield StoreServer(instance.socket_dir, password, passfile, mine[0].server_pid)


def prepared(instance, kind_name: str, files: dict | None = None, **params):
    """The workload kind `kind_name` prepared in `instance` with `params` (validated by the kind's
    Params, one value each, as a cell's); returns (kind, the validated params)."""
    from storlab.workloads import kind

    work = kind(kind_name)
    validated = work.Params.model_validate({"kind": kind_name, **params})
    work.prepare(instance, validated, files or {})
    return work, validated


def run_load(instance, kind_name: str, files: dict | None = None, probe=None, **params):
    """Prepare and run one load of a kind, the probe (if any) around it, as the runner does."""
    work, params = prepared(instance, kind_name, files, **params)
    load = work.load(instance, params, files or {})
    try:
        sessions = load.open()
        if probe is not None:
            probe.start(sessions)
        measured = load.run()
        capture = probe.stop() if probe is not None else None
    finally:
        load.close()
    return measured, capture


def instances_up() -> list:
    """Instances of this test's state dir whose server is up: PostgreSQL's postmaster.pid says "ready",
    MariaDB has opened its socket."""
    from storlab.lab import owned

    def ready(manifest) -> bool:
        for d in map(Path, manifest.dirs):
            pid_file = d / "pgdata" / "postmaster.pid"
            if pid_file.exists() and pid_file.read_text().splitlines()[-1:] == ["ready   "]:
                return True
            if (d / "mysqld.sock").exists():
                return True
        return False

    return [m for m in owned.Manifest.all() if m.server_pid and ready(m)]


def stop_storlab(proc: subprocess.Popen) -> None:
    """A storlab run a test started, ended on every way out as a user would: Ctrl-C (it stops its
    servers and removes its instance), else killed, and what it left cleaned."""

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    cleanup.clean(live=True)


def stop_instance(manifest: owned.Manifest) -> list[int]:
    """SIGSTOP every process of an instance, its server and the server's children: a stalled server."""
    server = psutil.Process(manifest.server_pid)
    server.suspend()  # first, so it forks no child after the listing
    children = server.children(recursive=True)
    for process in children:
        process.suspend()
    return [server.pid, *(p.pid for p in children)]


def stopped_processes(pids: list[int]) -> list[int]:
    """Those of `pids` that are still there (a zombie is gone), or stopped."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left
