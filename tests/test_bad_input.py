"""Broken experiment files, as a careless or hostile user writes them: each one is refused when it loads
(`storlab run --dry-run` included) with exit 2 and exactly one line, before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storlab.errors import UserError
from storlab.experiment import file as experiment
from tests.commands import invoke, storlab
from tests.disk_experiments import on_disk
from tests.experiments import BASE, MARIADB, changed

SETTINGS = "\n[engine_settings]\n"
LOTS = "[" + ", ".join(str(i) for i in range(1, 1002)) + "]"
TWO_HUNDRED = "[" + ", ".join(str(i) for i in range(1, 201)) + "]"
RUNS_OLD = BASE[BASE.index("repetitions"):BASE.index("data_on")]

# (case, replace this, with that, the expected line after "storlab: "; {disk} is the lab directory)
CASES = [
    ("repetitions a date", "repetitions = 2", "repetitions = 1979-05-27",
     "fz.toml:3: repetitions: expected an integer from 1 to 100, or { min = 3, max = 10 } with race = true, or { max = 12, until = \"settled\" }, got 1979-05-27"),
    ("kind a datetime", 'kind = "random-insert"', "kind = 1979-05-27T07:32:00",
     "fz.toml:15: workload.kind: expected one of bulk-insert, custom, pgbench, random-insert, replay, scan, sequential-insert, sysbench, got 1979-05-27T07:32:00"),
    ("connections a time", "connections = 2", "connections = 07:32:00",
     "fz.toml:16: workload.connections: expected a positive integer or a list of them, got 07:32:00"),
    ("a date inside a factor", "data_files = [1, 2]", "data_files = [1, 1979-05-27]",
     "fz.toml:10: layout.data_files: expected a positive integer or a list of them, got 1979-05-27"),
    ("placement a date", 'disk = "{disk}"', "disk = 1979-05-27",
     'fz.toml:6: placements.disk: expected a directory path, "tmpfs" or a table such as { loop = "4GB" } or { path = "./lab/disk", write_iops = 3000 }, got 1979-05-27'),
    ("engine_settings a number", "repetitions = 2", "repetitions = 2\nengine_settings = 5",
     "fz.toml:4: engine_settings: expected a table of settings, got 5"),
    ("layout a number", "repetitions = 2", "repetitions = 2\nlayout = 5",
     "fz.toml: not valid TOML: Cannot overwrite a value (at line 10, column 8)"),
    ("exclude not a list", "repetitions = 2", "repetitions = 2\nexclude = 5",
     "fz.toml:4: exclude: expected a valid list, got 5"),
    ("exclude rule not a table", "repetitions = 2", "repetitions = 2\nexclude = [5]",
     "fz.toml:4: exclude: expected a table, got 5"),
    ("repetitions without end", "repetitions = 2", "repetitions = 9223372036854775807",
     "fz.toml:3: repetitions: expected an integer from 1 to 100, or { min = 3, max = 10 } with race = true, or { max = 12, until = \"settled\" }, got 9223372036854775807"),
    ("too many cells", "data_files = [1, 2]", f"data_files = {LOTS}",
     "fz.toml:9: layout: 1,001 cells; the limit is 1,000"),
    ("too many runs", RUNS_OLD, RUNS_OLD.replace("= 2\n", "= 51\n").replace("[1, 2]", TWO_HUNDRED),
     "fz.toml:3: repetitions: 200 cells x 51 repetitions; the limit is 10,000 runs"),
    ("too many connections", "connections = 2", "connections = 5000",
     "fz.toml:16: workload.connections: 5,000 is more than the limit of 1,024"),
    ("too many transactions", "rows_per_connection = 1000\nbatch = 100", "rows_per_connection = 100_000_000\nbatch = 1",
     "fz.toml:18: workload.batch: up to 200,000,000 transactions in one run; the limit is 10,000,000 "
     "(connections x rows_per_connection / batch)"),
    ("too many data files", "data_files = [1, 2]", "data_files = 5000",
     "fz.toml:10: layout.data_files: 5,000 is more than the limit of 1,024"),
    ("500 nested brackets", "data_files = [1, 2]", "data_files = " + "[" * 500 + "1" + "]" * 500,
     "fz.toml: values nested too deeply; an experiment needs at most 16 levels"),
    ("20 nested brackets", "data_files = [1, 2]", "data_files = " + "[" * 20 + "1" + "]" * 20,
     "fz.toml:10: layout.data_files: nested more than 16 levels deep"),
    ("a ratio weight of 0", 'data_on = "disk"', "data_on = { disk = 0, ram = 1 }",
     'fz.toml:11: layout.data_on: ratio weight for "disk" must be an integer from 1 to 1000, got 0'),
    ("a duplicate value", "data_files = [1, 2]", "data_files = [1, 1]",
     "fz.toml:10: layout.data_files: 1 is listed twice; each value of a factor makes one cell"),
    ("a duplicate ratio, keys in another order", 'data_on = "disk"', "data_on = [{ disk = 1, ram = 2 }, { ram = 2, disk = 1 }]",
     'fz.toml:11: layout.data_on: {"ram": 2, "disk": 1} is listed twice; each value of a factor makes one cell'),
    ("a duplicate setting value", "batch = 100", 'batch = 100\n\n[engine_settings]\nwork_mem = ["4MB", "4MB"]',
     'fz.toml:21: engine_settings.work_mem: "4MB" is listed twice; each value of a factor makes one cell'),
    ("one size in two spellings", "batch = 100", 'batch = 100\n\n[engine_settings]\nwork_mem = ["4MB", "4096kB"]',
     'fz.toml:21: engine_settings.work_mem: "4096kB" and "4MB" are one value to PostgreSQL (4MB); each value of a '
     'factor makes one cell'),
    ("a size and its bare number in a version's table", "batch = 100",
     'batch = 100\n\n[engine_settings.15]\nwork_mem = ["1GB", "1024 MB"]',
     'fz.toml:21: engine_settings.15.work_mem: "1024 MB" and "1GB" are one value to PostgreSQL (1GB); each value of a '
     'factor makes one cell'),
    ("a full-width digit in a percentage", "repetitions = 2", 'repetitions = 2\nequivalent_within = "５%"',
     'fz.toml:4: equivalent_within: expected a percentage above 0 and at most 50, such as "2%", got "５%" '
     '(digits are 0 to 9)'),
    ("a full-width digit in a size", 'log_on = "ram"', 'log_on = "ram"\nlog_size = "６４MB"',
     'fz.toml:13: layout.log_size: expected a size such as "1GB" or a list of them, got "６４MB" (digits are 0 to 9)'),
    ("an Arabic-Indic digit in a budget", "repetitions = 2", 'repetitions = { max = 3, until = "settled", budget = "٥m" }',
     'fz.toml:3: repetitions: budget: expected a duration such as "90s", "10m" or "2h", got "٥m" (digits are 0 to 9)'),
    ("a version in full-width digits", 'engine = "postgres"', 'engine = "postgres"\nengine_version = "１８"',
     'fz.toml:3: engine_version: "１８": storlab runs PostgreSQL 15, 18'),
    ("two factors named alike", "batch = 100", "batch = [100, 200]\n\n[engine_settings]\nbatch = [1, 2]",
     "fz.toml:21: engine_settings.batch: a factor named batch already comes from workload.batch; rename one"),
    ("a name of 300 characters", 'name = "fz"', f'name = "{"a" * 300}"',
     "fz.toml:1: name: 300 characters; the limit is 64"),
    ("a placement name with a space", 'disk = "{disk}"\nram = "tmpfs"', '"my disk" = "{disk}"\nram = "tmpfs"',
     "fz.toml:6: placements.my disk: not a placement name: use 1 to 32 letters, digits or '_'"),
    ("a placement name with a quote", 'ram = "tmpfs"', "ram = \"tmpfs\"\n\"x'y\" = \"{disk}/b\"",
     "fz.toml:8: placements.x'y: not a placement name: use 1 to 32 letters, digits or '_'"),
    ("Disk and disk", 'ram = "tmpfs"', 'ram = "tmpfs"\nDisk = "{disk}/other"',
     "fz.toml:8: placements.Disk: the same name as placements.disk when case is ignored"),
    ("two names for one directory", 'ram = "tmpfs"', 'ram = "tmpfs"\nshm = "/dev/shm"',
     "fz.toml:8: placements.shm: the same directory as placements.ram (/dev/shm); one name per place"),
    ("two names through a relative path", 'ram = "tmpfs"', 'ram = "tmpfs"\nsame = "./disk/../disk"',
     "fz.toml:8: placements.same: the same directory as placements.disk ({disk}); one name per place"),
    ("a placement that is a file", 'disk = "{disk}"', 'disk = "fz.toml"',
     "fz.toml:6: placements.disk: {lab}/fz.toml is not a directory"),
    ("a placement under a file", 'disk = "{disk}"', 'disk = "fz.toml/lab"',
     "fz.toml:6: placements.disk: {lab}/fz.toml/lab cannot be made: {lab}/fz.toml is not a directory"),
    ("a placement in /proc", 'disk = "{disk}"', 'disk = "/proc/storlab"',
     "fz.toml:6: placements.disk: /proc/storlab is inside /proc, a system folder: choose a directory of your own, outside /proc"),
    ("a placement in /sys", 'disk = "{disk}"', 'disk = "/sys/kernel/storlab"',
     "fz.toml:6: placements.disk: /sys/kernel/storlab is inside /sys, a system folder: choose a directory of your own, "
     "outside /sys"),
    ("a placement in /root", 'disk = "{disk}"', 'disk = "/root/storlab-harden-test"',
     "fz.toml:6: placements.disk: /root/storlab-harden-test is inside /root, a system folder: choose a directory of "
     "your own, outside /root"),
    ("a placement at /", 'disk = "{disk}"', 'disk = "/"',
     "fz.toml:6: placements.disk: / is a system folder: choose a directory of your own below it"),
    ("a placement in /etc", 'disk = "{disk}"', 'disk = "/etc/storlab"',
     "fz.toml:6: placements.disk: /etc/storlab is inside /etc, a system folder: choose a directory of your own, outside /etc"),
    ("a placement at /usr", 'disk = "{disk}"', 'disk = "/usr"',
     "fz.toml:6: placements.disk: /usr is a system folder: choose a directory of your own, outside /usr"),
    ("a placement in /dev", 'disk = "{disk}"', 'disk = "/dev/storlab"',
     'fz.toml:6: placements.disk: /dev/storlab is inside /dev: choose a directory on a real file system (or "tmpfs")'),
    ("a placement in /var/lib", 'disk = "{disk}"', 'disk = "/var/lib/storlab-harden-test"',
     "fz.toml:6: placements.disk: /var/lib/storlab-harden-test is inside /var/lib, a system folder: choose a directory "
     "of your own, outside /var/lib"),
    ("a placement that is a device", 'disk = "{disk}"', 'disk = "/dev/zero"',
     'fz.toml:6: placements.disk: /dev/zero is inside /dev: choose a directory on a real file system (or "tmpfs")'),
    ("a placement name too long for a tablespace", 'ram = "tmpfs"', f'ram = "tmpfs"\n{"p" * 33} = "{{disk}}/x"',
     f"fz.toml:8: placements.{'p' * 33}: not a placement name: use 1 to 32 letters, digits or '_'"),
    ("an exclude value that matches nothing", "repetitions = 2", "repetitions = 2\nexclude = [{ data_files = 3 }]",
     "fz.toml:4: exclude: data_files = 3 matches no cell (data_files is never 3)"),
    ("an exclude of true for 1", "repetitions = 2", "repetitions = 2\nexclude = [{ data_files = true }]",
     "fz.toml:4: exclude: data_files = true matches no cell (data_files is never true)"),
    ("an exclude of a date", "repetitions = 2", "repetitions = 2\nexclude = [{ data_files = 1979-05-27 }]",
     "fz.toml:4: exclude: data_files = 1979-05-27 matches no cell (data_files is never 1979-05-27)"),
    ("an exclude that leaves nothing", "repetitions = 2", "repetitions = 2\nexclude = [{ data_files = 1 }, { data_files = 2 }]",
     "fz.toml:4: exclude: every cell is excluded; nothing would run"),
    ("an empty exclude rule", "repetitions = 2", "repetitions = 2\nexclude = [{}]",
     "fz.toml:4: exclude: an empty rule excludes every cell"),
    ("a log of 0 MB", 'log_on = "ram"', 'log_on = "ram"\nlog_size = "0MB"',
     'fz.toml:13: layout.log_size: "0MB" is less than two WAL segments of 16MB (PostgreSQL keeps at least two)'),
    ("a setting name with a newline", "batch = 100", 'batch = 100\n\n[engine_settings]\n"fsync = off\\nx" = 1',
     'fz.toml:20: engine_settings: the key "fsync = off\\nx" holds a control character'),
    ("a setting value with a newline", "batch = 100", 'batch = 100\n\n[engine_settings]\nwork_mem = "4MB\\nfsync = off"',
     'fz.toml:21: engine_settings.work_mem: "4MB\\nfsync = off" holds a control character; only printable text is allowed'),
    ("an escape sequence in a value", "batch = 100", 'batch = 100\n\n[engine_settings]\nwork_mem = ["\\u001b[2J", "4MB"]',
     'fz.toml:21: engine_settings.work_mem: "\\u001b[2J" holds a control character; only printable text is allowed'),
    ("a setting name that is an assignment", "batch = 100", 'batch = 100\n\n[engine_settings]\n"fsync=off" = 1',
     "fz.toml:21: engine_settings.fsync=off: not a setting name: use at most 63 letters, digits, '_' or '$', "
     "and one '.' for an extension's setting"),
    ("a table too deep for a setting", "batch = 100", "batch = 100\n\n[engine_settings]\na = { b = { c = 1 } }",
     'fz.toml:21: engine_settings.a.b: expected a string, number or boolean, got {"c": 1}'),
    ("a setting that is not a number", "batch = 100", "batch = 100\n\n[engine_settings]\nwork_mem = nan",
     "fz.toml:21: engine_settings.work_mem: expected a finite number, got NaN"),
    ("the same setting twice", "batch = 100", "batch = 100\n\n[engine_settings]\nwork_mem = 1\nWORK_MEM = 2",
     "fz.toml:22: engine_settings.WORK_MEM: the same setting as work_mem"),
    ("listen_addresses", "batch = 100", 'batch = 100\n\n[engine_settings]\nlisten_addresses = "*"',
     "fz.toml:21: engine_settings.listen_addresses: storlab sets it: the instance listens on its own unix socket "
     "only, never on TCP"),
    ("port", "batch = 100", "batch = 100\n\n[engine_settings]\nport = 5432",
     "fz.toml:21: engine_settings.port: storlab sets it: the instance listens on its own unix socket only, never on TCP"),
    ("unix_socket_directories", "batch = 100", 'batch = 100\n\n[engine_settings]\nUnix_Socket_Directories = "/tmp"',
     "fz.toml:21: engine_settings.Unix_Socket_Directories: storlab sets it: the instance listens on its own unix "
     "socket only, never on TCP"),
    ("hba_file", "batch = 100", 'batch = 100\n\n[engine_settings]\nhba_file = "/tmp/x"',
     "fz.toml:21: engine_settings.hba_file: storlab sets it: the instance's authentication is storlab's"),
    ("pg_wait_sampling's period", "batch = 100", "batch = 100\n\n[engine_settings]\npg_wait_sampling.profile_period = 1",
     "fz.toml:21: engine_settings.pg_wait_sampling.profile_period: storlab sets it: the wait statistics depend on it"),
    ("min_wal_size beside log_size", 'log_on = "ram"', 'log_on = "ram"\nlog_size = "64MB"\n\n[engine_settings]\nmin_wal_size = "1GB"',
     "fz.toml:16: engine_settings.min_wal_size: layout.log_size sets it in this experiment"),
]

MARIADB_CASES = [
    ("skip_networking", "skip_networking = false", "skip_networking"),
    ("skip-networking spelled with dashes", '"skip-networking" = 0', "skip-networking"),
    ("bind_address", 'bind_address = "0.0.0.0"', "bind_address"),
    ("loose-bind-address", '"loose-bind-address" = "0.0.0.0"', "loose-bind-address"),
    ("port", "port = 3306", "port"),
    ("extra_port", "extra_port = 3307", "extra_port"),
    ("socket", 'socket = "/tmp/x.sock"', "socket"),
]



@pytest.mark.parametrize("case, old, new, expected", CASES, ids=[c[0] for c in CASES])
def test_broken_file_gives_one_line_and_exit_2(lab_root, case, old, new, expected):
    disk = lab_root / "disk"
    path = lab_root / "fz.toml"
    path.write_text(changed(old, new, disk))
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2, (result.stdout, result.exception)
    assert result.stderr == f"storlab: {expected.replace('{disk}', str(disk)).replace('{lab}', str(lab_root))}\n"
    assert not (lab_root / "results").exists() and not disk.exists()  # nothing made before the checks pass
    assert not Path("/root/storlab-harden-test").exists()


@pytest.mark.parametrize("case, setting, name", MARIADB_CASES, ids=[c[0] for c in MARIADB_CASES])
def test_mariadb_settings_storlab_owns_are_refused(lab_root, case, setting, name):
    path = lab_root / "fz.toml"
    path.write_text(changed("batch = 100", f"batch = 100\n\n[engine_settings]\n{setting}", lab_root / "disk", MARIADB))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"storlab: fz.toml:21: engine_settings.{name}: storlab sets it: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("values, said", [
    ('["128M", 134217728]', '134217728 and "128M" are one value to MariaDB (128MB)'),
    ('["1g", "1024M"]', '"1024M" and "1g" are one value to MariaDB (1GB)'),
    ('[1000, "1000"]', '"1000" and 1000 are one value to MariaDB (1,000)'),
])
def test_mariadb_reads_one_number_written_two_ways_as_one_value(lab_root, values, said):
    path = lab_root / "fz.toml"
    path.write_text(changed("batch = 100", f"batch = 100\n\n[engine_settings]\ninnodb_buffer_pool_size = {values}",
                          lab_root / "disk", MARIADB))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr == (f"storlab: fz.toml:21: engine_settings.innodb_buffer_pool_size: {said}; each value of a "
                             "factor makes one cell\n")


@pytest.mark.parametrize("args, said", [
    (["worker", "--store", "host=/nonexistent dbname=x", "--lease=６０"], "--lease '６０': expected a number of seconds, such as 60"),
    (["worker", "--store", "host=/nonexistent dbname=x", "--lease=1_0"], "--lease '1_0': expected a number of seconds, such as 60"),
    (["io", "/var/tmp", "--size=２５６M"], "--size: '２５６M' is not a size (a number with K, M, G or T, as 256M) (digits are 0 to 9)"),
    (["io", "/var/tmp", "--duration=１０s"],
     '--duration: expected a duration such as "90s", "10m" or "2h", got "１０s" (digits are 0 to 9)'),
])
def test_numbers_on_the_command_line_are_written_in_digits_0_to_9(args, said):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr == f"storlab: {said}\n"


def test_mariadb_layout_owned_settings_name_the_layout_key(lab_root):
    body = changed('log_on = "ram"', 'log_on = "ram"\npage_size = "16k"\n\n[engine_settings]\ninnodb_page_size = "8k"',
                 lab_root / "disk", MARIADB)
    path = lab_root / "fz.toml"
    path.write_text(body)
    with pytest.raises(UserError, match=r"^fz.toml:16: engine_settings.innodb_page_size: layout.page_size sets it"):
        experiment.load(path)


def test_unreachable_placement_is_named_and_not_made(lab_root, tmp_path):
    private = tmp_path / "private" / "disk"  # pytest's tmp dirs are mode 0700, closed to other users
    path = lab_root / "fz.toml"
    path.write_text(changed('disk = "{disk}"', f'disk = "{private}"', lab_root / "disk"))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    blocked = next(p for p in reversed(tmp_path.parents) if not os.stat(p).st_mode & 0o001)
    assert result.stderr == (f"storlab: fz.toml:6: placements.disk: {private} is not reachable by the servers' OS user "
                             f"storlab ({blocked} is mode 0700); choose a directory outside it\n")
    assert not private.parent.exists()


def test_nothing_is_made_when_a_later_placement_is_wrong(lab_root):
    deep = lab_root / "new" / "deep"
    path = lab_root / "fz.toml"
    path.write_text(changed('ram = "tmpfs"', 'ram = "tmpfs"\nbad = "/proc/x"', deep))
    for args in (["--dry-run"], []):
        result = invoke("run", str(path), *args, "--out", str(lab_root / "results"))
        assert result.exit_code == 2 and "placements.bad" in result.stderr
        assert not (lab_root / "new").exists() and not (lab_root / "results").exists()


@pytest.mark.parametrize("changes, key, line", [
    ([('disk = "{disk}"', 'disk = "{lab}/it\'s"')], "placements.disk", 6),
    pytest.param([('ram = "tmpfs"', 'quoted = { loop = "64MB", image_dir = "{lab}/img\'s" }'),
                  ('data_on = "disk"', 'data_on = ["disk", { disk = 1, quoted = 1 }]'), ('log_on = "ram"', 'log_on = "disk"')],
                 "placements.quoted.image_dir", 7,
                 marks=pytest.mark.skipif(os.getuid() != 0, reason="a device placement is checked as root only")),
])
def test_a_quote_in_a_placement_holding_data_is_refused_when_the_file_loads(lab_root, changes, key, line):
    """PostgreSQL refuses a ' in a tablespace's location: said at once, naming the placement, before
    any folder is made (it once came at the first run, after the placements were made)."""
    disk = lab_root / "disk"
    path = lab_root / "fz.toml"
    body = BASE.format(disk=disk)
    for old, new in changes:
        old = old.replace("{disk}", str(disk))
        assert old in body, old
        body = body.replace(old, new.replace("{lab}", str(lab_root)), 1)
    path.write_text(body)
    folder = lab_root / ("it's" if key == "placements.disk" else "img's")
    for args in (["--dry-run"], []):
        result = invoke("run", str(path), *args, "--out", str(lab_root / "results"))
        assert result.exit_code == 2, result.output
        assert result.stderr == (f"storlab: fz.toml:{line}: {key}: {folder} cannot hold a tablespace (PostgreSQL "
                                 "refuses a ' in a tablespace's location); choose another directory\n")
        assert not folder.exists() and not disk.exists() and not (lab_root / "results").exists()


@pytest.mark.parametrize("base, folder, said", [
    (BASE, "it's", "cannot hold a tablespace (PostgreSQL refuses a ' in a tablespace's location)"),
    (MARIADB, "my temp", "cannot be named in innodb_temp_data_file_path (no ':', ';', quotes, '#' or spaces)"),
], ids=["postgres", "mariadb"])
def test_a_temp_placement_the_engine_cannot_name_is_refused_when_the_file_loads(lab_root, base, folder, said):
    """temp_on's placement is judged as data_on's are, before the first cell runs (it once came at the
    first cell that put the temporary files there)."""
    path = lab_root / "fz.toml"
    path.write_text(changed('log_on = "ram"', 'log_on = "ram"\ntemp_on = "scratch"', lab_root / "disk", base).replace(
        'ram = "tmpfs"', f'ram = "tmpfs"\nscratch = "{lab_root / folder}"'))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"storlab: fz.toml:8: placements.scratch: {lab_root / folder} {said}")
    assert result.stderr.count("\n") == 1


def test_a_quote_in_a_placement_holding_only_the_log_is_fine(lab_root):
    """The log's folder is no tablespace: initdb --waldir takes it as it is."""
    path = lab_root / "fz.toml"
    path.write_text(changed('log_on = "ram"', 'log_on = "logs"', lab_root / "disk").replace(
        'ram = "tmpfs"', f'ram = "tmpfs"\nlogs = "{lab_root}/it\'s"'))
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 0, result.output


