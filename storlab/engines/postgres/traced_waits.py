"""Exact waits and per-file IO of one PostgreSQL instance, from the server's static trace points (the
Debian build has them: `bpftrace -l 'usdt:/usr/lib/postgresql/15/bin/postgres:*'`), through one
bpftrace program around the load. Everything is counted in BPF maps and printed once at the end.

- Lock waits (`lock__wait__start/done`): the workload's sessions only, as pg_wait_sampling's profile
  is; count, time and a log2 histogram per lock type and relation (the lock tag's database and
  relation; other lock kinds by their kind). Named after the run from pg_class.
- LWLock waits (`lwlock__wait__start/done`): the same sessions, per tranche.
- Data files (`smgr__md__read/write__start/done`): every process of the instance (a scan's parallel
  workers, the checkpointer), per relation file segment of 1 GB; mapped after the run to the
  relation's name and file. A page the server adds to a relation (mdextend) has no trace point: the
  writes are the writes of existing pages (flushes, checkpoints).
- WAL: the WAL code's own trace point fires only when a backend must write a full WAL buffer, so
  the WAL files are traced at the system call instead: pwrite64/pwritev (a new segment's zero fill)
  and fdatasync/fsync by the instance's processes on a file in the instance's WAL directory, per
  segment (a new segment is written as xlogtemp.<pid> before it is renamed).

Only this instance's processes count: the postmaster (the parent of a workload's session) and its
children; another server started from the same binary (a PostgreSQL on port 5432) is filtered out
in the kernel.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import psutil

from storlab import bpftrace, traced_waits
from storlab.file_io import FileIO
from storlab.traced_waits import TracedWait
from storlab.waits import WaitCapture, WaitProbe

SOURCE = "bpftrace"
BLOCK = 8192  # every smgr read and write is one block (bpftrace 0.17 reads no 7th USDT argument, the bytes done)
SEGMENT_BLOCKS = 131072  # RELSEG_SIZE: 1 GB of 8 kB blocks per file segment (the Debian build's)
# PostgreSQL 15's LockTagType, in order, by the names pg_locks and the wait events give them.
LOCK_TYPES = ("relation", "extend", "frozenid", "page", "tuple", "transactionid", "virtualxid", "spectoken",
              "object", "userlock", "advisory")
RELATION_LOCKS = (0, 1, 3, 4)  # lock tags whose second field is a relation's OID
FORKS = {0: "", 1: "_fsm", 2: "_vm", 3: "_init"}
# The probes this module attaches: a binary without them is named in the note.
_NEEDED = (b"lock__wait__start", b"lwlock__wait__start", b"smgr__md__read__start")

_PROGRAM = """
usdt:{bin}:postgresql:lock__wait__start /{sessions}/ {{ @lock_at[tid] = nsecs; }}
usdt:{bin}:postgresql:lock__wait__done /@lock_at[tid]/ {{
  $d = nsecs - @lock_at[tid]; delete(@lock_at[tid]);
  $rel = (arg4 == 0 || arg4 == 1 || arg4 == 3 || arg4 == 4) ? arg1 : 0;
  $db = (arg4 == 0 || arg4 == 1 || arg4 == 3 || arg4 == 4) ? arg0 : 0;
  @lock[arg4, $db, $rel] = stats($d); @lock_hist[arg4, $db, $rel] = hist($d);
}}
usdt:{bin}:postgresql:lwlock__wait__start /{sessions}/ {{ @lwlock_at[tid] = nsecs; }}
usdt:{bin}:postgresql:lwlock__wait__done /@lwlock_at[tid]/ {{
  $d = nsecs - @lwlock_at[tid]; delete(@lwlock_at[tid]);
  $t = str(arg0);
  @lwlock[$t] = stats($d); @lwlock_hist[$t] = hist($d);
}}
usdt:{bin}:postgresql:smgr__md__read__start /{instance}/ {{ @read_at[tid] = nsecs; }}
usdt:{bin}:postgresql:smgr__md__read__done /@read_at[tid]/ {{
  $d = nsecs - @read_at[tid]; delete(@read_at[tid]);
  $seg = arg1 / {segment};
  @read[arg2, arg3, arg4, arg0, $seg] = stats($d); @read_hist[arg2, arg3, arg4, arg0, $seg] = hist($d);
}}
usdt:{bin}:postgresql:smgr__md__write__start /{instance}/ {{ @write_at[tid] = nsecs; }}
usdt:{bin}:postgresql:smgr__md__write__done /@write_at[tid]/ {{
  $d = nsecs - @write_at[tid]; delete(@write_at[tid]);
  $seg = arg1 / {segment};
  @write[arg2, arg3, arg4, arg0, $seg] = stats($d); @write_hist[arg2, arg3, arg4, arg0, $seg] = hist($d);
}}
tracepoint:syscalls:sys_enter_pwrite64,tracepoint:syscalls:sys_enter_pwritev /{instance}/ {{
  $f = *(curtask->files->fdt->fd + args->fd);
  if ($f->f_path.dentry->d_parent->d_inode->i_ino == {wal_ino} && $f->f_inode->i_sb->s_dev == {wal_dev}) {{
    @wal_at[tid] = nsecs; @wal_name[tid] = str($f->f_path.dentry->d_name.name);
  }}
}}
tracepoint:syscalls:sys_exit_pwrite64,tracepoint:syscalls:sys_exit_pwritev /@wal_at[tid]/ {{
  $d = nsecs - @wal_at[tid]; $name = @wal_name[tid]; delete(@wal_at[tid]); delete(@wal_name[tid]);
  @walw[$name] = stats($d); @walw_bytes[$name] = sum(args->ret); @walw_hist[$name] = hist($d);
}}
tracepoint:syscalls:sys_enter_fdatasync,tracepoint:syscalls:sys_enter_fsync /{instance}/ {{
  $f = *(curtask->files->fdt->fd + args->fd);
  if ($f->f_path.dentry->d_parent->d_inode->i_ino == {wal_ino} && $f->f_inode->i_sb->s_dev == {wal_dev}) {{
    @sync_at[tid] = nsecs; @sync_name[tid] = str($f->f_path.dentry->d_name.name);
  }}
}}
tracepoint:syscalls:sys_exit_fdatasync,tracepoint:syscalls:sys_exit_fsync /@sync_at[tid]/ {{
  $d = nsecs - @sync_at[tid]; $name = @sync_name[tid]; delete(@sync_at[tid]); delete(@sync_name[tid]);
  @sync[$name] = stats($d);
}}
"""

RELATION_NAME = "SELECT %s::oid::regclass::text"
DATABASE_OID = "SELECT oid FROM pg_database WHERE datname = current_database()"
# A relation file by what the trace point tells (tablespace, relfilenode): the relation and its path.
FILE_OF = """
    SELECT r::regclass::text, pg_relation_filepath(r)
    FROM (SELECT pg_filenode_relation(CASE WHEN %(spc)s = 1663 THEN 0 ELSE %(spc)s END, %(node)s) AS r) f
    WHERE r IS NOT NULL"""
TABLESPACES = "SELECT oid, spcname FROM pg_tablespace"


def program(binary: Path, sessions: list[int], postmaster: int, wal: os.stat_result) -> str:
    return _PROGRAM.format(
        bin=binary, segment=SEGMENT_BLOCKS,
        sessions=" || ".join(f"pid == {int(p)}" for p in sorted(set(sessions))) or "0",
        instance=f"(pid == {postmaster} || curtask->real_parent->tgid == {postmaster})",
        wal_ino=wal.st_ino, wal_dev=(os.major(wal.st_dev) << 20) | os.minor(wal.st_dev),
    )


@functools.cache
def _has_trace_points(binary: Path, mtime: float) -> bool:
    """Whether the server was built with its static trace points (--enable-dtrace): their names are in
    its ELF notes."""
    data = binary.read_bytes()
    return all(name in data for name in _NEEDED)


def why_not_traced(binary: Path) -> str | None:
    reason = bpftrace.why_not("bpftrace")
    if reason is not None:
        return reason
    if not _has_trace_points(binary, binary.stat().st_mtime):
        return f"{binary} was built without trace points (--enable-dtrace)"
    return None


class TracedWaitProbe:
    """The instance's sampled wait probe (pg_wait_sampling or pg_stat_activity), with the trace around
    the same load: its counts go into the wait table beside the sampled time, its per-relation lock
    waits and per-file IO into the capture."""

    def __init__(self, sampled: WaitProbe, instance: Any):
        self.sampled = sampled
        self.instance = instance
        self.source = sampled.source
        self.trace: bpftrace.Trace | None = None
        self.note = ""

    def start(self, sessions: list[int]) -> None:
        self.sampled.start(sessions)
        binary = self.instance.bins / "postgres"  # the cell's version's server
        self.note = why_not_traced(binary) or ""
        if self.note or not sessions:
            self.note = self.note or "no sessions to trace"
            return
        try:
            postmaster = psutil.Process(sessions[0]).ppid()
            wal = os.stat(self.instance.roots[self.instance.spec.log.name] / "wal")
        except (psutil.Error, OSError) as exc:
            self.note = f"the instance's processes or WAL could not be found: {exc}"
            return
        self.trace = bpftrace.Trace(program(binary, sessions, postmaster, wal))
        try:
            self.trace.start()
        except BaseException:
            self.sampled.stop()
            raise
        self.note = self.trace.note

    def so_far(self) -> dict[str, float]:
        return self.sampled.so_far()

    def stop(self) -> WaitCapture:
        try:
            maps = self.trace.stop() if self.trace is not None else None
            if self.trace is not None:
                self.note = self.trace.note
        finally:
            if self.trace is not None:
                self.trace.kill()
            capture = self.sampled.stop()
        if maps is None:
            return traced_waits.without_counts(capture, self.note or "not traced")
        with self.instance.connect() as conn:
            names = _Names(conn, self.instance)
            waited = lock_waits(maps, names) + lwlock_waits(maps)
            files = data_files(maps, names) + wal_files(maps, self.instance.spec.log.name)
        traced = traced_waits.with_counts(capture, waited)
        traced.files = files
        return traced


class _Names:
    """OIDs and file nodes named through the instance, each asked once."""

    def __init__(self, conn: Any, instance: Any):
        self.conn = conn
        self.database = conn.execute(DATABASE_OID).fetchone()[0]
        spaces = dict(conn.execute(TABLESPACES).fetchall())
        home = instance.spec.home.name
        by_tablespace = {f"ts_{p.name}".lower().replace("-", "_"): p.name for p in instance.spec.data_placements}
        self.placements = {oid: by_tablespace.get(name, home) for oid, name in spaces.items()}

    @functools.cache
    def relation(self, db: int, oid: int) -> str:
        if db not in (self.database, 0):
            return f"relation {oid} of database {db}"
        return self.conn.execute(RELATION_NAME, (oid,)).fetchone()[0]

    @functools.cache
    def file(self, spc: int, db: int, node: int) -> tuple[str, str]:
        """(relation, path relative to the data directory) of a relation file node."""
        row = self.conn.execute(FILE_OF, {"spc": spc, "node": node}).fetchone() if db in (self.database, 0) else None
        if row is None:  # dropped since, or another database's
            return f"file node {node}", f"{spc}/{db}/{node}"
        return row[0], row[1]


def _stats(maps: bpftrace.Maps, name: str) -> list[tuple[tuple, tuple[int, int]]]:
    """A stats() map's (key, (count, total)), the keys that counted something."""
    return [(key, (int(v["count"]), int(v["total"]))) for key, v in maps.get(name, {}).items() if v["count"]]


