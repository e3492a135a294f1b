"""The general log as storlab dumps it from its table (`log_output = 'TABLE'`: stamps in microseconds):
`mariadb --batch`'s form, a header line, then one event a line, its fields tab-separated and escaped as
--batch escapes them. `storlab capture` writes it (instance.py) and the replay kind reads it
(storlab.workloads.mariadb_log), as it reads a dump a DBA made with `mariadb --batch` on a server."""

from __future__ import annotations

HEADER = "event_time\tthread_id\tcommand_type\targument"


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r").replace("\0", "\\0")
