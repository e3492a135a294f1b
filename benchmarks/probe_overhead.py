"""What do the probes that explain a run cost it? (goal: the interval of throughput with probes /
without within [0.98, 1.02])

For each engine, one throwaway instance with the random-insert workload prepared (16 sessions, 4 data
files: the seed-000 set-up, where sessions wait on Lock:extend and the waiting-task reader has work),
its files on a loop device whose image is in memory (`--image-dir` moves it): the load is then
CPU-bound, so the probes' share of it is as large as it gets, no disk's noise hides it, and every
probe a device placement starts (the IO-size trace, the device timeline) has a device to watch. Then
rounds that run the same load with no probe and with each probe set, in an order that rotates every
round so drift favours none. Before each load the table is emptied and the instance settled as
`storlab run` settles it (checkpoint, sync, its files out of the page cache). Probe sets:

  all            what `storlab run` starts around a run on a device placement
                 (storlab.probes.lifecycle.around_run): the wait probe with its traces (PostgreSQL 15:
                 lock waits, checkpoints and WAL switches through bpftrace; MariaDB: per-file IO from
                 performance_schema), the waits per second (wait:<WaitType>), the device timeline and
                 every probe of the registry (storlab.probes.registry), the IO-size trace included
  trace-io       what `storlab run --trace-io` starts: `all` with every LWLock wait and each file's writes
                 and syncs traced too
  untraced       what `storlab run --no-trace` starts: the same without bpftrace (the sampled waits)
  wait-timeline  the wait probe without its traces, and its reading once a second
  waiting_tasks, io_sizes, pressure, ...
                 one probe of the registry alone, with its own recorder (waiting_tasks: pg_stat_activity
                 + pg_locks, or events_waits_current, every 0.5 s)
  trace:GROUP    PostgreSQL: the wait probe with one group of its bpftrace program alone (locks,
                 lwlocks, writes, temp_reads, events, reads: storlab.engines.postgres.traced_waits.GROUPS), to find
                 which group a cost comes from (by default `all` traces locks and events; `trace-io` adds
                 lwlocks and writes); trace:GROUP+GROUP... several together (a temp_on cell traces
                 locks+events+temp_reads+writes)

Prints each round, then per engine and probe set three or four figures:
- the ratio (rows/s with it) / (rows/s without) as the geometric mean over the rounds with its 95 %
  interval, and the median (round 0 is a warm-up for every set and is not counted). Rounds go on
  until every interval is narrower than `--width` (2 %: a 1 % cost told apart) or `--rounds` have run.
  This machine's CPU speed wanders by 5-15 % from one second to the next (a fixed Python loop timed
  in 80 ms pieces took from 0.057 to 0.129 s, CPU time as wall time), so two loads with nothing
  changed between them differ by 8-17 %, and a 2 % interval takes several hundred rounds.
- the instance's CPU per row (every process of the server, the sessions included: a uprobe's trap is
  charged to the process that hits it), with / without: the server's own work per unit of it does not
  move with the machine's wandering speed as much as the throughput does (a slower core does the same
  work in more CPU time, yet no queue or scheduler delay is in it), so its interval is narrower.
- the CPU the machine spent beside the sessions (every process but the sessions' own: bpftrace, the
  samplers and the server work they ask for, the server's background), with minus without, as a
  share of the machine: a few percent of it, which the machine's wandering speed moves by a few
  percent of a few percent, so its interval is several times narrower. It leaves out what a probe
  costs inside the sessions (a uprobe's trap runs in the session that hits it): the ratio is the whole.
- for a set with traces, their own CPU over the instance's CPU without them, counted rather than timed
  against another load: the run time of each BPF program as the kernel counts it
  (kernel.bpf_stats_enabled, on while this runs), and for each hit of a uprobe or USDT probe the trap
  into the kernel, its cost measured first on a nop (a USDT probe's site) in a C loop with and without
  one (needs cc). The machine's wandering speed moves a count not at all and a run time little, so this
  interval is the narrow one; it leaves out what the probes do to the load beyond their own CPU (the
  cache lines they touch, a trap inside a spinning lock's wait), which only the ratio sees.

A sampler's cost per reading can be made k times larger to measure it: waiting_tasks:x10 and
wait-timeline:x10 read ten times as often as storlab does.

    .venv/bin/python benchmarks/probe_overhead.py [--engines postgres,mariadb] [--probes all,waiting_tasks]
        [--rounds 200] [--width 0.02] [--rows 20000] [--image-dir DIR] [--postgres-version 18]

PostgreSQL 18 (the wheel's server, without pg_wait_sampling) samples pg_stat_activity every 50 ms
instead: --postgres-version 18 --probes wait-timeline measures what that sampler costs.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from storlab.answer.stats import summarize
from storlab.engines import provision
from storlab.engines.postgres.traced_waits import GROUPS, TracedWaitProbe
from storlab.experiment import places
from storlab.lab import devices, mounts, quiesce
from storlab.lab.layout import CellLayout, spec_for
from storlab.probes import bpftrace, wait_timeline, waiting_tasks
from storlab.probes.bpftrace import Tracing
from storlab.probes.kept import RunScope
from storlab.probes.recorders import sched_delta, sched_time
from storlab.probes.lifecycle import CAPTURE, TIMELINE, Recorder, RunStart, around_run, recording
from storlab.probes.registry import PROBES
from storlab.probes.wait_timeline import WaitTimeline
from storlab.probes.waiting_tasks import WaitingTasksSampler
from storlab.workloads import kind
from storlab.workloads.random_insert import RandomInsertParams

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Fewer rounds than this make the interval's own width too unsure to stop on.
MIN_ROUNDS = 10
RESET = {"postgres": "TRUNCATE lab_insert", "mariadb": "TRUNCATE TABLE lab_insert"}
ALONE = {probe.name: probe for probe in PROBES if probe.recorder is not None}
SAMPLERS = ("waiting_tasks", "wait-timeline")  # read at their rate, or k times it (NAME:xK)
TRACE_GROUPS = tuple(f"trace:{group}" for group in GROUPS)
SETS = ("all", "trace-io", "untraced", *SAMPLERS, *(name for name in ALONE if name not in SAMPLERS), *TRACE_GROUPS)


def recorders(instance, probes: str) -> list[Recorder]:
    """The recorders of one probe set, as the runner starts them; NAME:xK, a sampler read K times as
    often as it is."""
    name, _, faster = probes.partition(":x")
    if name in SAMPLERS:
        return sampler(instance, name, int(faster or 1))
    if _trace_groups(name):  # groups of the PostgreSQL trace, with the sampled waits they sit beside
        waits = TracedWaitProbe(instance.wait_probe(Tracing.OFF).sampled, instance, "bpftrace",
                                tuple(name.removeprefix("trace:").split("+")))
        return [Recorder(CAPTURE, lambda run: waits.start(run.sessions), waits.stop)]
    if name == "all":  # exactly what `storlab run` starts around a run on a device, its default traces included
        return around_run(instance, traced=True)
    if name == "trace-io":  # what `storlab run --trace-io` starts
        return around_run(instance, traced=True, tracing=Tracing.IO)
    if name == "untraced":  # what `storlab run --no-trace` starts: the same without bpftrace
        return around_run(instance, traced=False, tracing=Tracing.OFF)
    alone = ALONE[name].recorder(RunScope(instance, traced=False))
    return [Recorder(name, lambda run: alone.start(run.sessions, run.t0), alone.stop)]


def _trace_groups(name: str) -> bool:
    """Whether `name` is trace:GROUP or trace:GROUP+GROUP..., of the trace's groups."""
    return name.startswith("trace:") and all(f"trace:{group}" in TRACE_GROUPS
                                             for group in name.removeprefix("trace:").split("+"))


