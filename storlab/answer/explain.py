"""What explains a difference: two cells' (or two groups of cells') waits per unit of work, side by side,
sorted by how much of the elapsed difference each wait type explains (Oracle's AWR Compare Periods,
pg_profile's diff report).

Waits are session-seconds (the time every session spent in them, summed), elapsed is wall time: the
elapsed difference is made session-seconds by multiplying each side's elapsed by its sessions, and each
wait type's share is its difference over that one. The wait types that are not shown are "the rest";
"not in the waits" is the session time no wait accounts for (elapsed × sessions − the waits), so the
shares add up to 100 %."""

from __future__ import annotations

from dataclasses import dataclass

from storlab.labels import short_name
from storlab.labels import format_value
from storlab.results.experiment_record import StoredExperiment
from storlab.workloads import KINDS
from storlab.workloads.kind import UnitOfWork

TOP_PERCENT = 95.0
REST, OUTSIDE = "the rest", "not in the waits"


@dataclass
class Profile:
    """One side, per unit of work: wall seconds, session-seconds (wall × sessions) and each wait's session-seconds."""

    elapsed: float
    session_s: float
    waits: dict[str, float]
    sessions: float = 1


@dataclass
class Line:
    wait_type: str
    baseline: float
    candidate: float
    share: float | None  # of the elapsed difference in session-seconds; None when that is too small to divide by

    @property
    def difference(self) -> float:
        return self.candidate - self.baseline


@dataclass
class Explanation:
    unit: str
    baseline: Profile
    candidate: Profile
    lines: list[Line]  # the top wait types, then the rest, then what is not in the waits

    @property
    def difference(self) -> float:
        """The elapsed difference, session-seconds per unit."""
        return self.candidate.session_s - self.baseline.session_s


def unit_of(experiment: StoredExperiment | None) -> UnitOfWork | None:
    """The unit its kind counts its work in; None for a folder of a kind this storlab does not know."""
    kind = KINDS.get(experiment.kind or "") if experiment is not None else None
    return None if kind is None else kind.unit_of_work


def sessions(experiment: StoredExperiment | None, factors: dict) -> int:
    """How many sessions a cell's load opened (the workload's kind tells, from its parameters: the
    stored experiment's, the cell's factor values in place of the lists, validated as the file was)."""
    declared = experiment.workload if experiment is not None else {}
    declared.update({k.split(".", 1)[1]: v for k, v in factors.items() if k.startswith("workload.")})
    try:
        kind = KINDS[declared["kind"]]
        return max(kind.sessions(kind.Params.model_validate(declared)), 1)
    except (KeyError, ValueError):  # a folder of a kind or keys this storlab does not know: one session
        return 1


def profile(cell, unit: UnitOfWork, n_sessions: int) -> Profile | None:
    """A cell's mean per run, divided by its mean work per run; None unless every run counted its work."""
    runs = [r for r in cell.runs if "elapsed_s" in r.figures and r.figures.get(unit.figure)]
    if not runs or len(runs) != len(cell.runs):
        return None
    work = sum(unit.units(r.figures[unit.figure]) for r in runs) / len(runs)
    elapsed = sum(r.figures["elapsed_s"] for r in runs) / len(runs) / work
    return Profile(elapsed, elapsed * n_sessions, {w.wait_type: w.wait_s / work for w in cell.waits}, n_sessions)


def mean(profiles: list[Profile]) -> Profile:
    """Several cells' profiles as one: the mean of each figure (a wait a cell lacks counts 0)."""
    n = len(profiles)
    names = sorted({k for p in profiles for k in p.waits})
    return Profile(sum(p.elapsed for p in profiles) / n, sum(p.session_s for p in profiles) / n,
                   {k: sum(p.waits.get(k, 0.0) for p in profiles) / n for k in names},
                   sum(p.sessions for p in profiles) / n)


def explain(baseline: Profile, candidate: Profile, unit: str, percent: float = TOP_PERCENT) -> Explanation:
    """Largest difference first (either way), keeping wait types until their differences reach `percent`
    of all the differences (the row that crosses it is kept); the others summed as the rest."""
    names = sorted(set(baseline.waits) | set(candidate.waits))
    diffs = sorted(((candidate.waits.get(k, 0.0) - baseline.waits.get(k, 0.0), k) for k in names),
                   key=lambda d: (-abs(d[0]), d[1]))
    total = sum(abs(d) for d, _ in diffs)
    elapsed_diff = candidate.session_s - baseline.session_s
    # A difference far smaller than the waits' movements (they moved from one type to another) gives
    # shares of thousands of per cent, which say nothing: none then.
    divisible = elapsed_diff != 0 and abs(elapsed_diff) >= 0.1 * total

    def line(name: str, base: float, cand: float) -> Line:
        return Line(name, base, cand, (cand - base) / elapsed_diff if divisible else None)

    lines, running = [], 0.0
    for d, name in diffs:
        if total <= 0 or running >= percent / 100 * total:
            break
        running += abs(d)
        lines.append(line(name, baseline.waits.get(name, 0.0), candidate.waits.get(name, 0.0)))
    shown = {ln.wait_type for ln in lines}
    rest = [k for k in names if k not in shown]
    if rest:
        lines.append(line(f"{REST} ({len(rest)} type{'s' if len(rest) > 1 else ''})", sum(baseline.waits.get(k, 0.0) for k in rest),
                          sum(candidate.waits.get(k, 0.0) for k in rest)))
    lines.append(line(OUTSIDE, baseline.session_s - sum(baseline.waits.values()),
                      candidate.session_s - sum(candidate.waits.values())))
    return Explanation(unit, baseline, candidate, lines)


