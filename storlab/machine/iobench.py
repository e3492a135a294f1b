"""What a device can really do, measured the SQLIO/DiskSpd way (seed 004): a small matrix of block
size x access pattern x direction at a fixed number of outstanding IOs, one job at a time, run by fio.

The results carry flags wherever the number cannot mean what it says: a file on tmpfs measures memory,
buffered IO on a file that fits in memory measures the page cache, a queue depth fio never reached
measures a shallower queue than the one asked for, and a job through an IO cap measures the cap.

With IO caps (as an experiment's placement asks them: storlab.lab.caps), fio runs inside a control
group holding those caps on the device under the target, as an instance's server would, and each job
says how close it came to the cap that binds it: a cap that holds is reached, never passed.

With a declared latency (storlab.lab.latency), each job runs on the device alone, then through the
delay layer holding that latency, and says whether it held (storlab.volume.held_latency)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import psutil
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from storlab import interrupts, processes, sizes
from storlab.errors import RunFailed, UserError
from storlab.lab import caps, cgroups, credits, latency, mounts, os_users, owned, placements
from storlab.volume import added_latency, io_caps, registry
from storlab.volume.property import Calibrated, Job, Measured

FIO = "fio"


def _sqlio(direct: bool = True) -> list[Job]:
    # Seed 004: "pending IO requests to 2, IO request size to 8K and 64K, random and sequential read and write".
    return [Job(f"{bs // 1024}k-{rw}", rw, bs, 2, direct)
            for bs in (8192, 65536) for rw in ("randread", "randwrite", "read", "write")]


PRESETS = {"sqlio": _sqlio, "latency": added_latency.depth_jobs, "commit": added_latency.commit_jobs}


def preset(name: str, buffered: bool = False) -> list[Job]:
    if name not in PRESETS:
        raise UserError(f"--preset: unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name](direct=not buffered)


def default_jobs(declared: Mapping[str, Any], buffered: bool = False) -> list[Job]:
    """The jobs when --preset is not given: those that show each declared property held (storlab.volume),
    or seed 004's matrix where none has jobs of its own."""
    jobs = [job for prop in registry.PROPERTIES for job in prop.io_jobs(declared, not buffered)]
    return jobs or _sqlio(not buffered)


def parse_size(text: str) -> int:
    """--size as bytes, in storlab's one size grammar (binary units, as fio reads them)."""
    try:
        size = sizes.parse_size(text)
    except ValueError:
        size = 0
    if size == 0:
        raise UserError(f"--size: {text!r} is not a size (a number with K, M, G or T, as 256M){sizes.digits_note(text)}")
    return size


def parse_duration(text: str) -> int:
    """Whole seconds (fio's runtime granularity here), in the experiment file's grammar (storlab.sizes)."""
    try:
        return math.ceil(sizes.parse_duration(text))
    except ValueError as exc:
        raise UserError(f"--duration: {exc}") from None


def ioengine() -> str:
    """libaio keeps IOs in flight; psync cannot (its queue depth is always 1, and the flag will say so)."""
    try:
        engines = subprocess.run([FIO, "--enghelp"], capture_output=True, text=True, timeout=30).stdout
    except FileNotFoundError:
        raise RunFailed("fio is not installed (Debian: apt-get install fio)") from None
    return "libaio" if "libaio" in engines.split() else "psync"


def fio_command(job: Job, file: Path, size: int, seconds: int, engine: str) -> list[str]:
    return [FIO, f"--name={job.name}", f"--filename={file}", f"--size={size}", f"--rw={job.rw}",
            f"--bs={job.block_size}", f"--iodepth={job.iodepth}", f"--direct={int(job.direct)}",
            f"--ioengine={engine}", f"--runtime={seconds}", "--time_based", *(["--fdatasync=1"] if job.synced else []),
            # Total latency (submission + completion) is what SQLIO reports; fio gives its percentiles only when asked.
            "--lat_percentiles=1", "--percentile_list=50:99:99.9", "--output-format=json"]


def _layout_command(file: Path, size: int) -> list[str]:
    # Written once before the first job, so no job pays for it and reads find real blocks, not holes.
    return [FIO, "--name=layout", f"--filename={file}", f"--size={size}", "--create_only=1", "--output-format=json"]


# -- fio's JSON ----------------------------------------------------------------------------------


def parse_json(text: str) -> dict:
    """fio prints warnings before its JSON ("fio: ..."): start at the first line that opens it."""
    start = next((m.start() for m in re.finditer(r"^\{", text, re.MULTILINE)), None)
    if start is None:
        raise RunFailed(f"fio printed no JSON: {text.strip()[-300:] or 'nothing'}")
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError as exc:
        raise RunFailed(f"fio's JSON is cut short or broken: {exc}") from None


