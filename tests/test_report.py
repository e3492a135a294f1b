"""The report of a recorded experiment (tests/data/explain: a real PostgreSQL run and `storlab io` of its
disk placement): what it shows, its PNGs, and the page as a browser renders it at a phone's width and a
desktop's (headless Chromium: no console error, no request beyond the file itself, every chart drawn,
no sideways scroll, no two texts of a chart overlapping)."""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from storlab.answer import analysis
from storlab.probes import iosizes, pressure
from storlab.answer import model
from storlab.answer.compose import compose
from storlab.report import page
from storlab.report.page import FILES as REPORT_FILES
from storlab.report.charts import plt
from storlab.results.store import Store
from tests.browser import Chromium
from tests.commands import invoke

RECORDED = Path(__file__).parent / "data" / "explain"
IO_FOLDER = "io-var-tmp-storlab-testdata-disk"
CHARTS = ["factor_effects.png", "elapsed.png", "wait_composition.png", "waits_over_time.png", "rows_per_s.png",
          "latency.png", "mb_s.png", "cpu_percent.png", "io.png"]


def copied(folder: Path) -> Path:
    """A copy in `folder` (commands may migrate a store and write beside it), the io folder beside it as
    `storlab io` leaves it by default."""
    shutil.copytree(RECORDED, folder / "results")
    return folder / "results" / "quickstart"


@pytest.fixture
def recorded(tmp_path) -> Path:
    return copied(tmp_path)


# Requests per run by power-of-two bucket, as bpftrace traced them on this machine's disk under the
# quickstart's log_on=disk cell (20,000 rows per session; the 4 MiB writes zero-fill new WAL segments).
TRACED_WRITES = {4096: 5841, 8192: 1286, 16384: 5280, 32768: 4348, 65536: 168, 131072: 61, 262144: 29, 524288: 59,
                 1048576: 22, 2097152: 20, 4194304: 60}