def cells(results, baseline, candidate) -> Explanation | None:
    """One cell against another."""
    unit = unit_of(results.experiment)
    if unit is None:
        return None
    sides = [profile(c, unit, sessions(results.experiment, c.cell.factors)) for c in (baseline, candidate)]
    return None if None in sides else explain(sides[0], sides[1], unit.name)


def level(results, factor: str, value, reference) -> tuple[Explanation, int] | None:
    """A factor's level against its reference: the cells at the level against those at the reference
    with the same other factors, each side the mean of its cells; and how many pairs were matched."""
    def others(c):
        return tuple(sorted((short_name(k), format_value(v)) for k, v in c.cell.factors.items() if short_name(k) != factor))

    def at(c, v):
        return any(short_name(k) == factor and val == v for k, val in c.cell.factors.items())

    measured = results.measured
    pairs = [(r, c) for c in measured if at(c, value) for r in measured if at(r, reference) and others(r) == others(c)]
    unit = unit_of(results.experiment)
    if not pairs or unit is None:
        return None
    sides = [[profile(c, unit, sessions(results.experiment, c.cell.factors)) for c in side] for side in zip(*pairs)]
    if any(p is None for side in sides for p in side):
        return None
    return explain(mean(sides[0]), mean(sides[1]), unit.name), len(pairs)


def scale(expl: Explanation) -> tuple[str, float]:
    """Milliseconds when every figure is under a second."""
    biggest = max([abs(v) for ln in expl.lines for v in (ln.baseline, ln.candidate)] + [expl.baseline.session_s,
                                                                                         expl.candidate.session_s])
    return ("s", 1.0) if biggest >= 1 else ("ms", 1000.0)


def rows(expl: Explanation) -> list[list[str]]:
    """The table's rows as text: wait type, baseline, candidate, difference, share."""
    _, factor = scale(expl)
    return [[ln.wait_type, f"{factor * ln.baseline:.3f}", f"{factor * ln.candidate:.3f}",
             f"{factor * ln.difference:+.3f}", "—" if ln.share is None else f"{100 * ln.share:+.0f} %"]
            for ln in expl.lines]


def summary(expl: Explanation, candidate: str) -> str | None:
    """In words: the wait types that go the difference's way, largest first, until they explain 80 % of
    it (three at most), and those that offset it by 10 % or more; None without shares."""
    if not expl.lines or expl.lines[0].share is None:
        return None
    name, factor = scale(expl)
    waits = sorted((ln for ln in expl.lines if not ln.wait_type.startswith(REST) and ln.wait_type != OUTSIDE),
                   key=lambda ln: -ln.share)
    named, total = [], 0.0
    for ln in (ln for ln in waits if ln.share > 0):
        if total >= 0.8 or len(named) == 3:
            break
        named.append(ln.wait_type)
        total += ln.share
    against = [ln for ln in reversed(waits) if ln.share <= -0.1][:3]
    said = f"{candidate} spends {factor * abs(expl.difference):.3f} session-{name} " \
           f"{'more' if expl.difference > 0 else 'less'} per {expl.unit}: "
    said += f"{_and(named)} {'explain' if len(named) > 1 else 'explains'} {100 * total:.0f} % of it" if named else \
        "no wait type explains it"
    if against:
        said += f"; {_and([ln.wait_type for ln in against])} offset it by {-100 * sum(ln.share for ln in against):.0f} %"
    return said


def _and(names: list[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def title(expl: Explanation) -> str:
    return f"session-{scale(expl)[0]} per {expl.unit}"


def note(expl: Explanation) -> str:
    """The one line under the table: the elapsed difference the shares are of, and how it was made."""
    name, factor = scale(expl)
    b, c = expl.baseline, expl.candidate
    n_sessions = f"{b.sessions:g} sessions" if b.sessions == c.sessions else f"{b.sessions:g} → {c.sessions:g} sessions"
    said = (f"elapsed {factor * b.elapsed:.3f} → {factor * c.elapsed:.3f} {name} per {expl.unit} (wall) × {n_sessions}"
            f" = {factor * b.session_s:.3f} → {factor * c.session_s:.3f} session-{name}; waits are summed over sessions; ")
    if expl.lines and expl.lines[0].share is None:
        return said + (f"the elapsed difference ({factor * expl.difference:+.3f}) is small beside the waits' movements"
                       " (time moved from one wait to another): no shares")
    return said + f"share: the difference over the elapsed difference ({factor * expl.difference:+.3f})"