def _bucket(depth: int) -> str:
    # fio buckets depths by powers of two: "1", "2" (2-3), "4" (4-7) ... ">=64".
    if depth >= 64:
        return ">=64"
    return str(1 << (depth.bit_length() - 1))


def measured(report: dict, iodepth: int, synced: bool = False) -> Measured:
    """IOPS and MiB/s summed over jobs and directions; latency percentiles averaged weighted by IO count
    (exact percentiles of a union cannot be rebuilt from fio's per-direction ones; with one direction
    per job, as in every preset here, the weighting changes nothing). `synced`: the latency is the
    fdatasync's that follows each write (fio's sync section), the write's own being a copy to memory."""
    parts, depth_shares = [], []
    for job in report.get("jobs", []):
        levels = job.get("iodepth_level", {})
        keys = list(levels)
        if _bucket(iodepth) in keys:
            depth_shares.append(sum(float(levels[k]) for k in keys[keys.index(_bucket(iodepth)):]) / 100)
        for direction in ("read", "write", "trim"):
            stats = job.get(direction, {})
            if stats.get("total_ios"):
                timed = job.get("sync", {}) if synced else stats
                latency = timed.get("lat_ns", {}).get("percentile") or timed.get("clat_ns", {}).get("percentile", {})
                parts.append((stats["total_ios"], stats["iops"], stats["bw_bytes"], latency))
    if not parts:
        raise RunFailed("fio did no IO (its JSON has no read or write with IOs)")
    ios = sum(p[0] for p in parts)

    def percentile(name: str) -> float:
        key = next((k for k in parts[0][3] if float(k) == float(name)), None)
        if key is None:
            return float("nan")
        return sum(n * lat[key] for n, _, _, lat in parts) / ios / 1e6

    return Measured(
        iops=sum(p[1] for p in parts),
        # SQLIO's MBs/sec are MiB: IOPS x block size / 2^20.
        mb_s=sum(p[2] for p in parts) / 2**20,
        lat_ms={name: percentile(name) for name in ("50", "99", "99.9")},
        depth_share=min(depth_shares) if depth_shares else float("nan"),
    )


def flags(job: Job, result: Measured, filesystem: str | None, file_size: int, memory_bytes: int) -> list[str]:
    """Why this number may not measure the device."""
    found = []
    if filesystem == "tmpfs":
        how = "direct IO is accepted there since Linux 6.6" if job.direct else "the file lives in RAM"
        found.append(f"memory speed: the file is on tmpfs ({how}): this measures memory, not a device")
    elif not job.direct and not job.synced and file_size < memory_bytes:
        found.append(f"page cache: buffered IO on a {file_size / 2**20:.0f} MiB file, smaller than memory "
                     f"({memory_bytes / 2**30:.1f} GiB): this measures the cache, not the device")
    if result.depth_share == result.depth_share and result.depth_share < 0.5:
        found.append(f"queue depth {job.iodepth} reached only {result.depth_share:.0%} of the time "
                     "(fio's iodepth distribution): this measures a shallower queue")
    return found


@dataclass
class IoResult:
    target: str
    job: str
    rw: str
    block_size: int
    iodepth: int
    iops: float
    mb_s: float
    lat_p50_ms: float
    lat_p99_ms: float
    lat_p999_ms: float
    flags: list[str] = field(default_factory=list)

    def as_row(self) -> dict:
        return {"target": self.target, "job": self.job, "rw": self.rw, "block_size": self.block_size,
                "iodepth": self.iodepth, "iops": self.iops, "mb_s": self.mb_s, "lat_p50_ms": self.lat_p50_ms,
                "lat_p99_ms": self.lat_p99_ms, "lat_p999_ms": self.lat_p999_ms, "flags": list(self.flags)}


# -- fio as a child process ----------------------------------------------------------------------


