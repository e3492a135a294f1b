"""A run's failure in the server's own words: read from its log (and the set-up tool's output) while
the instance still exists, and told as what the user can act on: a delay layer that ended, a
placement full, a setting the server refuses, the kernel's OOM killer at the memory limit, or the
server's last words."""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path
from typing import Protocol

from storlab.errors import RunFailed, UserError
from storlab.lab import cgroups, diagnosis, latency, mounts, safe_files, setting_failures
from storlab.lab.server_process import ServerProcess
from storlab.sizes import format_size

KILLED_CHILD = re.compile(r"(\w[\w ]* \(PID \d+\)) was terminated by signal 9")
NAMED_WITHIN_S = 2.0  # a postmaster logs a lost child within milliseconds of its death
# What a call on a delay layer's mount gets once the layer's process is gone: the calls under way as
# its connection ends, then every later one.
LAYER_GONE = (errno.ECONNABORTED, errno.ENOTCONN)


class SettingRejected(UserError):
    """The server refused one of the user's engine_settings: every run with it would fail alike."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


class PlacementFull(RunFailed):
    """A placement ran out of space: every later run would too."""

    def __init__(self, message: str, placement: str):
        super().__init__(message)
        self.placement = placement


class Diagnosed(Protocol):
    """What telling a failure asks of its engine: its log's grammar and its settings' symptoms."""

    log: diagnosis.ServerLog
    symptoms: tuple[tuple[str, str], ...]


def told(exc: Exception, engine: Diagnosed, settings: dict, server: ServerProcess | None, uid: int,
         group: cgroups.ControlGroup | None, roots: dict[str, Path]) -> Exception | None:
    """The failure in the server's own words, read while its log still exists (as `uid`, the log's
    owner); None to keep `exc`. `roots`: the instance's folder on each placement, to name a full one."""
    text = getattr(exc, "output", "")
    if server is not None:
        text += "\n" + safe_files.read_tail(server.log_path, uid, diagnosis.LOG_TAIL_BYTES)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    ended = layer_ended(exc, roots, text)
    if ended is not None:
        return ended
    killed = out_of_memory(server, uid, group, text)
    if killed is not None:
        return RunFailed(f"{first}; {killed}")
    cause = diagnosis.explain(engine.log, text, server.cwd if server else None, roots, settings)
    if cause is not None and cause.placement:
        return PlacementFull(cause.message, cause.placement)
    if cause is not None and cause.setting:
        return SettingRejected(cause.message, cause.setting)
    said = "\n".join(diagnosis.messages(engine.log, f"{exc}\n{text}"))
    blamed = setting_failures.caused_by(engine.symptoms, said, settings)  # started, yet fails every run
    if blamed is not None:
        return SettingRejected(blamed[1], blamed[0])
    if server is not None and not server.alive():
        lines = diagnosis.messages(engine.log, text)
        said = diagnosis.first_stop(engine.log, lines) or " | ".join(lines[-3:]) or "nothing in its log"
        return RunFailed(f"{first}; the server's log says: {said}")
    return None


def layer_ended(exc: Exception, roots: dict[str, Path], logged: str = "") -> RunFailed | None:
    """`exc` told as the end of the delay layer that serves one of `roots` (placement name -> a folder
    on it), when it is that: the layer's process is gone, its mount answers every call with ENOTCONN
    ("Transport endpoint is not connected"; ECONNABORTED for those under way as it died), and `exc`, or
    what the server `logged`, says so. None otherwise."""
    said = f"{exc}\n{logged}"
    if getattr(exc, "errno", None) not in LAYER_GONE and not any(os.strerror(e) in said for e in LAYER_GONE):
        return None
    ended = [f"placements.{name}" for name, root in roots.items() if _layer_gone(root)]
    if not ended:
        return None
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RunFailed(f"the delay layer serving {' and '.join(ended)} ended ({first})")


def _layer_gone(path: Path) -> bool:
    """`path` is on a delay layer's mount that no process serves any more. Asked with statfs, which the
    kernel always sends to the layer: it answers a stat from its cache, even with the layer gone."""
    mount = mounts.mount_of(path)
    if mount is None or mount["filesystem"] != latency.FILESYSTEM:
        return False
    try:
        os.statvfs(mount["mount_point"])
    except OSError as exc:
        return exc.errno in LAYER_GONE
    return False


def out_of_memory(server: ServerProcess | None, uid: int, group: cgroups.ControlGroup | None,
                  logged: str) -> str | None:
    """What the kernel's OOM killer did in the instance's group at its memory limit, in words (which
    process, the limit, the peak); None when it killed nothing."""
    if group is None or group.limits.memory_bytes is None:
        return None
    try:
        reading = group.reading()
    except RunFailed:
        return None
    if not reading.oom_kills:
        return None
    if server is not None and not server.alive():
        which = f"the server itself ({Path(server.argv[0]).name}, pid {server.pid})"
    else:  # PostgreSQL's postmaster names the child it lost: "server process (PID 123) was terminated by signal 9"
        named = KILLED_CHILD.search(logged)
        deadline = time.monotonic() + NAMED_WITHIN_S
        while named is None and server is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # the client saw its session end a moment before the postmaster logged why
            named = KILLED_CHILD.search(safe_files.read_tail(server.log_path, uid, diagnosis.LOG_TAIL_BYTES))
        which = named.group(1) if named else "one of the server's processes"
    peak = f", peak {format_size(reading.peak_bytes)}" if reading.peak_bytes else ""
    return (f"the kernel's OOM killer ended {which}: the server's memory limit of "
            f"{format_size(group.limits.memory_bytes)} (layout.server_memory) was reached "
            f"({reading.oom_kills} killed{peak})")
