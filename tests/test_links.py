"""Root is never led by a link the servers' OS user plants: in a template, in an instance's folders
(its server's log, its socket directory, the files evicted from the page cache), in a killed server's
shared memory, in a results folder (the temporary files of report and export), or named as an
experiment's SQL file. Run as root; each link is made by the `storlab` user itself (runuser), and each
target is a root-only file whose content and time must stay as they were, and whose content must
appear nowhere."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from storlab import processes
from storlab.engines import provision
from storlab.errors import RunFailed, UserError
from storlab.experiment import file as experiment
from storlab.engines.postgres import shared_memory
from storlab.lab import os_users, owned, safe_files, quiesce, templates, user_tools
from storlab.lab.devices import DevicePool
from storlab.lab.layout import CellLayout, spec_for
from tests.commands import invoke
from tests.conftest import Victim, storlab_processes
from tests.devicetools import device_spec
from tests.other_users import open_to_all, servers_user_folder

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the servers' OS user exists only when storlab runs as root")

DATA = Path(__file__).parent / "data"


def as_server_user(*argv: object) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", os_users.SERVER_USER, "--", *map(str, argv)],
                          capture_output=True, text=True)


def plant(link: Path, target: Path) -> None:
    """A link made by the servers' user (replacing whatever had that name)."""
    done = as_server_user("ln", "-sfn", target, link)
    assert done.returncode == 0, done.stderr
    assert os.lstat(link).st_uid == os_users.server_user().uid


@pytest.fixture
def private_templates(monkeypatch):
    root = Path("/var/tmp") / f"storlab-test-link-templates-{os.getpid()}"
    monkeypatch.setenv("STORLAB_TEMPLATE_DIR", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def small_spec(lab_dir: Path):
    return spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})


def owners(folder: Path) -> set[int]:
    return {os.lstat(p).st_uid for p in [folder, *folder.rglob("*")]}


# -- templates ---------------------------------------------------------------------------------

@pytest.mark.engine
def test_a_template_is_roots_and_one_the_servers_user_changed_is_built_again(lab_dir, private_templates, victim):
    with provision("postgres", small_spec(lab_dir), keep=False, connections=2):
        pass
    (made,) = private_templates.glob("postgres-*")
    assert owners(made) == {0}
    conf = made / "pgdata" / "postgresql.auto.conf"
    assert as_server_user("ln", "-sfn", victim.path, conf).returncode != 0  # a finished template is closed to it
    # A template as an older storlab left it, the servers' user's, with a link planted where each run
    # appends its settings.
    user_tools.give_to(made, os_users.server_user())
    plant(conf, victim.path)
    with provision("postgres", small_spec(lab_dir), keep=False, connections=2) as inst:
        with inst.connect() as conn:
            assert conn.execute("SHOW max_connections").fetchone()[0]  # its settings are its own
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""
    assert victim.untouched()
    (again,) = private_templates.glob("postgres-*")
    assert owners(again) == {0} and not conf.is_symlink()


def test_a_link_planted_while_a_template_is_built_is_refused(private_templates, victim):
    def build(into: Path) -> None:
        plant(into / "settings.conf", victim.path)

    with pytest.raises(RunFailed, match="is a link to .*secret, which the engine's installer does not make"):
        templates.template("test", {"case": "link"}, build)
    assert victim.untouched()
    assert [p for p in private_templates.iterdir()] == []  # nothing kept, not even the half-built one


def test_a_templates_folder_another_user_could_change_is_refused(lab_root, monkeypatch):
    folder = servers_user_folder(lab_root / "templates")
    monkeypatch.setenv("STORLAB_TEMPLATE_DIR", str(folder))
    built = []
    with pytest.raises(RunFailed, match=f"{folder}: a folder another user could change .*STORLAB_TEMPLATE_DIR"):
        templates.template("test", {"case": "folder"}, built.append)
    assert built == [] and list(folder.iterdir()) == []


