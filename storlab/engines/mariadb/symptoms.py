"""Settings that let MariaDB start but fail every run, each with the words its failure says: a run
failing so, with the setting among the cell's engine_settings, is that setting's doing
(storlab.lab.setting_failures). A pattern is searched for, ignoring case, in the error and in the server's
log (its lines without their prefix); a setting turned off (0, off) is never blamed."""

SYMPTOMS: tuple[tuple[str, str], ...] = (
    ("max_statement_time", r"max_statement_time exceeded"),
    ("read_only", r"--read-only option"),
    ("wait_timeout", r"disconnected by the server because of inactivity|server has gone away"),
    ("interactive_timeout", r"disconnected by the server because of inactivity"),
    ("innodb_lock_wait_timeout", r"lock wait timeout exceeded"),
    ("max_connections", r"too many connections"),
    ("large_pages", r"large page|hugetlb"),
)
