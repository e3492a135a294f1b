"""Exact waits and per-file IO of one PostgreSQL instance, from the server's static trace points (the
Debian build has them: `bpftrace -l 'usdt:/usr/lib/postgresql/15/bin/postgres:*'`), through one
bpftrace program per server binary, the same for every run: inside one storlab invocation it is
attached once and left attached (bpftrace.attached_across_runs), each run putting its processes in the program's
filter maps. Everything is counted in BPF maps, printed and cleared at the end of each run.

- Lock waits (`lock__wait__start/done`): the workload's sessions only, as pg_wait_sampling's profile
  is; count, time and a log2 histogram per lock type and relation (the lock tag's database and
  relation; other lock kinds by their kind). Named after the run from pg_class.
- LWLock waits (`lwlock__wait__start/done`), only when asked for (storlab run --trace-io): the same
  sessions, per tranche. One wait is two traps and two program runs, thousands a second on a busy
  WAL: about 1.4 % of the instance's CPU on a CPU-bound insert load, over the lab's 1 % budget.
- Reads of data files: by default the blocks each relation read as the server counts them
  (session_counters.py: pg_statio, untimed, read once the run's sessions have exited), on the
  relation's first file; timed with the trace points (`smgr__md__read__start/done`) when asked for
  (storlab run --trace-reads): every process of the instance (a scan's parallel workers, the
  checkpointer), per relation file segment of 1 GB, one 8 kB block each. Each read takes two uprobe
  traps: a cold scan of 300 MB ran 16 to 29 % slower traced (two sets of 5 runs each, on this
  project's 2-core VM).
- Writes and syncs of every file (`pwrite64`/`pwritev`, `fdatasync`/`fsync` system calls by the
  instance's processes), only when asked for (storlab run --trace-io; about 1.4 % of the instance's
  CPU on a CPU-bound insert load), per file by its directory and name: a data file's writes are then
  all of them, the pages the server adds to a relation included (the smgr write trace point misses those:
  extending a relation has none), and the WAL's (its own trace point fires only when a backend must
  write out a full WAL buffer). A new WAL segment is zero-filled as xlogtemp.<pid> before it is
  renamed: its writes are listed under that name.
- Temporary files (sorts and hashes beyond work_mem, in a tablespace's `pgsql_tmp`), with
  --trace-io: their writes, and when the cell puts them on a placement of their own (temp_on) their
  reads (`pread64`, each of the instance's tested against its file's directory, a data file's read
  too), as one object on the temp placement. By default a temp_on cell has the server's counts of its
  temporary files (temp_files, temp MB): tracing their IO tests every write and read of the instance,
  over the lab's 1 % budget with the rest (docs/explaining.md).
- Checkpoints (`checkpoint__start/done`, in the checkpointer) and WAL switches (`wal__switch`): when
  each happened, for the run's timeline (the capture's `events`). A checkpoint still going when the
  load ends is left out (its duration is not known).

Files are named after the run through the instance (`pg_relation_filenode`, `pg_relation_filepath`),
without opening anything in the server's directories.

Only this instance's processes count: the postmaster (the parent of a workload's session) and its
children, by their pids in the filter maps; another server started from the same binary (a
PostgreSQL on port 5432) is filtered out in the kernel, but its processes still trap into it at
every trace point while the program is attached (docs/explaining.md says what that costs).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import psutil

from storlab import timeline
from storlab.engines.postgres import session_counters
from storlab.probes import bpftrace, file_io, traced_waits
from storlab.probes.waits import FileIO
from storlab.probes.waits import TracedWait, WaitCapture, WaitProbe
from storlab.probes.target import Probed
from storlab.session import Session

SOURCE = "bpftrace"
COUNTED_READS = f"pg_statio, {file_io.READS_UNTIMED} (storlab run --trace-reads)"  # session_counters'
BLOCK = 8192  # every smgr read is one block (bpftrace 0.17 reads no 7th USDT argument, the bytes read)
SEGMENT_BLOCKS = 131072  # RELSEG_SIZE: 1 GB of 8 kB blocks per file segment (the Debian build's)
# PostgreSQL 15's LockTagType, in order, by the names pg_locks and the wait events give them.
LOCK_TYPES = ("relation", "extend", "frozenid", "page", "tuple", "transactionid", "virtualxid", "spectoken",
              "object", "userlock", "advisory")
RELATION_LOCKS = (0, 1, 3, 4)  # lock tags whose second field is a relation's OID
FORKS = {0: "", 1: "_fsm", 2: "_vm", 3: "_init"}
RELATION_FILE = re.compile(r"(\d+)(_fsm|_vm|_init)?(?:\.(\d+))?")  # a relation's file: node, fork, segment
WAL_DIR = "wal"  # provision() puts the WAL in <log placement>/wal, pg_wal linking to it
# Where a session's temporary files are (sorts and hashes beyond work_mem): every tablespace's
# pgsql_tmp, each file named pgsql_tmp<pid>.<n>. They come and go by the hundred, so they are counted
# together, as one object; with --trace-io their reads (pread64) are traced too when the cell gives them
# a placement (temp_on), whatever --trace-reads says.
TEMP_DIR = "pgsql_tmp"
TEMP_FILES = "temporary files"
# The probes this module attaches: a binary without them is named in the note.
_NEEDED = (b"lock__wait__start", b"lwlock__wait__start", b"smgr__md__read__start")

# A written or synced file ($f) as its key ($dn, $ino), its directory and name copied at its first IO
# of the run, and whether it is a temporary file (kind 2).
_FILE_NAMED = """  $dn = (uint64)$f->f_path.dentry; $ino = $f->f_inode->i_ino;
  if (@file_kind[$dn, $ino] == 0) {{
    $dir = str($f->f_path.dentry->d_parent->d_name.name);
    @file_dir[$dn, $ino] = $dir; @file_name[$dn, $ino] = str($f->f_path.dentry->d_name.name);
    @file_kind[$dn, $ino] = $dir == "{temp}" ? 2 : 1;
  }}