def sampler(instance, name: str, k: int) -> list[Recorder]:
    """One sampler at k times its rate (1: as storlab reads it): a cost too small to measure against
    this machine's noise is made k times larger (each reading costs what it costs whatever the rate)."""
    if name == "waiting_tasks":
        tasks = WaitingTasksSampler(instance.waiting_tasks_probe(), waiting_tasks.PERIOD_S / k)
        return [Recorder(name, lambda run: tasks.start(run.sessions), tasks.stop)]
    waits = instance.wait_probe(Tracing.OFF)  # the sampler alone: `all` minus `untraced` is the traces
    timeline = WaitTimeline(waits.so_far, wait_timeline.PERIOD_S / k)
    return [Recorder(CAPTURE, lambda run: waits.start(run.sessions), waits.stop),
            Recorder(TIMELINE, lambda run: timeline.start(run.t0), timeline.stop)]


@dataclass
class Load:
    """One load: its throughput, and the CPU the machine spent meanwhile outside the sessions."""

    rows_per_s: float
    server_cpu_per_row: float  # CPU-seconds of every process of the instance, per row
    others_cores: float  # CPU-seconds per second of the load of every process but the sessions'
    server_cpu_s: float = 0.0  # CPU-seconds of every process of the instance
    bpf_ns: int = 0  # the traces' programs' own run time, as the kernel counted it (kernel.bpf_stats_enabled)
    uprobe_hits: int = 0  # runs of uprobe and USDT programs: each one a trap into the kernel, paid besides


