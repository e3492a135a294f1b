"""IO caps: IOs a second and MiB (2^20 bytes) a second on the device under a placement, each direction
or both (`iops`, `mb_s`), held by the instance's control group (storlab.lab.caps, lab.cgroups). A
directory's table takes them too: they cap the whole device under it. The value "max" (as the
kernel's io.max writes it) holds nothing back: a level of a factor that is uncapped."""

from __future__ import annotations

from typing import Any, Mapping

from storlab import factors
from storlab.factors import KeyProblem, show
from storlab.lab import caps, cgroups, credits
from storlab.volume import credit_buckets
from storlab.volume.rates import MAX_IOPS, MAX_MB_S, least_problem, number
from storlab.volume.property import Calibrated, Key, Observed, Part, Property

UNCAPPED = "max"
# A job through its cap reaches it (the throttle lets IO through in slices: a little under it); well
# under it, the device or the queue depth was the limit, not the cap; beyond it, the cap did not hold.
CAP_REACHED = 0.9
CAP_PASSED = 1.02


def _iops(v: Any, what: str) -> int | str:
    if v != UNCAPPED and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_IOPS):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    return v


def _mb_s(v: Any, what: str) -> int | float | str:
    if v != UNCAPPED and (not number(v) or not 0 < v <= MAX_MB_S):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    too_little = None if v == UNCAPPED else least_problem(v, "mb_s")
    if too_little:
        raise ValueError(f"{show(v)} MiB a second {too_little}")
    return v


def _rate(text: str) -> int | float | str:
    """An option's text as a cap's value: "max", a whole number, or (MiB/s) a fraction."""
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value


_IOPS_WHAT = f'a whole number of IOs a second from 1 to {MAX_IOPS:,} (or "max": uncapped)'
_MB_S_WHAT = 'MiB a second, a number above 0 (or "max": uncapped)'
_IOPS_SCHEMA = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_IOPS}, {"const": UNCAPPED}]}
_MB_S_SCHEMA = {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_MB_S}, {"const": UNCAPPED}]}


def _iops_key(name: str, said: str) -> Key:
    return Key(name, _IOPS_WHAT, _iops, _IOPS_SCHEMA, name.replace("_", "-"), _rate,
               f"Cap {said} this many IOs a second on the device (a placement's {name}).", "IOPS")


def _mb_s_key(name: str, said: str) -> Key:
    return Key(name, _MB_S_WHAT, _mb_s, _MB_S_SCHEMA, name.replace("_", "-"), _rate,
               f"Cap {said} this many MiB a second on the device (a placement's {name}).", "MIB_S")


def of(declared: Mapping[str, Any]) -> caps.IoCaps:
    """One cell's caps: each direction's own key or the shorthand for both, "max" uncapped; a bucket's
    unit capped at the rate it starts a run with."""

    def either(own: str, both: str):
        found = declared.get(own) if declared.get(own) is not None else declared.get(both)
        return None if found == UNCAPPED else found

    buckets = credit_buckets.buckets(declared)
    found = caps.IoCaps(either("read_iops", "iops"), either("write_iops", "iops"),
                        either("read_mb_s", "mb_s"), either("write_mb_s", "mb_s"), buckets)
    for bucket in buckets:
        found = credits.at_rate(found, bucket, bucket.start_cap)
    return found


def binding(job_rw: str, block_size: int, found: caps.IoCaps) -> tuple[str, float] | None:
    """The cap that limits a job (its direction's IOPS, or its MiB/s at the job's block size, the
    tighter), in words and in IOs a second; None when its direction is uncapped."""
    reads = job_rw in ("read", "randread")
    iops, bps = (found.read_iops, found.read_bps) if reads else (found.write_iops, found.write_bps)
    direction = "read" if reads else "write"
    limits = [(f"{direction} {iops:,} IOPS", float(iops))] if iops else []
    if bps:
        limits.append((f"{direction} {bps / 2**20:,g} MiB/s", bps / block_size))
    return min(limits, key=lambda c: c[1]) if limits else None


class IoCaps(Property):
    name = "caps"
    directory = True
    keys = (_iops_key("read_iops", "reads at"), _iops_key("write_iops", "writes at"),
            _iops_key("iops", "reads and writes alike at"),
            _mb_s_key("read_mb_s", "reads at"), _mb_s_key("write_mb_s", "writes at"),
            _mb_s_key("mb_s", "reads and writes alike at"))

    def conflicts(self, given: Mapping[str, Any]) -> KeyProblem | None:
        """A direction is capped once: by its own key or by the shorthand for both."""
        for both, (read, write) in caps.SHORTHANDS.items():
            named = [key for key in (read, write) if given.get(key) is not None]
            if given.get(both) is not None and named:
                return KeyProblem((both,), f"{both} caps reads and writes alike, and {named[0]} is given too; "
                                  f"give {both}, or {read} and {write}")
        return None

    def host_problem(self, given: Mapping[str, Any]) -> tuple[str, str] | None:
        """A control group here holds IO caps, where some value caps (a bucket's caps too)."""
        capping = [key for key in (*(k.name for k in self.keys), *credit_buckets.UNITS)
                   if any(v not in (None, UNCAPPED) for v in factors.values(given.get(key)))]
        why = cgroups.limits_unavailable(io=True, memory=False) if capping else None
        return None if why is None else (capping[0], f"IO caps cannot be set here: {why}")

    def io_flags(self, declared: Mapping[str, Any], calibrated: Calibrated) -> list[str]:
        """Through its cap a job reaches it and never passes it; a bucket's cap changes during the job,
        which credit_buckets judges, and the layer's pass is judged by the latency it adds."""
        bound = binding(calibrated.job.rw, calibrated.job.block_size, of(declared))
        if bound is None or calibrated.spent or calibrated.alone is not None:
            return []
        name, limit = bound
        share = calibrated.measured.iops / limit
        verdict = ("held" if share <= CAP_PASSED else "beyond its cap: the kernel did not hold it") \
            if share >= CAP_REACHED else "under its cap: the device or the queue depth, not the cap, was the limit"
        return [f"capped: {name} on {calibrated.device}: reached {100 * share:.0f} % of it, {verdict}; "
                "this measures the cap"]

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        given = self.given(declared)
        if not given:
            return None
        share = observed.limits.get("at_cap_share")
        said = of(given).text() + ("" if share is None else f"; at its cap {100 * share:.0f} % of the runs' time")
        return self.made(observed, declared, said, {} if share is None else {"at_cap_share": share})


PROPERTY = IoCaps()
