"""The report in tables and marks, every figure read from the answer (issue 46): what each run held, the
IO caps, credit buckets and memory limits, and the warnings are tables whose cells are the answer's
(`show --json`), the same warnings `show` prints; the timelines mark what the answer says of the runs
they draw; the rate chart draws on each curve exactly the points the answer calls sustained.

On the recorded quickstart (tests/data/explain, a real PostgreSQL run) with what its runs did not
have added as their probes keep it: caps, a memory limit and a credit bucket on two cells, and the
checkpoints each run counted (one in one run of a third cell)."""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from storlab.answer import analysis, rate_curve
from storlab.answer.analysis import CellResult
from storlab.answer.compose import compose
from storlab.answer.stats import summarize
from storlab.report import io_report, rate_chart
from storlab.results.experiment_record import CellRecord
from storlab.results.runs import RunRecord
from storlab.results.store import Store
from storlab.timeline import CHECKPOINT_SEEN
from tests.commands import invoke
from tests.page_tables import tables

RECORDED = Path(__file__).parent / "data" / "explain"
CAPPED, BUCKETED, CHECKPOINTED = "84c14c9a", "0e002ca6", "85accf38"
MIB = 2**20
DRY_AT_S = 0.6


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("limited")
    shutil.copytree(RECORDED, base / "results")
    folder = base / "results" / "quickstart"
    with Store.open(folder, create=False) as store:  # migrated: the limits' and checkpoints' tables are there
        runs = {(r.cell_id, r.repetition): r.id for r in store.runs()}
    with sqlite3.connect(folder / "storlab.sqlite") as db:
        for rep, at_cap, written, charged in ((1, 0.9, 200 * MIB, 120 * MIB), (2, 0.5, 100 * MIB, 100 * MIB)):
            db.execute("INSERT INTO io_caps (run_id, device, placements, cgroup_version, max_sectors_kb, write_iops, "
                       "served_read_ios, served_write_ios, served_read_bytes, served_write_bytes, charged_read_ios, "
                       "charged_write_ios, charged_read_bytes, charged_write_bytes, at_cap_s, run_s) "
                       "VALUES (?, 'loop9', 'disk', 1, 512, 300, 10, 900, ?, ?, 10, 600, ?, ?, ?, 2.0)",
                       (runs[CAPPED, rep], 4 * MIB, written, 4 * MIB, charged, 2.0 * at_cap))
            db.execute("INSERT INTO memory_limit (run_id, limit_bytes, cgroup_version, hits, oom_kills, peak_bytes) "
                       "VALUES (?, ?, 1, ?, 0, ?)", (runs[CAPPED, rep], 256 * MIB, 3 if rep == 1 else 0, 250 * MIB))
            db.execute("INSERT INTO io_buckets (run_id, device, placements, unit, baseline, burst, size, start, dry_at_s, "
                       "dry_s, spent, left_end, run_s) VALUES (?, 'loop7', 'disk', 'iops', 30, 300, 1350, 1350, ?, ?, 1500, "
                       "0, 2.0)", (runs[BUCKETED, rep], DRY_AT_S if rep == 1 else None, 1.4 if rep == 1 else 0.0))
        for (cell, rep), run_id in runs.items():
            db.execute("INSERT INTO checkpoints (run_id, counter_before, counter_after, counted, setting, value, cycle_s, "
                       "cycle_bytes, log_bytes) VALUES (?, 0, ?, ?, 'checkpoint_timeout', '5min', 300, NULL, 1e7)",
                       (run_id, *(2 * [1 if (cell, rep) == (CHECKPOINTED, 1) else 0])))
        db.execute("INSERT INTO timeline (run_id, t_s, metric, value) VALUES (?, 0.5, ?, 1)",
                   (runs[CHECKPOINTED, 1], CHECKPOINT_SEEN.name))
    done = invoke("report", folder)
    assert done.exit_code == 0, done.output
    return folder