"""

# The program, in groups that can be traced apart (benchmarks/probe_overhead.py measures each one's cost).
GROUPS = {
    "locks": """
usdt:{bin}:postgresql:lock__wait__start /{sessions}/ {{ @lock_at[tid] = nsecs; }}
usdt:{bin}:postgresql:lock__wait__done /@lock_at[tid]/ {{
  $d = nsecs - @lock_at[tid]; delete(@lock_at[tid]);
  $rel = ({relation_lock}) ? arg1 : 0;
  $db = ({relation_lock}) ? arg0 : 0;
  @lock[arg4, $db, $rel] = stats($d); @lock_hist[arg4, $db, $rel] = hist($d);
}}
""",
    # Keyed by the tranche name's address, its text copied once per run rather than at every wait: a
    # tenth of this group's cost (benchmarks/probe_overhead.py); the per-event map updates are the rest.
    "lwlocks": """
usdt:{bin}:postgresql:lwlock__wait__start /{sessions}/ {{ @lwlock_at[tid] = nsecs; }}
usdt:{bin}:postgresql:lwlock__wait__done /@lwlock_at[tid]/ {{
  $d = nsecs - @lwlock_at[tid]; delete(@lwlock_at[tid]);
  if (@lwlock_named[arg0] == 0) {{ @lwlock_named[arg0] = 1; @lwlock_name[arg0] = str(arg0); }}
  @lwlock[arg0] = stats($d); @lwlock_hist[arg0] = hist($d);
}}
""",
    # Keyed by the file's dentry and inode, its directory and name copied once per run rather than at
    # every write (a fifth of this group's cost); the inode keeps apart two files that held one freed
    # dentry in turn. A WAL segment recycled mid-run under a new name is counted under the name it had
    # at its first write of the run.
    "writes": """
tracepoint:syscalls:sys_enter_pwrite64,tracepoint:syscalls:sys_enter_pwritev /{instance}/ {{
  @write_at[tid] = nsecs; @write_file[tid] = (uint64)*(curtask->files->fdt->fd + args->fd);
}}
tracepoint:syscalls:sys_exit_pwrite64,tracepoint:syscalls:sys_exit_pwritev /@write_at[tid]/ {{
  $d = nsecs - @write_at[tid]; $f = (struct file *)@write_file[tid];
  delete(@write_at[tid]); delete(@write_file[tid]);
""" + _FILE_NAMED + """  if (@file_kind[$dn, $ino] == 2) {{
    @temp_write = stats($d); @temp_write_hist = hist($d); @temp_write_bytes = sum(args->ret);
  }} else {{
    @write[$dn, $ino] = stats($d); @write_hist[$dn, $ino] = hist($d); @write_bytes[$dn, $ino] = sum(args->ret);
  }}
}}
tracepoint:syscalls:sys_enter_fdatasync,tracepoint:syscalls:sys_enter_fsync /{instance}/ {{
  @sync_at[tid] = nsecs; @sync_file[tid] = (uint64)*(curtask->files->fdt->fd + args->fd);
}}
tracepoint:syscalls:sys_exit_fdatasync,tracepoint:syscalls:sys_exit_fsync /@sync_at[tid]/ {{
  $d = nsecs - @sync_at[tid]; $f = (struct file *)@sync_file[tid];
  delete(@sync_at[tid]); delete(@sync_file[tid]);
""" + _FILE_NAMED + """  @sync[$dn, $ino] = stats($d);
}}
""",
    # Every pread64 of the instance tested against its file's directory: a data file's reads (the
    # server reads blocks with pread64) pay for that test too.
    "temp_reads": """
