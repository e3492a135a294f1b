"""Settings that let PostgreSQL start but fail every run, each with the words its failure says: a run
failing so, with the setting among the cell's engine_settings, is that setting's doing
(storlab.lab.setting_failures). A pattern is searched for, ignoring case, in the error and in the server's
log (its lines without their prefix); a setting turned off (0, off) is never blamed."""

SYMPTOMS: tuple[tuple[str, str], ...] = (
    ("statement_timeout", r"canceling statement due to statement timeout"),
    ("lock_timeout", r"canceling statement due to lock timeout"),
    ("transaction_timeout", r"due to transaction timeout"),
    ("idle_session_timeout", r"idle-session timeout"),
    ("idle_in_transaction_session_timeout", r"idle-in-transaction timeout"),
    ("default_transaction_read_only", r"in a read-only transaction"),
    ("huge_pages", r"could not map anonymous shared memory|huge pages"),
    ("temp_file_limit", r"temporary file size exceeds temp_file_limit"),
    ("max_connections", r"too many clients already|remaining connection slots are reserved"),
    # No schema on the path exists (a custom setup may make one, so it cannot be told before): the
    # workload's first CREATE has nowhere to go.
    ("search_path", r"no schema has been selected to create in"),
)
