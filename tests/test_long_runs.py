"""A long run costs what a short one does, a second at a time: the kept trace's flush reads each byte of
bpftrace's output once however long its maps take to print, and the stop check of until settled reads
only the runs recorded since the check before, with the same answer as a load that reads them all."""

import json
import os
import random
import shutil
import stat
import sys
from pathlib import Path

from storlab.answer import analysis
from storlab.answer.compose import compose
from storlab.probes import bpftrace, waiting_tasks
from storlab.probes.waits import WaitCapture
from storlab.results.runs import RunResult
from storlab.results.store import Store

QUICKSTART = Path(__file__).parent / "data" / "explain" / "quickstart"

# Prints what bpftrace prints: the attach line, then each run's maps as one JSON line per map, in small
# pieces over many of the flush's polls, its flush line cut in two, then the cleared line.
PRINTER = """#!{python}
import json, re, sys, time
program = sys.argv[sys.argv.index("-e") + 1]
base = re.search(r"args->pid == (\\d+) && args->sig == 0", program).group(1)
out = sys.stdout.buffer
def say(text, piece=700):
    for at in range(0, len(text), piece):
        out.write(text[at:at + piece]); out.flush(); time.sleep(0.002)
say(b"Attaching 3 probes...\\n__BPFTRACE_NOTIFY_PROBES_ATTACHED\\n")
for maps in json.load(open({runs!r})):
    say(maps.encode())
    say(b"storlab flu"); time.sleep(0.03); say(f"shed {{base}}\\nstorlab cleared {{base}}\\n".encode())
"""


def maps_text(first: int, keys: int) -> str:
    """One run's maps as bpftrace -f json prints them: a map of `keys` keys, a histogram, a stats map."""
    counts = {str(k): k % 7 + 1 for k in range(first, first + keys)}
    lines = [{"type": "map", "data": {"@offsets": counts}},
             {"type": "hist", "data": {"@lat": [{"min": 2 ** i, "max": 2 ** (i + 1) - 1, "count": i + first}
                                                for i in range(20)]}},
             {"type": "stats", "data": {"@lock": {"5,0,0": {"count": first, "average": 3, "total": 3 * first}}}}]
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_a_kept_trace_s_flush_reads_each_byte_once_and_gives_what_a_full_read_would(tmp_path, monkeypatch):
    """Two runs of a kept trace whose maps print over many polls (a long run's are large): each run's
    maps are what parsing its whole output gives, and no byte of the output is read twice (every poll
    read everything since the run's start, so a flush cost the square of its maps' length)."""
    runs = [maps_text(0, 3000), maps_text(3000, 3000)]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    printer = tmp_path / "bpftrace"
    printer.write_text(PRINTER.format(python=sys.executable, runs=str(tmp_path / "runs.json")))
    printer.chmod(printer.stat().st_mode | stat.S_IXUSR)
    read = []
    reading = bpftrace.read_since
    monkeypatch.setattr(bpftrace, "read_since", lambda output, offset: read.append(reading(output, offset)) or read[-1])
    trace = bpftrace._Bpftrace("BEGIN { }", str(printer), ())
    try:
        assert trace.start(), trace.note
        flushed = [trace.flush(), trace.flush()]
        written = os.fstat(trace._output.fileno()).st_size
    finally:
        trace.kill()
    assert flushed[0] == bpftrace.parse(runs[0]) and flushed[1] == bpftrace.parse(runs[1]), trace.note
    assert flushed[1]["offsets"][("5999",)] == 5999 % 7 + 1 and ("0",) not in flushed[1]["offsets"]
    assert len(read) > 10  # printed over many polls, as a long run's maps are
    assert sum(len(piece) for piece in read) <= written


def copy_of(store: Store, run, kept: dict) -> RunResult:
    units = store.units()
    return RunResult(run.started_at, [(name, value, units[name]) for name, value in run.figures.items()],
                     WaitCapture(run.wait_source, store.waits(run.id), run.wait_extras), run.engine_version,
                     store.timeline(run.id), run.conditions, kept)


def test_the_stop_check_reads_only_new_runs_and_answers_as_a_load_of_them_all(tmp_path):
    """Rounds of the recorded quickstart's runs added one after another to two stores (their new runs
    copies of different recorded ones under the same run ids), a cached load of each after every round
    as the stop check makes it: the answer (every field of `show --json`) is the one a load reading every
    run gives, and only the runs recorded since the load before are read."""
    noise = random.Random(4)
    with Store.open(copied(tmp_path / "a")) as one, Store.open(copied(tmp_path / "b")) as other:
        recorded = one.runs()
        kept = {r.id: one.kept(waiting_tasks.PROBE, r.id) for r in recorded}
        read: list[int] = []
        waits = one.waits
        one.waits = lambda run_id: read.append(run_id) or waits(run_id)
        before: set[int] = set()
        for rep in range(3, 7):
            for store, source in ((one, rep % 2 + 1), (other, (rep + 1) % 2 + 1)):
                for run in recorded:
                    if run.repetition == source:
                        result = copy_of(one, run, {waiting_tasks.PROBE.name: kept[run.id]})
                        result.figures = [(n, v * noise.lognormvariate(0, 0.1), u) for n, v, u in result.figures]
                        store.record_run(run.cell_id, rep, result, run.facts_id)
            for store in (one, other):
                read.clear()
                cached = analysis.load(store, cached=True)
                if store is one:
                    new = {r.id for r in one.runs()} - before
                    assert sorted(read) == sorted(new)
                    before |= new
                fresh = analysis.load(store)
                assert cached.rounds == fresh.rounds == rep
                assert analysis.verdicts_line(cached) == analysis.verdicts_line(fresh)
                assert compose(cached).model_dump_json() == compose(fresh).model_dump_json()


def copied(folder: Path) -> Path:
    shutil.copytree(QUICKSTART, folder)
    return folder
