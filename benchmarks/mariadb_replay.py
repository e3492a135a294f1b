"""What storlab's MariaDB replayer costs, and how closely it keeps its schedule.

One throwaway MariaDB with a small table; a log of `--sessions` sessions sending point SELECTs at
`--rate` statements a second in all (evenly spaced per session, the sessions staggered) for
`--seconds`, written as the general log's table dump. Each round replays it at speed 1 through the
replay kind (the replayer as the client user, in the run's clients' group, as a run does), then sends
the same statements through mariadb-slap (as many connections, no schedule: as fast as it can), and
prints the replayer's lag behind its schedule (p50, p99, max) and each client's CPU per statement
(user + system, from its exit status). Goal: p99 lag under 1 ms at a few thousand statements a second.

    .venv/bin/python benchmarks/mariadb_replay.py [--sessions 20] [--rate 2000] [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from storlab.engines import provision
from storlab.engines.mariadb import instance as mariadb
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads import kind, mariadb_log

ROWS = 10_000
SETUP = ["CREATE TABLE bench (id int PRIMARY KEY, k int NOT NULL)",
         f"INSERT INTO bench SELECT seq, seq * 7 FROM seq_1_to_{ROWS}"]
START = datetime(2026, 1, 5, 9, 0, 0)


def statement(n: int) -> str:
    return f"SELECT k FROM bench WHERE id = {n % ROWS + 1}"


def log(sessions: int, rate: float, seconds: float) -> tuple[str, int]:
    """The general log's dump: each session a statement every sessions / rate seconds."""
    every_us = sessions / rate * 1e6
    per_session = int(seconds * rate / sessions)
    events = [(s * every_us / sessions, 10 + s, "Connect", "shop@localhost on shop using Socket")
              for s in range(sessions)]
    for i in range(per_session):
        for s in range(sessions):
            events.append((1000 + i * every_us + s * every_us / sessions, 10 + s, "Query", statement(i * sessions + s)))
    end = 1000 + per_session * every_us
    events += [(end + s, 10 + s, "Quit", "") for s in range(sessions)]
    events.sort(key=lambda e: e[0])
    lines = [mariadb_log.HEADER] + [f"{(START + timedelta(microseconds=at)).strftime('%Y-%m-%d %H:%M:%S.%f')}\t{t}\t{c}\t"
                                    f"{mariadb_log.escape(a)}" for at, t, c, a in events]
    return "\n".join(lines) + "\n", per_session * sessions


def replayed(instance, text: str) -> dict[str, float]:
    work = kind("replay")
    params = work.Params.model_validate({"kind": "replay", "log": "day.tsv", "speed": 1})
    load = work.load(instance, params, {"day.tsv": text})
    try:
        load.open()
        return load.run().figures
    finally:
        load.close()


def slap_cpu_s(instance, sessions: int, statements: int, folder: Path) -> float:
    queries = folder / "queries.sql"
    queries.write_text("".join(statement(n) + ";\n" for n in range(statements)))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["mariadb-slap", "--no-defaults", f"--socket={instance.socket}", f"--user={mariadb.WORKLOAD_USER}",
                    f"--create-schema={mariadb.DATABASE}", "--no-drop", f"--concurrency={sessions}", "--iterations=1",
                    f"--number-of-queries={statements}", f"--query={queries}", "--delimiter=;"],
                   capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    text, statements = log(args.sessions, args.rate, args.seconds)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        os.chmod(folder, 0o755)
        spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": Path(folder)})
        with provision("mariadb", spec, keep=False, connections=args.sessions + 2) as instance:
            with instance.connect() as conn:
                for sql in SETUP:
                    conn.execute(sql)
            print(f"{statements:,} point SELECTs from {args.sessions} sessions at {args.rate:g}/s for {args.seconds:g} s; "
                  f"{os.cpu_count()} cores")
            rows = []
            for r in range(args.rounds):
                f = replayed(instance, text)
                slap = slap_cpu_s(instance, args.sessions, statements, Path(folder))
                replayer_us = 1e6 * f["client_cpu_s"] / f["statements"]
                slap_us = 1e6 * slap / statements
                rows.append((f["lag_p50_ms"], f["lag_p99_ms"], 1000 * f["lag_max_s"], replayer_us, slap_us))
                print(f"round {r + 1}: {f['statements']:.0f} statements, {f['errors']:.0f} errors, behind "
                      f"{f['behind_s'] * 1000:.1f} ms; lag p50 {rows[-1][0]:.3f} ms, p99 {rows[-1][1]:.3f} ms, max "
                      f"{rows[-1][2]:.3f} ms; CPU per statement: replayer {replayer_us:.1f} us, mariadb-slap "
                      f"{slap_us:.1f} us")
            median = [statistics.median(column) for column in zip(*rows)]
            print(f"median of {args.rounds} rounds: lag p50 {median[0]:.3f} ms, p99 {median[1]:.3f} ms, max "
                  f"{median[2]:.3f} ms; CPU per statement: replayer {median[3]:.1f} us, mariadb-slap {median[4]:.1f} us "
                  f"({median[3] / median[4]:.2f}x)")


if __name__ == "__main__":
    main()
