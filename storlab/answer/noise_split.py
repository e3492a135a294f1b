"""Where the noise is (Kalibera and Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013): how
much of the variance of the per-second throughput is between runs and how much inside a run, and what
that says about the next runs: more of them, or longer ones.

The measured seconds of every run (the declared warm-up left out), on the log scale so cells of any
throughput pool, are fitted by a linear mixed model (statsmodels' MixedLM, REML): each cell its own mean,
each round a block when the rounds are given (as in the factor answer), each run a random intercept (the
variance between runs), and the seconds about it (the variance inside a run). Each run has an instance of its own (a scan's runs share their cell's one): instance and run are one
level here, and no level is left above them to measure.

A cell's mean from r runs of n seconds varies by s_run^2 / r + s_in^2 / (r n); a run costs its fixed part
c (the instance made, the data prepared: the wall time between runs beyond their load; and its warm-up) plus
n seconds. For
a given precision the cheapest n is sqrt(c s_in^2 / s_run^2) (Kalibera and Jones' optimum for two levels):
longer than the runs are, and longer runs are the cheaper way to a narrower interval; shorter, more runs.
Seconds next to each other are alike (a checkpoint, the write-back), which makes s_in^2 / n too small a
share: the advice errs towards more runs.

With what the verdicts still need (`Need`: how much narrower their interval must get), the plan is costed:
the rounds more and their runs' length, within the file's bounds on a run's length, the rounds its max
leaves and the budget left, that reach that precision at the least cost, each round costing its cells' fixed
parts and seconds; the factor answer weighs every round alike, which the costing follows (`costed`). When
none reaches it, the plan is the one that narrows the interval most within those bounds, and says so; no
plan costs more than the budget left. A settled answer needs nothing: no plan. Under `run_length`
(storlab.running.plan.round_length) the next round runs at the plan's length, each run keeping its length
and why in its conditions (RUN_LENGTH), which `lengths_said` reads back for the answer."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from storlab.answer.steadiness import THROUGHPUT

METHOD = ("a linear mixed model of the log of each measured second's throughput (statsmodels MixedLM, REML): "
          "each cell its mean, each run a random intercept; the cheapest run length sqrt(c s_in^2 / s_run^2) for a "
          "run's fixed cost c (Kalibera and Jones 2013)")
RUN_LENGTH = "run_length"  # a run's conditions under a planned length: {"s": seconds, "why": the plan in words}
# A run length within this factor of the cheapest is as good as it (the cost curve is flat near it).
FLAT = 1.5
MAX_MORE = 100  # the most rounds a plan counts without a max (the experiment file's limit on repetitions)


@dataclass(frozen=True)
class Need:
    """What the verdicts still need, for a costed plan, and the bounds it is made within."""

    narrow: float  # the interval's half-width they need over the one they have (below 1; 0 or less: none reaches it)
    cells: int  # runs a round
    rounds: int  # rounds done
    budget_left_s: float | None = None  # the wall time the file's budget still allows; None: no budget
    longest_s: float | None = None  # the longest run the file allows; None: no bound
    shortest_s: float | None = None  # the shortest; None: the runs' length now (a plan never shortens them)
    lengths: tuple[float, ...] = ()  # each round done, its runs' measured seconds; (): every round at the mean
    rounds_left: int | None = None  # the rounds the file's max still allows; None: no bound


@dataclass(frozen=True)
class Plan:
    """The costed plan: `rounds` more of runs of `length` seconds, about `total_s` of wall time, which narrow
    the interval to `reached` of its width (the need's `narrow` or less when they reach it)."""

    rounds: int
    length: float
    total_s: float
    reached: float
    reaches: bool


@dataclass(frozen=True)
class Split:
    between_runs: float  # variance of the log between runs (a CV^2, roughly)
    inside_run: float  # of one second's log about its run's mean
    runs: int
    seconds: float  # measured seconds a run, on average
    run_cost_s: float | None  # a run's fixed cost: the wall time between runs beyond their load
    best_seconds: float | None  # the cheapest run length for a given precision (None: unknown cost, or no
                                # variance between runs: any length)
    advice: str | None  # "longer runs", "more runs", "shorter runs"; None: a run's cost is unknown
    plan: str  # in words
    costed: Plan | None = None  # the costed plan, when the verdicts' need was given and one fits


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
          settled: bool = False, rounds: dict[str, list[int]] | None = None) -> Split | None:
    """The split from each cell's runs' measured per-second throughput (cell -> one array a run); None
    without two runs of one cell of three seconds or more. `need`: what the verdicts still need, for a costed
    plan; `settled`: the answer needs nothing, and nothing is planned. `rounds`: each run's round (cell -> one
    a run), a block as in the factor answer, so the rounds' drift, which the verdicts do not see, is not
    counted between runs."""
    from statsmodels.regression.mixed_linear_model import MixedLM

    rows, cells, groups, run_cells, run_rounds = [], [], [], [], []
    names = sorted(series)
    for i, name in enumerate(names):
        for j, values in enumerate(series[name]):
            positive = values[values > 0]
            if len(positive) < 3:
                continue
            rows.append(np.log(positive))
            cells += [i] * len(positive)
            groups += [len(run_cells)] * len(positive)
            run_rounds += [rounds[name][j] if rounds else 0] * len(positive)
            run_cells.append(i)
    run = len(run_cells)
    if not run_cells or max(np.bincount(run_cells)) < 2:
        return None
    y = np.concatenate(rows)
    exog = np.eye(len(names))[np.array(cells)]
    exog = exog[:, exog.any(axis=0)]
    blocks = sorted(set(run_rounds))
    if len(blocks) > 1:  # every round but the first its own offset, as the factor answer's blocks
        exog = np.hstack([exog, (np.array(run_rounds)[:, None] == np.array(blocks[1:])[None, :]).astype(float)])
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
        advice, plan, found = costed(between, inside, seconds, cost_s, need)
        return Split(between, inside, run, seconds, cost_s, best, advice, plan, found)
    advice = None if cost_s is None else "longer runs" if best is None or best > FLAT * seconds else "more runs"
    return Split(between, inside, run, seconds, cost_s, best, advice, _plan(seconds, cost_s, best))


