"""Each measured run starts from the same state: the data its workload prepared written out (a
checkpoint), every dirty page of the machine on disk (sync: the copy of the instance's template and the
previous run's files must not be written back during this run), and none of the instance's own files
in the OS page cache, so a run finds on disk, not in memory, what it did not write itself.

Only the instance's files are evicted (posix_fadvise DONTNEED on each), not the whole page cache
(/proc/sys/vm/drop_caches): that would also evict the templates the next run copies, the servers'
programs, and the work of everyone else on the machine, and it needs root. What was done is recorded
with the run, and `show` says it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable

from storlab.lab import instances, latency, safe_files
from storlab.lab.cgroups import ControlGroup
from storlab.sizes import format_bytes


def evict(roots: Iterable[Path]) -> int:
    """Drop the clean cached pages of every file under `roots` (after a sync every page is clean);
    the number of files. The folders are the servers' user's, who could swap one for a link mid-walk:
    they are walked through descriptors (safe_files), so root opens nothing outside them."""
    count = 0
    for root in roots:
        for fd in safe_files.regular_files(root):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        # Behind a passthrough delay layer the pages are the device's files' (no other user reaches them there).
        below = latency.on_device(root)
        for fd in safe_files.regular_files(below) if below is not None else ():
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return count


def quiesce(checkpoint: Callable[[], None], roots: Iterable[Path], group: ControlGroup | None = None) -> dict[str, Any]:
    """Checkpoint the instance, sync, evict its files (under `roots`) from the page cache: the
    conditions of the run that follows; the instances before it are gone (instances.ending_in_background).
    An evicted page is no longer charged to the control group that read it, so under a server memory
    limit (`group`) every run starts with its cache inside the limit: what the group then holds (its
    servers' own memory, their shared buffers) is recorded."""
    instances.wait_ended()
    checkpoint()
    os.sync()
    evict(roots)
    found = {"checkpoint": True, "sync": True, "page_cache": "the instance's files evicted"}
    if group is not None and group.limits.memory_bytes is not None:
        found["server_memory_held_bytes"] = group.reading().memory_bytes
    return found


def describe(conditions: list[dict[str, Any]]) -> str | None:
    """One line for `show`: what every run had before it started (or how they differed)."""
    if not conditions or not any(conditions):
        return None
    caches = sorted({c.get("page_cache", "not recorded") for c in conditions})
    declared = sorted({c.get("warmup_s", 0) for c in conditions if not c.get("warmup_found")})
    found = [c["warmup_s"] for c in conditions if c.get("warmup_found")]
    line = "before each run: checkpoint, sync, page cache: " + " or ".join(caches)
    if declared not in ([], [0]):
        line += "; the first " + " or ".join(f"{w:g}" for w in declared) + " s of each run are warm-up, left out of its figures"
    if found:
        span = f"{min(found):g}" + ("" if min(found) == max(found) else f" to {max(found):g}")
        line += f"; the warm-up found in each run ({span} s, MSER-5) cut from its figures"
    traced = sorted({c["tracing"] for c in conditions if c.get("tracing")})
    if traced:
        line += "; traced with bpftrace: " + " or ".join(_TRACED[t] for t in traced)
    charged = [c["server_memory_held_bytes"] for c in conditions if c.get("server_memory_held_bytes") is not None]
    if charged:
        amount = format_bytes(min(charged)) + ("" if min(charged) == max(charged) else f" to {format_bytes(max(charged))}")
        line += (f"; under a server memory limit its control group then held {amount} (the servers' own memory: "
                 "the instance's files no longer charged to it)")
    return line


_TRACED = {"off": "nothing (--no-trace)", "on": "lock waits and events", "io": "waits, writes and syncs (--trace-io)",
           "reads": "waits, writes, syncs and reads (--trace-reads)"}
