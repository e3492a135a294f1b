"""`warmup_s = "found"`: the warm-up MSER-5 finds in a run's per-second throughput is cut from its
figures once it has ended. The cut is the one the answer says it found, pgbench's figures are recomputed
from its log after it, a kind that cannot recompute its figures refuses it in one line, and cutting keeps
the false "different" rate where it is when the cells' warm-ups differ (simulated)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from storlab import timeline
from storlab.answer import steadiness
from storlab.engines import provision
from storlab.lab.layout import CellLayout, spec_for
from storlab.workloads.kind import found_cut
from storlab.workloads.pgbench import _Before
from tests import simulate
from tests.commands import invoke
from tests.conftest import prepared
from tests.experiments import BASE, PGBENCH, RAMP_SQL, SYSBENCH, changed



@pytest.mark.parametrize("base, old, new, line, why", [
    (SYSBENCH, "duration_s = 20", 'duration_s = 20\nwarmup_s = "found"', 17, "its percentiles come from one histogram"),
    (BASE, "batch = 100", 'batch = 100\nwarmup_s = "found"', 19, "its figures time a fixed amount of work"),
], ids=["sysbench", "random-insert"])
def test_a_kind_that_cannot_recompute_its_figures_refuses_a_found_warmup_in_one_line(lab_root, base, old, new, line, why):
    path = lab_root / "fz.toml"
    path.write_text(changed(old, new, lab_root / "disk", base))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith(f'storlab: fz.toml:{line}: workload.warmup_s: "found" cannot be cut from this '
                                    f"kind's runs: {why}")
    assert result.stderr.endswith("; give the warm-up in seconds\n") and result.stderr.count("\n") == 1


def test_pgbench_takes_a_found_warmup_as_a_factor_level(lab_root):
    path = lab_root / "fz.toml"
    path.write_text(changed("duration_s = 20", 'duration_s = 20\nwarmup_s = [2, "found"]', lab_root / "disk", PGBENCH))
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "warmup_s=found" in result.stdout and "warmup_s=2" in result.stdout


def ramp(seconds: int, warmup: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(seconds, dtype=float)
    return t, np.where(t < warmup, 400.0, 1000.0) * rng.lognormal(0, 0.08, seconds)


def test_the_warmup_cut_is_the_one_the_answer_says_it_found():
    rng = np.random.default_rng(7)
    for warmup in (4, 9, 15):
        t, x = ramp(40, warmup, rng)
        points = [(float(s), timeline.TRANSACTIONS_PER_S.name, float(v)) for s, v in zip(t, x)]
        cut = found_cut(points, timeline.TRANSACTIONS_PER_S)
        run = steadiness.RunSeries(1, cut, 40.0, {timeline.TRANSACTIONS_PER_S.name: (t, x)}, [], None, True)
        said = steadiness.state(run)
        assert said.found_warmup_s == cut and warmup <= cut <= 20  # past the step, in the first half
        assert said.steady and f"warm-up found and cut {steadiness._seconds(cut)}" in steadiness.runs_line([said])


def test_a_stopped_run_keeps_the_lines_of_transactions_that_ended_before_it_stopped():
    ends = 1_700_000_000 + np.sort(np.random.default_rng(3).uniform(0, 10, 500))
    text = "".join(f"0 {i} 1200 0 {int(e)} {round((e - int(e)) * 1e6)}\n" for i, e in enumerate(ends)).encode()
    whole = [line.split() for line in text.decode().splitlines()]
    logged = [int(f[4]) + int(f[5]) / 1e6 for f in whole]
    for stop in (ends[0] - 1, ends[0], ends[250], (ends[250] + ends[251]) / 2, ends[-1], ends[-1] + 1):
        kept = _Before(io.BytesIO(text), stop)
        read = kept.read(7) + kept.read()
        assert read.decode().splitlines() == [" ".join(f) for f, at in zip(whole, logged) if at < stop]
        kept.seek(0)
        assert kept.read() == read


def found_different(rounds: int, warmups: tuple[float, float], cut: bool, truth: float = 1.0, sims: int = 4000) -> float:
    """How often the factor table calls two cells "different" (its test at 5 %) when they differ by `truth`
    and warm up over `warmups` seconds (a ramp from half their level), each run 60 per-second points, the
    rounds' moods, the runs' and the seconds' noise 5-20 %; each run's figure its mean, from the warm-up
    MSER-5 finds when `cut`."""
    factors = {"memory": ["a", "b"]}
    layout = simulate.template(factors, rounds)
    rng = np.random.default_rng(46)
    levels = np.exp(simulate.responses(layout, lambda levels: truth if levels["memory"] == "b" else 1.0, sims, rng))
    each = np.array([warmups[factors["memory"].index(o.factors["memory"])] for o in layout], dtype=float)
    figures = simulate.run_figures(simulate.warmed_runs(levels, each, 60, rng), cut)
    codes, _ = simulate.Fits(layout, factors).verdicts(np.log(figures), 0.05)
    return float((codes[0] == "D").mean())


def test_cutting_the_found_warmups_keeps_the_false_different_rate_where_it_is():
    """Two cells alike but for their warm-ups (0 s in one, 25 s in the other), 5 rounds: uncut, the warm-ups
    alone make them "different" in a fifth of the experiments or more; cut where MSER-5 finds them, as
    often as when neither run warms up (docs/statistics.md)."""
    reference = found_different(5, (0, 0), cut=False)
    assert found_different(5, (0, 25), cut=False) > 0.15  # what the cut must undo
    found = found_different(5, (0, 25), cut=True)
    margin = 3 * math.sqrt(2 * 0.05 * 0.95 / 4000)  # two binomial rates' difference, 3 standard errors
    assert abs(found - reference) < margin and found < 0.065


def table() -> list[str]:
    """docs/statistics.md's table of the error rates with the warm-up cut and uncut (4,000 experiments a cell)."""
    lines = ['| rounds | warm-ups (s) | false "different", uncut | false "different", cut | '
             "a 10 % difference found, uncut | found, cut |", "| --- | --- | --- | --- | --- | --- |"]
    for rounds in (3, 5):
        for warmups in ((0, 0), (10, 10), (5, 25), (0, 25)):
            rates = [found_different(rounds, warmups, cut, truth) for truth in (1.0, 1.1) for cut in (False, True)]
            lines.append(f"| {rounds} | {warmups[0]} and {warmups[1]} | " + " | ".join(f"{100 * r:.1f} %" for r in rates) + " |")
    return lines