def run_fio(command: list[str], timeout_s: float, tick=None, group: cgroups.ControlGroup | None = None) -> str:
    """fio's stdout (run inside `group`, if given). Output goes to files, not pipes: a pipe nobody reads
    while waiting could fill."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            child = processes.start(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    cgroups=cgroups.joining(group))
        except FileNotFoundError:
            raise RunFailed("fio is not installed (Debian: apt-get install fio)") from None
        try:
            waited = 0.0
            while True:
                try:
                    child.wait(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    waited += 0.25
                    if tick:
                        tick(0.25)
                    if waited > timeout_s:
                        raise RunFailed(f"fio ran for more than {timeout_s:.0f} s: stopped") from None
        finally:
            processes.stop(child, signal.SIGTERM)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            message = (err.read().strip() or out.read().strip()).splitlines()
            raise RunFailed(f"fio failed (exit {child.returncode}): {message[-1] if message else 'no message'}")
        return out.read()


# -- the scratch directory -----------------------------------------------------------------------


@dataclass
class Scratch:
    """Where the test file is (`directory`), the group holding the caps, and the delay layer's view of
    the same directory when a latency is declared."""

    directory: Path
    group: cgroups.ControlGroup | None = None
    delayed: Path | None = None


@interrupts.owning
def _scratch(target: Path, limits: caps.GroupLimits, declared: latency.DeviceLatency | None = None) -> Iterator[Scratch]:
    """A fresh directory under `target` for the test file, written down in a manifest and marked as
    storlab's (as an instance's directories are), with `limits` a control group holding them, and with
    `declared` a delay layer serving its `files` folder at its `layer` folder, so `storlab clean`
    removes them all if storlab is killed."""
    manifest = owned.Manifest(owned.new_instance_id("io"), "io", owner_pid=os.getpid(),
                                  owner_start=owned.pid_start(os.getpid()))
    scratch = target / f"storlab-{manifest.instance_id}"
    made = Scratch(scratch)
    layer = None
    try:
        manifest.save()  # inside: a Ctrl-C as it returns is then ended like any other
        try:
            owned.make_owned_dir(scratch, manifest, os_users.current_user())
        except OSError as exc:
            raise RunFailed(f"cannot create {scratch}: {exc.strerror}") from None
        if declared is not None:
            made.directory = scratch / "files"
            made.directory.mkdir(mode=0o700)
            point = scratch / "layer"
            point.mkdir(mode=0o700)
            manifest.layers.append({"point": str(point)})
            manifest.save()
            layer = latency.Layer(made.directory, point, declared, "/dev/" + caps.device_of(target)[0])
            manifest.layers[-1].update(pid=layer.pid, start=layer.started)
            manifest.save()
            made.delayed = point
        if limits:  # after the layer: what it does for fio is charged to fio's caps
            place = cgroups.place(manifest.instance_id, limits)
            manifest.cgroup, manifest.cgroup_more = str(place.path), [str(p) for p in place.more.values()]
            manifest.save()
            made.group = cgroups.ControlGroup.make(place, limits, latency.guests([point]) if layer else [])
        yield made
    finally:
        with interrupts.uninterrupted:
            if layer is None or not layer.stop():
                manifest.layers = []
            if made.group is None or made.group.remove():
                manifest.cgroup, manifest.cgroup_more = None, []
            if not manifest.layers and owned.remove_owned_dir(scratch, manifest.instance_id) and manifest.cgroup is None:
                manifest.forget()
            else:
                manifest.save()


def check_target(target: Path) -> None:
    """A directory fio may write its test file under, as a placement may hold a server's files: never
    a system folder nor a device's (storlab may run as root). UserError otherwise."""
    if not target.is_dir():
        raise UserError(f"{target}: not a directory")
    problem = placements.not_a_place(Path(os.path.realpath(target)))
    if problem:
        raise UserError(problem)


def check_volume(target: Path, declared: Mapping[str, Any]) -> None:
    """fio may run here through the volume `declared` (storlab.volume's keys): a directory that may
    hold a server's files, a device under it to cap or delay, and a host that can (UserError otherwise)."""
    check_target(target)
    for prop in registry.PROPERTIES:
        found = prop.host_problem(declared)
        if found is not None:
            raise UserError(found[1])
    if added_latency.of(declared) is not None and caps.device_of(target) is None:
        raise UserError(f"{target} sits on no block device (tmpfs, or a filesystem without one): a latency is "
                        "added to a device's own")
    _cap_limits(target, io_caps.of(declared))


def _cap_limits(target: Path, declared_caps: caps.IoCaps) -> caps.GroupLimits:
    """The caps on the device under `target` (UserError where there is none)."""
    if not declared_caps:
        return caps.GroupLimits()
    found = caps.device_of(target)
    if found is None:
        raise UserError(f"{target} sits on no block device (tmpfs, or a filesystem without one): there is no device to cap")
    return caps.GroupLimits((caps.DeviceCap(("io",), found[0], found[1], declared_caps),))