# A program of this type runs on a kprobe, a uprobe or a USDT probe: bpftrace attaches only the last two
# here (a trap each time the probed instruction runs); a tracepoint's (type 5) runs in a call the kernel
# makes anyway.
KPROBE_TYPE = 2
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def bpf_programs() -> dict[tuple[int, int], tuple[int, int, int]]:
    """Every BPF program the bpftrace processes this one started hold: (pid, fd) -> (type, run time in
    ns, runs), from /proc/<pid>/fdinfo (the run time and count only while kernel.bpf_stats_enabled)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, _, tail = stat.read_text().rpartition(")")
            if head.partition("(")[2] != "bpftrace" or int(tail.split()[1]) != os.getpid():
                continue
            pid = int(stat.parent.name)
            for fd in (stat.parent / "fd").iterdir():
                if os.readlink(fd) != "anon_inode:bpf-prog":
                    continue
                info = dict(line.split(":", 1) for line in (stat.parent / "fdinfo" / fd.name).read_text().splitlines() if ":" in line)
                found[(pid, int(fd.name))] = (int(info["prog_type"]), int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0)))
        except (OSError, ValueError, IndexError):
            continue  # a process or descriptor gone meanwhile
    return found


def bpf_delta(before: dict, after: dict) -> tuple[int, int]:
    """The programs' run time (ns) and the uprobe programs' runs between two bpf_programs()."""
    run_ns = hits = 0
    for key, (kind_, ns, n) in after.items():
        _, ns0, n0 = before.get(key, (kind_, 0, 0))
        run_ns += ns - ns0
        hits += (n - n0) if kind_ == KPROBE_TYPE else 0
    return run_ns, hits


# A probe site as PostgreSQL's USDT probes are: a one-byte nop, which the kernel emulates after the trap
# (a uprobe on another instruction steps it out of line: about 20 times dearer on this VM).
TRAP_LOOP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) void site(void) { __asm__ volatile("nop"); }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++) site();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    printf("%.0f\n", (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
    return 0;
}
"""


def uprobe_trap_ns(pairs: int = 9, calls: int = 200_000) -> tuple[float, float, float]:
    """What one hit of a uprobe on a nop (a USDT probe's site) costs beyond its program's run time: the
    trap into the kernel, the nop emulated, the return; in ns with its 95 % interval. A C loop calls a
    function whose first instruction is a nop, with and without a uprobe on it (the loop's own CPU
    time), `pairs` alternations. Needs a C compiler (cc)."""
    with tempfile.TemporaryDirectory() as folder:
        loop = Path(folder) / "trap_loop"
        try:
            subprocess.run(["cc", "-O2", "-o", str(loop), "-x", "c", "-"], input=TRAP_LOOP, text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SystemExit(f"probe_overhead: the trap's cost is measured with a C loop, and cc failed: {exc}")

        def cpu_ns() -> float:
            return float(subprocess.run([str(loop), str(calls)], capture_output=True, text=True, check=True).stdout)

        extra = []
        for _ in range(pairs):
            without = cpu_ns()
            trace = bpftrace.Trace(f"uprobe:{loop}:site {{ @n = count(); }}")
            trace.start()
            if not trace.running:
                raise SystemExit(f"probe_overhead: a uprobe on {loop} could not be attached: {trace.note}")
            try:
                before = bpf_programs()
                with_ = cpu_ns()
                program_ns, hits = bpf_delta(before, bpf_programs())
            finally:
                trace.stop()
            if hits != calls:
                raise SystemExit(f"probe_overhead: the uprobe on {loop} counted {hits} hits of {calls}")
            extra.append((with_ - without - program_ns) / hits)
    found = summarize(extra)
    return found.ci_low, found.mean, found.ci_high


def machine_busy_s() -> float:
    """CPU-seconds the machine has spent working since boot (user, nice, system, irq, softirq: idle,
    IO wait and the time the hypervisor took away left out)."""
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in Path("/proc/stat").read_text().split()[1:8])
    return (user + nice + system + irq + softirq) / TICKS_PER_S