# -- the file itself -----------------------------------------------------------------------------


def test_a_fifo_is_refused_without_waiting(lab_root):
    fifo = lab_root / "exp.toml"
    os.mkfifo(fifo)
    done = storlab("run", fifo, "--dry-run", timeout=60)  # a child: opening a FIFO could block forever
    assert done.returncode == 2
    assert done.stderr == f"storlab: {fifo}: not a regular file (a FIFO, device or socket); give a TOML file\n"


@pytest.mark.parametrize("make, expected", [
    (lambda p: Path("/dev/zero"), "storlab: /dev/zero: not a regular file (a FIFO, device or socket); give a TOML file"),
    (lambda p: p, "storlab: {p}: is a directory, not an experiment file"),
    (lambda p: _sparse(p / "huge.toml", 2**40), "storlab: {p}/huge.toml: 1,099,511,627,776 bytes; an experiment file "
                                               "is at most 1,048,576 bytes"),
    (lambda p: _bytes(p / "bin.toml", b'name = "x"\x00\x01\x02'), "storlab: bin.toml: a binary file, not TOML text"),
    (lambda p: _bytes(p / "latin.toml", 'name = "x"\nengine = "postgres"\n# caf\u00e9\n'.encode("latin-1")),
     "storlab: latin.toml:3: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
    (lambda p: _bytes(p / "empty.toml", b""), "storlab: empty.toml: name: missing"),
    (lambda p: p / "missing.toml", "storlab: {p}/missing.toml: no such experiment file"),
])
def test_files_that_are_not_experiment_files(lab_root, make, expected):
    path = make(lab_root)
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr == expected.replace("{p}", str(lab_root)) + "\n"


def test_a_utf8_byte_order_mark_is_fine(lab_root):
    path = _bytes(lab_root / "bom.toml", b"\xef\xbb\xbf" + BASE.format(disk=lab_root / "disk").encode())
    assert experiment.load(path).name == "fz"


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- every key, every TOML type ------------------------------------------------------------------

VALUES = ["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z", "1.5", "true", "-1", "0", '""', '"x"', "[]", "[[]]",
          "{}", "{ a = 1 }", "[1979-05-27]", "nan", "inf", "9223372036854775807", '"[/]"', '"$x$"', '"a\\u0000b"']
KEYS = ["name", "engine", "repetitions", "disk", "ram", "data_files", "data_on", "log_on", "kind", "connections",
        "rows_per_connection", "batch"]


@pytest.mark.parametrize("key", KEYS)
def test_any_toml_value_anywhere_is_refused_in_one_line_or_loads(lab_root, key):
    base = BASE.format(disk=lab_root / "disk")
    line = next(line for line in base.splitlines() if line.startswith(f"{key} ="))
    for i, value in enumerate(VALUES):
        path = lab_root / f"v{i}.toml"
        path.write_text(base.replace(line, f"{key} = {value}"))
        try:
            experiment.load(path)
        except UserError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"v{i}.toml")