tracepoint:syscalls:sys_enter_pread64 /{instance}/ {{
  $rf = (struct file *)*(curtask->files->fdt->fd + args->fd);
  if (str($rf->f_path.dentry->d_parent->d_name.name) == "{temp}") {{ @temp_read_at[tid] = nsecs; }}
}}
tracepoint:syscalls:sys_exit_pread64 /@temp_read_at[tid]/ {{
  $d = nsecs - @temp_read_at[tid]; delete(@temp_read_at[tid]);
  @temp_read = stats($d); @temp_read_hist = hist($d); @temp_read_bytes = sum(args->ret);
}}
""",
    "events": """
usdt:{bin}:postgresql:checkpoint__start /{instance}/ {{ @checkpoint_at[tid] = nsecs; }}
usdt:{bin}:postgresql:checkpoint__done /@checkpoint_at[tid]/ {{
  @checkpoint[@checkpoint_at[tid]] = nsecs - @checkpoint_at[tid]; delete(@checkpoint_at[tid]);
}}
usdt:{bin}:postgresql:wal__switch /{instance}/ {{ @wal_switch[nsecs] = 1; }}
""",
    "reads": """
usdt:{bin}:postgresql:smgr__md__read__start /{instance}/ {{ @read_at[tid] = nsecs; }}
usdt:{bin}:postgresql:smgr__md__read__done /@read_at[tid]/ {{
  $d = nsecs - @read_at[tid]; delete(@read_at[tid]);
  $seg = arg1 / {segment};
  @read[arg3, arg4, arg0, $seg] = stats($d); @read_hist[arg3, arg4, arg0, $seg] = hist($d);
}}
""",
}
# What a run traces by default (Tracing.ON), with --trace-io (Tracing.IO) and with --trace-reads
# (Tracing.READS): the default's cost is inside the lab's 1 % budget, LWLock waits and writes each
# cost more than it (benchmarks/probe_overhead.py's trace groups). A cell whose temporary files have a
# placement of their own (temp_on) traces their reads too from --trace-io on (TEMP_READS): they are its
# question; every file's writes, theirs among them, are the writes group's.
DEFAULT_GROUPS = ("locks", "events")
WITH_IO = (*DEFAULT_GROUPS, "lwlocks", "writes")
WITH_READS = (*WITH_IO, "reads")
TEMP_READS = "temp_reads"

RELATION_NAME = "SELECT %s::oid::regclass::text"
DATABASE_OID = "SELECT oid FROM pg_database WHERE datname = current_database()"
# A relation file by its file node: the relation, its path in the data directory, its tablespace.
FILE_OF = """
    SELECT c.oid::regclass::text, pg_relation_filepath(c.oid), c.reltablespace
    FROM pg_class c WHERE pg_relation_filenode(c.oid) = %s"""
TABLESPACES = "SELECT oid, spcname FROM pg_tablespace"


# The filter maps the program tests, set per run: the workload's sessions, and the instance's postmaster.
SESSIONS, POSTMASTER = "session", "postmaster"


def program(binary: Path, groups: tuple[str, ...] = DEFAULT_GROUPS) -> str:
    """The program for one server binary and these GROUPS: the same for every run (which processes
    count is in its filter maps), so one process can trace run after run."""
    instance = f"(@{POSTMASTER}[pid] || @{POSTMASTER}[(uint64)curtask->real_parent->tgid])"
    return "".join(GROUPS[group] for group in groups).format(
        bin=binary, relation_lock=" || ".join(f"arg4 == {kind}" for kind in RELATION_LOCKS),
        sessions=f"@{SESSIONS}[pid]", instance=instance, segment=SEGMENT_BLOCKS, temp=TEMP_DIR)


def filters(sessions: list[int], postmaster: int) -> dict[str, list[int]]:
    return {SESSIONS: sessions, POSTMASTER: [postmaster]}


@functools.cache
def _has_trace_points(binary: Path, mtime: float) -> bool:
    """Whether the server was built with its static trace points (--enable-dtrace): their names are in
    its ELF notes."""
    data = binary.read_bytes()
    return all(name in data for name in _NEEDED)


_SYSCALLS = ("sys_enter_pwrite64", "sys_enter_pwritev", "sys_enter_pread64", "sys_enter_fdatasync", "sys_enter_fsync",
             "sys_enter_kill")


def groups(binary: Path) -> list[tuple[str, str | None]]:
    """For `storlab check`: each group of what a run traces on the server `binary`, and why it cannot
    run here (None when it can)."""
    missing = next((c for c in _SYSCALLS if not (bpftrace.TRACEFS / "events/syscalls" / c).is_dir()), None)
    # One program traces all of them: what stops one stops every group.
    why = why_not_traced(binary) or (f"this kernel has no syscalls:{missing} tracepoint" if missing else None)
    return [(name, why) for name in ("lock waits, checkpoints, WAL switches",
                                     "LWLock waits, writes and syncs of each file (--trace-io)",
                                     "reads and writes of the temporary files (temp_on, --trace-io)",
                                     "reads of each data file (--trace-reads)")]


def why_not_traced(binary: Path, command: str | None = "bpftrace") -> str | None:
    """None when `binary` can be traced with bpftrace as `command` (None: traces turned off); otherwise why not."""
    reason = bpftrace.why_not(command)
    if reason is not None:
        return reason
    if not _has_trace_points(binary, binary.stat().st_mtime):
        return f"{binary} was built without trace points (--enable-dtrace)"
    return None


class TracedWaitProbe:
    """The instance's sampled wait probe (pg_wait_sampling or pg_stat_activity), with the trace around
    the same load: its counts go into the wait table beside the sampled time, its per-relation lock
    waits and per-file IO into the capture. `command`: the bpftrace to run, None when traces are
    turned off (the sampled figures only)."""

    def __init__(self, sampled: WaitProbe, instance: Probed, command: str | None = "bpftrace",
                 groups: tuple[str, ...] = DEFAULT_GROUPS):
        self.sampled = sampled
        self.instance = instance
        self.command = command
        self.groups = groups
        self.source = sampled.source
        self.trace: bpftrace.Trace | None = None
        self.note = ""
        self.sessions: list[int] = []
        self.reads_before: session_counters.RelationReads | None = None
        self.writes_traced = False

    def start(self, sessions: list[int]) -> None:
        self.sessions = sessions
        if "reads" not in self.groups:  # the server counts them, untimed (ended())
            with self.instance.admin() as conn:
                self.reads_before = session_counters.relation_reads(conn)
        self.sampled.start(sessions)
        binary = self.instance.bins / "postgres"  # the cell's version's server
        self.note = why_not_traced(binary, self.command) or ""
        if self.note or not sessions:
            self.note = self.note or "no sessions to trace"
            return
        try:
            postmaster = psutil.Process(sessions[0]).ppid()
        except psutil.Error as exc:
            self.note = f"the server's processes could not be found: {exc}"
            return
        self.trace = bpftrace.Trace(program(binary, self.groups), self.command, filters(sessions, postmaster),
                                    across_runs=True)
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
        self.writes_traced = "writes" in self.groups
        with self.instance.admin() as conn:
            names = _Names(conn, self.instance)
            waited = lock_waits(maps, names) + lwlock_waits(maps)
            files = instance_files(maps, names, self.groups)
        traced = traced_waits.with_counts(capture, waited)
        traced.files = files
        traced.events = events(maps)
        return traced

    def ended(self, capture: WaitCapture) -> WaitCapture:
        """The capture's files with each relation's reads as the server counted them, read once the
        run's sessions have exited (they report their last counts as they exit)."""
        if self.reads_before is None:
            return capture
        with self.instance.admin() as conn:
            session_counters.wait_for_exit(conn, session_counters.THESE_SESSIONS, self.sessions)
            after = session_counters.relation_reads(conn)
            capture.files = with_counted_reads(capture.files, after.since(self.reads_before), after.block_size,
                                               _Names(conn, self.instance), self.writes_traced)
        return capture