def one_load(instance, params: RandomInsertParams, probes: str | None) -> Load:
    """One load, with the probe set `probes` around it as the runner places them (None: no probe)."""
    # A trace of the load before may still be detaching (storlab run's next trace waits for it too):
    # a load without probes must not run beside it.
    bpftrace.wait_ended()
    load = kind("random-insert").load(instance, params, {})
    with ExitStack() as stack:
        stack.callback(load.close)
        sessions = load.open()
        threads = instance.session_os_pids(sessions)
        if probes is not None:
            stack.enter_context(recording(recorders(instance, probes), RunStart(sessions, time.monotonic())))
        programs = bpf_programs()
        busy, own, server, began = machine_busy_s(), sched_time(threads), instance.cpu_s(), time.monotonic()
        figures = load.run().figures
        elapsed, busy, own = time.monotonic() - began, machine_busy_s() - busy, sched_delta(own, sched_time(threads))
        server = instance.cpu_s() - server
        bpf_ns, hits = bpf_delta(programs, bpf_programs())
        if own is None:
            raise SystemExit(f"probe_overhead: the sessions' /proc/<pid>/schedstat could not be read ({threads})")
        return Load(figures["rows_per_s"], server / figures["rows"], (busy - own.cpu_s) / elapsed, server, bpf_ns, hits)


def measure(engine: str, sets: list[str], rounds: int, width: float, rows: int, lab: Path,
            version: str | None = None) -> dict[str, list[tuple[Load, Load]]]:
    """Paired rounds until every set's interval is narrower than `width` (at least MIN_ROUNDS, at most
    `rounds`): this machine's CPU speed wanders by 5-15 % from one second to the next, so the number
    of rounds a 1 % cost needs is found by measuring, not guessed. Each pair: (without, with)."""
    params = RandomInsertParams(kind="random-insert", connections=16, rows_per_connection=rows, batch=1000)
    spec = spec_for(CellLayout(data_on="lab", data_files=4), {}, {"lab": lab}, version if engine == "postgres" else None)
    pairs: dict[str, list[tuple[Load, Load]]] = {s: [] for s in sets}
    with provision(engine, spec, keep=False, connections=16) as instance:
        kind("random-insert").prepare(instance, params, {})
        contenders = [None, *sets]
        for round_no in range(rounds + 1):
            shift = round_no % len(contenders)
            results = {}
            for who in contenders[shift:] + contenders[:shift]:
                with instance.connect() as conn:
                    conn.execute(RESET[engine])
                quiesce.quiesce(instance.checkpoint, instance.roots.values())
                results[who] = one_load(instance, params, who)
            line = ", ".join(f"{who or 'no probe'} {load.rows_per_s:,.0f}" for who, load in results.items())
            if round_no == 0:
                print(f"  {engine} warm-up: {line} rows/s", flush=True)
                continue
            for s in sets:
                pairs[s].append((results[None], results[s]))
            print(f"  {engine} round {round_no}: {line} rows/s; ratios " + ", ".join(
                f"{s} {results[s].rows_per_s / results[None].rows_per_s:.3f} (CPU beside the sessions "
                f"{results[s].others_cores - results[None].others_cores:+.3f} cores)" for s in sets), flush=True)
            if round_no >= MIN_ROUNDS and all(high - low < width for low, _, high in (interval(cpu_ratios(p)) for p in pairs.values())):
                break
    return pairs


def ratios(pairs: list[tuple[Load, Load]]) -> list[float]:
    return [on.rows_per_s / off.rows_per_s for off, on in pairs]


def cpu_ratios(pairs: list[tuple[Load, Load]]) -> list[float]:
    return [on.server_cpu_per_row / off.server_cpu_per_row for off, on in pairs]


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """The ratios' geometric mean and its 95 % interval (Student's t on the logs): each round pairs the
    loads with and without, so the round's mood cancels out of its ratio."""
    logs = summarize([math.log(r) for r in ratios])
    return math.exp(logs.ci_low), math.exp(logs.mean), math.exp(logs.ci_high)


