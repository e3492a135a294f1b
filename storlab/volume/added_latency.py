"""A latency added to each IO of the device: reads, writes and the flush that fsync and fdatasync send,
each fixed or a p50/p99 pair whose lognormal each IO's delay is drawn from, held by storlab's delay
layer over a device storlab makes (storlab.lab.latency; machine.held_latency judges it). The layer is
the lab, not the storage: its CPU and its mode are part of the answer beside the time it adds."""

from __future__ import annotations

from typing import Any, Mapping

from storlab.factors import show
from storlab.lab import latency
from storlab.volume import held_latency
from storlab.volume import io_caps
from storlab.volume.property import Calibrated, Job, Key, Observed, Part, Property
from storlab.volume.rates import number

_WHAT = "milliseconds from 0 (fixed) or { p50 = …, p99 = … }"
_MS = {"type": "number", "minimum": 0, "maximum": latency.MAX_MS}
_SCHEMA = {"anyOf": [_MS, {"type": "object", "required": ["p50", "p99"], "additionalProperties": False,
                           "properties": {"p50": _MS, "p99": _MS}}]}
# The least time a latency key adds, 0 aside (nothing added): the delay layer's own round trip is some
# 0.03 to 0.13 ms on a 2-core VM, moving with the machine's load, and a declared time below this could not
# be told apart from it. Fixed, so a file passes or fails alike whatever the machine is doing.
MIN_LATENCY_MS = 0.1


def _ms(v: Any) -> bool:
    return number(v) and 0 <= v <= latency.MAX_MS


def value(v: Any, what: str = _WHAT) -> float | dict[str, float]:
    """A latency key's value: milliseconds added to each IO, fixed, or a p50/p99 pair (p99 above p50,
    both above 0); 0, or MIN_LATENCY_MS and more."""
    pair = isinstance(v, dict)
    if pair:
        if set(v) != {"p50", "p99"} or not all(_ms(x) and x > 0 for x in v.values()):
            raise ValueError(f"expected {what} or a list of them, got {show(v)}")
        if v["p99"] <= v["p50"]:
            raise ValueError(f"p99 ({show(v['p99'])}) must be above p50 ({show(v['p50'])}); a fixed latency is one number")
    elif not _ms(v):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    p50 = v["p50"] if pair else v
    if 0 < p50 < MIN_LATENCY_MS:
        raise ValueError(f"{'p50 ' if pair else ''}{show(p50)} ms is below {MIN_LATENCY_MS:g} ms: the delay layer's "
                         "own round trip is some 0.03 to 0.13 ms on a 2-core VM, and a declared time below "
                         f"{MIN_LATENCY_MS:g} ms could not be told apart from it; declare 0 (nothing added) or at "
                         f"least {MIN_LATENCY_MS:g} ms")
    # + 0.0: -0.0 is 0, one value with it (two cells of one latency otherwise)
    return {"p50": float(v["p50"]), "p99": float(v["p99"])} if pair else float(v) + 0.0


def _option(text: str) -> float | dict[str, float]:
    """"2" or "1/4" (a p50/p99 pair) as a latency key's value."""
    try:
        numbers = [float(n) for n in text.split("/")]
    except ValueError:
        numbers = []
    if not 1 <= len(numbers) <= 2:
        raise ValueError('expected milliseconds ("2") or a p50/p99 pair ("1/4")')
    return {"p50": numbers[0], "p99": numbers[1]} if len(numbers) == 2 else numbers[0]


def of(declared: Mapping[str, Any]) -> latency.DeviceLatency | None:
    """One cell's latency; None when it declares none (a latency of 0 is held by the layer too, so the
    cells of a factor with a 0 level differ only in the time added)."""
    if all(declared.get(key) is None for key in latency.KEYS):
        return None
    return latency.DeviceLatency(*(latency.NONE if declared.get(key) is None else latency.parse(declared[key])
                                   for key in latency.KEYS))


def depth_jobs(direct: bool = True) -> list[Job]:
    """What a read or write latency is held against: 4 KiB random IO each way, one IO in flight and eight."""
    return [Job(f"4k-{rw}-qd{depth}", rw, 4096, depth, direct) for rw in ("randread", "randwrite") for depth in (1, 8)]