def costed(between: float, inside: float, seconds: float, cost_s: float,
           need: Need) -> tuple[str | None, str, Plan | None]:
    """(advice, plan in words, plan): the rounds more and their runs' length, within the bounds, the rounds
    left and the budget left, that narrow the interval to `need.narrow` of its width at the least cost; when
    none does, those that narrow it most.

    The factor answer weighs every round alike (OLS, each round a block), so a round's runs count for no
    more for being longer: with each round done i of variance v_i = s_run^2 + s_in^2 / n_i (a cell's run of
    n_i seconds), the interval's width goes as sqrt(sum v_i) / R, and r rounds more of n seconds make it
    sqrt(sum v_i + r v(n)) / (R + r). Rounds done at a length are not made cheaper by later ones."""
    now = need.lengths[-1] if need.lengths else seconds
    if need.narrow <= 0:
        return None, "none: the undecided effect sits at the margin, where no precision tells it", None
    if need.narrow >= 1:
        return None, "none: the interval is as narrow as the verdicts need", None
    if need.rounds_left == 0:
        return None, f"none: the file's max rounds ({need.rounds}) are run", None
    room = None if need.budget_left_s is None else need.budget_left_s / need.cells - cost_s  # one round must fit
    longest = min((x for x in (need.longest_s, room) if x is not None), default=math.inf)
    shortest = now if need.shortest_s is None else need.shortest_s
    if longest < shortest:
        return None, (f"none fits: a round of {need.cells} runs of {shortest:.0f} s takes longer than the budget left, "
                      f"{need.budget_left_s:.0f} s"), None
    done = [between + inside / n for n in (need.lengths or [seconds] * need.rounds)]
    rounds, spread = len(done), sum(done)
    target = need.narrow**2 * spread / rounds**2  # the variance of the estimate the verdicts need

    def variance(more: int, length: float) -> float:
        return (spread + more * (between + inside / length)) / (rounds + more) ** 2

    def cost(more: int, length: float) -> float:
        return more * need.cells * (cost_s + length)

    most = need.rounds_left if need.rounds_left is not None else MAX_MORE
    priced = []  # (cost, rounds, length): the plans that reach the target
    fitting = []  # (variance, cost, rounds, length): the most each number of rounds can do within the bounds
    for more in range(1, most + 1):
        cap = longest if room is None else min(longest, need.budget_left_s / (more * need.cells) - cost_s)
        if cap < shortest:
            break  # more rounds fit the budget only shorter than the file allows
        cap = math.floor(cap) if math.isfinite(cap) else cap
        fitting.append((variance(more, cap), cost(more, cap), more, cap))
        # the per-round variance the more rounds need, and the length that gives it
        wanted = (target * (rounds + more) ** 2 - spread) / more
        if wanted <= between:
            continue
        length = max(float(math.ceil(inside / (wanted - between))), shortest)
        if length <= cap:
            priced.append((cost(more, length), more, length))
    if priced:
        total, more, length = min(priced)
        found = Plan(more, length, total, math.sqrt(variance(more, length) / (spread / rounds**2)), True)
    elif fitting and math.isfinite(min(fitting)[3]):
        _, total, more, length = min(fitting)
        found = Plan(more, length, total, math.sqrt(variance(more, length) / (spread / rounds**2)), False)
    else:
        return None, "none: no run length the bounds allow narrows the interval", None
    advice = "longer runs" if found.length > FLAT * now else "shorter runs" if found.length < now / FLAT else "more runs"
    said = (f"{advice}: {found.rounds} round{'s' if found.rounds != 1 else ''} more of {found.length:.0f} s runs (now "
            f"{now:.0f} s), about {found.total_s:.0f} s, ")
    if found.reaches:
        said += f"narrow the interval the verdicts need to {need.narrow:.2f} of its width"
        same = next((more for more in range(1, most + 1) if variance(more, now) <= target), None)
        if same is not None and found.length != now:
            said += f" (at {now:.0f} s: {same} rounds, about {cost(same, now):.0f} s)"
    else:
        limits = ["the budget left"] if room is not None else []
        limits += [f"max {rounds + most} rounds"] if need.rounds_left is not None else []
        limits += [f"runs of at most {need.longest_s:.0f} s"] if need.longest_s is not None else []
        said += (f"the most {' and '.join(limits) or 'the bounds'} allow: the interval to {found.reached:.2f} of its "
                 f"width, where the verdicts need {need.narrow:.2f}")
    return advice, said, found


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