class _Names:
    """OIDs and file nodes named through the instance, each asked once."""

    def __init__(self, conn: Session, instance: Probed):
        self.conn = conn
        self.database = conn.execute(DATABASE_OID).fetchone()[0]
        spaces = dict(conn.execute(TABLESPACES).fetchall())
        self.home, self.log = instance.spec.home.name, instance.spec.log.name
        self.temp = instance.spec.temp.name if instance.spec.temp is not None else self.home
        by_tablespace = {f"ts_{p.name}".lower().replace("-", "_"): p.name for p in instance.spec.data_placements}
        self.placements = {oid: by_tablespace.get(name, self.home) for oid, name in spaces.items()}

    @functools.cache
    def relation(self, db: int, oid: int) -> str:
        if db not in (self.database, 0):
            return f"relation {oid} of database {db}"
        return self.conn.execute(RELATION_NAME, (oid,)).fetchone()[0]

    @functools.cache
    def file(self, directory: str, node: int) -> tuple[str, str, str]:
        """(relation, path relative to the data directory, placement) of a relation's file node in a
        database's directory (its OID) or the shared catalogs' (global)."""
        row = self.conn.execute(FILE_OF, (node,)).fetchone() if directory in (str(self.database), "global") else None
        if row is None:  # dropped since, or another database's
            return f"file node {node}", f"{directory}/{node}", ""
        return row[0], row[1], self.placement(row[2])

    def placement(self, tablespace: int) -> str:
        return self.placements.get(tablespace, self.home) if tablespace else self.home


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
    """Per tranche: the program keys them by their name's address, so two addresses of one name
    (a tranche an extension named in each session) are added together."""
    found: dict[str, TracedWait] = {}
    for key, (n, ns) in _stats(maps, "lwlock"):
        name = maps.get("lwlock_name", {}).get(key) or f"tranche at {int(key[0]):#x}"
        acc = found.setdefault(name, TracedWait(f"LWLock:{name}", "", 0, 0.0))
        acc.waits += n
        acc.seconds += ns / 1e9
        for bucket, count in _histogram(maps, "lwlock_hist", key).items():
            acc.histogram[bucket] = acc.histogram.get(bucket, 0) + count
    return list(found.values())