@pytest.mark.device
def test_an_image_folder_another_user_could_change_is_refused(lab_root, victim):
    """In a folder everyone may write to (as /var/tmp), the servers' user got there first: a link in
    place of the image folder's parent, or that parent as a folder of its own. Root follows neither."""
    shared = lab_root / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    plant(shared / "linked", victim.path.parent)
    assert as_server_user("mkdir", shared / "theirs").returncode == 0
    for parent, said in (("linked", "a link"), ("theirs", "a folder another user could change")):
        spec = device_spec("fast", {"loop": "64MB", "image_dir": str(shared / parent / "img")})
        # Bad input, found by the checks before anything starts (experiment load, --dry-run).
        with DevicePool() as pool:
            with pytest.raises(UserError, match=f"^placements.fast.image_dir: {shared / parent}: {said}.*storlab makes no device image under it; "
                                                "give placements.fast.image_dir a real folder"):
                pool.device("fast", spec)
        # And when the folder is made, after those checks: nothing made through what was planted.
        with pytest.raises(RunFailed, match=f"^{shared / parent}: {said}.*: the remedy$"):
            safe_files.own_folder(shared / parent / "img", "the remedy")
    # '..' after a link: the kernel would follow the link first.
    with DevicePool() as pool:
        with pytest.raises(UserError, match="a path with '..' in it: storlab makes no device image"):
            pool.device("fast", device_spec("fast", {"loop": "64MB", "image_dir": f"{shared}/linked/../img"}))
    assert sorted(p.name for p in victim.path.parent.iterdir()) == ["secret"] and victim.untouched()
    assert list((shared / "theirs").iterdir()) == []
    # Made afresh by root under the same shared folder, the image folder is used.
    with DevicePool() as pool:
        assert pool.device("fast", device_spec("fast", {"loop": "64MB", "image_dir": str(shared / "mine" / "img")})).loop


def test_settings_are_never_written_through_a_link(lab_root, victim):
    folder = servers_user_folder(lab_root / "instance")
    plant(folder / "postgresql.auto.conf", victim.path)
    with pytest.raises(RunFailed, match="storlab will not write through it"):
        safe_files.append(folder / "postgresql.auto.conf", "port = 1\n")
    with pytest.raises(RunFailed, match="storlab will not write through it"):
        safe_files.write_new(folder / "postgresql.auto.conf", "port = 1\n")
    # A folder on the way swapped for a link: not followed either.
    plant(folder / "swapped", victim.path.parent)
    with pytest.raises(RunFailed, match="storlab will not write through it"):
        safe_files.write_new(folder / "swapped" / "my.cnf", "port = 1\n")
    assert not (victim.path.parent / "my.cnf").exists()
    assert victim.untouched()
    # A link root made itself is followed (a system's /var/run, a placement reached through one).
    (lab_root / "roots-link").symlink_to(folder)
    safe_files.write_new(lab_root / "roots-link" / "my.cnf", "port = 1\n")
    assert (folder / "my.cnf").read_text() == "port = 1\n"


# -- an instance's folders -----------------------------------------------------------------------

@pytest.mark.engine
def test_a_failed_run_never_quotes_a_file_its_log_was_swapped_for(lab_dir, private_templates, victim):
    with pytest.raises(RunFailed) as caught:
        with provision("postgres", small_spec(lab_dir), keep=False, connections=2) as inst:
            ws = inst.workspace
            log = ws.server.log_path
            user = os_users.server_user()
            assert "ready to accept connections" in safe_files.read_tail(log, user.uid, 1 << 20)  # its own log is read
            plant(log, victim.path)
            assert safe_files.read_tail(log, user.uid, 1 << 20) == ""
            os.kill(ws.server.pid, signal.SIGKILL)
            ws.server.proc.wait()
            raise RuntimeError("the load failed")
    assert str(caught.value) == "the load failed; the server's log says: nothing in its log"
    assert "SECRET" not in str(caught.value)
    assert victim.untouched()


@pytest.mark.engine
def test_a_restart_never_writes_its_log_through_a_link(lab_dir, private_templates, victim):
    with pytest.raises(RunFailed, match="server.log: .*storlab will not write through it"):
        with provision("postgres", small_spec(lab_dir), keep=False, connections=2) as inst:
            plant(inst.workspace.server.log_path, victim.path)
            inst.restart()
    assert victim.untouched()


@pytest.mark.engine
def test_a_socket_folder_swapped_for_a_link_is_not_emptied(lab_root, lab_dir, private_templates, victim):
    decoy = lab_root / "decoy"
    decoy.mkdir()
    keep = decoy / "keep"
    keep.write_text("root's\n")
    moved = None
    try:
        with provision("postgres", small_spec(lab_dir), keep=False, connections=2) as inst:
            sockets = inst.workspace.socket_dir
            (decoy / owned.MARKER).write_text(inst.workspace.manifest.instance_id + "\n")  # even a marker that fits
            moved = sockets.with_name(sockets.name + "-moved")
            assert as_server_user("mv", sockets, moved).returncode == 0
            plant(sockets, decoy)
        assert keep.read_text() == "root's\n" and (decoy / owned.MARKER).exists()
        assert list(lab_dir.iterdir()) == []  # the instance's own folders went as usual
    finally:
        if moved is not None:
            shutil.rmtree(moved, ignore_errors=True)
            Path(str(moved).removesuffix("-moved")).unlink(missing_ok=True)
    assert victim.untouched()


