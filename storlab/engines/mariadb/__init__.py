"""MariaDB: where it is installed (binaries.py), a throwaway server per cell and its wait probes
(instance.py), its settings (settings.py), its log (log.py), the settings that start yet fail every
run (symptoms.py), and its layout rules and limits here."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from storlab.engines import settings as common
from storlab.engines.base import Engine, Instance
from storlab.engines.mariadb import instance, probe_costs
from storlab.engines.mariadb.binaries import binaries
from storlab.engines.mariadb.log import MariadbLog
from storlab.engines.mariadb.settings import MariadbSettings
from storlab.engines.mariadb.symptoms import SYMPTOMS
from storlab.lab.layout import InstanceSpec
from storlab.probes.costs import Cost

MB = 1024**2
# Measured (docs/experiment-file.md, "Checked before anything starts"): the datadir's ibdata1 and system tables.
CATALOG_BYTES = 30 * MB
INNODB_REDO = 96 * MB  # the default innodb_log_file_size, allocated whole at install


class Mariadb(Engine):
    name = "mariadb"
    title = "MariaDB"
    layout_keys = frozenset({"data_files", "data_on", "log_on", "log_size", "page_size", "file_kind", "striping",
                             "temp_on", "server_memory"})
    unhonoured = {
        "log_growth": "MariaDB's redo log is one fixed, circular file that never grows: declare its size with log_size",
    }
    min_log_bytes = 4 * MB  # the smallest redo log InnoDB takes
    parallel_query = False
    catalog_bytes = CATALOG_BYTES
    # Its buffer pool, and the redo log's buffer.
    memory_settings = ("innodb_buffer_pool_size", "innodb_log_buffer_size")
    symptoms = SYMPTOMS

    def __init__(self):
        self.settings = MariadbSettings()
        self.log = MariadbLog(self.settings.blamed)

    def installed(self, version: str | None = None) -> None:
        binaries()

    def probe_costs(self, source: str, tracing: str | None) -> tuple[Cost, ...]:
        return probe_costs.of_run(tracing)

    def provision(self, spec: InstanceSpec, keep: bool, connections: int) -> AbstractContextManager[Instance]:
        return instance.provision(self, spec, keep, connections)

    def temp_folder_problem(self, folder: Path) -> str | None:
        return instance.temp_folder_problem(folder)

    def memory_bytes(self, name: str, value: Any) -> int:
        """A bare number counts bytes; innodb_buffer_pool_size is 128MB when unset, innodb_log_buffer_size 16MB."""
        default = {"innodb_buffer_pool_size": 128 * MB, "innodb_log_buffer_size": 16 * MB}[name]
        return common.setting_bytes({name: value}, name, default, 1)

    def log_bytes(self, log_size: int | None, written: int, settings: dict[str, Any]) -> int:
        """One circular redo file, allocated whole, whatever a run writes."""
        return log_size or common.setting_bytes(settings, "innodb_log_file_size", INNODB_REDO, 1)