def of_results(results, effects=None, budget_left_s: float | None = None) -> Split | None:
    """The split of an answer's runs (storlab.answer.analysis.Results), each run's round its block; with the
    factor effects (each with verdict and intervals, and the margin), costed for what their undecided levels
    need within the file's bounds (`run_length`, `max`) and the budget left (`budget_left_s`; None: the file's
    budget less the wall time the runs spanned). The runs' fixed cost counts their warm-up."""
    series: dict[str, list] = {}
    rounds: dict[str, list[int]] = {}
    timing, warmups, lengths = [], [], {}
    for c in results.measured:
        for run, run_series in zip(c.runs, c.series):
            name = next((m for m in THROUGHPUT if m in run_series.series), None)
            if name is None:
                continue
            t, x = run_series.series[name]
            series.setdefault(c.cell.id, []).append(x[t >= run_series.warmup_s])
            rounds.setdefault(c.cell.id, []).append(run.repetition)
            timing.append((run.started_at, run_series.warmup_s + (run_series.measured_s or 0.0)))
            warmups.append(run_series.warmup_s)
            lengths.setdefault(run.repetition, []).append(float(np.sum(t >= run_series.warmup_s)))
    undecided = [e for e in effects.effects + effects.conditional if e.verdict == "undecided"] if effects else []
    settling = results.settling
    need = None
    if undecided and not results.settled:
        budget = settling.budget_s if settling else None
        if budget_left_s is None and budget is not None:
            used = max(s + n for s, n in timing) - min(s for s, _ in timing) if timing else 0.0
            budget_left_s = max(budget - used, 0.0)
        planned = settling is not None and settling.plans_length
        need = Need(narrowing(undecided, effects.margin), cells=len(results.measured), rounds=results.rounds,
                    budget_left_s=budget_left_s, longest_s=settling.longest_s if planned else None,
                    shortest_s=settling.shortest_s if planned else None,
                    lengths=tuple(float(np.mean(lengths[r])) for r in sorted(lengths)),
                    rounds_left=None if settling is None else max(settling.max_rounds - results.rounds, 0))
    cost = run_cost(timing)
    if cost is not None and warmups:
        cost += float(np.mean(warmups))  # a run's warm-up is spent whatever its length
    return split(series, cost, need, settled=results.settled, rounds=rounds)


def lengths_said(runs: Sequence[tuple[int, dict]]) -> str | None:
    """Which rounds ran at which length and why, from each run's (round, conditions) under a planned run
    length; None when no run was planned."""
    by_round: dict[int, dict] = {}
    for rnd, conditions in runs:
        if RUN_LENGTH in (conditions or {}):
            by_round.setdefault(rnd, conditions[RUN_LENGTH])
    if not by_round:
        return None
    groups: list[tuple[list[int], dict]] = []
    for rnd in sorted(by_round):
        if groups and groups[-1][1] == by_round[rnd] and groups[-1][0][-1] == rnd - 1:
            groups[-1][0].append(rnd)
        else:
            groups.append(([rnd], by_round[rnd]))
    said = [f"round{'s' if len(r) > 1 else ''} {r[0]}{'-' + str(r[-1]) if len(r) > 1 else ''} ran {planned['s']:g} s "
            f"({planned['why']})" for r, planned in groups]
    return "run length planned: " + "; ".join(said)


def line(found: Split, shared_instance: bool = False) -> str:
    """The split in words; `shared_instance`: a cell's runs share one instance (a scan's)."""
    total = found.between_runs + found.inside_run / found.seconds
    share = 100 * found.between_runs / total if total > 0 else 0.0
    level = "a cell's runs on one instance" if shared_instance else "each on its own instance"
    return (f"between runs {100 * math.sqrt(found.between_runs):.1f} % ({level}), inside a run "
            f"{100 * math.sqrt(found.inside_run):.1f} % a second ({found.runs} runs of {found.seconds:.0f} measured s; "
            f"of a run's mean's variance {share:.0f} % is between runs); plan: {found.plan}")
