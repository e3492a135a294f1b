"""What explains a difference (storlab.answer.explain): the arithmetic on small constructed waits."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from storlab.answer import explain
from storlab.answer.explain import Profile
from storlab.probes.waits import Wait
from storlab.results.experiment_record import StoredExperiment
from storlab.workloads import KINDS


def _cell(factors: dict, elapsed: float, rows: float, waits: dict[str, float], runs: int = 2):
    return SimpleNamespace(cell=SimpleNamespace(factors=factors),
                           runs=[SimpleNamespace(figures={"elapsed_s": elapsed, "rows": rows}) for _ in range(runs)],
                           waits=[Wait(k, v) for k, v in waits.items()])


def test_profile_is_per_unit_of_work_and_elapsed_is_made_session_seconds():
    cell = _cell({}, elapsed=2.0, rows=4000, waits={"IO:WALSync": 4.0, "CPU": 2.0})
    unit = KINDS["random-insert"].unit_of_work
    assert unit.name == "1,000 rows"
    p = explain.profile(cell, unit, 4)
    assert p.elapsed == 0.5 and p.session_s == 2.0 and p.sessions == 4  # 2 s wall / 4 units, × 4 sessions
    assert p.waits == {"IO:WALSync": 1.0, "CPU": 0.5}


def test_shares_are_of_the_elapsed_difference_sorted_and_cut_at_95_percent():
    base = Profile(elapsed=1.0, session_s=4.0, waits={"WALWrite": 2.0, "CPU": 1.0, "extend": 0.5, "tiny": 0.01})
    cand = Profile(elapsed=0.5, session_s=2.0, waits={"WALWrite": 0.4, "CPU": 1.3, "extend": 0.5, "tiny": 0.0})
    expl = explain.explain(base, cand, "1,000 rows")
    assert expl.difference == -2.0
    # differences: WALWrite -1.6, CPU +0.3, tiny -0.01, extend 0: the first two reach 95 % of 1.91
    names = [ln.wait_type for ln in expl.lines]
    assert names == ["WALWrite", "CPU", "the rest (2 types)", "not in the waits"]
    shares = [ln.share for ln in expl.lines]
    assert shares == pytest.approx([0.8, -0.15, 0.005, 0.345])
    assert sum(shares) == pytest.approx(1.0)  # the rest and what no wait holds make it whole
    outside = expl.lines[-1]
    assert outside.baseline == pytest.approx(0.49) and outside.candidate == pytest.approx(-0.2)
    assert explain.rows(expl)[0] == ["WALWrite", "2.000", "0.400", "-1.600", "+80 %"]
    assert explain.title(expl) == "session-s per 1,000 rows"
    assert explain.summary(expl, "ram") == \
        "ram spends 2.000 session-s less per 1,000 rows: WALWrite explains 80 % of it; CPU offset it by 15 %"


def test_no_shares_when_the_waits_moved_far_more_than_the_time():
    base = Profile(elapsed=1.0, session_s=4.0, waits={"A": 2.0, "B": 1.0})
    cand = Profile(elapsed=1.01, session_s=4.04, waits={"A": 0.5, "B": 2.5})
    expl = explain.explain(base, cand, "transaction")
    assert all(ln.share is None for ln in expl.lines)
    assert explain.summary(expl, "x") is None
    assert "no shares" in explain.note(expl)


def test_a_level_is_matched_on_the_other_factors_and_averaged_over_its_pairs():
    cells = [_cell({"layout.log_on": "disk", "layout.data_files": 1}, 2.0, 1000, {"IO:WALSync": 3.0}),
             _cell({"layout.log_on": "ram", "layout.data_files": 1}, 1.0, 1000, {"IO:WALSync": 0.0}),
             _cell({"layout.log_on": "disk", "layout.data_files": 4}, 4.0, 1000, {"IO:WALSync": 5.0}),
             _cell({"layout.log_on": "ram", "layout.data_files": 4}, 3.0, 1000, {"IO:WALSync": 1.0})]
    experiment = StoredExperiment.model_validate({"name": "e", "engine": "postgres", "source": "", "repetitions": 1, "factors": {},
                                                  "identity": {"workload": {"kind": "random-insert", "connections": 2}}})
    results = SimpleNamespace(measured=cells, experiment=experiment)
    expl, pairs = explain.level(results, "log_on", "ram", "disk")
    assert pairs == 2
    assert expl.baseline.session_s == 6.0 and expl.candidate.session_s == 4.0  # (2 + 4) / 2 × 2 sessions
    assert expl.baseline.waits == {"IO:WALSync": 4.0} and expl.candidate.waits == {"IO:WALSync": 0.5}
    assert expl.lines[0].share == pytest.approx(3.5 / 2.0)
