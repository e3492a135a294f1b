"""storlab io: fio's JSON recorded here, the flags, fio as an owned child, and real fio runs compared
with the same jobs run by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import psutil
import pytest

from storlab.errors import RunFailed, UserError

from storlab.machine import iobench
from storlab.results.store import Store
from tests.commands import invoke

DATA = Path(__file__).parent / "data"
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")


def recorded(name: str, iodepth: int = 2) -> iobench.Measured:
    return iobench.measured(iobench.parse_json((DATA / name).read_text()), iodepth)


# -- fast: parsing and flags ---------------------------------------------------------------------


def test_sqlio_preset_is_the_seeds_matrix():
    jobs = iobench.preset("sqlio")

    assert [(j.name, j.rw, j.block_size, j.iodepth, j.direct) for j in jobs] == [
        ("8k-randread", "randread", 8192, 2, True), ("8k-randwrite", "randwrite", 8192, 2, True),
        ("8k-read", "read", 8192, 2, True), ("8k-write", "write", 8192, 2, True),
        ("64k-randread", "randread", 65536, 2, True), ("64k-randwrite", "randwrite", 65536, 2, True),
        ("64k-read", "read", 65536, 2, True), ("64k-write", "write", 65536, 2, True),
    ]


def test_commit_preset_is_a_logs_commit_and_a_latency_picks_the_jobs_that_hold_it():
    assert [(j.name, j.rw, j.block_size, j.iodepth, j.direct, j.synced) for j in iobench.preset("commit", buffered=False)] == [
        ("4k-commit", "write", 4096, 1, False, True), ("8k-commit", "write", 8192, 1, False, True)]  # buffered always
    assert "--fdatasync=1" in iobench.fio_command(iobench.preset("commit")[0], Path("/x"), 2**20, 1, "libaio")
    assert "--fdatasync=1" not in iobench.fio_command(iobench.preset("latency")[0], Path("/x"), 2**20, 1, "libaio")
    two, one = 2.0, {"p50": 1.0, "p99": 4.0}
    assert iobench.default_jobs({}) == iobench.preset("sqlio")
    assert iobench.default_jobs({"iops": 2000}) == iobench.preset("sqlio")  # a cap binds any job
    assert iobench.default_jobs({"read_latency_ms": two}) == iobench.preset("latency")
    assert iobench.default_jobs({"flush_latency_ms": one}) == iobench.preset("commit")
    assert iobench.default_jobs({"write_latency_ms": two, "flush_latency_ms": one}) == \
        iobench.preset("latency") + iobench.preset("commit")


def test_a_commits_latency_is_its_flushs():
    """Recorded: 8 KiB writes through the page cache, each followed by fdatasync, for 1 s on this VM's disk."""
    report = iobench.parse_json((DATA / "fio-libaio-8k-commit.json").read_text())

    commit = iobench.measured(report, 1, synced=True)
    assert commit.iops == pytest.approx(1960.03996)
    assert commit.lat_ms == {"50": 0.485376, "99": 0.782336, "99.9": 2.670592}  # fio's sync section
    assert iobench.measured(report, 1).lat_ms["50"] == 0.012992  # the write alone: a copy to memory
    # Each commit waits for its flush: the flush's mean time is most of a commit's (1 / commits a second).
    assert 0.7 < report["jobs"][0]["sync"]["lat_ns"]["mean"] / 1e9 * commit.iops < 1
    # Its writes are buffered, yet each reaches the device: not the page cache's speed.
    assert iobench.flags(iobench.preset("commit")[1], commit, "ext4", 2**28, 2**34) == []


def test_sizes_and_durations():
    assert [iobench.parse_size(s) for s in ("256M", "1g", "64KiB", "4096")] == [256 * 2**20, 2**30, 65536, 4096]
    assert [iobench.parse_duration(s) for s in ("10s", "2m", "1.5s")] == [10, 120, 2]  # whole seconds, rounded up
    for bad in ("12Q", "", "0", "-1M"):
        with pytest.raises(UserError, match="--size"):
            iobench.parse_size(bad)
    for bad in ("1.5x", "5", "0s"):  # the experiment file's grammar: a bare number could be seconds or minutes
        with pytest.raises(UserError, match=f'--duration: expected a duration such as "90s", "10m" or "2h", got "{bad}"'):
            iobench.parse_duration(bad)


def test_text_before_the_json_is_skipped():
    """Recorded: fio with psync prints a note before its JSON."""
    text = (DATA / "fio-psync-depth2.out").read_text()
    assert text.startswith("note: both iodepth >= 1 and synchronous I/O engine")

    assert iobench.parse_json(text)["fio version"] == "fio-3.33"
    with pytest.raises(RunFailed, match="fio printed no JSON: fio: file not found"):
        iobench.parse_json("fio: file not found\n")


def test_measured_from_recorded_json():
    m = recorded("fio-libaio-8k-randread.json")

    assert m.iops == pytest.approx(7710.28971)
    assert m.mb_s == pytest.approx(7710.28971 * 8192 / 2**20, rel=1e-3)
    assert m.lat_ms == {"50": 0.116224, "99": 2.023424, "99.9": 5.537792}
    assert m.depth_share == pytest.approx(0.99987043)


def test_percentiles_are_weighted_by_io_count():
    """70 % reads, 30 % writes: 5067 read IOs at p50 122368 ns, 2255 writes at 158720 ns."""
    m = recorded("fio-libaio-8k-randrw70.json")

    assert m.iops == pytest.approx(5061.938062 + 2252.747253)
    assert m.lat_ms["50"] == pytest.approx((5067 * 0.122368 + 2255 * 0.158720) / (5067 + 2255))