@pytest.fixture(scope="module")
def answer(limited) -> dict:
    done = invoke("show", limited, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def page(limited) -> str:
    return (limited / "report.html").read_text()


def test_what_each_run_held_is_a_table_of_the_answers_runs(answer, page):
    found = tables(page)["What each run held: steady state, warm-up, checkpoints"]
    assert found[0][:4] == ["cell", "round", "measured s", "steady"]
    held = {(row[0], int(row[1])): row for row in found[1:]}
    runs = [(c["label"], r) for c in answer["steadiness"]["cells"] for r in c["runs"]]
    assert len(held) == len(runs) == 8
    for label, run in runs:
        row = held[label, run["repetition"]]
        assert row[2] == f"{run['measured_s']:.1f}" and row[3] == "not judged"
        times = "".join(f" at {t:g} s" for t in run["checkpoint_times_s"])
        assert row[7] == f"{run['checkpoints']}{times}" and row[8] == "checkpoint_timeout 5min"
    assert held["data_files=1 log_on=ram", 1][7] == "1 at 0.5 s"  # the one checkpoint counted
    # No sentence per run: the answer's per-run words are not on the page.
    assert not any(line in html.unescape(page) for c in answer["steadiness"]["cells"] for line in c["lines"])


def test_caps_buckets_and_memory_are_tables_of_the_answers_rows(answer, page):
    found = tables(page)["IO caps, credit buckets and the server's memory"]
    limits = answer["limits"]
    (cap,), (bucket,), (memory,) = limits["caps"], limits["buckets"], limits["memory"]
    cap_row = next(r for r in found if r[1] == "disk on loop9")
    assert cap_row[0] == cap["label"] and "300 IOPS" in cap_row[2]
    assert cap_row[3] == f"{100 * cap['at_cap_share']:.0f} %" == "70 %"
    assert cap_row[4] == "150 MiB" and cap_row[5] == "110 MiB (73 %)"  # the means of its two runs
    bucket_row = next(r for r in found if r[1] == "disk on loop7")
    assert bucket_row[0] == bucket["label"] and bucket_row[3] == f"{len(bucket['dry'])} of {bucket['runs']}" == "1 of 2"
    assert bucket_row[4] == f"round 1 at {DRY_AT_S:.1f} s" and bucket_row[5] == f"{100 * bucket['dry_share']:.0f} %"
    memory_row = next(r for r in found if r[1] == "256 MiB")
    assert memory_row[0] == memory["label"] and memory_row[2] == f"{memory['runs_hit']} of {memory['runs']}" == "1 of 2"
    # Tables, not the sentences `show --details` says them in.
    assert not any(row["said"] in html.unescape(page) for row in limits["caps"] + limits["buckets"] + limits["memory"])


def test_the_warnings_are_the_same_in_the_terminal_the_json_and_the_report(limited, answer, page):
    found = tables(page)["What to keep in mind"]
    assert found[0] == ["warning", "cells", "runs", "what it means"]
    labels = answer["labels"]
    expected = [[c["kind"], ", ".join(f"{labels[cell]} ({cell})" for cell in c["cells"]),
                 "—" if c["runs"] is None else f"{c['runs']} of {c['of_runs']}", c["meaning"]] for c in answer["concerns"]]
    assert found[1:] == expected
    kinds = {c["kind"]: c for c in answer["concerns"]}
    assert kinds["no checkpoint"]["cells"] == [r["cell"] for r in answer["ranking"] if r["cell"] != CHECKPOINTED]
    assert kinds["no checkpoint"]["runs"] == 6 and kinds["no checkpoint"]["of_runs"] == 8
    assert kinds["unequal checkpoints"]["cells"] == [CHECKPOINTED]
    shown = invoke("show", limited)
    assert shown.exit_code == 0
    said = " ".join(shown.stdout.split())
    assert all(" ".join(c["line"].split()) in said for c in answer["concerns"])


def test_the_timelines_mark_what_the_answer_says_of_the_runs_they_draw(answer, page):
    first = {r["cell"]: r["repetition"] for r in answer["first_runs"]}
    assert first[CHECKPOINTED] == 1 and first[BUCKETED] == 1
    latency = page[page.index("<h2>Transaction latency over time"):]
    latency = latency[:latency.index("</figure>")]
    held = {(c["cell"], r["repetition"]): r for c in answer["steadiness"]["cells"] for r in c["runs"]}
    drawn = [held[cell, rep] for cell, rep in first.items()]
    dry = [d for b in answer["limits"]["buckets"] for d in b["dry"] if d["round"] == first[b["cell"]]]
    assert [r["checkpoint_times_s"] for r in drawn if r["checkpoint_times_s"]] == [[0.5]] and len(dry) == 1
    # Each kind of mark the answer has for a drawn run, in the legend and the caption; no other.
    marks = [(any(r["found_warmup_s"] for r in drawn), "warm-up found (MSER-5)", "the warm-up MSER-5 found dashed"),
             (True, "checkpoint counted", "the checkpoints counted as triangles along the top"),
             (True, "credit bucket ran dry", "the moment a credit bucket ran dry dash-dotted")]
    for has, legend, _ in marks:
        assert (f"<!-- {legend} -->" in latency) == has, legend
    said = ", ".join(words for has, _, words in marks if has)
    assert f"marked from the answer: {said}</figcaption>" in html.unescape(latency)


def test_the_cap_in_force_is_the_answers_on_the_device_s_iops(answer, page):
    """The capped cell's write cap, set once, is one step a run in the answer and a line on the first run's
    panel of the device's IOPS (its level read back from the SVG: tests/test_report_timeline.py); the other
    cells have none."""
    held = sorted((c["cell"], c["round"], c["key"], [s["cap"] for s in c["steps"]]) for c in answer["limits"]["in_force"])
    assert held == [(CAPPED, 1, "write_iops", [300]), (CAPPED, 2, "write_iops", [300])]
    iops = page[page.index("<h2>Device IOPS over time against the IOPS caps"):]
    iops = iops[:iops.index("</figure>")]
    drawn = re.findall(r'id="cap-in-force-iops-run(\d+)-(\d+)"', iops)
    assert drawn == [(str(r["run"]), "1") for r in answer["first_runs"] if r["cell"] == CAPPED]
    assert "<!-- cap in force -->" in iops and "<!-- write cap in force (disk on loop9): 300 -->" in iops


def test_the_waits_are_coloured_in_the_answers_rank(answer, page):
    """The composition chart's legend lists the waits in the answer's rank, not one the report makes."""
    composition = page[page.index("<h2>Where the time went"):]
    composition = composition[:composition.index("</figure>")]
    legend = [w for w in re.findall(r"<!-- (.*?) -->", composition) if w in answer["waits_ranked"]]
    drawn = list(dict.fromkeys(legend))
    assert drawn == [w for w in answer["waits_ranked"] if w in drawn] and len(drawn) >= 5


def test_the_chart_beside_the_headline_reads_its_factor_and_figures_from_the_answer(limited, tmp_path):
    """The quickstart's figures are rows/s and ms, none in the headline's seconds: no chart; given one by
    the answer, it is drawn against the answer's swept factor, titled by the answer's labels."""
    with Store.open(limited, create=False) as store:
        answer = compose(analysis.load(store))
    assert answer.swept == "data_files" and answer.beside_headline == [] and not answer.swept_log
    assert io_report.beside_chart(answer, tmp_path / "none.png") is None
    title, drawn = io_report.beside_chart(answer.model_copy(update={"beside_headline": ["latency_p99_ms"]}),
                                          tmp_path / io_report.BESIDE_FILE)
    assert title == "elapsed s and p99 txn ms against data_files"
    assert "<!-- data_files -->" in drawn and "<!-- p99 txn ms (mean) -->" in drawn and "dop" not in drawn


# -- the rate curve ------------------------------------------------------------------------------------


def _cell(level, sustained: list[bool], tps: float, p99: float) -> CellResult:
    """A rate's cell whose runs kept up with its schedule or not, one run a round."""
    records = [RunRecord(i, f"r{level}", i, 0.0, "", {}, "15", 1,
                         {"transactions_per_s": tps, "latency_p99_ms": p99, "latency_p50_ms": p99 / 4,
                          "sustained_percent": 100.0 if kept else 0.0, "target_rate": level})
               for i, kept in enumerate(sustained, 1)]
    return CellResult(CellRecord(f"r{level}", f"rate={level}", {"workload.rate": level}), records,
                      {n: summarize([r.figures[n] for r in records]) for n in records[0].figures}, [], "", {})


def test_the_rate_chart_draws_on_the_curve_exactly_the_points_the_answer_calls_sustained(tmp_path):
    """Sustained in every run, in half of them (the old chart's >= 0.5 kept it, the answer's > 0.5 does
    not), in a third, in none: each point off the curve is labelled with the answer's words, where the
    terminal says them, and only those."""
    cells = [_cell(1150, [True, True], 1150, 4), _cell(1650, [True, True], 1650, 5), _cell(2150, [True, True], 2150, 7),
             _cell(2650, [True, False], 2400, 60), _cell(3150, [True, False, False], 2500, 200),
             _cell(3650, [False, False], 2450, 900)]
    points = [rate_curve.Point(c.cell.factors["workload.rate"], c, c.figures["transactions_per_s"],
                               {f: c.figures[f] for f in ("latency_p50_ms", "latency_p99_ms")},
                               c.figures["sustained_percent"].mean / 100) for c in cells]
    curve = rate_curve.Curve("log_on=disk", points, None, rate_curve.knee(points))
    found = rate_curve.typed(rate_curve.RateAnswer([curve], None))
    (layout,) = found.layouts
    assert [p.kept_up for p in layout.points] == [True, True, True, False, False, False]
    drawn = rate_chart.chart(found, "t", tmp_path / "rate_curve.png")
    said = " ".join(rate_curve.lines(found))
    for p in layout.points:
        words = rate_curve.sustained_words(p)
        if p.kept_up:
            assert drawn.count(f"<!-- {p.level} -->") == 1 and f"<!-- {p.level} " not in drawn.replace(f"<!-- {p.level} -->", "")
        else:
            assert drawn.count(f"<!-- {p.level} {words} -->") == 1, (p.level, words)
            assert f"{p.level}: " in said and words in said
    assert "<!-- 2650 sustained in 50 % of runs -->" in drawn
