"""The report of a recorded experiment (tests/data/explain: a real PostgreSQL run and `storlab io` of its
disk placement): what it shows, its PNGs, and the page as a phone's browser renders it (headless
Chromium: no console error, no request beyond the file itself, every chart drawn, no sideways scroll)."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.browser import Chromium
from tests.commands import invoke

RECORDED = Path(__file__).parent / "data" / "explain"
IO_FOLDER = "io-var-tmp-storlab-testdata-disk"
CHARTS = ["factor_effects.png", "elapsed.png", "wait_composition.png", "waits_over_time.png", "rows_per_s.png",
          "latency_p99_ms.png", "mb_s.png", "cpu_percent.png", "io.png"]



@pytest.fixture
def recorded(tmp_path) -> Path:
    """A copy (commands may migrate a store and write beside it), the io folder beside it as `storlab io`
    leaves it by default."""
    shutil.copytree(RECORDED, tmp_path / "results")
    return tmp_path / "results" / "quickstart"


def test_the_report_shows_what_explains_the_numbers(recorded):
    done = invoke("report", recorded)
    assert done.exit_code == 0, done.output
    page = (recorded / "report.html").read_text()
    for title in ("What explains the difference", "Where the time went: waits per cell", "Who waits on what", "Waits over time",
                  "Throughput over time", "Device capability beside the database", "Machine facts"):
        assert f"<h2>{title}</h2>" in page
    assert page.count("<svg") == len(CHARTS)
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
    # The machine facts judged as storlab check judges them: a table, the VM's warning, no JSON dump.
    assert "as storlab check judges these facts" in page and "warning: CPU virtualization: virtual machine" in page
    assert "<pre>" not in page


def test_bars_follow_the_swept_factor_and_the_chosen_run_is_the_median_of_the_best(recorded):
    from storlab.answer import analysis
    from storlab.report import wait_report
    from storlab.results.store import Store

    with Store.open(recorded, create=False) as store:
        results = analysis.load(store)
    order = [c.cell.label for c in wait_report.in_factor_order(results)]
    assert order == ["data_files=1 log_on=disk", "data_files=4 log_on=disk", "data_files=1 log_on=ram",
                     "data_files=4 log_on=ram"]
    cell, run = wait_report.chosen_run(results, None)
    assert cell is results.ranking()[0].result
    assert run.figures["elapsed_s"] == min(r.figures["elapsed_s"] for r in cell.runs)  # of two: the lower median
    other = results.cells[-1]
    assert wait_report.chosen_run(results, other.cell.id)[0] is other


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


def test_an_unknown_cell_for_the_waits_over_time_is_refused(recorded):
    done = invoke("report", recorded, "--cell", "nosuch")
    assert done.exit_code == 2 and "--cell nosuch: no such cell" in done.output


def _non_blank(png: bytes) -> bool:
    """Drawn: some ink (not only the white page) in many colours (axes, text and data, not a flat box)."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    inked = (pixels.min(axis=1) < 200).mean()
    return len(pixels) > 100 * 100 and inked > 0.02 and len(np.unique(pixels, axis=0)) > 20


FIGURES = """JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  charts: [...document.querySelectorAll('figure svg')].map(e => { const r = e.getBoundingClientRect();
    return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; })})"""


def test_the_report_renders_in_a_phone_browser(recorded):
    assert invoke("report", recorded).exit_code == 0
    url = (recorded / "report.html").resolve().as_uri()
    with Chromium() as browser:
        session = browser.open(url, 390, 844)
        page = json.loads(browser.evaluate(FIGURES, session))
        assert len(page["charts"]) == len(CHARTS)
        assert page["scrollWidth"] <= page["innerWidth"] == 390  # nothing makes the page scroll sideways
        for chart in page["charts"]:
            assert chart["width"] <= 390 and chart["height"] > 100, chart
            assert _non_blank(browser.screenshot(session, chart)), chart
        assert browser.errors() == []
        assert browser.requests() == [url]  # self-contained: no other file, no address


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
    from storlab.results.store import Store

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
