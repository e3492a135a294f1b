"""The answer, as one typed value: what each factor does, the ranking, the noise, the settling, each
cell's waits and IO sizes, what explains the differences, the devices' capability, the machines, and
which run each chart over time draws, and each probe's part under the probe's name. The statistics build
it once (storlab.answer.compose); the terminal, `show --json` (its schema generated from these types) and
the HTML report only read it. A new per-cell statistic is a field of `Ranked`, its computation, and a
`Column` below: every table of the ranking shows the columns listed here, in this order.

Numbers that cannot be known (an interval from too few runs) are None, never NaN."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import ConfigDict, SerializeAsAny

# The probes' parts of the answer, each typed in its probe's part module, which imports only the ground.
from storlab.probes.limits_part import Limits
from storlab.probes.part import Part
from storlab.probes.pressure_part import Pressure
from storlab.typed import Typed
from storlab.volume.property import Part as VolumePart

SCHEMA_VERSION = 3
Verdict = Literal["different", "equivalent", "undecided"]


class AnsweredExperiment(Typed):
    """The experiment as the answer names it (storlab.experiment.file.Experiment is the file's)."""

    name: str
    engine: str
    factors: dict[str, list[Any]]  # short name -> its values, in the file's order
    order_seed: int | None  # None: a folder from before the seed, whose runs went in the matrix order
    kind: str | None  # its workload's kind; None: none declared, or a folder of a kind this storlab does not know
    throughput: str | None  # the kind's per-second series (storlab.timeline) drawn as its throughput over time
    declared: bool = True  # False: the store holds no experiment (a `storlab io` folder); name and engine are "?"


class Figure(Typed):
    name: str
    unit: str
    label: str


class Headline(Figure):
    better: Literal["lower", "higher"]


class Effect(Typed):
    """One level against its factor's reference: the ratio of geometric means and its verdict."""

    factor: str
    level: Any
    reference: Any
    given: dict[str, Any] | None  # a conditional effect: the other factor's level it is given at
    ratio: float
    ci_low: float | None  # the 1 - alpha interval (the look's alpha when run until settled)
    ci_high: float | None
    equivalence_low: float | None  # the 1 - 2 alpha interval that decides equivalence
    equivalence_high: float | None
    p_value: float | None
    adjusted_p: float | None
    verdict: Verdict
    hidden: float | None  # the largest effect the interval still allows, a fraction
    better: bool | None  # the level improves the headline (different only)
    real: bool  # equivalent, yet told apart from none: a real difference inside the margin
    said: str  # the verdict in words, with the interval that decided it
    aliases: str | None = None  # in a screening: what this main effect is aliased with, in words


class Interaction(Typed):
    factors: tuple[str, str]
    p_value: float | None
    adjusted_p: float | None
    significant: bool
    aliases: list[tuple[str, str]] = []  # in a fraction: the other pairs whose interaction is the same column


class FactorEffects(Typed):
    effects: list[Effect]  # main effects, factor order then level order
    interactions: list[Interaction]
    conditional: list[Effect]  # each factor of a significant interaction at each level of the other
    not_estimable: list[str]
    settled: bool
    margin: float
    rounds: int
    runs: int
    residual_cv: float | None
    formula: str
    method: str
    alpha: float
    look: int | None
    max_looks: int | None
    confidence: str  # "95 % CI", or what a look of an experiment run until settled spends
    interaction_lines: list[str]  # the interactions, in words


class EffectPoint(Typed):
    """One main effect on the half-normal plot: its size against where pure noise would put it."""

    factor: str
    level: Any
    size: float  # |log ratio| of the level against its reference
    quantile: float  # the half-normal quantile of its rank among the effects
    verdict: Verdict


class Design(Typed):
    """A screening (a fraction of the factors' product) or the follow-up after it: how its cells were
    chosen, against the full factorial, and what the cells that ran cannot tell apart."""

    kind: Literal["screening", "follow-up"]
    method: str
    resolution: int | None  # the shortest word of a regular fraction (None: full, non-regular or above VI)
    cells: int  # the design's cells
    full_cells: int  # the full factorial's
    runs: int  # the runs in the results folder
    full_runs: int  # the full factorial's at as many rounds
    aliases: dict[str, str]  # factor -> what its main effect is aliased with, in words
    aliased_with: dict[str, list[list[str]]]  # factor -> the interactions (up to three factors) aliased with it
    chains: list[list[tuple[str, str]]]  # two-factor interactions that share one column
    named: list[str]  # a screening: the factors it found different; a follow-up: the factors it runs
    shared: int  # a follow-up's cells the screening ran (or, for a screening, would share with its follow-up)
    follow_up: str | None  # the key that runs the follow-up of what the screening named, in this results folder
    points: list[EffectPoint]  # the half-normal plot (Daniel 1959): every main effect, smallest first
    lines: list[str]  # all of it in words


class UntilSettled(Typed):
    min_rounds: int
    max_rounds: int
    budget_s: float | None


class NoiseSplit(Typed):
    """Where the noise is (Kalibera and Jones 2013): between runs, inside a run, and the plan it gives."""

    between_runs: float  # variance of the log of the per-second throughput between runs (about a CV^2)
    inside_run: float  # of one second about its run's mean
    runs: int
    seconds: float  # measured seconds a run, on average
    run_cost_s: float | None  # a run's fixed cost: the wall time between runs beyond their load
    best_seconds: float | None  # the cheapest run length for a given precision
    advice: str | None  # "longer runs" or "more runs"; None when a run's cost is unknown
    method: str
    line: str  # all of it in words


class Noise(Typed):
    residual_cv: float | None  # the paired model's: the rounds' drift taken out
    rounds_needed: dict[str, int]  # "10 %" -> rounds two cells compared round by round need (80 % power)
    hidden: dict[str, float]  # each undecided factor's largest effect the noise still allows
    line: str | None  # all of it in words; None without a factor table
    cells: list[str]  # each noisy cell's warning, and each cell's outliers
    split: NoiseSplit | None = None  # None: no cell has two runs with a per-second throughput


class Ranked(Typed):
    """One measured cell, in the ranking's order (the cell the verdicts hold the others against first)."""

    place: int
    cell: str
    label: str
    factors: dict[str, Any]
    runs: int
    mean: float | None
    ci_half_width: float | None
    geometric_mean: float | None  # of the headline over the runs, as the factor table and the verdicts read them
    geometric_low: float | None  # its 95 % t interval on the logs (above 0); None from one run or a figure <= 0
    geometric_high: float | None
    cv: float | None
    noisy: bool  # its runs vary by more than stats.NOISY_CV
    figures: dict[str, float | None]  # the workload's other figures shown per cell (Answer.figures), means
    distance_percent: float | None  # how much worse than the best cell, in % of the best's mean
    verdict: str  # "best", or the paired verdict against it
    p_value: float | None
    adjusted_p: float | None
    top_wait: str
    hosts: list[str]  # the hosts that measured its runs, where one cell's runs were pooled from several


class WaitRow(Typed):
    """A row of the seeds' wait table, per run; None where the source cannot fill a column honestly."""

    wait_type: str
    wait_s: float
    signal_s: float | None
    wait_count: float | None
    percentage: float
    avg_wait_s: float | None


class Resource(Typed):
    resource: str  # as the engine names it ("— (not named)" when it does not; "N others" for the rest)
    named: bool  # the engine named what the sessions waited on (or this row sums others that it named)
    seconds: float  # sampled in the wait, per run
    share: float  # % of the wait's sampled time


class WaitResources(Typed):
    """Who waits on what: the resources one top wait's sessions were caught waiting on."""

    wait_type: str
    resources: list[Resource]  # empty: the sampler never caught a session in this wait


class TracedLock(Typed):
    """A relation's lock waits as the trace counted them, per run."""

    wait_type: str  # Lock:extend, Lock:transactionid
    resource: str  # the relation (lab_insert_3), or the lock's kind; "" where the trace named none
    waits: float
    seconds: float
    share: float  # % of its wait type's traced seconds


class FileRow(Typed):
    """One file's IO per run (a cell's mean); None where its records did not measure that figure."""

    object: str  # what it holds: lab_insert_3, WAL, redo log
    file: str  # as the engine names it: base/5/16390.1
    placement: str  # "" outside the instance's placements
    others: int  # 0; or this row sums that many files, past the busiest (object and file then "")
    reads: float | None
    read_bytes: float | None
    read_avg_s: float | None
    read_p99_bound_s: float | None  # the upper bound of the power-of-two bucket holding the p99
    writes: float | None
    write_bytes: float | None
    write_avg_s: float | None
    write_p99_bound_s: float | None
    syncs: float | None
    sync_avg_s: float | None


class Traced(Typed):
    """What a cell's traces counted (`storlab waits --resources --files`)."""

    runs: int
    runs_with_locks: int  # its runs whose trace counted lock waits (or any traced wait)
    locks: list[TracedLock]  # the wait type with the most seconds first
    runs_with_files: int
    files: list[FileRow]  # the busiest first, at most 24 rows (the rest summed in the last)
    files_source: str
    unavailable: list[str]  # why its runs' wait sources counted nothing traced, each reason once
    io_traced_by_default: bool  # every run traced the default (each file's writes need --trace-io)


class CellWaits(Typed):
    cell: str
    label: str
    factors: dict[str, Any]
    source: str
    waits: list[WaitRow]  # top 95 %
    rest: dict[str, float] = {}  # every wait below the top 95 %: seconds per run (the report's "other waits")
    extras: dict[str, float]  # counters beside the table (MariaDB's redo log, the sessions' CPU), per run
    resources: list[WaitResources]  # None recorded: the waiting-task sampler saw no session (or did not run)
    traced: Traced


class IoSizes(Typed):
    """The size of the IOs one placement's device served in one direction, per run of a cell."""

    placement: str
    direction: Literal["read", "write"]
    traced: dict[int, float]  # a power-of-two bucket's lower bound in bytes -> requests, over its traced runs
    average_bytes: float | None  # the average size per request over its runs that kept only /proc/diskstats'
    average_requests: float | None  # their requests; both None: every run of the cell was traced


class CellIoSizes(Typed):
    """What the io_sizes probe kept of a cell's runs: traced histograms and diskstats' averages apart."""

    cell: str
    label: str
    traced_runs: int
    averaged_runs: int
    sizes: list[IoSizes]  # by placement, then direction


class FioJob(Typed):
    """One fio job's latest measurement on a device (`storlab io`)."""

    job: str  # 8k-randwrite
    rw: str
    block_size: int  # bytes
    iodepth: int
    iops: float
    mb_s: float
    lat_p50_ms: float | None
    lat_p99_ms: float | None
    lat_p999_ms: float | None
    flags: list[str]  # what makes the numbers suspect (a RAM disk's speed, a cache in the way)
    run_at: float  # when it was measured, seconds since the epoch


class DatabaseIo(Typed):
    """What the busiest cell (the highest mean MiB/s) drove on a placement's whole device."""

    cell: str
    label: str
    iops_mean: float  # over its runs' device readings
    iops_peak: float
    mb_s_mean: float
    mb_s_peak: float
    period_s: float  # the device sampler's interval: a peak is one interval's


class Capability(Typed):
    """A device's capability as fio measured it, beside what the database drove on it."""

    target: str  # the path fio measured
    device: str | None  # its kernel device; None where `storlab io` did not record it
    placement: str | None  # the experiment's placement there; None: not one of them
    jobs: list[FioJob]
    database: DatabaseIo | None  # None: not a placement, or its runs recorded no device readings there


class FactJudged(Typed):
    """One fact of a machine as `storlab check` judges it."""

    group: str  # CPU, Memory, Kernel, a placement's path
    name: str
    value: str
    state: Literal["ok", "warning", "unknown"]
    reason: str
    distorts: bool  # a warning that distorts results makes the machine unfit; the others add noise or context


class Machine(Typed):
    """A machine the kept runs were measured on."""

    host: str | None  # or the hosts that share its facts; None when the runs name no host
    fit: bool | None  # fit to benchmark as the check judges it; None: facts too old to judge
    judged: list[FactJudged]  # [] when the facts are too old to judge
    facts: dict[str, Any]  # facts too old to judge, as they were recorded (dotted key -> value); {} once judged


class DrawnRun(Typed):
    """A run a chart draws over its own time axis (the store's timeline of that run)."""

    cell: str
    label: str
    run: int  # the run's id: its timeline's key in the store
    repetition: int
    elapsed_s: float | None  # where its time axis ends; None: the run recorded no elapsed time


class ExplanationLine(Typed):
    wait_type: str
    baseline: float
    candidate: float
    difference: float
    share: float | None  # of the elapsed difference; None when that is too small to divide by


class Explanation(Typed):
    """What explains a difference: the waits per unit of work, side by side (storlab.answer.explain)."""

    what: str  # "log_on=ram against log_on=disk, over 2 pairs of cells alike in the other factors"
    baseline: str
    candidate: str
    per: str  # "session-ms per 1,000 rows"
    scale: float  # 1 for seconds, 1000 for milliseconds
    lines: list[ExplanationLine]
    notes: list[str]


class Compared(Typed):
    cell: str
    label: str
    mean: str  # the headline's mean ± its interval, as the ranking writes it
    change_percent: float | None  # None for the baseline itself
    p_value: float | None
    adjusted_p: float | None
    verdict: str


class Comparison(Typed):
    """`storlab compare`: every measured cell against one, paired by round, with what explains each difference."""

    headline: Headline
    baseline: str
    baseline_label: str
    cells: list[Compared]
    correction: str
    explanations: list[Explanation]


class RatePoint(Typed):
    """One rate of a layout: what its runs achieved (means over the runs)."""

    level: Any  # the declared rate, or "max" (closed loop)
    cell: str
    target: float | None  # transactions a second asked for; None for "max"
    achieved: float  # transactions a second
    latency_ms: dict[str, float]  # "p50", "p95", "p99" -> the runs' percentile, their mean
    sustained: float | None  # the share of its runs that kept up with the schedule; None for "max"
    kept_up: bool | None = None  # sustained in most of its runs: a point of its curve (the knee reads only these); None for "max"


class RateGoal(Typed):
    """The highest rate a layout sustains inside the latency goal."""

    highest_level: Any | None  # the highest declared rate inside the goal in every round
    reached: float | None  # where the goal is reached: throughput, geometric mean over the rounds
    reached_low: float | None  # its 95 % interval (on the logs); None from one round
    reached_high: float | None
    rounds_counted: int
    floor: bool  # in some round every rate stayed inside: `reached` is a floor
    per_round: dict[int, float]  # round -> its throughput inside the goal
    below: int  # rounds in which not even the lowest rate stayed inside


class RateLayout(Typed):
    label: str  # the other factors' values
    points: list[RatePoint]  # the open-loop rates, rising
    closed: RatePoint | None  # "max"
    knee: Any | None  # the level where the curve bends (Kneedle); None: no bend
    goal: RateGoal | None  # None without a latency goal


class RateMost(Typed):
    """Which layout sustains the most inside the goal, against the next, paired by round."""

    best: str
    other: str
    ratio: float
    low: float | None  # its 95 % interval; None from one round
    high: float | None


class RateCurves(Typed):
    """A rate sweep's answer (storlab.answer.rate_curve): each layout's curve, its knee, its highest rate
    inside the latency goal, and the layout that sustains the most."""

    layouts: list[RateLayout]
    goal_ms: dict[str, float] | None  # "p99_ms" -> its limit
    most: RateMost | None


class Failure(Typed):
    cell: str
    repetition: int
    message: str


class Concern(Typed):
    """One kind of warning over the cells it concerns (storlab.answer.concerns): `show` says each in one
    line by default, the sentences per cell and run behind --details."""

    kind: str  # not steady, not judged steady, no checkpoint, unequal checkpoints, noisy, outliers kept, client-bound
    cells: list[str]  # the cells it concerns (ids), in the ranking's order
    runs: int | None  # the runs it concerns; None: a warning about cells, not runs
    of_runs: int | None  # out of the runs it could concern
    meaning: str  # what it does to the figures: "their means mix two states, their verdicts hold for runs of this length only"
    line: str  # all of it in words: "not steady: 2 cells (84c14c9a, 0e002ca6), 3 of 8 runs: their means mix two states, …"


class SeriesState(Typed):
    """One per-second series of one run, judged for a steady state (storlab.steady_state)."""

    metric: str  # transactions_per_s, rows_per_s, latency_p99_ms
    points: int  # the measured seconds judged
    steady: bool | None  # None: too few seconds to judge
    range: float | None  # SNIA's range of the 5 intervals' means, a fraction of their mean
    excursion: float | None  # SNIA's excursion of the line fitted through them, a fraction of the mean
    change_p: float | None  # the CUSUM change test's p value
    changed_at_s: float | None  # where it changed, on the run's axis (when the test finds a change)
    change: float | None  # the mean after that second against the mean before, a fraction
    drift: float | None  # the fitted slope's change over the measured part, a fraction of its mean
    drift_low: float | None  # its 95 % interval
    drift_high: float | None
    said: str


class RunSteadiness(Typed):
    """What one run showed: a steady state or not, its warm-up found beside the declared one, its checkpoints."""

    repetition: int
    measured_s: float | None
    declared_warmup_s: float
    found_warmup_s: float | None  # MSER-5 over the whole series, on the run's axis
    steady: bool | None  # every series judged steady; None when none could be judged
    series: list[SeriesState]
    checkpoints: int | None  # inside the measured part; None: the run was recorded before storlab counted them
    checkpoint_times_s: list[float]  # when each was seen (to the second), on the run's axis
    checkpoint_phases: list[float]  # each one's time over the cycle, from the checkpoint forced before the run
    checkpoint_setting: str | None  # what paces them: checkpoint_timeout, innodb_log_file_size
    checkpoint_value: str | None
    checkpoint_cycle_s: float | None  # the setting in seconds, where it is a time
    checkpoint_cycle_bytes: float | None  # in bytes of log, where it is a size (InnoDB's redo log)
    log_bytes: float | None  # the WAL or redo the run wrote, its warm-up included
    # warmup_s = "found": declared_warmup_s is the warm-up found (MSER-5) and cut from the run's figures.
    warmup_found: bool = False
    stopped_by: str | None = None  # until = "steady": "steady" (the rule held) or "max" (its cap reached)
    stopped_at_s: float | None = None  # where it ended, on the run's axis


class CellSteadiness(Typed):
    cell: str
    label: str
    runs: list[RunSteadiness]
    lines: list[str]  # runs not steady and what that does to the cell's verdicts; checkpoints missing or unequal


class Steadiness(Typed):
    rule: str  # the steady-state rule applied, in words
    cells: list[CellSteadiness]
    lines: list[str]  # all of it in words, as `show` prints it


class Answer(Typed):
    # Every probe's part (probes/kept.Probe.summary) is a key of the probe's name: a field below types it in
    # the schema; a part of a probe with no field here is held all the same, checked to be a Part.
    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, SerializeAsAny[Part] | None]

    schema_version: int = SCHEMA_VERSION
    experiment: AnsweredExperiment
    headline: Headline
    figures: list[Figure]  # the workload's other figures, shown per cell
    rounds: int
    settled: bool
    status: str | None  # settled or not, and why the runs stopped; None without a factor
    stopped: str | None
    until_settled: UntilSettled | None
    factor_effects: FactorEffects | None
    noise: Noise
    ranking: list[Ranked]
    ranking_correction: str | None
    best: list[str]  # the best cell, how much better than the worst, what is not told apart from it
    not_run: list[str]  # cells without a finished run
    labels: dict[str, str]  # every cell's label by its id
    race: list[str]
    rate: list[str]  # a rate sweep's curve per layout, its knee, the highest rate inside a latency goal
    rate_curves: RateCurves | None  # the same as numbers; None: the rate is not a factor
    failures: list[Failure]
    warnings: list[str]  # runs set aside (other machine facts)
    notes: list[str]  # what every run started from, how the workload runs, the client's CPU, the machines, the traces
    cells: list[CellWaits]
    explanations: list[Explanation]
    # The probes' parts the schema types, in the registry's order (probes/registry.py).
    pressure: Pressure | None = None  # None: no run read the kernel's counters
    limits: Limits | None = None  # None: no cell had an IO cap or a server memory limit
    design: Design | None = None  # None: the full factorial
    steadiness: Steadiness | None = None  # None: no run has a per-second series or a checkpoint count
    swept: str | None = None  # the factor the headline chart draws along (short name): data_files, else the first numeric
    chart_order: list[str] = []  # the measured cells grouped by the other factors, the swept one rising: charts' order
    io_sizes: list[CellIoSizes] = []  # in chart order; a cell whose runs kept no IO sizes is left out
    capability: list[Capability] = []  # each device `storlab io` measured, the experiment's placements first
    machines: list[Machine] = []  # the machines the kept runs were measured on, one per host when the host is a factor
    # The run whose waits the report draws over time: the median (of two, the lower) of the best cell's runs
    # by the headline, or of the cell `storlab report --cell` names; None without a measured cell.
    waits_over_time: DrawnRun | None = None
    first_runs: list[DrawnRun] = []  # each measured cell's first run, in chart order: the runs the timelines draw
    concerns: list[Concern] = []  # each kind of warning and the cells it concerns: what runs held, then the noise, then the client
    waits_ranked: list[str] = []  # every wait in some cell's top 95 %, the most seconds over the cells first: its colour's rank
    # Each measured cell's volumes: every property's part of each placement it declares (storlab.volume).
    volumes: list[VolumePart] = []
    swept_log: bool = False  # the swept factor's values are positive and span 8x or more: drawn on a log axis (base 2)
    beside_headline: list[str] = []  # the shown figures in the headline's unit (a scan's CPU s): drawn beside it against the swept factor

    def parts(self) -> dict[str, Part]:
        """Every probe's part the answer holds, by the probe's name: the typed fields first, then the others."""
        return {name: value for name, value in self if isinstance(value, Part)}


