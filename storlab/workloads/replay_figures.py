"""The replay kind's figures, declared once for both replayers (pgreplay on PostgreSQL, storlab's own on
MariaDB: storlab.workloads.mariadb_replay), which each read their own into them."""

from __future__ import annotations

from storlab.workloads.kind import Figure

BEHIND = Figure("behind_s", "s", "behind s", "lower")
LAG_MAX = Figure("lag_max_s", "s", "max lag s", "lower", shown=False)
SCHEDULE = Figure("schedule_s", "s", "schedule s", shown=False)
STATEMENTS = Figure("statements", "", "statements", shown=False)
ERRORS = Figure("errors", "", "errors")
FAILED_PERCENT = Figure("failed_percent", "%", "failed %", shown=False)
STATEMENT_AVG = Figure("statement_avg_ms", "ms", "avg statement ms", "lower", shown=False)
STATEMENT_MAX = Figure("statement_max_ms", "ms", "max statement ms", "lower", shown=False)
CONNECTIONS = Figure("connections", "", "connections", shown=False)
AT_ONCE = Figure("connections_max", "", "most connections at once", shown=False)
CALLS = Figure("calls_per_s", "calls/s", "calls/s", shown=False)
LAG_P50 = Figure("lag_p50_ms", "ms", "p50 lag ms", "lower", shown=False)
LAG_P99 = Figure("lag_p99_ms", "ms", "p99 lag ms", "lower")