@contextmanager
def in_memory_lab(image_dir: Path, size: str) -> Iterator[Path]:
    """The mount point of a loop device whose image is in `image_dir` (in memory where that is tmpfs),
    made and removed as storlab makes a device placement."""
    on_tmpfs = (mounts.mount_of(image_dir) or {}).get("filesystem") == "tmpfs"
    device = places.device("lab", {"loop": size, "image_dir": str(image_dir), "allow_tmpfs": on_tmpfs}).spec()
    with devices.DevicePool() as pool:
        lab = pool.device("lab", device).mount_point
        print(f"the instances' files on {pool.devices['lab'].loop}, an image in {image_dir}"
              f"{' (memory)' if on_tmpfs else ''}", flush=True)
        yield lab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgres,mariadb")
    parser.add_argument("--probes", default="all,waiting_tasks", help=f"comma-separated, of: {', '.join(SETS)}; "
                        f"{' or '.join(SAMPLERS)}:xK reads K times as often")
    parser.add_argument("--rounds", type=int, default=200, help="at most this many paired rounds")
    parser.add_argument("--width", type=float, default=0.02,
                        help="stop once every interval of the instance's CPU per row is narrower than this "
                             "(0.02: a 1 %% cost is told apart)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per connection (16 connections)")
    parser.add_argument("--image-dir", default="/dev/shm/storlab-benchmarks",
                        help="where the loop device's image lives (tmpfs by default: the load is then CPU-bound, "
                             "the probes' share of it the largest, and no disk's noise hides it)")
    parser.add_argument("--device-size", default="4GB", help="the loop device's size")
    parser.add_argument("--postgres-version", default="15", help="the PostgreSQL version to measure (15 or 18)")
    args = parser.parse_args()
    sets = args.probes.split(",")
    unknown = [s for s in sets if s not in SETS and not _trace_groups(s)
               and not (s.partition(":x")[0] in SAMPLERS and s.partition(":x")[2].isdigit())]
    if unknown:
        parser.error(f"unknown probe set {', '.join(unknown)} (known: {', '.join(SETS)})")

    # A kill takes Ctrl-C's path, as in storlab's CLI: the servers stop and the loop device goes.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    summary = []
    stats_were = BPF_STATS.read_text().strip()
    with ExitStack() as stack:
        BPF_STATS.write_text("1")  # the kernel counts each program's run time (two clock reads a run)
        stack.callback(BPF_STATS.write_text, stats_were)
        trap = uprobe_trap_ns()
        print(f"a uprobe hit costs {trap[1]:.0f} ns [{trap[0]:.0f}, {trap[2]:.0f}] beyond its program's run time "
              "(a nop in a C loop with / without one, CPU time, 95 % CI)", flush=True)
        lab = stack.enter_context(in_memory_lab(Path(args.image_dir), args.device_size))
        for engine in args.engines.split(","):
            for s, pairs in measure(engine, sets, args.rounds, args.width, args.rows, lab, args.postgres_version).items():
                low, mid, high = interval(ratios(pairs))
                s_low, s_mid, s_high = interval(cpu_ratios(pairs))
                cores = os.cpu_count() or 1
                others = summarize([on.others_cores - off.others_cores for off, on in pairs])
                c_low, c_mid, c_high = (100 * c / cores for c in (others.ci_low, others.mean, others.ci_high))
                summary.append(f"{engine:8} {s:14}: throughput with / without {mid:.3f} [{low:.3f}, {high:.3f}] (geometric "
                               f"mean, 95 % CI, width {high - low:.3f}; median {statistics.median(ratios(pairs)):.3f}) over "
                               f"{len(pairs)} rounds, 16 connections x {args.rows} rows, 4 data files\n"
                               f"{'':25} the instance's CPU per row with / without: {s_mid:.3f} [{s_low:.3f}, {s_high:.3f}] "
                               f"(geometric mean, 95 % CI, width {s_high - s_low:.3f})\n"
                               f"{'':25} CPU beside the sessions' with - without: {c_mid:+.2f} % of the machine "
                               f"[{c_low:+.2f}, {c_high:+.2f}] (mean, 95 % CI)")
                own = traces_own(pairs, trap)
                if own:
                    summary.append(f"{'':25} {own}")
        print("\n".join(summary))


def traces_own(pairs: list[tuple[Load, Load]], trap: tuple[float, float, float]) -> str | None:
    """The traces' own CPU (the programs' run time the kernel counted, and a trap per uprobe hit) over
    the instance's CPU without them, per load: counted, not timed against another load, so the
    machine's wandering speed moves it little. Its far ends take the trap's cost at its own far ends."""
    loads = [on for _, on in pairs]
    if not any(on.bpf_ns or on.uprobe_hits for on in loads):
        return None

    def shares(trap_ns: float) -> list[float]:
        direct = [on.bpf_ns + on.uprobe_hits * trap_ns for on in loads]
        return [100 * d / (on.server_cpu_s * 1e9 - d) for d, on in zip(direct, loads)]

    low, mid, high = summarize(shares(trap[0])).ci_low, summarize(shares(trap[1])).mean, summarize(shares(trap[2])).ci_high
    hits = statistics.mean(on.uprobe_hits / on.server_cpu_s for on in loads)
    run = statistics.mean(100 * on.bpf_ns / (on.server_cpu_s * 1e9) for on in loads)
    return (f"the traces' own CPU over the instance's without them: +{mid:.2f} % [+{low:.2f}, +{high:.2f}] (mean, 95 % CI: "
            f"the programs' run time {run:.2f} %, and {hits:,.0f} uprobe hits per CPU-second x {trap[1]:.0f} ns)")


if __name__ == "__main__":
    main()