def run(target: Path, jobs: list[Job], size: int, seconds: int, console: Console | None = None,
        declared: Mapping[str, Any] | None = None) -> list[IoResult]:
    """Each job in turn on one test file of `size` bytes in a fresh directory under `target`, through
    the volume `declared` (storlab.volume's keys): inside its IO caps and credits on the device under
    it, and with a latency each job on the device alone and then through the delay layer holding it
    (its name ending "+latency"); each job's flags say whether what binds it held."""
    target, declared = Path(target), dict(declared or {})
    check_volume(target, declared)
    limits = _cap_limits(target, io_caps.of(declared))
    delay = added_latency.of(declared)
    free = shutil.disk_usage(target).free
    if size > free:
        raise UserError(f"--size: {size / 2**20:.0f} MiB does not fit in the {free / 2**20:.0f} MiB free on {target}")
    engine = ioengine()
    filesystem = (mounts.mount_of(target) or {}).get("filesystem")
    device = (caps.device_of(target) or ("?",))[0]
    memory = psutil.virtual_memory().total
    # A slow device lays out the file at a few MB/s at worst; beyond that something is stuck.
    layout_timeout = 60 + size / 2**20
    with _scratch(target, limits, delay) as scratch:
        file = scratch.directory / "storlab-io.dat"
        bar = (Progress(TextColumn("{task.description:<22}"), BarColumn(), TimeRemainingColumn(), console=console)
               if console else nullcontext())
        with bar as progress:
            task = progress.add_task(f"lay out {size / 2**20:.0f} MiB", total=None) if progress else None
            run_fio(_layout_command(file, size), layout_timeout)
            if progress:
                progress.update(task, total=1, completed=1)
            results = []

            def one(job: Job, where: Path, name: str) -> tuple[Measured, list[credits.RunBucket]]:
                task = progress.add_task(name, total=seconds) if progress else None
                tick = (lambda dt, t=task: progress.advance(t, dt)) if progress else None
                keeper = credits.CreditKeeper(scratch.group) if scratch.group is not None else None
                if keeper:
                    keeper.start(time.monotonic())  # each job starts with the bucket's declared credits
                try:
                    text = run_fio(fio_command(job, where, size, seconds, engine), seconds + layout_timeout, tick,
                                   scratch.group)
                finally:
                    spent = keeper.stop() if keeper else []
                if progress:
                    progress.update(task, completed=seconds)
                return measured(parse_json(text), job.iodepth, job.synced), spent

            def result(name: str, job: Job, m: Measured, flagged: list[str]) -> IoResult:
                return IoResult(str(target), name, job.rw, job.block_size, job.iodepth, m.iops, m.mb_s,
                                m.lat_ms["50"], m.lat_ms["99"], m.lat_ms["99.9"], flagged)

            def verdicts(calibrated: Calibrated) -> list[str]:
                return [flag for prop in registry.PROPERTIES for flag in prop.io_flags(declared, calibrated)]

            for job in jobs:
                m, spent = one(job, file, job.name)
                results.append(result(job.name, job, m, flags(job, m, filesystem, size, memory) +
                                      verdicts(Calibrated(job, m, device, spent=tuple(spent)))))
                if scratch.delayed is not None:
                    seen, through = one(job, scratch.delayed / file.name, job.name + "+latency")
                    results.append(result(job.name + "+latency", job, seen,
                                          verdicts(Calibrated(job, seen, device, m, tuple(through), tuple(spent)))))
        return results


def default_folder(target: Path) -> Path:
    """results/io-<path with every run of other characters made one dash>: /var/tmp/x -> io-var-tmp-x."""
    name = re.sub(r"[^A-Za-z0-9._]+", "-", str(Path(target).resolve())).strip("-") or "root"
    return Path("results") / f"io-{name}"


def table(results: list[IoResult]) -> Table:
    grid = Table(box=None, pad_edge=False)
    grid.add_column("job")
    for name in ("IOPS", "MiB/s", "p50 ms", "p99 ms", "p99.9 ms"):
        grid.add_column(name, justify="right")
    for r in results:
        grid.add_row(r.job + (" *" if r.flags else ""), f"{r.iops:,.0f}", f"{r.mb_s:,.1f}",
                     f"{r.lat_p50_ms:.3f}", f"{r.lat_p99_ms:.3f}", f"{r.lat_p999_ms:.3f}")
    return grid


def flag_lines(results: list[IoResult]) -> list[str]:
    """Each distinct flag once, with the jobs it applies to (a tmpfs run flags all of them alike)."""
    jobs_by_flag: dict[str, list[str]] = {}
    for r in results:
        for flag in r.flags:
            jobs_by_flag.setdefault(flag, []).append(r.job)
    return [f"* {flag} [{'all jobs' if len(jobs) == len(results) else ', '.join(jobs)}]"
            for flag, jobs in jobs_by_flag.items()]