def commit_jobs(direct: bool = True) -> list[Job]:
    """What a flush latency is held against: a log's commit as the engines make it by default, a
    sequential write through the page cache, then fdatasync, one at a time (PostgreSQL's wal_sync_method
    fdatasync, 8 KiB WAL pages; InnoDB's redo with innodb_flush_log_at_trx_commit = 1, 4 KiB blocks).
    Buffered whatever `direct` says: the flush, not the write, is what reaches the device."""
    return [Job(f"{bs // 1024}k-commit", "write", bs, 1, direct=False, synced=True) for bs in (4096, 8192)]


class AddedLatency(Property):
    name = "latency"
    keys = tuple(Key(key, _WHAT, value, _SCHEMA, f"{direction}-latency", _option,
                     f"Add this latency to each {direction} through storlab's delay layer: milliseconds, fixed "
                     f'("2") or a p50/p99 pair ("1/4") (a placement\'s {key}).', "MS")
                 for key, direction in zip(latency.KEYS, latency.DIRECTIONS))
    device_only = "a latency is held by a layer over a device storlab makes, which a directory is not"

    def host_problem(self, given: Mapping[str, Any]) -> tuple[str, str] | None:
        mine = self.given(given)
        why = latency.unavailable() if mine else None
        return None if why is None else (next(iter(mine)), f"a latency cannot be held here: {why}")

    def io_jobs(self, declared: Mapping[str, Any], direct: bool) -> list[Job]:
        found = of(declared)
        if found is None:
            return []
        reads_or_writes = found.read != latency.NONE or found.write != latency.NONE
        return (depth_jobs(direct) if reads_or_writes else []) + (commit_jobs() if found.flush != latency.NONE else [])

    def io_flags(self, declared: Mapping[str, Any], calibrated: Calibrated) -> list[str]:
        """A job through the layer against the same job on the device alone; where the job's cap is
        tighter than the latency allows at its depth, against the cap."""
        found, own, seen, job = of(declared), calibrated.alone, calibrated.measured, calibrated.job
        if found is None or own is None:
            return []
        added = getattr(found, job.direction)
        # A bucket's cap moves during the job: where the latency alone would pass the rate the bucket
        # held (its baseline once dry, its burst until then), the bucket bound the job for some of its
        # time, and its flag says what it allowed.
        free_iops = job.iodepth / ((held_latency.mean_ms(added) + own.lat_ms["50"]) / 1000)
        bucket_iops = [(u.bucket.baseline if u.dry_at_s is not None else u.bucket.burst) *
                      (1 if u.bucket.unit == "iops" else 2**20 / job.block_size) for u in calibrated.spent]
        if bucket_iops and free_iops > min(bucket_iops):
            return [f"latency: {job.direction} {added.text()} declared, at depth {job.iodepth} not judged: the latency "
                    f"alone allows {free_iops:,.0f} IOPS, above the {min(bucket_iops):,.0f} the bucket held"]
        bound = io_caps.binding(job.rw, job.block_size, io_caps.of(declared)) if not calibrated.spent else None
        # The job alone, faster, may have run its bucket dry: its tail is then the bucket's queue.
        own_tail = not any(u.dry_at_s is not None for u in calibrated.alone_spent)
        verdict = held_latency.judge(job.direction, added, job.iodepth, (own.lat_ms["50"], own.lat_ms["99"], own.iops),
                                     (seen.lat_ms["50"], seen.lat_ms["99"], seen.iops), bound[1] if bound else None,
                                     own_tail)
        return [verdict.flag]

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        found = of(declared)
        if found is None:
            return None
        cpu = [s for c in observed.conditions if (s := (c.get("delay_layer_cpu_s") or {}).get(observed.placement))
               is not None]
        modes = sorted({m for c in observed.conditions if (m := (c.get("delay_layer_mode") or {}).get(observed.placement))})
        seen: dict[str, Any] = {}
        said = ", ".join(f"{d} {getattr(found, d).text()}" for d in latency.DIRECTIONS if getattr(found, d) != latency.NONE) \
            or "0 ms added"
        said = f"{said}, through storlab's delay layer"
        if modes:
            seen["mode"] = " or ".join(modes)
            said += f" ({seen['mode']})"
        if cpu:
            seen["layer_cpu_s"] = sum(cpu) / len(cpu)
            said += f"; its CPU {seen['layer_cpu_s']:.2f} s a run"
            if observed.load_s > 0:
                seen["layer_core_share"] = sum(cpu) / observed.load_s
                said += f", {100 * seen['layer_core_share']:.1f} % of a core over the load"
        return self.made(observed, declared, said, seen)


PROPERTY = AddedLatency()