def _histogram(maps: bpftrace.Maps, name: str, key: tuple) -> dict[int, int]:
    return dict(maps.get(name, {}).get(key, {}))


def lock_waits(maps: bpftrace.Maps, names: _Names) -> list[TracedWait]:
    found = []
    for key, (n, ns) in _stats(maps, "lock"):
        kind, db, rel = (int(k) for k in key)
        kind_name = LOCK_TYPES[kind] if kind < len(LOCK_TYPES) else f"locktag {kind}"
        resource = names.relation(db, rel) if rel else ("transaction" if kind_name == "transactionid" else kind_name)
        found.append(TracedWait(f"Lock:{kind_name}", resource, n, ns / 1e9,
                                _histogram(maps, "lock_hist", key)))
    return found


def lwlock_waits(maps: bpftrace.Maps) -> list[TracedWait]:
    return [TracedWait(f"LWLock:{key[0]}", "", n, ns / 1e9, _histogram(maps, "lwlock_hist", key))
            for key, (n, ns) in _stats(maps, "lwlock")]


def data_files(maps: bpftrace.Maps, names: _Names) -> list[FileIO]:
    found: dict[tuple, FileIO] = {}
    for direction in ("read", "write"):
        for key, (n, ns) in _stats(maps, direction):
            spc, db, node, fork, segment = (int(k) for k in key)
            relation, path = names.file(spc, db, node)
            path += FORKS.get(fork, f"_fork{fork}") + (f".{segment}" if segment else "")
            what = relation + (f" ({FORKS[fork].lstrip('_')})" if FORKS.get(fork) else "")
            one = found.setdefault((spc, db, node, fork, segment),
                                   FileIO(path, what, names.placements.get(spc, ""), source=SOURCE))
            setattr(one, f"{direction}s", n)
            setattr(one, f"{direction}_bytes", n * BLOCK)
            setattr(one, f"{direction}_s", ns / 1e9)
            setattr(one, f"{direction}_histogram", _histogram(maps, f"{direction}_hist", key))
    return list(found.values())


def wal_files(maps: bpftrace.Maps, placement: str) -> list[FileIO]:
    found: dict[str, FileIO] = {}
    for (name,), (n, ns) in _stats(maps, "walw"):
        found[name] = FileIO(f"pg_wal/{name}", "WAL", placement, writes=n,
                             write_bytes=int(maps.get("walw_bytes", {}).get((name,), 0)), write_s=ns / 1e9,
                             write_histogram=_histogram(maps, "walw_hist", (name,)), syncs=0, sync_s=0.0,
                             source=SOURCE)
    for (name,), (n, ns) in _stats(maps, "sync"):
        one = found.setdefault(name, FileIO(f"pg_wal/{name}", "WAL", placement, syncs=0, sync_s=0.0, source=SOURCE))
        one.syncs, one.sync_s = n, ns / 1e9
    return list(found.values())