def test_flags():
    job = iobench.Job("8k-randread", "randread", 8192, 2)
    buffered = iobench.Job("8k-randread", "randread", 8192, 2, direct=False)
    deep = recorded("fio-libaio-8k-randread.json")
    shallow = recorded("fio-psync-depth2.out")

    assert iobench.flags(job, deep, "ext4", 2**28, 2**34) == []
    assert iobench.flags(job, deep, "tmpfs", 2**28, 2**34) == [
        "memory speed: the file is on tmpfs (direct IO is accepted there since Linux 6.6): this measures memory, not a device"]
    assert iobench.flags(buffered, deep, "ext4", 2**28, 2**34) == [
        "page cache: buffered IO on a 256 MiB file, smaller than memory (16.0 GiB): this measures the cache, not the device"]
    assert iobench.flags(buffered, deep, "ext4", 2**35, 2**34) == []
    assert iobench.flags(job, shallow, "ext4", 2**28, 2**34) == [
        "queue depth 2 reached only 0% of the time (fio's iodepth distribution): this measures a shallower queue"]


def test_row_has_exactly_the_store_columns():
    result = iobench.IoResult("/x", "8k-read", "read", 8192, 2, 100.0, 0.8, 0.1, 0.2, 0.3, ["f"])

    assert result.as_row() == {"target": "/x", "job": "8k-read", "rw": "read", "block_size": 8192, "iodepth": 2,
                               "iops": 100.0, "mb_s": 0.8, "lat_p50_ms": 0.1, "lat_p99_ms": 0.2,
                               "lat_p999_ms": 0.3, "flags": ["f"]}


def test_default_folder_is_named_after_the_path():
    assert iobench.default_folder(Path("/var/tmp/my disk")) == Path("results/io-var-tmp-my-disk")
    assert iobench.default_folder(Path("/")) == Path("results/io-root")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, message in ((["io", "/no/such/place"], "storlab: /no/such/place: no such file or directory\n"),
                          (["io", str(tmp_path), "--size", "12Q"],
                           "storlab: --size: '12Q' is not a size (a number with K, M, G or T, as 256M)\n"),
                          (["io", str(tmp_path), "--preset", "tpc"], "storlab: --preset: unknown preset 'tpc' (known: sqlio, latency, commit)\n")):
        result = invoke(*args)
        assert (result.exit_code, result.output) == (2, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target, message", [
    ("/etc", "/etc is a system folder: choose a directory of your own, outside /etc"),
    ("/usr/lib", "/usr/lib is inside /usr, a system folder: choose a directory of your own, outside /usr"),
    ("/", "/ is a system folder: choose a directory of your own below it"),
    ("/dev", '/dev is inside /dev: choose a directory on a real file system (or "tmpfs")'),
])
def test_io_refuses_a_system_folder_as_placements_are_refused(tmp_path, target, message):
    """fio would lay its test file out there (as root, anywhere): refused in one line before anything
    is made, its results folder included, as a placement there is refused."""
    for out in ([], ["--out", str(tmp_path / "r")]):
        result = invoke("io", target, *out)
        assert (result.exit_code, result.output) == (2, f"storlab: {message}\n")
    assert list(tmp_path.iterdir()) == [] and not iobench.default_folder(Path(target)).exists()
    linked = tmp_path / "etc-link"
    linked.symlink_to(target)  # by its real path, as a placement is judged
    result = invoke("io", str(linked), "--out", str(tmp_path / "r"))
    assert (result.exit_code, result.output) == (2, f"storlab: {message}\n")


# -- fio as a child process ----------------------------------------------------------------------


@pytest.mark.fio
@needs_fio
def test_ctrl_c_ends_fio(tmp_path):
    def interrupt(_):
        raise KeyboardInterrupt

    command = ["fio", "--name=long", f"--filename={tmp_path / 'f'}", "--size=8M", "--rw=randread",
               "--runtime=60", "--time_based", "--output-format=json"]
    with pytest.raises(KeyboardInterrupt):
        iobench.run_fio(command, 120, interrupt)

    assert psutil.Process().children(recursive=True) == []


@pytest.mark.fio
@needs_fio
def test_fio_failure_is_a_lab_failure(tmp_path):
    with pytest.raises(RunFailed, match="fio failed"):
        iobench.run_fio(["fio", "--name=x", "--filename=/proc/version", "--size=8M", "--rw=write",
                         "--output-format=json"], 30)


# -- real fio ------------------------------------------------------------------------------------

@pytest.mark.fio
@needs_fio
def test_io_command_on_disk_shows_stores_and_cleans_up(tmp_path):
    target = tmp_path / "disk"
    target.mkdir()
    (target / "keep.txt").write_text("not storlab's")
    out = tmp_path / "results"

    result = invoke("io", str(target), "--size", "16M", "--duration", "1s", "--out", str(out))

    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("job"))
    assert header.split() == ["job", "IOPS", "MiB/s", "p50", "ms", "p99", "ms", "p99.9", "ms"]
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    with Store.open(out, create=False) as store:
        rows = store.io_jobs()
    assert [r["job"] for r in rows] == [j.name for j in iobench.preset("sqlio")]
    assert all(r["iops"] > 0 and r["target"] == str(target) for r in rows)


@pytest.mark.fio
@needs_fio
def test_io_on_tmpfs_is_flagged_as_memory_speed(tmp_path):
    out = tmp_path / "results"

    result = invoke("io", "tmpfs", "--size", "16M", "--duration", "1s", "--out", str(out))

    assert result.exit_code == 0, result.output
    assert "* memory speed: the file is on tmpfs" in result.output
    with Store.open(out, create=False) as store:
        rows = store.io_jobs()
    assert rows and all(any(f.startswith("memory speed") for f in r["flags"]) for r in rows)
    assert not any(p.name.startswith("storlab-io") for p in Path("/dev/shm").iterdir())
