"""Credit buckets: a unit's caps (IOPS or MiB/s, both directions) at `burst` while the bucket holds
credits and at `baseline` once it is dry, earning `baseline` a second up to `size`, `start` of them at
each run's start (full when left out): a gp2-like volume (storlab.lab.credits keeps it during a run)."""

from __future__ import annotations

from typing import Any, Mapping

from storlab.factors import KeyProblem, show
from storlab.lab import caps, credits
from storlab.lab.caps import Bucket
from storlab.volume.rates import MAX_IOPS, MAX_MB_S, least_problem, number
from storlab.volume.property import Calibrated, Key, Observed, Part, Property

UNITS = {"iops_bucket": "iops", "mb_s_bucket": "mb_s"}  # a bucket's key -> the unit it earns and pays
_WHAT = "{ baseline = …, burst = …, size = …, start = … } (start optional: full)"
_SCHEMA = {"type": "object", "required": ["baseline", "burst", "size"], "additionalProperties": False,
           "properties": {k: {"type": "number", "minimum": 0} for k in ("baseline", "burst", "size", "start")}}
# A job's IO through a bucket may pass what it allowed by one settling period at the burst rate, and by
# the kernel's slack of its slices.
PASSED = 1.02


def _checked(unit: str):
    def check(v: Any, what: str) -> dict[str, float]:
        if not isinstance(v, dict) or not {"baseline", "burst", "size"} <= set(v) <= {"baseline", "burst", "size", "start"} \
                or not all(number(x) and 0 <= x for x in v.values()):
            raise ValueError(f"expected {what} or a list of them, got {show(v)}")
        given = {key: float(x) + 0.0 for key, x in v.items()}  # + 0.0: -0.0 is 0, one value with it
        if not 0 < given["baseline"] < given["burst"]:
            raise ValueError(f"a bucket's baseline ({show(v['baseline'])}) must be above 0 and below its burst "
                             f"({show(v['burst'])})")
        if given["size"] <= 0:
            raise ValueError(f"a bucket's size ({show(v['size'])}) must be above 0")
        if given.setdefault("start", given["size"]) > given["size"]:
            raise ValueError(f"a bucket's size ({show(v['size'])}) must be above 0 and hold its start "
                             f"({show(v['start'])})")
        too_little = least_problem(given["baseline"], unit)  # its burst is above its baseline
        if too_little:
            raise ValueError(f"a bucket's baseline ({given['baseline']:g}) {too_little}")
        limit = MAX_IOPS if unit == "iops" else MAX_MB_S
        if given["burst"] > limit:
            raise ValueError(f"a bucket's burst above {limit:,} is no device's")
        return given

    return check


def _option(text: str) -> dict[str, float]:
    """"300/3000/54000[/START]" as a bucket's table."""
    try:
        numbers = [float(n) for n in text.split("/")]
    except ValueError:
        numbers = []
    if len(numbers) not in (3, 4):
        raise ValueError("expected BASELINE/BURST/SIZE or BASELINE/BURST/SIZE/START")
    return dict(zip(("baseline", "burst", "size", "start"), (int(n) if n.is_integer() else n for n in numbers)))


def buckets(declared: Mapping[str, Any]) -> tuple[Bucket, ...]:
    """One cell's buckets, as lab.credits keeps them."""
    return tuple(Bucket(unit, **declared[key]) for key, unit in UNITS.items() if declared.get(key) is not None)


class CreditBuckets(Property):
    name = "credits"
    directory = True
    keys = tuple(Key(key, _WHAT, _checked(unit), _SCHEMA, key.replace("_", "-"), _option,
                     f"A credit bucket on the {caps.UNITS[unit]} of both directions (a placement's {key}): earned "
                     f"at BASELINE a second, spent up to BURST, SIZE {caps.CREDIT[unit]}s, START of them when each "
                     "job starts (full if left out).", "BASELINE/BURST/SIZE[/START]")
                 for key, unit in UNITS.items())

    def conflicts(self, given: Mapping[str, Any]) -> KeyProblem | None:
        for key, unit in UNITS.items():
            named = [k for k in (unit, *caps.SHORTHANDS[unit]) if given.get(k) is not None]
            if given.get(key) is not None and named:
                return KeyProblem((key,), f"{key} sets the {unit} caps of both directions as its credits allow, and "
                                  f"{named[0]} caps them too; give one of them")
        return None

    def io_flags(self, declared: Mapping[str, Any], calibrated: Calibrated) -> list[str]:
        """When each bucket ran dry in the job, and whether the kernel let through no more than it
        allowed (its start, the baseline over the job, and one settling period's overdraft at the burst)."""
        said = []
        for use in calibrated.spent:
            b = use.bucket
            allowed = b.start + b.baseline * use.run_s + b.burst * credits.PERIOD_S
            verdict = "held" if use.spent <= allowed * PASSED else "beyond the bucket: the kernel did not hold it"
            dry = f"ran dry at {use.dry_at_s:.1f} s, the baseline held {use.dry_s:.1f} s" if use.dry_at_s is not None \
                else "never ran dry"
            said.append(f"bucket on {calibrated.device} ({b.text()}): {dry}; {use.spent:,.0f} {caps.CREDIT[b.unit]} "
                        f"charged of the {allowed:,.0f} it allowed, {verdict}")
        return ["; ".join(said)] if said else []

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        given = self.given(declared)
        if not given:
            return None
        said = "; ".join(b.text() for b in buckets(given))
        runs = observed.limits.get("bucket_runs")
        if runs is None:
            return self.made(observed, declared, said)
        dry = observed.limits["dry_at_s"]
        said += (f"; dry in {len(dry)} of {runs} runs, at " + ", ".join(f"{s:.1f}" for s in dry) + " s"
                 if dry else f"; never dry in {runs} run{'s' if runs > 1 else ''}")
        return self.made(observed, declared, said, {k: observed.limits[k] for k in ("dry_at_s", "baseline_share")}
                         | {"runs": runs})


PROPERTY = CreditBuckets()
