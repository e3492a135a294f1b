"""From the store to the answer: per-cell statistics of every figure the workload reports, the
ranking by its headline figure, wait tables, and the runs that were recorded on different machine
facts (kept apart, never averaged in silently)."""

from __future__ import annotations

import math
import weakref
from pathlib import Path
from typing import Any
from collections import Counter
from dataclasses import dataclass, field

from storlab.answer import capability, effects, racing, screening, steadiness
from storlab.answer.effects import FactorAnswer, Observation
from storlab.answer.stats import (
    CellVerdict,
    Summary,
    Verdicts,
    against_baseline_paired,
    against_best_paired,
    summarize,
    without_verdicts,
)
from storlab.experiment.swept import HOST_FACTOR, VERSION_FACTOR, nested_in
from storlab.labels import short_name
from storlab.labels import format_value
from storlab.lab import quiesce
from storlab.machine import system
from storlab.probes import file_io, iosizes, traced_waits, waiting_tasks
from storlab.probes import registry
from storlab.probes.waits import FileIO, TracedWait, Wait, WaitingTask, WaitRow, mean_per_run, top_share
from storlab.results.experiment_record import AnswerSettings, CellRecord, StoredExperiment
from storlab.rounds import DEFAULT_MARGIN
from storlab.results.runs import RunRecord
from storlab.results.store import Store
from storlab.rounds import Settling
from storlab.workloads import KINDS, Figure
from storlab.workloads.kind import ELAPSED


@dataclass
class CellResult:
    cell: CellRecord
    runs: list[RunRecord]
    figures: dict[str, Summary]  # every figure its runs all reported
    waits: list[Wait]
    wait_source: str
    extras: dict[str, float]
    headline_name: str = ELAPSED.name
    tasks: list[WaitingTask] = field(default_factory=list)  # who waited on what, per run
    kept: dict[str, list[Any]] = field(default_factory=dict)  # what each probe with a summary kept, per run
    traced: list[list[TracedWait]] = field(default_factory=list)  # every traced wait, per run
    files: list[list[FileIO]] = field(default_factory=list)  # each file's IO, per run
    io_sizes: list[list[tuple[str, str, int, int, str]]] = field(default_factory=list)  # the io_sizes probe's rows, per run
    series: list[steadiness.RunSeries] = field(default_factory=list)  # each run's per-second series and checkpoints

    @property
    def headline(self) -> Summary | None:
        return self.figures.get(self.headline_name)

    def values(self, name: str | None = None) -> list[float]:
        """One figure's value in each run (the headline by default)."""
        name = name or self.headline_name
        return [r.figures[name] for r in self.runs if name in r.figures]

    @property
    def hosts(self) -> list[str]:
        """The hosts that measured its runs."""
        return sorted({r.host for r in self.runs if r.host})

    @property
    def top(self) -> list[WaitRow]:
        return top_share(self.waits)

    @property
    def top_wait(self) -> str:
        rows = self.top
        return f"{rows[0].wait_type} {rows[0].percentage:.0f} %" if rows else "—"


@dataclass
class Ranked:
    result: CellResult
    distance_percent: float  # how much worse than the best cell, in % of the best's mean
    versus_best: CellVerdict | None  # None for the best cell itself