def events(maps: bpftrace.Maps) -> list[tuple[float, str, float]]:
    """Each checkpoint (at its start, its duration in seconds) and WAL switch, in order, t in
    time.monotonic() seconds: bpftrace's nsecs reads the same clock."""
    found = [(int(start) / 1e9, timeline.CHECKPOINT.name, int(ns) / 1e9)
             for (start,), ns in maps.get("checkpoint", {}).items()]
    found += [(int(at) / 1e9, timeline.WAL_SWITCH.name, 1.0) for (at,) in maps.get("wal_switch", {})]
    return sorted(found)


def _file_key(db: int, node: int, fork: int, segment: int) -> tuple[str, str]:
    """A relation file segment as (its directory's name, its own name), as the system calls see it."""
    return "global" if db == 0 else str(db), f"{node}{FORKS.get(fork, f'_fork{fork}')}" + (f".{segment}" if segment else "")


def instance_files(maps: bpftrace.Maps, names: _Names, groups: tuple[str, ...]) -> list[FileIO]:
    """Reads from the smgr trace point, writes and syncs from the system calls, joined per file; a
    file whose reads the `groups` traced not says so in its source."""
    found: dict[tuple[str, str], FileIO] = {}
    source = SOURCE if "reads" in groups else f"{SOURCE}, {file_io.READS_UNTRACED} (storlab run --trace-reads)"

    def file(directory: str, name: str) -> FileIO:
        if (directory, name) not in found:
            found[(directory, name)] = FileIO(*_named(directory, name, names), syncs=0, sync_s=0.0, source=source)
        return found[(directory, name)]

    for key, (n, ns) in _stats(maps, "read"):
        one = file(*_file_key(*(int(k) for k in key)))
        one.reads, one.read_bytes, one.read_s = n, n * BLOCK, ns / 1e9
        one.read_histogram = _histogram(maps, "read_hist", key)
    for key, (n, ns) in _stats(maps, "write"):  # a file's (dentry, inode): one file may have had two
        one = file(*_file_named(maps, key))
        one.writes, one.write_s = one.writes + n, one.write_s + ns / 1e9
        one.write_bytes += int(maps.get("write_bytes", {}).get(key, 0))
        for bucket, count in _histogram(maps, "write_hist", key).items():
            one.write_histogram[bucket] = one.write_histogram.get(bucket, 0) + count
    for key, (n, ns) in _stats(maps, "sync"):
        one = file(*_file_named(maps, key))
        one.syncs, one.sync_s = one.syncs + n, one.sync_s + ns / 1e9
    temp = _temporary_files(maps, names, TEMP_READS in groups)
    return list(found.values()) + ([temp] if temp is not None else [])


