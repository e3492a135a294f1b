"""PostgreSQL: where it is installed (binaries.py), a throwaway cluster per cell and its wait probes
(instance.py), its settings (settings.py), its log (log.py), the settings that start yet fail every
run (symptoms.py), the shared memory a killed one leaves (shared_memory.py), and its layout rules and
limits here."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from storlab.engines import settings as common
from storlab.engines.base import Engine, Instance
from storlab.engines.postgres import instance, probe_costs, shared_memory, traced_waits
from storlab.engines.postgres.binaries import (
    DEFAULT_VERSION,
    HOW_TO_INSTALL,
    VERSIONS,
    bin_dir,
    installed_versions,
    server_version,
)
from storlab.engines.postgres.log import PostgresLog
from storlab.engines.postgres.settings import PostgresSettings, checkpoint_timeout_s
from storlab.engines.postgres.symptoms import SYMPTOMS
from storlab.factors import KeyProblem, show, values
from storlab.lab.layout import InstanceSpec
from storlab.probes.costs import Cost
from storlab.sizes import format_size, parse_size

MB = 1024**2
PAGE = 8192
# initdb --wal-segsize takes a power of two from 1 to 1024 MB.
WAL_SEGMENT_MB = tuple(2**i for i in range(11))
DEFAULT_WAL_SEGMENT = 16 * MB
# Measured (docs/experiment-file.md, "Checked before anything starts"): the catalog, its template having no
# template0 database.
CATALOG_BYTES = 16 * MB
MIN_WAL = 80 * MB  # the default min_wal_size: recycled segments it keeps
MAX_WAL = 1024 * MB  # the default max_wal_size: a checkpoint then lets WAL be recycled


class Postgres(Engine):
    name = "postgres"
    title = "PostgreSQL"
    layout_keys = frozenset({"data_files", "data_on", "log_on", "log_size", "log_growth", "striping",
                             "temp_on", "server_memory"})
    unhonoured = {
        "page_size": "PostgreSQL's page is fixed at 8 kB when the server is built",
        "file_kind": "PostgreSQL spreads a table over data files as partitions only",
    }
    parallel_query = True
    catalog_bytes = CATALOG_BYTES
    # Its buffers, and what one maintenance operation (an index build, a vacuum) may take at once.
    memory_settings = ("shared_buffers", "maintenance_work_mem")
    symptoms = SYMPTOMS
    versions = VERSIONS
    default_version = DEFAULT_VERSION

    def __init__(self):
        self.settings = PostgresSettings()
        self.log = PostgresLog(self.settings.blamed)

    def installed(self, version: str | None = None) -> None:
        bin_dir(version or DEFAULT_VERSION)

    def checkpoint_cycle_s(self, settings: dict[str, Any]) -> float | None:
        found = checkpoint_timeout_s(settings)
        if found is None:
            raise ValueError(f"checkpoint_timeout: {settings['checkpoint_timeout']!r} is not a time PostgreSQL reads "
                             "(such as \"30s\" or \"5min\")")
        return found

    def client_program(self, name: str, server_version: str) -> Path:
        return bin_dir(server_version.split(".")[0].split()[0]) / name  # "15.14 (Debian 15.14-1)": 15

    def installations(self) -> list[tuple[str, str | None, str]]:
        found = installed_versions()
        return [(f"{self.title} {v}", f"{server_version(found[v])}, {found[v]}" if v in found else None,
                 HOW_TO_INSTALL[v]) for v in VERSIONS]

    def trace_groups(self) -> list[tuple[str, str | None]]:
        return [(f"{self.title} {version}: {name}", why) for version, bins in installed_versions().items()
                for name, why in traced_waits.groups(bins / "postgres")]

    def probe_costs(self, source: str, tracing: str | None) -> tuple[Cost, ...]:
        return probe_costs.of_run(source, tracing)

    def provision(self, spec: InstanceSpec, keep: bool, connections: int) -> AbstractContextManager[Instance]:
        return instance.provision(self, spec, keep, connections)

    def check_layout(self, layout: Any) -> None:
        """The WAL segment size is a power of two from 1 MB to 1 GB, and min_wal_size (log_size) must
        hold two segments (PostgreSQL's own rule); the default segment is 16 MB."""
        growths = [parse_size(g) for g in values(layout.log_growth) if g is not None] or [DEFAULT_WAL_SEGMENT]
        for growth in growths:
            if growth % MB or growth // MB not in WAL_SEGMENT_MB:
                raise KeyProblem(("layout", "log_growth"), f"the WAL segment size must be a power of two from 1MB to 1GB, got {format_size(growth)}")
        for size in values(layout.log_size):
            if size is not None and parse_size(size) < 2 * max(growths):
                raise KeyProblem(("layout", "log_size"), f"{show(size)} is less than two WAL segments of {format_size(max(growths))} (PostgreSQL keeps at least two)")

    def memory_bytes(self, name: str, value: Any) -> int:
        """shared_buffers: a bare number counts 8 kB pages, 128MB when unset (initdb's); maintenance_work_mem:
        kB, 64MB."""
        default, unit = {"shared_buffers": (128 * MB, PAGE), "maintenance_work_mem": (64 * MB, 1024)}[name]
        return common.setting_bytes({name: value}, name, default, unit)

    def data_folder_problem(self, folder: Path) -> str | None:
        return instance.tablespace_problem(folder)

    def log_bytes(self, log_size: int | None, written: int, settings: dict[str, Any]) -> int:
        """The WAL it keeps (min_wal_size, or log_size) up to what a run writes before checkpoints
        recycle it (max_wal_size), plus the segment being written."""
        floor = max(log_size or 0, common.setting_bytes(settings, "min_wal_size", MIN_WAL, MB))
        ceiling = common.setting_bytes(settings, "max_wal_size", max(2 * (log_size or 0), MAX_WAL), MB)
        return max(floor, min(written, ceiling)) + DEFAULT_WAL_SEGMENT

    def release_shared_memory(self, dirs: list[Path], data_dirs: list[list[int]]) -> list[str]:
        return shared_memory.release(dirs, {(dev, ino): uid for dev, ino, uid in data_dirs})