@dataclass
class Results:
    experiment: StoredExperiment | None  # None: the store holds no experiment (a `storlab io` folder)
    cells: list[CellResult]
    figures: tuple[Figure, ...]  # the workload's, the headline first
    note: str | None = None  # how the workload runs, where a reader could assume otherwise
    set_aside: list[RunRecord] = field(default_factory=list)
    facts_notes: list[str] = field(default_factory=list)
    failures: list[tuple[str, int, str]] = field(default_factory=list)
    facts: dict | None = None
    race: racing.RaceState | None = None  # replayed from the runs, when the experiment raced
    conditions: str | None = None  # what every run started from, in one line
    # The machines the kept runs were measured on: (host, or the hosts that share its facts, or None
    # when runs name no host; its facts). One per host when the host is a factor.
    machines: list[tuple[str | None, dict]] = field(default_factory=list)
    answer: FactorAnswer | None = None  # what each factor does (storlab.answer.effects); None without a factor or a run
    stopped: str | None = None  # why the last `storlab run` stopped (until settled), as it said
    design: screening.Designed | None = None  # a screening or a follow-up (None: the full factorial)
    io_measured: capability.Measured = field(default_factory=capability.Measured)  # `storlab io` beside the runs

    @property
    def name(self) -> str | None:
        return None if self.experiment is None else self.experiment.name

    @property
    def factors(self) -> dict[str, list]:
        """Each factor's values by its dotted key, as the experiment declared them."""
        return {} if self.experiment is None else self.experiment.factors

    @property
    def answer_settings(self) -> AnswerSettings:
        return AnswerSettings() if self.experiment is None else self.experiment.answer

    @property
    def settling(self) -> Settling | None:
        """`until = "settled"`, as the store keeps it."""
        return self.answer_settings.settling

    @property
    def rounds(self) -> int:
        """The rounds with runs: the highest repetition of any kept run (a follow-up's: of its own runs)."""
        after = self.design.after_run if self.design is not None else None
        return max((r.repetition for c in self.cells for r in c.runs if after is None or r.id > after), default=0)

    @property
    def settled(self) -> bool:
        """Every factor's every level different or equivalent (until settled: from its `min` rounds on)."""
        settling = self.settling
        return self.answer is not None and self.answer.settled and \
            (settling is None or self.rounds >= settling.min_rounds)

    def paired_values(self) -> dict[str, dict[int, float]]:
        """Each measured cell's headline figure by round (its repetition)."""
        return {c.cell.id: {r.repetition: r.figures[self.headline.name] for r in c.runs if self.headline.name in r.figures}
                for c in self.measured}

    @property
    def prepared_once(self) -> bool:
        """A cell's runs share one instance and what it prepared (a scan's), instead of one instance a run."""
        kind = KINDS.get(self.experiment.kind or "") if self.experiment is not None else None
        return bool(kind is not None and kind.prepared_once)

    @property
    def pooled_hosts(self) -> bool:
        """Runs of one cell measured on several hosts (no `hosts` in the experiment, identical facts)."""
        return HOST_FACTOR not in self.factors and \
            len({h for c in self.cells for h in c.hosts}) > 1

    @property
    def headline(self) -> Figure:
        return self.figures[0]

    @property
    def lower_is_better(self) -> bool:
        return self.headline.better != "higher"

    @property
    def measured(self) -> list[CellResult]:
        return [c for c in self.cells if c.headline is not None]

    def cell(self, ident: str) -> CellResult | None:
        """By id, or by a unique prefix of the id."""
        matches = [c for c in self.cells if c.cell.id.startswith(ident)]
        return matches[0] if len(matches) == 1 else None

    @property
    def no_ratios(self) -> str | None:
        """Why the runs cannot be read as ratios (the factor effects, the paired verdicts), or None:
        both take the log of the headline figure, and a figure of 0 or below has none."""
        values = [v for c in self.measured for v in c.values()]
        low = sum(1 for v in values if v <= 0)
        if not low:
            return None
        return (f"{self.headline.label} is 0 or below in {low} of {len(values)} runs, and a ratio of geometric "
                "means needs every figure above 0")

    def verdicts(self) -> Verdicts:
        """Every measured cell against the best, paired by round as the factor effects are, corrected
        for the number of comparisons."""
        if self.no_ratios is not None:
            sign = 1 if self.lower_is_better else -1
            best = min(self.measured, key=lambda c: sign * c.headline.mean)
            return without_verdicts([c.cell.id for c in self.measured], best.cell.id, self.no_ratios)
        return against_best_paired(self.paired_values(), self.lower_is_better)

    def against(self, baseline: str) -> Verdicts:
        """Every measured cell against `baseline`, paired by round."""
        if self.no_ratios is not None:
            return without_verdicts([c.cell.id for c in self.measured], baseline, self.no_ratios)
        return against_baseline_paired(self.paired_values(), baseline, self.lower_is_better)

    def ranking(self) -> list[Ranked]:
        if not self.measured:
            return []
        verdicts = self.verdicts()
        sign = 1 if self.lower_is_better else -1
        # The cell the verdicts hold the others against comes first, whichever mean is lowest.
        cells = sorted(self.measured, key=lambda c: (c.cell.id != verdicts.reference, sign * c.headline.mean))
        best = cells[0].headline.mean
        return [
            Ranked(c, sign * 100.0 * (c.headline.mean - best) / best if best > 0 else math.nan,
                   verdicts.cells.get(c.cell.id))
            for c in cells
        ]


def _mean_extras(runs: list[RunRecord]) -> dict[str, float]:
    keys = set().union(*(r.wait_extras for r in runs)) if runs else set()
    return {k: sum(r.wait_extras.get(k, 0.0) for r in runs) / len(runs) for k in sorted(keys)}


def _figures_of(experiment: StoredExperiment | None, units: dict[str, str]) -> tuple[tuple[Figure, ...], str | None]:
    """The workload kind's figures; for a kind this storlab does not know, elapsed first and the rest as recorded."""
    kind = KINDS.get(experiment.kind or "") if experiment is not None else None
    if kind is not None:
        return kind.figures_of(experiment.workload), kind.note
    others = tuple(Figure(name, unit, name) for name, unit in sorted(units.items()) if name != ELAPSED.name)
    return (ELAPSED, *others), None


