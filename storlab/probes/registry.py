"""Every probe that keeps its own part of a run, in the order their recorders start: the store makes
their tables and writes what they recorded, the runner starts them around each run, the answer holds
their parts (each under the probe's name, storlab.probes.part), which `show --details` and the report
show in this order. A new probe is its module and one entry here; every reader takes PROBES from this
module when it reads, so a test may register a probe by setting it."""

from __future__ import annotations

from storlab.probes import checkpoints, file_io, iosizes, limits, pressure, traced_waits, waiting_tasks
from storlab.probes.kept import Probe

PROBES: tuple[Probe, ...] = (waiting_tasks.PROBE, iosizes.PROBE, traced_waits.PROBE, file_io.PROBE, pressure.PROBE,
                             limits.PROBE, checkpoints.PROBE)
