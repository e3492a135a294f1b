"""Where the noise is (Kalibera and Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013): how
much of the variance of the per-second throughput is between runs and how much inside a run, and what
that says about the next runs: more of them, or longer ones.

The measured seconds of every run (the declared warm-up left out), on the log scale so cells of any
throughput pool, are fitted by a linear mixed model (statsmodels' MixedLM, REML): each cell its own mean,
each run a random intercept (the variance between runs), and the seconds about it (the variance inside a
run). Each run has an instance of its own (a scan's runs share their cell's one): instance and run are one
level here, and no level is left above them to measure.

A cell's mean from r runs of n seconds varies by s_run^2 / r + s_in^2 / (r n); a run costs its fixed part
c (the instance made, the data prepared: the wall time between runs beyond their load) plus n seconds. For
a given precision the cheapest n is sqrt(c s_in^2 / s_run^2) (Kalibera and Jones' optimum for two levels):
longer than the runs are, and longer runs are the cheaper way to a narrower interval; shorter, more runs.
Seconds next to each other are alike (a checkpoint, the write-back), which makes s_in^2 / n too small a
share: the advice errs towards more runs.

With what the verdicts still need (`Need`: how much narrower their interval must get), the plan is costed:
the rounds more that reach that precision at the runs' length, against those at the cheapest length (within
the longest run the file allows, and short enough for a round to fit in the budget left), each round costing
its cells' fixed parts and seconds; the cheaper is the plan, and a plan the budget cannot hold says so. A
settled answer needs nothing: no plan."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

METHOD = ("a linear mixed model of the log of each measured second's throughput (statsmodels MixedLM, REML): "
          "each cell its mean, each run a random intercept; the cheapest run length sqrt(c s_in^2 / s_run^2) for a "
          "run's fixed cost c (Kalibera and Jones 2013)")
# A run length within this factor of the cheapest is as good as it (the cost curve is flat near it).
FLAT = 1.5


@dataclass(frozen=True)
class Need:
    """What the verdicts still need, for a costed plan."""

    narrow: float  # the interval's half-width they need over the one they have (below 1; 0 or less: none reaches it)
    cells: int  # runs a round
    rounds: int  # rounds done
    budget_left_s: float | None = None  # the wall time the file's budget still allows; None: no budget
    longest_s: float | None = None  # the longest run the file allows; None: no bound


@dataclass(frozen=True)
class Split:
    between_runs: float  # variance of the log between runs (a CV^2, roughly)
    inside_run: float  # of one second's log about its run's mean
    runs: int
    seconds: float  # measured seconds a run, on average
    run_cost_s: float | None  # a run's fixed cost: the wall time between runs beyond their load
    best_seconds: float | None  # the cheapest run length for a given precision (None: unknown cost, or no
                                # variance between runs: any length)
    advice: str | None  # "longer runs", "more runs"; None: a run's cost is unknown
    plan: str  # in words


def run_cost(starts_and_lengths: list[tuple[float, float]]) -> float | None:
    """A run's fixed cost in seconds: the median wall time from one run's load ending to the next run's
    start (its instance made, its data prepared); None with fewer than two runs."""
    ordered = sorted(starts_and_lengths)
    gaps = [b[0] - (a[0] + a[1]) for a, b in itertools.pairwise(ordered)]
    gaps = [g for g in gaps if g > 0]
    return float(np.median(gaps)) if gaps else None


def narrowing(undecided: Sequence, margin: float) -> float:
    """`Need.narrow` from the undecided levels (each with ratio, ci_low and ci_high, the interval that decides
    "different", and equivalence_low and equivalence_high, the one that decides "equivalent": model.Effect):
    of each, the share of its half-width (on the log scale) that would settle it at its ratio, excluding 1
    or lying inside the margin, whichever asks less; the least of those shares, so that every level settles."""
    bound = math.log1p(margin)
    shares = []
    for e in undecided:
        if None in (e.ci_low, e.ci_high, e.equivalence_low, e.equivalence_high):
            continue  # no interval to narrow (too few runs): the rounds, not their length, are what it lacks
        centre = abs(math.log(e.ratio))
        different = centre / (math.log(e.ci_high) - math.log(e.ci_low)) * 2
        equivalent = (bound - centre) / (math.log(e.equivalence_high) - math.log(e.equivalence_low)) * 2
        shares.append(max(different, equivalent))
    return min(shares, default=1.0)


def split(series: dict[str, list[np.ndarray]], cost_s: float | None, need: Need | None = None,
          settled: bool = False) -> Split | None:
    """The split from each cell's runs' measured per-second throughput (cell -> one array a run); None
    without two runs of one cell of three seconds or more. `need`: what the verdicts still need, for a costed
    plan; `settled`: the answer needs nothing, and nothing is planned."""
    from statsmodels.regression.mixed_linear_model import MixedLM

    rows, cells, groups, run_cells = [], [], [], []
    names = sorted(series)
    for i, name in enumerate(names):
        for values in series[name]:
            kept = values[values > 0]
            if len(kept) < 3:
                continue
            rows.append(np.log(kept))
            cells += [i] * len(kept)
            groups += [len(run_cells)] * len(kept)
            run_cells.append(i)
    run = len(run_cells)
    if not run_cells or max(np.bincount(run_cells)) < 2:
        return None
    y = np.concatenate(rows)
    exog = np.eye(len(names))[np.array(cells)]
    exog = exog[:, exog.any(axis=0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a variance at its boundary (0) is an answer, not a failure
        fit = MixedLM(y, exog, np.array(groups)).fit(reml=True)
    between = max(float(np.asarray(fit.cov_re)[0, 0]), 0.0)
    inside = float(fit.scale)
    seconds = len(y) / run
    best = None if cost_s is None or between <= 0 else math.sqrt(cost_s * inside / between)
    if settled:
        return Split(between, inside, run, seconds, cost_s, best, None, "none: the answer is settled")
    if need is not None and cost_s is not None:
        advice, plan = costed(between, inside, seconds, cost_s, best, need)
        return Split(between, inside, run, seconds, cost_s, best, advice, plan)
    advice = None if cost_s is None else "longer runs" if best is None or best > FLAT * seconds else "more runs"
    return Split(between, inside, run, seconds, cost_s, best, advice, _plan(seconds, cost_s, best))


def costed(between: float, inside: float, seconds: float, cost_s: float, best: float | None,
           need: Need) -> tuple[str | None, str]:
    """(advice, plan): the rounds more that narrow the interval to `need.narrow` of its width at the runs' length
    and at the cheapest length the bounds allow, and what each costs; the cheaper is the plan."""
    if need.narrow <= 0:
        return None, "none: the undecided effect sits at the margin, where no precision tells it"
    if need.narrow >= 1:
        return None, "none: the interval is as narrow as the verdicts need"
    room = None if need.budget_left_s is None else need.budget_left_s / need.cells - cost_s  # one round must fit
    longest = min((x for x in (need.longest_s, room) if x is not None), default=math.inf)
    # r rounds more of runs of n seconds add r / (s_run^2 + s_in^2 / n) to each cell's precision; `wanted` is
    # what the narrower interval needs beyond what the rounds done hold.
    wanted = need.rounds / (between + inside / seconds) * (1 / need.narrow**2 - 1)
    at_length = math.ceil(wanted * (between + inside / seconds))
    priced = {}
    for rounds in range(1, at_length + 1):
        gap = rounds / wanted - between
        length = seconds if rounds == at_length else math.ceil(inside / gap) if gap > 0 else math.inf
        if seconds <= length <= longest:
            priced[rounds] = (length, rounds * need.cells * (cost_s + length))
    if not priced:
        return None, (f"none fits: a round of {need.cells} runs of {seconds:.0f} s takes longer than the budget left, "
                      f"{need.budget_left_s:.0f} s")
    rounds = min(priced, key=lambda r: (priced[r][1], r))
    length, total = priced[rounds]
    advice = "longer runs" if length > FLAT * seconds else "more runs"
    said = (f"{advice}: {rounds} round{'s' if rounds != 1 else ''} more of {length:.0f} s runs (now {seconds:.0f} s), "
            f"about {total:.0f} s, narrow the interval the verdicts need to {need.narrow:.2f} of its width")
    if rounds != at_length:
        said += f" (at {seconds:.0f} s: {at_length} rounds, about {at_length * need.cells * (cost_s + seconds):.0f} s)"
    if need.budget_left_s is not None and total > need.budget_left_s:
        fit = int(need.budget_left_s // (need.cells * (cost_s + length)))
        said += f"; the budget left, {need.budget_left_s:.0f} s, holds {fit} of those rounds"
    return advice, said


def _plan(seconds: float, cost_s: float | None, best: float | None) -> str:
    if cost_s is None:
        return "a run's fixed cost is unknown (one run): no advice on the runs' length"
    if best is None:
        return (f"no variance between runs: longer runs narrow the interval more cheaply than more runs (each costs "
                f"{cost_s:.0f} s before its load)")
    if best > FLAT * seconds:
        return (f"longer runs: about {best:.0f} s each (now {seconds:.0f} s) narrow the interval more cheaply than more "
                f"runs, each of which costs {cost_s:.0f} s before its load")
    if best < seconds / FLAT:
        return (f"more runs (rounds), shorter if the question allows (about {best:.0f} s, now {seconds:.0f} s): the "
                "noise is between runs, and a longer run does not average it away")
    return f"more runs (rounds): the runs' length ({seconds:.0f} s) is near the cheapest ({best:.0f} s)"


def line(found: Split, shared_instance: bool = False) -> str:
    """The split in words; `shared_instance`: a cell's runs share one instance (a scan's)."""
    total = found.between_runs + found.inside_run / found.seconds
    share = 100 * found.between_runs / total if total > 0 else 0.0
    level = "a cell's runs on one instance" if shared_instance else "each on its own instance"
    return (f"between runs {100 * math.sqrt(found.between_runs):.1f} % ({level}), inside a run "
            f"{100 * math.sqrt(found.inside_run):.1f} % a second ({found.runs} runs of {found.seconds:.0f} measured s; "
            f"of a run's mean's variance {share:.0f} % is between runs); plan: {found.plan}")