def _summaries(runs: list[RunRecord]) -> dict[str, Summary]:
    names = set.intersection(*(set(r.figures) for r in runs)) if runs else set()
    return {name: summarize([r.figures[name] for r in runs]) for name in names}


def _comparable(runs: list[RunRecord], facts: dict[int, dict], who: str | None) -> tuple[int | None, list[str]]:
    """Runs are comparable only on the same machine facts: the largest group's facts, and a note for
    each other group (set aside)."""
    groups = Counter(r.facts_id for r in runs)
    compared_facts = groups.most_common(1)[0][0] if groups else None
    notes = []
    for fid in groups:
        if fid != compared_facts:
            diffs = system.differences(facts[compared_facts]["comparable"], facts[fid]["comparable"])
            notes.append(f"{'host ' + who + ': ' if who else ''}{groups[fid]} runs recorded on other machine "
                         "facts are set aside: " + "; ".join(diffs))
    return compared_facts, notes


@dataclass(frozen=True)
class _RunTables:
    """What the answer reads of one run besides its row and figures: its waits, what each probe it
    reads kept (by the probe's name), and its per-second series."""

    waits: list[Wait]
    kept: dict[str, Any]
    series: steadiness.RunSeries


# The probes whose tables the answer reads itself, beside every probe with a part (a summary): the waits'
# (who waits on what, traced waits, the files' IO) and the IO sizes, drawn by charts of their own.
_READ_ITSELF = (waiting_tasks.PROBE, traced_waits.PROBE, file_io.PROBE, iosizes.PROBE)
# What load(cached=True) has read of each run, per open store: a run's rows never change once recorded.
_read_before: weakref.WeakKeyDictionary[Store, dict[int, _RunTables]] = weakref.WeakKeyDictionary()


def _tables(store: Store, run: RunRecord) -> _RunTables:
    read = [p for p in registry.PROBES if p.summary or p in _READ_ITSELF]
    return _RunTables(store.waits(run.id), {probe.name: store.kept(probe, run.id) for probe in read},
                      steadiness.read(store, run))


def load(store: Store, io: list[Path] | None = None, cached: bool = False) -> Results:
    """`io`: `storlab io` results folders to read besides the store's own and those beside its folder;
    None: none of them (the run's own plan needs no device capability, and reads the store every round).
    `cached`: each run's tables as an earlier cached load of this same store object read them, only the
    runs recorded since read from the store (the stop check's, every round of a run until settled:
    re-reading every run's tables made each check cost more than the one before)."""
    experiment = store.experiment()
    figures, note = _figures_of(experiment, store.units())
    all_runs = store.runs()
    facts = store.facts()
    records = store.cells()
    # Each host of a `hosts` experiment is its own machine: its runs are held against its own facts.
    host_of = {c.id: c.factors.get(HOST_FACTOR) for c in records}
    by_host: dict[str | None, list[RunRecord]] = {}
    for r in all_runs:
        by_host.setdefault(host_of.get(r.cell_id), []).append(r)
    compared, notes, machines = [], [], []
    for host, runs in by_host.items():
        compared_facts, said = _comparable(runs, facts, host)
        notes += said
        mine = [r for r in runs if r.facts_id == compared_facts]
        compared += mine
        names = ", ".join(sorted({r.host for r in mine if r.host})) or None
        machines.append((host or names, facts[compared_facts]["body"]))
    compared_ids = {r.id for r in compared}
    set_aside = [r for r in all_runs if r.id not in compared_ids]
    read = _read_before.setdefault(store, {}) if cached else {}
    for r in compared:
        if r.id not in read:
            read[r.id] = _tables(store, r)
    cells = []
    for cell in records:
        runs = [r for r in compared if r.cell_id == cell.id]
        tables = [read[r.id] for r in runs]
        cells.append(
            CellResult(
                cell=cell,
                runs=runs,
                figures=_summaries(runs),
                waits=mean_per_run([t.waits for t in tables]),
                wait_source=", ".join(sorted({r.wait_source for r in runs})) or "—",
                extras=_mean_extras(runs),
                headline_name=figures[0].name,
                tasks=waiting_tasks.mean_per_run([t.kept[waiting_tasks.PROBE.name] for t in tables]),
                kept={probe.name: [t.kept[probe.name] for t in tables] for probe in registry.PROBES if probe.summary},
                traced=[t.kept[traced_waits.PROBE.name] for t in tables],
                files=[t.kept[file_io.PROBE.name] for t in tables],
                io_sizes=[t.kept[iosizes.PROBE.name] for t in tables],
                series=[t.series for t in tables],
            )
        )
    failures = store.failures()
    race = None
    if experiment is not None and experiment.race is not None and cells:
        values = racing.rounds_from([c.cell.id for c in cells], compared, failures, figures[0].name)
        race = racing.race(values, experiment.race)
    results = Results(
        experiment=experiment, cells=cells, figures=figures, note=note, set_aside=set_aside,
        facts_notes=notes, failures=failures,
        facts=machines[0][1] if machines else None, machines=sorted(machines, key=lambda m: m[0] or ""),
        race=race, conditions=quiesce.describe([r.conditions for r in compared]),
        stopped=None if experiment is None else experiment.stopped,
    )
    results.design = _design(results)
    results.answer = factor_answer(results)
    if io is not None:
        results.io_measured = capability.read(store, experiment, results.facts,
                                              {c.cell.id: [r.id for r in c.runs] for c in results.measured}, io)
    return results


