"""What the paired-cell benchmarks share (latency_layer.py, credit_keeper.py): one `storlab run` of an
experiment whose cells run in a random order each round, so the pairs compared share the machine's
state, and its runs' transactions a second read back from the store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path


def run(prefix: str, experiment: str) -> Path:
    """The results folder of one `storlab run` of `experiment` (a TOML text), in a new folder under
    /var/tmp; SystemExit with storlab's last words if the run fails."""
    work = Path(tempfile.mkdtemp(prefix=f"storlab-{prefix}-", dir="/var/tmp"))
    work.chmod(0o755)  # the servers' OS user reaches the results' neighbours, not the results
    path = work / f"{prefix}.toml"
    path.write_text(experiment)
    done = subprocess.run([sys.executable, "-m", "storlab", "run", str(path), "--out", str(work / "r"), "--no-trace"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"storlab run failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return work / "r"


def transactions(results: Path) -> list[tuple[dict, int, float, dict]]:
    """Each run's (its cell's factors, its round, its transactions a second, its conditions)."""
    with sqlite3.connect(results / "storlab.sqlite") as db:
        rows = db.execute("SELECT c.factors, r.repetition, f.value, r.conditions FROM figures f "
                          "JOIN runs r ON r.id = f.run_id JOIN cells c ON c.id = r.cell_id "
                          "WHERE f.name = 'transactions_per_s' ORDER BY r.repetition").fetchall()
    return [(json.loads(factors), rnd, value, json.loads(conditions)) for factors, rnd, value, conditions in rows]