def test_evicting_an_instance_never_follows_a_folder_swapped_for_a_link_mid_walk(lab_root, victim, monkeypatch):
    """The folders evict walks are the servers' user's: it swaps one for a link to root's folder while
    the walk is inside it (at the first file's fadvise), where files of the same names wait."""
    root = lab_root / "storlab-po12345678"  # an instance's own folder on a placement, root's
    root.mkdir(mode=0o711)
    folder = root / "pgdata" / "base"
    folder.mkdir(parents=True)
    for name in ("one", "two"):
        (folder / name).write_text("the server's\n")
        Victim(victim.path.parent, name)
    user_tools.give_to(root / "pgdata", os_users.server_user())
    advised = []
    fadvise = os.posix_fadvise

    def swap_then_advise(fd: int, offset: int, length: int, advice: int) -> None:
        if not advised:
            assert as_server_user("mv", folder, folder.with_name("moved")).returncode == 0
            plant(folder, victim.path.parent)
        st = os.fstat(fd)
        advised.append((st.st_dev, st.st_ino))
        fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", swap_then_advise)
    assert quiesce.evict([root]) == 2
    roots_files = {(st.st_dev, st.st_ino) for st in map(os.stat, victim.path.parent.iterdir())}
    assert len(advised) == 2 and not roots_files & set(advised)
    assert victim.untouched()


@pytest.mark.engine
def test_a_killed_servers_shared_memory_is_never_read_through_a_fifo(lab_dir, private_templates):
    """The servers' user swaps a killed server's control segment in /dev/shm for a FIFO: reading it
    would never end. What can be released is, and the FIFO is left alone."""
    fifos = []
    with provision("postgres", small_spec(lab_dir), keep=False, connections=2) as inst:
        ws = inst.workspace
        with open(f"/proc/{ws.server.pid}/maps") as maps:
            fifos = sorted({Path(line.split()[-1]) for line in maps if "/dev/shm/PostgreSQL." in line})
        assert fifos  # the control segment, mapped by the postmaster
        _, made = shared_memory.in_use(list(map(Path, ws.manifest.dirs)))  # what the FIFO hides from release
        processes.kill_tree(ws.server.pid)
        ws.server.proc.wait()
        for fifo in fifos:
            assert as_server_user("rm", fifo).returncode == 0
            assert as_server_user("mkfifo", fifo).returncode == 0
        released = []
        release = threading.Thread(target=lambda: released.extend(shared_memory.release(list(map(Path, ws.manifest.dirs)))),
                                   daemon=True)
        try:
            release.start()
            release.join(60)  # a hang guard: a FIFO's read waits for a writer
            hung = release.is_alive()
        finally:
            for fifo in fifos:  # a writer that closes at once ends a read that hung
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
            release.join()
    try:
        assert not hung
        assert released and all(r.startswith("shared memory segment ") for r in released)
        assert all(fifo.is_fifo() for fifo in fifos)
    finally:
        for file in {*fifos, *made}:
            file.unlink(missing_ok=True)
    assert storlab_processes() == []


def test_a_marker_that_is_a_fifo_or_a_link_is_not_read(lab_root, victim):
    folder = servers_user_folder(lab_root / "storlab-po12345678")
    plant(folder / owned.MARKER, victim.path)
    assert owned.remove_owned_dir(folder, "po12345678") is False and folder.exists()
    (folder / owned.MARKER).unlink()
    assert as_server_user("mkfifo", folder / owned.MARKER).returncode == 0
    assert owned.remove_owned_dir(folder, "po12345678") is False  # returns: a FIFO does not block it
    assert victim.untouched()


# -- a results folder ----------------------------------------------------------------------------

@pytest.fixture
def shared_results(lab_root) -> Path:
    """A results folder the servers' user may write in (as a folder shared between users would be)."""
    shutil.copytree(DATA / "explain", lab_root / "results")
    folder = lab_root / "results" / "quickstart"
    user = os_users.server_user()
    os.chown(folder, user.uid, user.gid)
    return folder


@pytest.mark.parametrize("command, name", [(["export", "--format", "csv"], "runs.csv"),
                                           (["export", "--format", "json"], "runs.json"),
                                           (["report"], "report.html")])