def _design(results: Results) -> screening.Designed | None:
    """A screening's or a follow-up's design, its aliases over the cells that ran (storlab.answer.screening)."""
    stored = results.answer_settings.design
    if stored is None:
        return None
    factors = {short_name(d): values for d, values in results.factors.items()}
    after = stored.after_run
    ran = [{short_name(d): v for d, v in c.cell.factors.items()} for c in results.cells if c.runs]
    before = [{short_name(d): v for d, v in c.cell.factors.items()} for c in results.cells
              if after is not None and any(r.id <= after for r in c.runs)]
    return screening.read(stored, factors, results.answer_settings.reference, ran, before)


def factor_answer(results: Results) -> FactorAnswer | None:
    """What each factor does to the headline figure: the kept runs read as the factorial experiment
    they are, the rounds as blocks (storlab.answer.effects). Until settled, at the look the last round made,
    so `show` says what `storlab run` decided on. Factors by their short names, as labels name them.
    A factor nested in one engine version (a list in [engine_settings.18]) is not crossed with the
    version: it is left out of the model and said so in not_estimable (the ranking compares its cells)."""
    if results.no_ratios is not None:
        return None
    swept = results.factors
    nested = {d: nested_in(d) for d in swept if nested_in(d) and VERSION_FACTOR in swept}
    declared = {short_name(d): values for d, values in swept.items() if d not in nested}
    if not any(len(values) > 1 for values in declared.values()):
        return None
    head = results.headline.name
    designed = results.design
    before = max((r.repetition for c in results.cells for r in c.runs
                  if designed is not None and designed.after_run is not None and r.id <= designed.after_run), default=0)
    observations = [
        Observation(c.cell.id, screening.block(designed, r.id, r.repetition, before),
                    {short_name(d): v for d, v in c.cell.factors.items() if d not in nested}, r.figures[head])
        for c in results.cells for r in c.runs if head in r.figures
    ]
    if not observations:
        return None
    settings = results.answer_settings
    references = {k: v for k, v in settings.reference.items() if k in declared}
    look = max_looks = None
    settling = results.settling
    if settling is not None:
        max_looks = settling.max_rounds - settling.min_rounds + 1
        look = min(max(results.rounds - settling.min_rounds + 1, 1), max_looks)
    try:
        answer = effects.analyse(observations, declared, lower_is_better=results.lower_is_better, references=references,
                                 margin=settings.equivalent_within or DEFAULT_MARGIN, look=look,
                                 max_looks=max_looks, headline=head, **screening.terms(designed, list(declared)))
    except ValueError:  # a cell at a level its factor does not declare, or a reference it lacks: the ranking still answers
        return None
    answer.not_estimable += [f"{short_name(d)}: nested in {short_name(VERSION_FACTOR)}={version} (its cells alone have it), "
                             f"not crossed with the other factors; {short_name(VERSION_FACTOR)}={version}'s effect is over its "
                             "levels, and the ranking compares its cells" for d, version in nested.items()]
    return answer


def verdicts_line(results: Results) -> str:
    """Each factor's verdicts in a few words: 'log_on different, data_files equivalent'."""
    if results.answer is None or not results.answer.effects:
        return "no factor to settle"
    by_factor: dict[str, list[str]] = {}
    named = results.design.named if results.design is not None and results.design.kind == "follow-up" else None
    for e in results.answer.effects:
        if named is not None and e.factor not in named:  # a follow-up settles its own factors
            continue
        verdict = e.verdict if len(_levels(results.answer, e.factor)) == 1 else f"{format_value(e.level)} {e.verdict}"
        by_factor.setdefault(e.factor, []).append(verdict)
    return ", ".join(f"{factor} {'; '.join(v)}" for factor, v in by_factor.items())


def _levels(answer: FactorAnswer, factor: str) -> list:
    return [e for e in answer.effects if e.factor == factor]
