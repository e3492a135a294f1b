"""IO per file of a MariaDB instance over a run: performance_schema's `file_summary_by_instance`
(the file IO instruments are on from start), read before and after the load and differenced. Every
thread's IO counts (the page cleaner's writes too), as SQL Server's sys.dm_io_virtual_file_stats
counts a file's. MariaDB 10.11 does not instrument its redo log's IO: the log is not among the files
(its counters stand beside the wait table). Times are the server's own timers (picoseconds) around
each read and write; syncs and opens are one "misc" figure there, so syncs are not shown apart, and
there is no histogram per file."""

from __future__ import annotations

from pathlib import Path

from storlab.probes.waits import FileIO
from storlab.probes.waits import WaitCapture, WaitProbe
from storlab.probes.target import Probed
from storlab.session import Session

SOURCE = "performance_schema"
FILE_SUMMARY = """
    SELECT FILE_NAME, EVENT_NAME, COUNT_READ, SUM_NUMBER_OF_BYTES_READ, SUM_TIMER_READ,
           COUNT_WRITE, SUM_NUMBER_OF_BYTES_WRITE, SUM_TIMER_WRITE
    FROM performance_schema.file_summary_by_instance"""
# A file's row leaves file_summary_by_instance when the file is deleted, as an implicit temporary
# table's Aria files are once its query ends: the IO of these instruments that no file still there
# accounts for is the deleted temporary tables'. (A sort's merge chunks in tmpdir are not instrumented.)
TEMPORARY_TABLES = ("wait/io/file/aria/MAD", "wait/io/file/aria/MAI")
BY_INSTRUMENT = """
    SELECT EVENT_NAME, COUNT_READ, SUM_NUMBER_OF_BYTES_READ, SUM_TIMER_READ,
           COUNT_WRITE, SUM_NUMBER_OF_BYTES_WRITE, SUM_TIMER_WRITE
    FROM performance_schema.file_summary_by_event_name WHERE EVENT_NAME IN %s"""
TEMP_DIR = "tmp"  # the instance's tmpdir on the temp placement (instance.provision)
TEMP_FILES = "temporary files"
DELETED = "temporary tables (deleted)"

Reading = dict[tuple[str, str], tuple[int, ...]]


def read(conn: Session) -> Reading:
    """(file, instrument) -> (reads, bytes read, read ps, writes, bytes written, write ps); the
    temporary tables' instruments' totals under the file name ""."""
    found = {(name, event): tuple(int(v or 0) for v in rest)
             for name, event, *rest in conn.execute(FILE_SUMMARY).fetchall()}
    found.update({("", event): tuple(int(v or 0) for v in rest)
                  for event, *rest in conn.execute(BY_INSTRUMENT, (TEMPORARY_TABLES,)).fetchall()})
    return found


def _moved(before: Reading, after: Reading, key: tuple[str, str]) -> list[int]:
    return [b - a for a, b in zip(before.get(key, (0,) * 6), after[key])]


def files(before: Reading, after: Reading, roots: dict[str, Path], temp: str = "") -> list[FileIO]:
    """The files that moved between two readings, named relative to the placement they are on; the
    files in the instance's temporary directory, and the deleted temporary tables (on `temp`, the
    temp placement: "" when tmpdir is the machine's), as temporary files."""
    found = []
    deleted = {event: _moved(before, after, ("", event)) for event in TEMPORARY_TABLES if ("", event) in after}
    for (name, event), now in after.items():
        if not name:
            continue
        moved = _moved(before, after, (name, event))
        if event in deleted:
            deleted[event] = [d - m for d, m in zip(deleted[event], moved)]
        if moved[0] <= 0 and moved[3] <= 0:
            continue
        placement, relative = _where(Path(name), roots)
        found.append(FileIO(relative, TEMP_FILES if Path(relative).parts[:1] == (TEMP_DIR,) else Path(name).stem,
                            placement, reads=moved[0], read_bytes=moved[1], read_s=moved[2] / 1e12,
                            writes=moved[3], write_bytes=moved[4], write_s=moved[5] / 1e12, source=SOURCE))
    left = [sum(column) for column in zip(*deleted.values())] if deleted else [0] * 6
    if left[0] > 0 or left[3] > 0:
        found.append(FileIO(DELETED, TEMP_FILES, temp, reads=left[0], read_bytes=left[1], read_s=left[2] / 1e12,
                            writes=left[3], write_bytes=left[4], write_s=left[5] / 1e12, source=SOURCE))
    return found


def _where(path: Path, roots: dict[str, Path]) -> tuple[str, str]:
    for placement, root in roots.items():
        if path.is_relative_to(root):
            return placement, str(path.relative_to(root))
    return "", str(path)


class FileSummaryProbe:
    """The instance's wait probe, with its files' IO read around the same load."""

    def __init__(self, waits: WaitProbe, instance: Probed):
        self.waits = waits
        self.instance = instance
        self.source = waits.source

    def start(self, sessions: list[int]) -> None:
        with self.instance.admin() as conn:
            self.before = read(conn)
        self.waits.start(sessions)

    def so_far(self) -> dict[str, float]:
        return self.waits.so_far()

    def stop(self) -> WaitCapture:
        capture = self.waits.stop()
        with self.instance.admin() as conn:
            after = read(conn)
        temp = self.instance.spec.temp.name if self.instance.spec.temp is not None else ""
        capture.files = files(self.before, after, {name: root.resolve() for name, root in self.instance.roots.items()}, temp)
        return capture

    def ended(self, capture: WaitCapture) -> WaitCapture:
        return capture  # performance_schema counts as the sessions go: stop() read it all