def test_report_and_export_never_write_through_a_planted_link(shared_results, lab_root, victim, command, name):
    others = [Victim(victim.path.parent, f"secret{i}") for i in range(3)]
    plant(shared_results / f".{name}.storlab-tmp", victim.path)
    plant(shared_results / "..storlab-files.storlab-tmp", others[0].path)
    plant(shared_results / ".storlab-files", others[1].path)
    done = invoke(*command, str(shared_results))
    assert done.exit_code == 0, done.output
    written = shared_results / name
    assert not written.is_symlink() and written.stat().st_uid == 0 and "SECRET" not in written.read_text()
    assert victim.untouched() and all(v.untouched() for v in others)
    # The file itself a link: refused, not replaced, not followed.
    written.unlink()
    plant(written, others[2].path)
    refused = invoke(*command, str(shared_results))
    assert refused.exit_code == 2 and "not written by storlab" in refused.stderr
    assert written.is_symlink() and others[2].untouched()
    assert all(p.is_symlink() for p in shared_results.glob(".*storlab-tmp"))  # only the planted names are left


def test_a_results_folder_another_user_could_change_is_refused_before_anything(lab_root, lab_dir, victim,
                                                                              monkeypatch):
    """Root writes the store and its files into the results folder: one the servers' user owns, one
    under a folder of theirs, or one open to everyone is refused in one line (exit 2) by every command
    that writes one, before anything is made in it; the default folder (results/NAME under the
    working folder) too. Under a sticky folder (/var/tmp) a root-only folder is fine."""
    user = os_users.server_user()
    theirs = servers_user_folder(lab_root / "theirs")
    open_folder = open_to_all(lab_root / "open")
    body = (f'name = "o"\nengine = "postgres"\n[placements]\ndisk = "{lab_dir}"\n[layout]\ndata_on = "disk"\n'
            '[workload]\nkind = "random-insert"\n')
    experiment_file = victim.path.parent / "o.toml"  # a folder of root's: the experiment is not the question here
    experiment_file.write_text(body)
    owned, remedy = f"owner uid {user.uid}, mode 0755", ("storlab runs as root and writes its results there; "
                                                          "choose a folder only root can change")
    cases = [(theirs, f"{theirs}: a folder another user could change ({owned})"),
             (theirs / "results", f"{theirs}: a folder another user could change ({owned})"),
             (open_folder / "r", f"{open_folder}: a folder another user could change (owner uid 0, mode 0777)")]
    for out, said in cases:
        for command in (["run", experiment_file, "--out", out], ["run", experiment_file, "--dry-run", "--out", out],
                        ["io", lab_dir, "--out", out], ["report", "--store", "postgresql://u@nowhere.invalid/d",
                                                        "--out", out]):
            done = invoke(*command)
            assert (done.exit_code, done.stderr) == (2, f"storlab: --out: {said}: {remedy}\n"), command
    assert list(theirs.iterdir()) == [] and list(open_folder.iterdir()) == []

    monkeypatch.chdir(theirs)  # the default folder, results/o, under the working folder
    done = invoke("run", str(experiment_file), "--dry-run")
    assert (done.exit_code, done.stderr) == (2, f"storlab: the results folder: {theirs}: a folder another user could "
                                                f"change ({owned}): {remedy}\n")
    assert list(theirs.iterdir()) == []
    monkeypatch.chdir(lab_root)  # root's own, in sticky /var/tmp
    done = invoke("run", str(experiment_file), "--dry-run")
    assert done.exit_code == 0, done.output


# -- SQL files -----------------------------------------------------------------------------------

HEAD = """name = "w"
engine = "postgres"
[placements]
disk = "disk"
[layout]
data_on = "disk"
[workload]
kind = "custom"
"""


def sql_refusal(write_experiment, workload: str) -> tuple[int, str, str]:
    path = write_experiment(HEAD + workload, "w.toml")
    # Beside the experiment's folder, not in it: that may be another user's, and root's results never go there
    # (a dry run makes no folder).
    out = path.parent.with_name(f"{path.parent.name}-results")
    done = invoke("run", str(path), "--dry-run", "--out", str(out))
    return done.exit_code, done.stderr, done.stdout


