"""No client runs as root (issue 36, "no way in, round 3"): pgbench, sysbench and pgreplay run as the OS
user storlab-client, in the instance's clients' group, in a private folder, and are ended with the run
with whatever they started; a client script that runs a program (pgbench's \\shell) is refused when
the file loads unless the run here says --allow-client-programs, and never taken by a fleet; the
client user cannot open storlab's own sessions; a replay log beyond what pgreplay can hold, or with
times no clock has, is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from storlab.lab import os_users, owned
from tests.commands import invoke, start, storlab
from tests.conftest import stop_storlab
from tests.disk_experiments import on_disk
from tests.store_edits import edit, submit, worker_refuses

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the clients' OS user exists only when storlab runs as root")

EXPERIMENT = on_disk("{workload}", name="{name}", repetitions="{reps}")

SHELL_SCRIPT = "\\set aid random(1, 100000)\n\\shell {command}\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def client_experiment(write_experiment, lab_root: Path, command: str, name: str = "shelled", reps: int = 1) -> Path:
    path = write_experiment(EXPERIMENT.format(name=name, reps=reps, disk=lab_root / "disk",
                                           workload='kind = "pgbench"\nscript = "shell.sql"\nclients = 1\ntransactions = 20'),
                            f"{name}.toml")
    (path.parent / "shell.sql").write_text(SHELL_SCRIPT.format(command=command))
    return path


def sleepers(tag: str) -> list[psutil.Process]:
    """Processes whose command line holds `tag` (a number only this test's script uses)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if tag in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_script_that_runs_a_program_is_refused_in_one_line_and_nothing_runs(write_experiment, lab_root, tmp_path):
    marker = tmp_path / "ran"
    path = client_experiment(write_experiment, lab_root, f"touch {marker}")
    for args in (["run", path, "--dry-run"], ["run", path, "--out", tmp_path / "r"],
                 ["submit", path, "--store", "host=/nonexistent dbname=x"]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert one_line(result.stderr) == ("storlab: shelled.toml:13: workload.script: shell.sql line 2: \\shell runs a "
                                           "program on this machine; taken only with storlab run "
                                           "--allow-client-programs (a fleet worker never takes it)")
    assert not marker.exists() and not (lab_root / "disk").exists()


def test_the_switch_is_for_a_results_folder_only(write_experiment, lab_root):
    path = client_experiment(write_experiment, lab_root, "true")
    result = invoke("run", path, "--allow-client-programs", "--store", "host=/nonexistent dbname=x")
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith("storlab: --allow-client-programs: only into a results folder; ")


@pytest.mark.engine
def test_with_the_switch_the_program_runs_as_the_client_user_and_ends_with_the_run(write_experiment, lab_root,
                                                                                  tmp_path):
    said = Path("/tmp") / f"storlab-test-who-{os.getpid()}"  # a folder every user may write in, as a script would
    tag = f"9{os.getpid() % 100000:05d}1"
    command = f"[ -e {said} ] || {{ id > {said}; setsid sleep {tag} & }}"
    path = client_experiment(write_experiment, lab_root, command)
    try:
        done = storlab("run", path, "--allow-client-programs", "--no-trace", "--out", tmp_path / "r")
        assert done.returncode == 0, done.stderr
        client = os_users.client_user()
        assert said.read_text().startswith(f"uid={client.uid}({client.name}) gid={client.gid}")
        assert os.stat(said).st_uid == client.uid
        assert sleepers(f"sleep {tag}") == []  # what it started in a session of its own was killed with the run
    finally:
        said.unlink(missing_ok=True)
    assert owned.Manifest.all() == []


@pytest.mark.engine
def test_a_fleet_worker_never_takes_a_script_that_runs_a_program(store_server, write_experiment, lab_root):
    marker = lab_root / "ran"
    for name in ("edited", "other"):
        source = client_experiment(write_experiment, lab_root, "true", name=name)
        (source.parent / "shell.sql").write_text("SELECT 1;\n")
        submit(store_server, source)
    edit(store_server, "edited", "files = %s", json.dumps({"shell.sql": SHELL_SCRIPT.format(command=f"touch {marker}")}))
    worker_refuses(store_server, lab_root, "edited", "edited: not taken by db1: edited.toml:13: workload.script: "
                   "shell.sql line 2: \\shell runs a program on this machine; taken only with storlab run "
                   "--allow-client-programs (a fleet worker never takes it)")
    assert not marker.exists()


# -- who the clients are ---------------------------------------------------------------------------


def watch_clients(run: subprocess.Popen, program: str, seconds: float) -> dict[int, tuple[int, str, str]]:
    """Every `program` process the run started (its descendants) while it ran, at most `seconds`:
    pid -> (its real uid, its control groups, its command line)."""
    seen: dict[int, tuple[int, str, str]] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and run.poll() is None:
        for process in psutil.Process(run.pid).children(recursive=True):
            try:
                if process.pid in seen or process.name() != program:
                    continue
                # Its command line first: an ended process (a zombie) has none, and pgreplay's parse
                # check as nobody, ended between two readings, would pass for a load.
                cmdline = " ".join(process.cmdline())
                if cmdline:
                    seen[process.pid] = (process.uids().real, Path(f"/proc/{process.pid}/cgroup").read_text(), cmdline)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError):
                continue  # a set-up tool that has just ended
        time.sleep(0.02)
    return seen


CLIENT_KINDS = [
    ("pgbench", "postgres", 'kind = "pgbench"\nscript = "select-only"\nclients = 2\nduration_s = 6'),
    ("sysbench", "mariadb", 'kind = "sysbench"\ntest = "oltp_point_select"\ntables = 1\ntable_size = 1000\nthreads = 2\n'
                            "duration_s = 6"),
    ("pgreplay", "postgres", 'kind = "replay"\nlog = "replay/orders-day.log"\nsetup = "replay/setup.sql"\nspeed = 2'),
]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.engine
@pytest.mark.parametrize("program, engine, workload", CLIENT_KINDS, ids=[k[0] for k in CLIENT_KINDS])
def test_no_client_runs_as_root_and_none_outlives_its_run(write_experiment, lab_root, tmp_path, program, engine,
                                                          workload):
    path = write_experiment(EXPERIMENT.format(name="who", reps=1, disk=lab_root / "disk", workload=workload)
                            .replace('engine = "postgres"', f'engine = "{engine}"'), "who.toml")
    shutil.copytree(EXAMPLES / "replay", path.parent / "replay")
    run = start("run", path, "--no-trace", "--out", tmp_path / "r")
    try:
        seen = watch_clients(run, program, 300)
        assert run.wait(300) == 0, run.stderr.read()
    finally:
        stop_storlab(run)
    client = os_users.client_user()
    # pgreplay parses the log as nobody when the file loads (no user is made before anything starts).
    loads = {pid: found for pid, found in seen.items() if "/dev/null" not in found[2]}
    assert loads, f"no {program} seen"
    assert all(uid != 0 for uid, _, _ in seen.values()), seen
    for uid, groups, _ in loads.values():
        assert uid == client.uid and "-clients" in groups  # the instance's clients' group, not storlab's own
    assert not [pid for pid in seen if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.engine
@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_the_client_user_opens_the_workload_s_sessions_and_never_storlab_s(lab_dir, engine):
    from storlab.engines import provision
    from storlab.lab.layout import CellLayout, spec_for

    def as_client(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", os_users.CLIENT_USER, "--", *argv], capture_output=True, text=True)

    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir})
    with provision(engine, spec, keep=False, connections=2) as instance:
        a = instance.client_address()
        if engine == "postgres":
            psql = ["psql", "-h", str(a.socket), "-p", str(a.port), "-d", a.database, "-Atc", "SELECT current_user"]
            storlabs = as_client(*psql, "-U", "storlab")
            workload = as_client(*psql, "-U", a.user)
            denied = "Peer authentication failed"
        else:
            cli = ["mariadb", "-S", str(a.socket), "-N", "-e", "SELECT current_user()"]
            storlabs = as_client(*cli, "-u", os_users.current_user().name)
            workload = as_client(*cli, "-u", a.user)
            denied = "Access denied"
        with instance.admin() as conn:  # storlab's own session, from storlab's OS user
            assert conn.execute("SELECT 1").fetchone()[0] == 1
    assert storlabs.returncode != 0 and denied in storlabs.stderr
    assert workload.returncode == 0 and workload.stdout.strip().startswith(a.user)
