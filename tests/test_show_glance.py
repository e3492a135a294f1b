"""`storlab show` on one screen (issue 46): by default the factor table, the interactions that matter,
the ranking and the best cell, and one line per kind of warning naming its cells; the sentences behind
them with --details; --json the whole answer either way. On the recorded quickstart (tests/data/explain,
a real PostgreSQL run), at a terminal's 120 columns."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from storlab.answer import analysis, concerns, model
from storlab.answer.compose import compose
from storlab.results.store import Store
from storlab.show import terminal
from tests.commands import invoke

RECORDED = Path(__file__).parent / "data" / "explain"
SCREEN = 30  # lines, at 120 columns


@pytest.fixture
def store(tmp_path) -> Path:
    shutil.copytree(RECORDED, tmp_path / "results")
    return tmp_path / "results" / "quickstart"


def shown(store: Path, details: bool = False) -> list[str]:
    """`show` as a terminal of 120 columns prints it."""
    with Store.open(store, create=False) as opened:
        answer = compose(analysis.load(opened))
    out = io.StringIO()
    terminal.show(answer, Console(file=out, width=120, highlight=False), details)
    return out.getvalue().splitlines()


def test_the_answer_fits_one_screen_and_names_each_warning_once(store):
    lines = shown(store)
    assert len(lines) <= SCREEN, "\n".join(lines)
    text = "\n".join(lines)
    answer = json.loads(invoke("show", store, "--json").stdout)
    # The answer: every level's verdict, the settling, every cell ranked, the best.
    for e in answer["factor_effects"]["effects"]:
        assert f"│ {e['ratio']:.2f}x │ [{e['ci_low']:.2f}, {e['ci_high']:.2f}] │" in text and f"│ {e['verdict']}:" in text
    assert " ".join(answer["status"].split()) in " ".join(text.split()) and answer["best"][0] in text
    assert all(f" {r['cell']} " in text for r in answer["ranking"])
    # Each kind of warning once, naming its cells: here every run too short to judge and every cell noisy.
    kinds = [c["kind"] for c in answer["concerns"]]
    assert kinds == ["not judged steady", "noisy"]
    said = " ".join(text.split())
    for concern in answer["concerns"]:
        assert " ".join(concern["line"].split()) in said
        assert concern["cells"] == [r["cell"] for r in answer["ranking"]]  # all four, in the ranking's order
    assert answer["concerns"][0]["runs"] == answer["concerns"][0]["of_runs"] == 8
    # The sentences behind them are not on the screen: one flag away.
    for hidden in ("noise: ", "steady state: ", "machine: ", "what the probes cost", "no significant interaction"):
        assert hidden not in text, hidden
    assert "show --details" in lines[-1]


def test_details_adds_the_sentences_behind_the_warnings(store):
    glance, details = shown(store), shown(store, details=True)
    assert len(details) > len(glance) + 10
    text = "\n".join(details)
    for said in ("noise: data_files=1 log_on=disk (84c14c9a): noisy: its 2 runs vary 47.3 %", "steady state: not judged",
                 "machine: AMD EPYC", "no significant interaction: data_files x log_on", "rows/s"):
        assert said in text, said
    assert "show --details" not in text


def test_json_holds_what_the_screen_leaves_out_and_refuses_details(store):
    done = invoke("show", store, "--json")
    assert done.exit_code == 0
    answer = json.loads(done.stdout)
    details = "\n".join(shown(store, details=True))
    for line in answer["noise"]["cells"] + answer["steadiness"]["lines"] + answer["notes"]:
        assert " ".join(line.split()) in " ".join(details.split()), line
    refused = invoke("show", store, "--json", "--details")
    assert refused.exit_code == 2 and "--details" in refused.output and refused.output.count("\n") == 1


def _run(repetition: int, steady: bool | None, checkpoints: int) -> model.RunSteadiness:
    said = {True: "steady", False: "not steady", None: "not judged"}[steady]
    series = model.SeriesState(metric="transactions_per_s", points=20, steady=steady, range=None, excursion=None,
                               change_p=None, changed_at_s=None, change=None, drift=None, drift_low=None, drift_high=None,
                               said=said)
    return model.RunSteadiness(repetition=repetition, measured_s=20.0, declared_warmup_s=0.0, found_warmup_s=4.0,
                               steady=steady, series=[series], checkpoints=checkpoints, checkpoint_times_s=[],
                               checkpoint_phases=[], checkpoint_setting="checkpoint_timeout", checkpoint_value="30s",
                               checkpoint_cycle_s=30.0, checkpoint_cycle_bytes=None, log_bytes=None)


def test_runs_not_steady_are_one_line_naming_their_cells_and_runs():
    """Three cells of two runs: 3 of the 5 judged runs not steady in two cells, one run too short to
    judge, one cell whose runs hold 1 and 0 checkpoints; named in the ranking's order, not the cells'."""
    cells = [("c", [_run(1, False, 1), _run(2, False, 1)]), ("a", [_run(1, True, 1), _run(2, None, 1)]),
             ("b", [_run(1, True, 1), _run(2, False, 0)])]
    held = model.Steadiness(rule="", lines=[], cells=[model.CellSteadiness(cell=c, label=c, runs=runs, lines=[])
                                                      for c, runs in cells])
    found = {c.kind: c for c in concerns.of_steadiness(held, ["a", "b", "c"])}
    assert list(found) == ["not steady", "not judged steady", "unequal checkpoints"]
    moved = found["not steady"]
    assert (moved.cells, moved.runs, moved.of_runs) == (["b", "c"], 3, 5)
    assert moved.line == ("not steady: 2 cells (b, c), 3 of 5 runs: their means mix two states, their verdicts hold for "
                          "runs of this length only")
    assert found["not judged steady"].line == "not judged steady: 1 cell (a), 1 of 6 runs: under 10 measured seconds"
    assert found["unequal checkpoints"].cells == ["b"] and found["unequal checkpoints"].runs is None