@pytest.mark.parametrize("workload, expected", [
    ('transaction = "/etc/shadow"\n',
     "w.toml:9: workload.transaction: SQL file /etc/shadow: an absolute path; name a file in the experiment file's "
     "folder (or below it)"),
    ('transaction = "../../etc/shadow"\n',
     "w.toml:9: workload.transaction: SQL file ../../etc/shadow: '..' leaves the experiment file's folder; name a file "
     "in it (or below it)"),
    ('transaction = "sub/../../x.sql"\n',
     "w.toml:9: workload.transaction: SQL file sub/../../x.sql: '..' leaves the experiment file's folder; name a file "
     "in it (or below it)"),
    ('transaction = "~/x.sql"\n',
     "w.toml:9: workload.transaction: SQL file ~/x.sql: '~' is not expanded; name a file in the experiment file's "
     "folder (or below it)"),
    ('setup = "/root/.bash_history"\ntransaction = "t.sql"\n',
     "w.toml:9: workload.setup: SQL file /root/.bash_history: an absolute path; name a file in the experiment file's "
     "folder (or below it)"),
])
def test_sql_files_outside_the_experiments_folder_are_refused(write_experiment, workload, expected):
    write_experiment("SELECT 1;\n", "t.sql")
    code, stderr, stdout = sql_refusal(write_experiment, workload)
    assert (code, stderr) == (2, f"storlab: {expected}\n")


@pytest.mark.parametrize("key", ["setup", "transaction"])
def test_a_sql_file_linked_out_of_the_folder_is_refused_and_never_read(write_experiment, lab_root, victim, key):
    write_experiment("SELECT 1;\n", "t.sql")
    user = os_users.server_user()
    os.chown(lab_root, user.uid, user.gid)  # the experiment's folder, its author's (here the servers' user)
    plant(lab_root / "q.sql", victim.path)
    workload = f'{key} = "q.sql"\n' + ('transaction = "t.sql"\n' if key == "setup" else "")
    code, stderr, stdout = sql_refusal(write_experiment, workload)
    assert code == 2
    assert stderr == (f"storlab: w.toml:9: workload.{key}: SQL file q.sql: a link to {victim.path}, outside the "
                      "experiment file's folder; storlab reads SQL files only inside it\n")
    assert "SECRET" not in stderr + stdout and victim.untouched()
    # submit refuses it the same way, before the store is even reached: nothing of it is uploaded.
    submitted = invoke("submit", lab_root / "w.toml", "--store", "postgresql://u@nowhere.invalid/d")
    assert (submitted.exit_code, submitted.stderr) == (2, stderr)


def test_a_sql_file_linked_inside_the_folder_is_read(write_experiment, lab_root):
    (lab_root / "sql").mkdir()
    write_experiment("SELECT 1;\n", "sql/t.sql")
    (lab_root / "t.sql").symlink_to("sql/t.sql")
    path = write_experiment(HEAD + 'transaction = "t.sql"\nsetup = "sql/t.sql"\n', "w.toml")
    assert experiment.load(path, check_placements=False).sql == {"t.sql": "SELECT 1;\n", "sql/t.sql": "SELECT 1;\n"}


def test_a_stored_experiment_naming_a_file_outside_is_refused(write_experiment):
    path = write_experiment(HEAD + 'transaction = "/etc/shadow"\n', "w.toml")
    with pytest.raises(UserError, match="w.toml:9: workload.transaction: SQL file /etc/shadow: an absolute path"):
        experiment.parse(path, path.read_text(), files={"/etc/shadow": "SELECT 1;"}, check_placements=False)


# -- system folders ------------------------------------------------------------------------------

@pytest.mark.parametrize("out, expected", [
    ("/", "/ is a system folder: choose a directory of your own below it"),
    ("/etc", "/etc is a system folder: choose a directory of your own, outside /etc"),
    ("/usr/local/r", "/usr/local/r is inside /usr, a system folder: choose a directory of your own, outside /usr"),
    ("/proc/1", "/proc/1 is inside /proc, a system folder: choose a directory of your own, outside /proc"),
    ("/sys", "/sys is a system folder: choose a directory of your own, outside /sys"),
    ("/dev", "/dev is inside /dev: choose a folder on a real file system"),
    ("/tmp", "/tmp is shared by every user: choose a folder of your own (below it is fine)"),
])
def test_results_folders_in_system_folders_are_refused(write_experiment, lab_root, out, expected):
    (lab_root / "disk").mkdir()
    path = write_experiment(HEAD.replace('kind = "custom"', 'kind = "random-insert"'), "w.toml")
    for command in (["run", str(path), "--dry-run", "--out", out], ["run", str(path), "--out", out],
                    ["export", "--store", "postgresql://u@nowhere.invalid/d", "--out", out],
                    ["report", "--store", "postgresql://u@nowhere.invalid/d", "--out", out]):
        done = invoke(*command)
        assert (done.exit_code, done.stderr) == (2, f"storlab: --out: {expected}\n"), command
    assert not Path("/storlab.sqlite").exists()