TRACED_READS = {4096: 198, 8192: 211, 16384: 45, 32768: 30, 65536: 11, 262144: 1}
# Each run's average read and write size and requests from /proc/diskstats, as runs of the log_on=ram
# cells kept them on this machine: every run's average is another size.
AVERAGES = [(11985, 27, 21845, 3), (12822, 23, 18432, 2), (12616, 25, 21271, 2), (7420, 69, 23004, 3)]
EVENTS = [(0.4, "event:wal_switch", 1.0), (1.2, "event:checkpoint", 0.6), (1.5, "event:wal_switch", 1.0)]


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Path:
    """The recorded experiment with what its runs did not trace there (not root): IO sizes traced in
    the log_on=disk cells and only diskstats' averages in the others, as a run keeps them, and a
    checkpoint and two WAL switches on the first run of each cell. Its report is rendered once, here:
    the tests that take it only read."""
    recorded = copied(tmp_path_factory.mktemp("traced"))
    with Store.open(recorded, create=False) as store:  # migrated: the io_sizes table is there
        runs = store.runs()
        cells = {c[0]: c[1] for c in store.db.execute("SELECT id, label FROM cells")}
    rows, events, first = [], [], set()
    for run in runs:
        if "log_on=disk" in cells[run.cell_id]:
            for direction, counts in (("read", TRACED_READS), ("write", TRACED_WRITES)):
                rows += [(run.id, "disk", direction, size, n, iosizes.TRACED) for size, n in counts.items()]
        else:  # data_files=1 the first two, data_files=4 the last two, by repetition
            read, reads, write, writes = AVERAGES[2 * ("data_files=4" in cells[run.cell_id]) + run.repetition - 1]
            rows += [(run.id, "disk", "read", read, reads, iosizes.AVERAGE),
                     (run.id, "disk", "write", write, writes, iosizes.AVERAGE)]
        if run.cell_id not in first:
            first.add(run.cell_id)
            events += [(run.id, *event) for event in EVENTS]
    with sqlite3.connect(recorded / "storlab.sqlite") as db:
        db.executemany("INSERT INTO io_sizes (run_id, placement, direction, size_bytes, requests, source) "
                       "VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.executemany("INSERT INTO timeline (run_id, t_s, metric, value) VALUES (?, ?, ?, ?)", events)
    done = invoke("report", recorded)
    assert done.exit_code == 0, done.output
    return recorded


def test_the_report_shows_what_explains_the_numbers(recorded):
    done = invoke("report", recorded)
    assert done.exit_code == 0, done.output
    page = (recorded / "report.html").read_text()
    for title in ("What explains the difference", "Where the time went: waits per cell", "Who waits on what", "Waits over time",
                  "Throughput over time", "Device capability beside the database", "Machine facts"):
        assert f"<h2>{title}</h2>" in page
    assert page.count("<svg") == len(CHARTS)
    # every file the report wrote is one it claims before writing any (so a refusal comes before the first)
    assert {p.name for p in recorded.glob("*.png")} <= set(REPORT_FILES)
    for name in CHARTS:
        image = Image.open(recorded / name)
        assert image.format == "PNG" and image.size[0] > 300 and len(image.getcolors(1 << 20)) > 10, name
    # Each factor's level against its reference, its cells matched on the other factor.
    assert "log_on=ram against log_on=disk, over 2 pairs of cells alike in the other factors" in page
    assert "<td class='l'>LWLock:WALWrite</td><td class=''>8.000</td><td class=''>1.875</td>" in page
    # Lock:extend on the partitions of the 4-file cells, each with its share.
    assert re.search(r"<td class='l'>Lock:extend</td><td class='l'>[0-9.]+</td><td class='l'>[^<]*lab_insert_\d [0-9]+ %", page)
    # The io folder beside the results is found by itself, its jobs beside what the database drove.
    assert "disk (/var/tmp/storlab-testdata/disk)" in page and "8k-randwrite" in page
    assert "database, busiest cell (data_files=" in page
    # The table is the answer's capability, as `show --json` gives it.
    (disk,) = [c for c in json.loads(invoke("show", recorded, "--json").output)["capability"] if c["placement"] == "disk"]
    for job in disk["jobs"]:
        assert f"<td class='l'>{job['job']}</td><td class=''>{job['iops']:,.0f}</td><td class=''>{job['mb_s']:,.1f}</td>" in page
    assert f"database, busiest cell ({disk['database']['label']})</td><td class=''>{disk['database']['iops_mean']:,.0f} mean" in page
    # The machine facts judged as storlab check judges them: a table, the VM's warning, no JSON dump; the
    # answer's judgement, as `show --json` gives it.
    assert "as storlab check judges these facts" in page and "warning: CPU virtualization: virtual machine" in page
    (machine,) = json.loads(invoke("show", recorded, "--json").output)["machines"]
    warned = [f for f in machine["judged"] if f["state"] == "warning"]
    assert warned and all(html.escape(f"warning: {f['group']} {f['name']}: {f['value']}: {f['reason']}") in page for f in warned)
    assert "<pre>" not in page


def test_the_headline_chart_draws_the_models_intervals_which_stay_above_zero(recorded):
    """Two runs far apart (0.05 s and 3 s): the mean's t interval reaches far below zero, a time cannot;
    the chart draws the geometric mean and its interval on the logs, as the factor table reads runs."""
    with sqlite3.connect(recorded / "storlab.sqlite") as db:
        for run_id, seconds in ((1, 0.05), (5, 3.0)):
            db.execute("UPDATE figures SET value = ? WHERE run_id = ? AND name = 'elapsed_s'", (seconds, run_id))
    answer = json.loads(invoke("show", recorded, "--json").output)
    (row,) = [r for r in answer["ranking"] if r["cell"] == "84c14c9a"]
    assert row["mean"] - row["ci_half_width"] < 0
    assert row["geometric_mean"] == pytest.approx(np.sqrt(0.05 * 3.0))
    assert 0 < row["geometric_low"] < row["geometric_mean"] < row["geometric_high"]
    drawn = page.headline_chart(model.Answer.model_validate(answer), "data_files", recorded / "elapsed.png")
    assert "<!-- elapsed s (geometric mean, 95 % CI) -->" in drawn


def test_io_sizes_are_histograms_averages_say_so_and_traced_events_are_marked(traced):
    answer = model.Answer.model_validate_json(invoke("show", traced, "--json").output)
    found = {c.label: {(s.placement, s.direction): s for s in c.sizes} for c in answer.io_sizes}
    disk, ram = found["data_files=1 log_on=disk"], found["data_files=1 log_on=ram"]
    assert {key: s.traced for key, s in disk.items()} == {("disk", "read"): TRACED_READS, ("disk", "write"): TRACED_WRITES}
    assert all(s.average_bytes is None for s in disk.values())
    # Each run's average weighted by its requests, and the requests per run.
    read, write = ram[("disk", "read")], ram[("disk", "write")]
    assert read.traced == write.traced == {}
    assert read.average_requests == pytest.approx((27 + 23) / 2) and write.average_requests == pytest.approx(2.5)
    assert read.average_bytes == pytest.approx((11985 * 27 + 12822 * 23) / 50)
    assert write.average_bytes == pytest.approx((21845 * 3 + 18432 * 2) / 5)
    page = (traced / "report.html").read_text()
    # The legend (in the SVG, each text's string in a comment): requests per run, or the averages as
    # averages; the answer's numbers, as `show --json` gives them.
    reads, writes = (sum(disk[("disk", d)].traced.values()) for d in ("read", "write"))
    assert f"<!-- data_files=1 log_on=disk: {reads:,.0f} reads, {writes:,.0f} writes per run -->" in page
    assert "<!-- data_files=1 log_on=disk: 496 reads, 17,174 writes per run -->" in page
    assert "<!-- data_files=1 log_on=ram: average only, 12 KiB per read, 20 KiB per write (25 reads, 2 writes per run)" in page
    assert "a dashed line is a cell whose runs could keep only the average size per request" in page
    assert page.count("as traced: checkpoints shaded from their start over their duration, WAL switches dotted") == 2
    for name in ("latency.png", "mb_s.png", "io_sizes.png"):
        assert Image.open(traced / name).format == "PNG"


def test_the_reports_table_of_the_kernels_view_is_the_answers_pressure(recorded):
    """The report draws `show --json`'s typed pressure: each cell's mean per run of each counter, — where
    not every run of the cell had it (its file unreadable in one run, and the caption says why)."""
    with Store.open(recorded, create=False) as store:  # migrated: the pressure tables are there
        runs = store.runs()
    source, why = "/proc/pressure/io", "line 1 is not as the kernel writes it: 'some total=12x'"
    with sqlite3.connect(recorded / "storlab.sqlite") as db:  # as the probe writes a run's
        for run in runs:
            unreadable = run.id == runs[0].id
            counters = {"nr_dirtied": 40.0 + run.id, "nr_written": 2.5 * run.repetition}
            counters |= {} if unreadable else {"io_some": 0.25 * run.id, "io_full": 0.125 * run.id}
            pressure.PROBE.write(db, run.id, pressure.Moved(counters, {source: why} if unreadable else {}))
    kernel = json.loads(invoke("show", recorded, "--json").output)["pressure"]
    assert [(c["name"], c["unit"]) for c in kernel["counters"]] == [("io_some", "s"), ("io_full", "s"),
                                                                    ("nr_dirtied", "MiB"), ("nr_written", "MiB")]
    assert kernel["unavailable"] == {source: [why]}
    for cell in kernel["cells"]:
        ids = [r.id for r in runs if r.cell_id == cell["cell"]]
        assert cell["runs"] == len(ids) and cell["means"]["nr_dirtied"] == pytest.approx(40 + sum(ids) / len(ids))
        assert (cell["means"]["io_some"] is None) == (runs[0].id in ids)
    assert invoke("report", recorded).exit_code == 0
    written = html.unescape((recorded / "report.html").read_text())
    heads = "".join(f"<th class=''>{c['label']}</th>" for c in kernel["counters"])
    assert ("<h2>The kernel's view: stalls and page-cache writes</h2><div class='scroll'><table>"
            f"<tr><th class='l'>cell</th>{heads}</tr>") in written
    for cell in kernel["cells"]:
        means = [cell["means"][c["name"]] for c in kernel["counters"]]
        shown = "".join(f"<td class=''>{'—' if mean is None else f'{mean:,.2f}'}</td>" for mean in means)
        assert f"<tr><td class='l'>{cell['label']}</td>{shown}</tr>" in written
    assert f"Unavailable in some runs: {source}: {why}." in written


def test_bars_follow_the_swept_factor_and_the_chosen_run_is_the_median_of_the_best(recorded):
    with Store.open(recorded, create=False) as store:
        results = analysis.load(store)
    answer = compose(results)
    order = [answer.labels[cell] for cell in answer.chart_order]
    assert order == ["data_files=1 log_on=disk", "data_files=4 log_on=disk", "data_files=1 log_on=ram",
                     "data_files=4 log_on=ram"]
    chosen = answer.waits_over_time
    cell = results.ranking()[0].result
    assert chosen.cell == cell.cell.id == answer.ranking[0].cell
    run = next(r for r in cell.runs if r.id == chosen.run)
    assert run.figures["elapsed_s"] == min(r.figures["elapsed_s"] for r in cell.runs)  # of two: the lower median
    other = results.cells[-1]
    assert compose(results, other.cell.id[:5]).waits_over_time.cell == other.cell.id
    # The timelines draw each cell's first run, in the charts' order.
    assert [(r.cell, r.run) for r in answer.first_runs] == [(c, results.cell(c).runs[0].id) for c in answer.chart_order]


def test_io_results_named_with_io_are_shown_and_a_wrong_folder_is_one_line(recorded, tmp_path):
    elsewhere = tmp_path / "device-tests"
    shutil.move(recorded.parent / IO_FOLDER, elsewhere)
    invoke("report", recorded)
    assert "Device capability" not in (recorded / "report.html").read_text()
    done = invoke("report", recorded, "--io", elsewhere)
    assert done.exit_code == 0, done.output
    assert "8k-randwrite" in (recorded / "report.html").read_text()
    wrong = invoke("report", recorded, "--io", tmp_path / "nothing")
    assert wrong.exit_code == 2 and wrong.output.strip().count("\n") == 0
    assert "--io" in wrong.output and "no storlab io results here" in wrong.output


def test_a_store_without_a_folder_reads_no_io_folder(recorded):
    """A shared store has no folder until a report or an export names one: `show` then finds no `storlab io`
    results beside it, and says nothing of the devices rather than fail."""
    with Store.open(recorded, create=False) as store:
        assert [c.placement for c in compose(analysis.load(store, [])).capability] == ["disk"]
        store.folder = None
        assert compose(analysis.load(store, [])).capability == []


def test_an_unknown_cell_for_the_waits_over_time_is_refused(recorded):
    done = invoke("report", recorded, "--cell", "nosuch")
    assert done.exit_code == 2 and "--cell nosuch: no such cell" in done.output


def _non_blank(png: bytes) -> bool:
    """Drawn: some ink (not only the white page) in many colours (axes, text and data, not a flat box)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3)
    inked = (pixels.min(axis=1) < 200).mean()
    return len(pixels) > 100 * 100 and inked > 0.02 and image.getcolors(20) is None  # None: more than 20 colours


FIGURES = """JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  charts: [...document.querySelectorAll('figure svg')].map(e => { const r = e.getBoundingClientRect();
    return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; })})"""


# Every text of every chart (matplotlib's SVG keeps each as a group of glyphs, its text in a comment
# before them) with its box on the page.
TEXTS = """JSON.stringify([...document.querySelectorAll('figure svg')].map(svg => {
  let title = svg.closest('figure').previousElementSibling;
  while (title && title.tagName !== 'H2') title = title.previousElementSibling;
  const texts = [...svg.querySelectorAll('g[id^="text_"]')].map(g => {
    const r = g.getBoundingClientRect();
    const note = [...g.childNodes].find(n => n.nodeType === Node.COMMENT_NODE);
    return {text: note ? note.data.trim() : g.id, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  }).filter(t => t.right > t.left && t.bottom > t.top);
  return {chart: title ? title.textContent : '?', texts};
}))"""


def overlapping(charts: list[dict], tolerance_px: float = 0.5) -> list[tuple[str, str, str]]:
    """(chart, text, text) for every two texts of one chart whose boxes overlap by more than the tolerance
    both ways."""
    found = []
    for chart in charts:
        texts = chart["texts"]
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                across = min(a["right"], b["right"]) - max(a["left"], b["left"])
                down = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
                if across > tolerance_px and down > tolerance_px:
                    found.append((chart["chart"], a["text"], b["text"]))
    return found


def test_the_report_renders_in_a_browser_and_no_two_labels_overlap(traced):
    """At a phone's width and a desktop's: one report, one browser, a page per width."""
    url = (traced / "report.html").resolve().as_uri()
    with Chromium() as browser:
        for width in (390, 1280):
            session = browser.open(url, width, 844)
            page = json.loads(browser.evaluate(FIGURES, session))
            assert len(page["charts"]) == len(CHARTS) + 1, width  # and the IO sizes
            assert page["scrollWidth"] <= page["innerWidth"] == width  # nothing makes the page scroll sideways
            for chart in page["charts"]:
                assert chart["width"] <= width and chart["height"] > 100, (width, chart)
                assert _non_blank(browser.screenshot(session, chart)), (width, chart)
            charts = json.loads(browser.evaluate(TEXTS, session))
            assert len(charts) == len(page["charts"]) and all(len(c["texts"]) > 5 for c in charts), width
            assert overlapping(charts) == [], width
        assert browser.errors() == []
        assert browser.requests() == [url, url]  # self-contained: no other file, no address


def test_the_browser_check_sees_overlapping_labels(tmp_path):
    """The overlap check can fail: tick labels too long for their ticks, drawn as they are (without
    charts.svg turning them upright), are found."""
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.bar(range(12), range(12))
    ax.set_xticks(range(12), [f"data_files={n} log_on=disk" for n in range(12)])
    drawn = io.StringIO()
    fig.savefig(drawn, format="svg")
    plt.close(fig)
    page = tmp_path / "overlap.html"
    page.write_text(f"<!doctype html><html><body><h2>labels</h2><figure>{drawn.getvalue()[drawn.getvalue().index('<svg'):]}"
                    "</figure></body></html>")
    with Chromium() as browser:
        session = browser.open(page.as_uri(), 1280, 844)
        found = overlapping(json.loads(browser.evaluate(TEXTS, session)))
    assert ("labels", "data_files=0 log_on=disk", "data_files=1 log_on=disk") in found


def test_the_browser_check_sees_errors_requests_and_blank_charts(tmp_path):
    """The checks above can fail: a page with a script error, a request for another file and an empty
    chart is caught on each count."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><body><figure><svg width='300' height='200'></svg></figure>"
                    "<img src='missing.png'><script>console.error('boom'); undefinedCall();</script>"
                    "<div style='width: 2000px'>wide</div></body></html>")
    with Chromium() as browser:
        session = browser.open(page.as_uri(), 390, 844)
        found = json.loads(browser.evaluate(FIGURES, session))
        assert found["scrollWidth"] > found["innerWidth"]
        assert not _non_blank(browser.screenshot(session, found["charts"][0]))
        errors = browser.errors()
        assert any("boom" in e for e in errors) and any("undefinedCall" in e or "Uncaught" in e for e in errors)
        assert (tmp_path / "missing.png").as_uri() in browser.requests()


def test_every_recorded_bucket_is_divided_by_the_time_it_covers(recorded):
    """The throughput buckets of each recorded run, times their widths (the last one up to the end of
    the run), give back every row: a last partial second divided by a whole one, the old false
    tail-off, would lose rows here; and no bucket is a sliver."""
    counts = []
    with Store.open(recorded, create=False) as store:
        runs = store.runs()
        for run in runs:
            buckets = [(t, v) for t, m, v in store.timeline(run.id) if m == "rows_per_s"]
            edges = [t for t, _ in buckets] + [run.figures["elapsed_s"]]
            widths = [b - a for a, b in zip(edges, edges[1:])]
            counts.append(len(buckets))
            assert min(widths) >= 0.5 and max(widths) < 1.5
            assert sum(v * w for (_, v), w in zip(buckets, widths)) == pytest.approx(run.figures["rows"], rel=1e-9)
    assert len(runs) == 8 and max(counts) >= 2