def with_counted_reads(files: list[FileIO], read: dict[str, tuple[str, int, int]], block_size: int, names: _Names,
                       writes_traced: bool) -> list[FileIO]:
    """The run's traced files with the blocks each relation read (session_counters), untimed, on its
    first file (the main fork's first segment: the server counts a relation's reads, not a file's).
    Every traced file of a relation says its reads were counted (none where none are listed); a
    relation that read but was not traced writing is added."""
    source = f"{SOURCE} + {COUNTED_READS}" if writes_traced else \
        f"{COUNTED_READS}, {file_io.WRITES_UNTRACED} (storlab run --trace-io)"
    left = dict(read)
    for one in files:
        if _is_relation_file(one.file):
            one.source = source
            if one.file in left:
                _, _, blocks = left.pop(one.file)
                one.reads, one.read_bytes = blocks, blocks * block_size
    return files + [FileIO(path, relation, names.placement(tablespace), reads=blocks, read_bytes=blocks * block_size,
                           syncs=0 if writes_traced else None, sync_s=0.0 if writes_traced else None, source=source)
                    for path, (relation, tablespace, blocks) in left.items()]


def _is_relation_file(file: str) -> bool:
    """Whether `file` (a path in the data directory) is a relation's of the workload's database or
    the shared catalogs (the server counts those reads), not the WAL, a temporary file or another
    database's relation."""
    path = Path(file)
    return RELATION_FILE.fullmatch(path.name) is not None and path.parts[0] in ("base", "global", "pg_tblspc")


def _file_named(maps: bpftrace.Maps, key: tuple) -> tuple[str, str]:
    """A written or synced file's (directory, name), as the program copied them at its first IO of the run."""
    return maps.get("file_dir", {}).get(key, "?"), maps.get("file_name", {}).get(key, f"inode {key[-1]}")


def _temporary_files(maps: bpftrace.Maps, names: _Names, reads: bool) -> FileIO | None:
    """Every temporary file of the run as one: its writes, and its reads when they were traced (the
    cell put them on a placement: temp_on), on the temp placement (--trace-io)."""
    read, written = _stats(maps, "temp_read"), _stats(maps, "temp_write")
    if not read and not written:
        return None
    source = SOURCE if reads else f"{SOURCE}, {file_io.READS_UNTRACED} (traced with --trace-io in a temp_on cell)"
    temp = FileIO(f"{TEMP_DIR}/{TEMP_DIR}*", TEMP_FILES, names.temp, syncs=0, sync_s=0.0, source=source)
    for (key, (n, ns)) in read:
        temp.reads, temp.read_s = n, ns / 1e9
        temp.read_bytes = int(maps.get("temp_read_bytes", {}).get(key, 0))
        temp.read_histogram = _histogram(maps, "temp_read_hist", key)
    for (key, (n, ns)) in written:
        temp.writes, temp.write_s = n, ns / 1e9
        temp.write_bytes = int(maps.get("temp_write_bytes", {}).get(key, 0))
        temp.write_histogram = _histogram(maps, "temp_write_hist", key)
    return temp


def _named(directory: str, name: str, names: _Names) -> tuple[str, str, str]:
    """(file, object, placement) of a file by its directory and name: a relation's file, a WAL
    segment, or another file of the server's (pg_xact/0000) named by its directory."""
    if directory == WAL_DIR:
        return f"pg_wal/{name}", "WAL", names.log
    if name == WAL_DIR:  # the directory itself, synced when a segment is added or renamed
        return "pg_wal", "WAL directory", names.log
    relation_file = RELATION_FILE.fullmatch(name)
    if relation_file and (directory.isdigit() or directory == "global"):
        node, fork, segment = relation_file.groups()
        relation, path, placement = names.file(directory, int(node))
        return path + (fork or "") + (f".{segment}" if segment else ""), \
            relation + (f" ({fork.lstrip('_')})" if fork else ""), placement
    return f"{directory}/{name}", directory, names.home
