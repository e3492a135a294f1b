"""Waits the engine's own trace points count one by one (PostgreSQL's lock and LWLock waits, through
bpftrace): every wait, its duration, and for a lock wait the relation it was on. They give the wait
table its WaitCount and AvgWait_S beside the sampled time, and `storlab waits --resources` the
relation of every lock wait, where a sampler sees only the waits that last across its readings."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace

from storlab.probes.kept import Db, Probe, histogram
from storlab.probes.waits import TracedWait, Wait, WaitCapture

COUNTED = "bpftrace counts"


def with_counts(capture: WaitCapture, traced: list[TracedWait]) -> WaitCapture:
    """The sampled waits with each traced type's count and traced time beside its sampled time; a type
    only the trace saw is added with no sampled time."""
    counts: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    for t in traced:
        counts[t.wait_type] += t.waits
        seconds[t.wait_type] += t.seconds
    waits = [replace(w, wait_count=int(counts[w.wait_type]), traced_s=seconds[w.wait_type])
             if w.wait_type in counts else w for w in capture.waits]
    sampled = {w.wait_type for w in capture.waits}
    waits += [Wait(name, 0.0, int(n), traced_s=seconds[name]) for name, n in counts.items() if name not in sampled]
    return replace(capture, source=f"{capture.source} + {COUNTED}", waits=waits, traced=traced)


UNAVAILABLE = "(counts unavailable: "  # a run's wait source says so, and why


def without_counts(capture: WaitCapture, why: str) -> WaitCapture:
    """The sampled figures as they are, the source saying in one line why nothing was counted."""
    return replace(capture, source=f"{capture.source} {UNAVAILABLE}{why})")


def unavailable_reasons(sources: list[str]) -> list[str]:
    """Why runs with these wait sources counted nothing, each reason once."""
    return sorted({s.split(UNAVAILABLE, 1)[1].removesuffix(")") for s in sources if UNAVAILABLE in s})


def mean_per_run(runs: list[list[TracedWait]]) -> list[TracedWait]:
    """A cell's traced waits: counts and seconds as the mean over its runs, histograms summed."""
    n = len(runs)
    found: dict[tuple[str, str], TracedWait] = {}
    for run in runs:
        for t in run:
            acc = found.setdefault((t.wait_type, t.resource), TracedWait(t.wait_type, t.resource, 0, 0.0))
            acc.waits += t.waits / n
            acc.seconds += t.seconds / n
            for bucket, count in t.histogram.items():
                acc.histogram[bucket] = acc.histogram.get(bucket, 0) + count
    return sorted(found.values(), key=lambda t: (t.wait_type, -t.seconds, t.resource))


def _write(db: Db, run_id: int, traced: list[TracedWait]) -> None:
    db.executemany("INSERT INTO traced_waits (run_id, wait_type, resource, waits, seconds, histogram) VALUES (?, ?, ?, ?, ?, ?)",
                   [(run_id, t.wait_type, t.resource, t.waits, t.seconds, json.dumps(t.histogram)) for t in traced])


def _read(db: Db, run_id: int) -> list[TracedWait]:
    return [TracedWait(t, r, n, s, histogram(h)) for t, r, n, s, h in db.execute(
        "SELECT wait_type, resource, waits, seconds, histogram FROM traced_waits WHERE run_id = ? "
        "ORDER BY wait_type, seconds DESC, resource", (run_id,))]



PROBE = Probe(
    "traced_waits",
    # Every wait the engine's trace points counted in a run, by resource (a lock wait's relation;
    # LWLocks by tranche, resource ''). Histograms are JSON, power-of-two buckets in ns.
    ("""
    CREATE TABLE traced_waits (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        wait_type TEXT NOT NULL,
        resource TEXT NOT NULL,
        waits INTEGER NOT NULL,
        seconds REAL NOT NULL,
        histogram TEXT NOT NULL,
        PRIMARY KEY (run_id, wait_type, resource)
    );
    """,),
    _write, _read,
    from_capture=lambda capture: capture.traced,
)