# -- the ranking's columns, declared once for every table that shows it ---------------------------


def figure(value: float | None, unit: str) -> str:
    """A figure as a table shows it: seconds to the millisecond (tenths past 10 s), ms to a tenth, rates
    and counts with separators."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if abs(value) >= 1e9:  # no honest run takes this long, nor counts this much: its digits would fill the table
        return f"{value:.3g}"
    if unit == "s":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if unit == "ms":
        return f"{value:.1f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


@dataclass(frozen=True)
class Column:
    title: Callable[[Answer], str]
    text: Callable[[Ranked, Answer], str]
    left: bool = False
    shown: Callable[[Answer], bool] = lambda answer: True
    glance: bool = True  # in the ranking `show` prints by default; False: with --details and in the report only


def _mean(row: Ranked, answer: Answer) -> str:
    unit = answer.headline.unit
    if row.runs < 2 or row.ci_half_width is None:
        return f"{figure(row.mean, unit)} (1 run)" if row.runs == 1 else figure(row.mean, unit)
    return f"{figure(row.mean, unit)} ± {figure(row.ci_half_width, unit)}"


def _versus(row: Ranked, answer: Answer) -> str:
    if row.verdict == "best" or row.distance_percent is None:
        return row.verdict
    return f"{row.distance_percent:+.1f} % ({row.verdict})"


def _figure_column(name: str) -> Column:
    def title(answer: Answer) -> str:
        return next(f.label for f in answer.figures if f.name == name)

    def text(row: Ranked, answer: Answer) -> str:
        return figure(row.figures.get(name), next(f.unit for f in answer.figures if f.name == name))

    return Column(title, text, glance=False)


def columns(answer: Answer) -> list[Column]:
    """The ranking's columns for this answer: the fixed ones, the workload's figures after the headline."""
    fixed = [
        Column(lambda a: "#", lambda r, a: str(r.place)),
        Column(lambda a: "cell", lambda r, a: r.cell, left=True),
        Column(lambda a: "factors", lambda r, a: r.label, left=True),
        Column(lambda a: a.headline.label, _mean),
        Column(lambda a: "CV", lambda r, a: "—" if r.cv is None else f"{100 * r.cv:.1f} %" + (" !" if r.noisy else "")),
    ]
    after = [
        Column(lambda a: "runs", lambda r, a: str(r.runs), glance=False),
        Column(lambda a: "vs best", _versus),
        Column(lambda a: "top wait", lambda r, a: r.top_wait, left=True),
        Column(lambda a: "hosts", lambda r, a: ", ".join(r.hosts), left=True, shown=lambda a: any(r.hosts for r in a.ranking)),
    ]
    return [c for c in fixed + [_figure_column(f.name) for f in answer.figures] + after if c.shown(answer)]