@pytest.mark.engine
def test_pgbench_figures_are_recomputed_from_its_log_after_the_warmup_found(lab_dir):
    """A script slow for its session's first 4 s (each transaction sleeps 5 ms), then fast: the warm-up
    found is that step, and every figure is of the transactions that began after it."""
    spec = spec_for(CellLayout(data_on="disk"), {}, {"disk": lab_dir}, "15")
    files = {"ramp.sql": RAMP_SQL}
    with provision("postgres", spec, keep=False, connections=4) as instance:
        work, params = prepared(instance, "pgbench", files, scale=1, clients=2, duration_s=14, warmup_s="found",
                                script="ramp.sql")
        load = work.load(instance, params, files)
        try:
            load.open()
            measured = load.run()
            with load.folder.written("txn") as logs:
                rows = np.array([line.split()[:6] for log in logs for line in log.read().decode().splitlines()],
                                dtype=float)
        finally:
            load.close()
    cut = measured.warmup_cut_s
    per_second = [round(v) for _, name, v in measured.timeline if name == timeline.TRANSACTIONS_PER_S.name]
    assert 3 <= cut <= 6 and cut == found_cut(measured.timeline, timeline.TRANSACTIONS_PER_S), per_second
    latency_ms = rows[:, 2] / 1000
    started = rows[:, 4] + rows[:, 5] / 1e6 - rows[:, 2] / 1e6
    kept = started >= measured.start_epoch + cut
    f = measured.figures
    assert f["transactions"] == kept.sum() < len(rows)
    assert f["transactions_per_s"] == pytest.approx(kept.sum() / (14 - cut)) and f["elapsed_s"] == 14 - cut
    assert f["latency_p99_ms"] == pytest.approx(np.percentile(latency_ms[kept], 99, method="inverted_cdf"), rel=0.005)
    assert f["latency_avg_ms"] == pytest.approx(latency_ms[kept].mean(), rel=1e-6)
    assert latency_ms[kept].mean() < latency_ms.mean()  # the sleeping transactions are cut


if __name__ == "__main__":
    print("\n".join(table()))