CYCLED = on_disk('kind = "sysbench"\ntest = "oltp_write_only"\ncheckpoint_cycles = {cycles}\n{extra}', name="cycled",
                 engine="{engine}")


@pytest.mark.parametrize("engine, cycles, extra, said", [
    ("postgres", 2, "duration_s = 5", ("cycled.toml:14: workload.checkpoint_cycles: the runs' length is its cycles of "
     "checkpoint_timeout from the checkpoint before each run; give checkpoint_cycles or duration_s, not both")),
    ("postgres", 0, "", ("cycled.toml:14: workload.checkpoint_cycles: expected a whole number of checkpoint cycles from "
     "1 to 12, got 0")),
    ("mariadb", 1, "", ("cycled.toml:14: workload.checkpoint_cycles: MariaDB has no checkpoint cycle in time (InnoDB "
     "checkpoints as its redo log fills); give duration_s")),
    ("postgres", 12, "[engine_settings]\ncheckpoint_timeout = \"1h\"", ("workload.checkpoint_cycles: 12 cycles of "
     "checkpoint_timeout 1h last 43200 s, more than a run's 3600 s")),
])
def test_checkpoint_cycles_are_refused_where_they_cannot_be_run(lab_root, engine, cycles, extra, said):
    path = lab_root / "cycled.toml"
    path.write_text(CYCLED.format(engine=engine, disk=lab_root / "disk", cycles=cycles, extra=extra))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2, (result.stdout, result.exception)
    assert result.stderr == f"storlab: {said}\n"
