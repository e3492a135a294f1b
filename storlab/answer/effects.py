"""What each factor does: the experiment read as the factorial design it is, its rounds as blocks.

The log of the headline figure is fitted by ordinary least squares (statsmodels OLS) with every factor's
main effect in treatment coding against its reference level, the round as a block when there are several
(a round's runs share the machine's mood: a multiplicative drift becomes an additive block on the log
scale), and the two-factor interactions the design can estimate with residual degrees of freedom to spare.
A level's effect is the ratio of geometric means, level / reference, averaged over the other factors' levels
as the runs spread over them (the population marginal means of Searle, Speed and Milliken 1980); with the
rounds as blocks it is, in a complete design, the paired comparison within rounds.

Three verdicts per level, after Chromium Pinpoint's DIFFERENT / SAME / UNKNOWN:
- equivalent: two one-sided tests (Schuirmann 1987) at alpha both reject, i.e. the 1 - 2 alpha interval of
  the ratio lies inside [1 / (1 + margin), 1 + margin]: whatever the effect is, it is smaller than what
  matters. It wins over different: a real difference of 4 % inside a declared ±25 % is equivalent (and
  said to be real), so the verdict does not flip between two runs of one experiment with the noise;
- different: not equivalent, and the t test of the effect, Holm-adjusted (Holm 1979, statsmodels'
  multipletests) over every test of the experiment (each level effect and each interaction's F test),
  is below alpha: a difference that may matter;
- undecided otherwise, with the effect the noise still hides: the largest ratio the interval allows.
An interaction significant after Holm is said, and each of its factors' effects is then given at each level
of the other (those follow-up tests are Holm-adjusted among themselves). What the design cannot estimate (a
factor with one level, a level with no runs, aliased columns, interactions without enough runs) is named.

When the experiment looks after every round (`until = "settled"`), alpha is the level `sequential.alpha_at`
spends at that look, for the tests and the intervals alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from storlab.answer import lenth, sequential
from storlab.rounds import ALPHA, DEFAULT_MARGIN

DIFFERENT, EQUIVALENT, UNDECIDED = "different", "equivalent", "undecided"
MIN_RESIDUAL_DF = 3  # an interaction is fitted only if this many residual degrees of freedom remain


@dataclass(frozen=True)
class Observation:
    """One measured run."""

    cell: str
    round: int  # the repetition number: the round, a block
    factors: Mapping[str, Any]  # factor name -> this run's level
    value: float  # the headline figure, > 0


@dataclass(frozen=True)
class LevelEffect:
    factor: str
    level: Any
    reference: Any
    ratio: float  # geometric-mean ratio level / reference
    ci_low: float
    ci_high: float  # 1 - alpha interval of the ratio (alpha of the look when sequential)
    p_value: float
    adjusted_p: float  # Holm over all the experiment's tests
    verdict: str
    hidden: float  # the largest effect the interval still allows, as a fraction: 0.12 for "±12 %"
    given: Mapping[str, Any] | None = None  # a conditional effect: the other factor's level it is given at
    better: bool | None = None  # True when the level improves the headline; None unless different
    # The 1 - 2 alpha interval that decides equivalence (two one-sided tests at alpha each).
    equivalence_low: float = math.nan
    equivalence_high: float = math.nan
    real: bool = False  # equivalent, yet told apart from no effect at all: a real difference inside the margin

    def to_json(self) -> dict:
        return {
            "factor": self.factor, "level": self.level, "reference": self.reference,
            "ratio": _num(self.ratio), "ci_low": _num(self.ci_low), "ci_high": _num(self.ci_high),
            "equivalence_low": _num(self.equivalence_low), "equivalence_high": _num(self.equivalence_high),
            "p_value": _num(self.p_value), "adjusted_p": _num(self.adjusted_p), "verdict": self.verdict,
            "hidden": _num(self.hidden), "given": dict(self.given) if self.given is not None else None,
            "better": self.better, "real": self.real,
        }


@dataclass(frozen=True)
class Interaction:
    factors: tuple[str, str]
    p_value: float
    adjusted_p: float
    significant: bool
    aliases: tuple[tuple[str, str], ...] = ()  # in a fraction: the other pairs whose interaction is the same column

    def to_json(self) -> dict:
        return {"factors": list(self.factors), "p_value": _num(self.p_value), "adjusted_p": _num(self.adjusted_p),
                "significant": self.significant, "aliases": [list(a) for a in self.aliases]}


@dataclass
class FactorAnswer:
    effects: list[LevelEffect]  # main effects, factor order then level order
    interactions: list[Interaction]  # the two-factor interactions fitted and tested
    conditional: list[LevelEffect]  # for each significant interaction: each factor at each level of the other
    not_estimable: list[str]  # what the design cannot estimate, and why
    settled: bool  # every main level effect different or equivalent
    margin: float
    rounds: int
    runs: int
    residual_cv: float
    formula: str
    method: str
    alpha: float = ALPHA  # the level the verdicts and intervals used
    look: int | None = None
    max_looks: int | None = None

    def to_json(self) -> dict:
        return {
            "effects": [e.to_json() for e in self.effects],
            "interactions": [i.to_json() for i in self.interactions],
            "conditional": [e.to_json() for e in self.conditional],
            "not_estimable": list(self.not_estimable),
            "settled": self.settled, "margin": self.margin, "rounds": self.rounds, "runs": self.runs,
            "residual_cv": _num(self.residual_cv), "formula": self.formula, "method": self.method,
            "alpha": self.alpha, "look": self.look, "max_looks": self.max_looks,
        }


def _num(x: float) -> float | None:
    """JSON has no nan or infinity: an unknown figure is null."""
    return None if x is None or not math.isfinite(x) else float(x)


def key(value: Any) -> str:
    """A level's canonical identity: levels may be dicts (ratios), so they are compared as sorted JSON."""
    return json.dumps(value, sort_keys=True, default=str)


# -- the design --------------------------------------------------------------------------------------------


@dataclass
class Factor:
    name: str
    reference: str  # key of the reference level
    levels: list[str]  # keys of the other levels with runs, in declared order
    values: dict[str, Any]  # key -> the level as declared


Column = tuple  # ("intercept",), ("round", r), ("main", factor, level), ("inter", factor, level, factor, level)


@dataclass
class Model:
    """The design matrix of one experiment's runs, pruned to full rank, and the contrasts it estimates."""

    X: np.ndarray  # runs x kept columns
    columns: list[Column]  # what each kept column is
    factors: list[Factor]
    interactions: dict[tuple[str, str], list[int]]  # fitted pair -> its kept columns
    not_estimable: list[str]
    rounds: list[int]
    dummies: dict[tuple[str, str], np.ndarray]  # (factor, level key) -> 1.0 for the runs at that level
    round_shares: dict[int, float]  # round -> its share of the runs

    @property
    def df_resid(self) -> int:
        return self.X.shape[0] - self.X.shape[1]

    def row(self, at: Mapping[str, str]) -> np.ndarray:
        """The design row of the levels `at` (factor -> level key); factors not named take their levels'
        shares of the runs, so a contrast between two rows is averaged over them as the runs spread."""
        def dummy(factor: str, level: str) -> float:
            if factor in at:
                return 1.0 if at[factor] == level else 0.0
            return float(self.dummies[factor, level].mean())

        values = []
        for column in self.columns:
            kind = column[0]
            if kind == "intercept":
                values.append(1.0)
            elif kind == "round":
                values.append(self.round_shares[column[1]])
            elif kind == "main":
                values.append(dummy(column[1], column[2]))
            else:
                values.append(dummy(column[1], column[2]) * dummy(column[3], column[4]))
        return np.array(values)

    def contrast(self, factor: Factor, level: str, given: Mapping[str, str] | None = None) -> np.ndarray | None:
        """Row difference level - reference (at the other factor's level `given`), or None when no runs
        compare those two cells."""
        given = dict(given or {})
        for other, at in given.items():
            here = self.dummies[other, at]
            for compared in (level, factor.reference):
                if not (here * self.dummies[factor.name, compared]).any():
                    return None
        return self.row({**given, factor.name: level}) - self.row({**given, factor.name: factor.reference})


def build(observations: Sequence[Observation], factors: Mapping[str, Sequence[Any]],
          references: Mapping[str, Any] | None = None, pairs: Sequence[tuple[str, str]] | None = None) -> Model:
    """The design matrix for `observations`: intercept, factor dummies, round blocks, and the two-factor
    interactions that are estimable with MIN_RESIDUAL_DF residual degrees of freedom left (of `pairs` only,
    when given: a design's own choice). A column that adds no rank (aliased with the others) is left out
    and said."""
    references = dict(references or {})
    n = len(observations)
    not_estimable: list[str] = []
    dummies: dict[tuple[str, str], np.ndarray] = {}
    fitted: list[Factor] = []
    for name, declared in factors.items():
        values = {key(v): v for v in declared}
        order = list(values)
        seen = []
        for obs in observations:
            if name not in obs.factors:
                raise ValueError(f"run of cell {obs.cell} (round {obs.round}) has no level for factor {name}")
            k = key(obs.factors[name])
            if k not in values:
                raise ValueError(f"run of cell {obs.cell} has {name} = {k}, not one of its declared levels")
            seen.append(k)
        column = np.array(seen, dtype=object)
        for k in order:
            dummies[name, k] = (column == k).astype(float)
        if len(order) < 2:
            not_estimable.append(f"{name}: one level only ({order[0] if order else 'none'}), nothing to compare")
            continue
        with_runs = [k for k in order if dummies[name, k].any()]
        not_estimable += [f"{name} = {k}: no runs" for k in order if k not in with_runs]
        if len(with_runs) < 2:
            not_estimable.append(f"{name}: fewer than two levels with runs")
            continue
        ref = key(references[name]) if name in references else order[0]
        if ref not in values:
            raise ValueError(f"reference {ref} of factor {name} is not one of its levels")
        if ref not in with_runs:
            not_estimable.append(f"{name}: the reference {ref} has no runs, {with_runs[0]} is the reference")
            ref = with_runs[0]
        fitted.append(Factor(name, ref, [k for k in with_runs if k != ref], values))

    estimable: list[np.ndarray] = [np.ones(n)]
    columns: list[Column] = [("intercept",)]

    def add(column: np.ndarray, what: Column) -> bool:
        if np.linalg.matrix_rank(np.column_stack(estimable + [column])) <= len(estimable):
            return False
        estimable.append(column)
        columns.append(what)
        return True

    for f in fitted:
        for level in list(f.levels):
            if not add(dummies[f.name, level], ("main", f.name, level)):
                not_estimable.append(f"{f.name} = {level}: aliased with other columns of the design, "
                                     "cannot be told apart")
                f.levels.remove(level)
    fitted = [f for f in fitted if f.levels]
    rounds = sorted({obs.round for obs in observations})
    round_of = np.array([obs.round for obs in observations])
    for r in rounds[1:]:
        add((round_of == r).astype(float), ("round", r))

    interactions: dict[tuple[str, str], list[int]] = {}
    by_name = {f.name: f for f in fitted}
    tried = [(f, g) for i, f in enumerate(fitted) for g in fitted[i + 1:]] if pairs is None else \
        [(by_name[a], by_name[b]) for a, b in pairs if a in by_name and b in by_name]
    for f, g in tried:
        candidates = [(dummies[f.name, a] * dummies[g.name, b], ("inter", f.name, a, g.name, b))
                      for a in f.levels for b in g.levels]
        rank = np.linalg.matrix_rank(np.column_stack(estimable + [c for c, _ in candidates]))
        gain = rank - len(estimable)
        pair = f"{f.name} x {g.name}"
        if gain == 0:
            not_estimable.append(f"interaction {pair}: the design has no runs to estimate it (aliased)")
            continue
        if n - rank < MIN_RESIDUAL_DF:
            not_estimable.append(
                f"interaction {pair}: not fitted, it would leave {n - rank} residual degrees of freedom "
                f"(fewer than {MIN_RESIDUAL_DF}); more rounds would allow it")
            continue
        start = len(estimable)
        for column, what in candidates:
            add(column, what)
        interactions[f.name, g.name] = list(range(start, len(estimable)))
        if gain < len(candidates):
            not_estimable.append(f"interaction {pair}: {len(candidates) - gain} of its {len(candidates)} terms "
                                 f"are not estimable (missing cells)")
    shares = {r: float((round_of == r).mean()) for r in rounds}
    return Model(np.column_stack(estimable), columns, fitted, interactions, not_estimable, rounds, dummies, shares)


# -- the answer --------------------------------------------------------------------------------------------


@dataclass
class _Estimate:
    factor: Factor
    level: str
    given: dict[str, Any] | None  # the other factor's level as declared, for a conditional effect
    log_ratio: float
    se: float


def analyse(observations: Sequence[Observation], factors: Mapping[str, Sequence[Any]], *,
            lower_is_better: bool = True, references: Mapping[str, Any] | None = None,
            margin: float = DEFAULT_MARGIN, look: int | None = None, max_looks: int | None = None,
            headline: str = "value", pairs: Sequence[tuple[str, str]] | None = None,
            aliased: Mapping[tuple[str, str], Sequence[tuple[str, str]]] | None = None,
            settle: Collection[str] | None = None, lenth_if_once: bool = False) -> FactorAnswer:
    """Every factor's effect on the headline, with verdicts; see the module's docstring. A design may say
    which interactions to fit (`pairs`), what each is aliased with (`aliased`), which factors must be
    decided for the answer to be settled (`settle`, default all), and that one round of it is judged by
    Lenth's pseudo standard error (`lenth_if_once`: a screening's cells fill every term)."""
    if not observations:
        raise ValueError("no runs to analyse")
    values = np.array([obs.value for obs in observations], dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("the headline figure must be positive and finite in every run")
    if (look is None) != (max_looks is None):
        raise ValueError("look and max_looks go together: the level of a look depends on how many there may be")
    if look is not None and max_looks is not None:
        alpha = sequential.alpha_at(look, max_looks, ALPHA)
        how = f"; look {look} of {max_looks}: {sequential.citation()}, alpha {alpha:.4f} at this look"
    else:
        alpha, how = ALPHA, ""
    y = np.log(values)
    if lenth_if_once and len({obs.round for obs in observations}) == 1:
        model = build(observations, factors, references, pairs=[])
        if model.factors and all(len(f.levels) == 1 for f in model.factors):
            return _by_lenth(observations, model, y, alpha, margin, lower_is_better, headline, how, settle)
    model = build(observations, factors, references, pairs)
    df = model.df_resid
    # Imported here: statsmodels takes most of a second to import, and a command that ends before any
    # answer (a file refused, --dry-run) should not wait for it.
    from statsmodels.regression.linear_model import OLS

    result = OLS(y, model.X).fit() if df > 0 else None
    cov = result.cov_params() if result is not None else None
    params = result.params if result is not None else np.linalg.lstsq(model.X, y, rcond=None)[0]
    mse = float(result.mse_resid) if result is not None else math.nan

    def estimate(f: Factor, level: str, given: Factor | None = None, at: str = "") -> _Estimate | None:
        c = model.contrast(f, level, {given.name: at} if given else None)
        if c is None:
            return None
        se = math.sqrt(max(float(c @ cov @ c), 0.0)) if cov is not None else math.nan
        return _Estimate(f, level, {given.name: given.values[at]} if given else None, float(c @ params), se)

    main = [e for f in model.factors for level in f.levels if (e := estimate(f, level)) is not None]
    inter_p = []
    for pair in model.interactions:
        cols = model.interactions[pair]
        R = np.zeros((len(cols), model.X.shape[1]))
        R[np.arange(len(cols)), cols] = 1.0
        inter_p.append(float(result.f_test(R).pvalue) if result is not None else math.nan)
    main_p = [_t_p(e.log_ratio, e.se, df) for e in main]
    adjusted = _holm(main_p + inter_p)
    effects = [_effect(e, p, a, df, alpha, margin, lower_is_better) for e, p, a in zip(main, main_p, adjusted)]
    fitted = list(model.interactions)
    interactions = [Interaction(pair, p, a, bool(a < alpha), tuple((aliased or {}).get(pair, ())))
                    for pair, p, a in zip(fitted, inter_p, adjusted[len(main):])]

    follow: list[_Estimate] = []
    by_name = {f.name: f for f in model.factors}
    for inter in interactions:
        if not inter.significant:
            continue
        if inter.aliases:  # which pair of the chain interacts, the fraction cannot tell
            continue
        for one, other in (inter.factors, inter.factors[::-1]):
            f, g = by_name[one], by_name[other]
            for at in [g.reference] + g.levels:
                for level in f.levels:
                    if (e := estimate(f, level, g, at)) is not None:
                        follow.append(e)
    follow_p = [_t_p(e.log_ratio, e.se, df) for e in follow]
    conditional = [_effect(e, p, a, df, alpha, margin, lower_is_better)
                   for e, p, a in zip(follow, follow_p, _holm(follow_p))]

    terms = [f.name for f in model.factors] + [f"{a}:{b}" for a, b in model.interactions]
    if len(model.rounds) > 1:
        terms.append("round")
    return FactorAnswer(
        effects=effects, interactions=interactions, conditional=conditional,
        not_estimable=model.not_estimable,
        settled=_settled(effects, settle),
        margin=margin, rounds=len(model.rounds), runs=len(observations),
        residual_cv=math.sqrt(math.expm1(mse)) if math.isfinite(mse) else math.nan,
        formula=f"log({headline}) ~ " + (" + ".join(terms) or "1"),
        method=(f"OLS on the log (statsmodels), rounds as blocks; different: t test Holm-adjusted over "
                f"{len(main_p) + len(inter_p)} tests below {alpha:.4g}; equivalent: two one-sided tests "
                f"(Schuirmann 1987) inside ±{100 * margin:g} %" + how),
        alpha=alpha, look=look, max_looks=max_looks,
    )


def _settled(effects: Sequence[LevelEffect], settle: Collection[str] | None) -> bool:
    """Every level of every factor that must be decided (all of them, unless a design names some) is."""
    judged = [e for e in effects if settle is None or e.factor in settle]
    return bool(judged) and all(e.verdict != UNDECIDED for e in judged)


def _by_lenth(observations: Sequence[Observation], model: Model, y: np.ndarray, alpha: float, margin: float,
              lower_is_better: bool, headline: str, how: str, settle: Collection[str] | None) -> FactorAnswer:
    """One round of a two-level fraction: every cell once, as many terms as cells, no residual. Each main
    effect is judged against Lenth's pseudo standard error of all the round's orthogonal contrasts
    (storlab.answer.lenth), Holm-adjusted over the main effects; equivalence by the same two one-sided
    tests, read on Lenth's reference distribution."""
    coded = np.array([[1.0 if key(obs.factors[f.name]) != f.reference else -1.0 for f in model.factors]
                      for obs in observations])
    contrasts = lenth.contrasts(coded, y)
    m = len(contrasts)
    pse = float(lenth.pseudo_se(contrasts)[0])
    mains = contrasts[:len(model.factors)]
    p = [lenth.p_value(c / pse, m) if pse > 0 else math.nan for c in mains]
    adjusted = _holm(p)
    bound = math.log1p(margin)

    def above(t: float) -> float:  # P(T >= t) on Lenth's symmetric reference distribution
        tail = lenth.p_value(t, m) / 2
        return tail if t > 0 else 1 - tail

    effects = []
    for f, c, pv, adj in zip(model.factors, mains, p, adjusted):
        if pse > 0:
            half, narrow = lenth.quantile(1 - alpha, m) * pse, lenth.quantile(1 - 2 * alpha, m) * pse
            tost = max(above((c + bound) / pse), above((bound - c) / pse))
            v = verdict(adj, tost, alpha)
        else:
            half = narrow = math.nan
            v = UNDECIDED
        ratio = math.exp(c)
        effects.append(LevelEffect(
            f.name, f.values[f.levels[0]], f.values[f.reference], ratio, math.exp(c - half), math.exp(c + half), pv, adj,
            v, math.expm1(max(abs(c - half), abs(c + half))), None, ((ratio < 1) == lower_is_better) if v == DIFFERENT else None,
            math.exp(c - narrow), math.exp(c + narrow), v == EQUIVALENT and adj < alpha))
    sigma = pse * math.sqrt(len(observations)) / 2  # a contrast of n runs spreads 2 sigma / sqrt(n)
    return FactorAnswer(
        effects=effects, interactions=[], conditional=[],
        not_estimable=model.not_estimable + [f"interactions: one round of the fraction fits a term for every cell; Lenth's "
                                             f"pseudo standard error over its {m} contrasts judges the main effects"],
        settled=_settled(effects, settle), margin=margin, rounds=1, runs=len(observations),
        residual_cv=math.sqrt(math.expm1(sigma**2)) if math.isfinite(sigma) else math.nan,
        formula=f"log({headline}) ~ " + " + ".join(f.name for f in model.factors) + " (saturated: every contrast of the round)",
        method=(f"Lenth's pseudo standard error (Lenth 1989) over {m} contrasts of one round; different: Holm-adjusted over "
                f"{len(mains)} main effects below {alpha:.4g}, on Lenth's reference distribution (simulated, "
                f"{lenth.DRAWS:,} draws); equivalent: two one-sided tests inside ±{100 * margin:g} %" + how),
        alpha=alpha)


def _t_p(log_ratio: float, se: float, df: int) -> float:
    if df <= 0 or not math.isfinite(se):
        return math.nan
    if se == 0:
        return 0.0 if log_ratio != 0 else 1.0
    return float(2 * sps.t.sf(abs(log_ratio) / se, df))


def _holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values; an untestable p (nan) stays nan and takes no part."""
    tested = [i for i, p in enumerate(p_values) if math.isfinite(p)]
    out = [math.nan] * len(p_values)
    if tested:
        from statsmodels.stats.multitest import multipletests  # imported when needed, as OLS is

        corrected = multipletests([p_values[i] for i in tested], method="holm")[1]
        for i, p in zip(tested, corrected):
            out[i] = float(p)
    return out


def tost_p(log_ratio: float, se: float, df: int, margin: float) -> float:
    """The larger p of the two one-sided tests that the log ratio lies above -ln(1+margin) and below
    +ln(1+margin): equivalence holds at alpha when it is below alpha."""
    if df <= 0 or not math.isfinite(se):
        return math.nan
    bound = math.log1p(margin)
    if se == 0:
        return 0.0 if abs(log_ratio) < bound else 1.0
    lower = sps.t.sf((log_ratio + bound) / se, df)
    upper = sps.t.cdf((log_ratio - bound) / se, df)
    return float(max(lower, upper))


def verdict(adjusted_p: float, equivalence_p: float, alpha: float) -> str:
    """Equivalent wins when both hold (a real effect smaller than the margin): different is kept for a
    difference that may matter, so one experiment run twice does not say both of one small effect."""
    if equivalence_p < alpha:
        return EQUIVALENT
    if adjusted_p < alpha:
        return DIFFERENT
    return UNDECIDED


def _effect(e: _Estimate, p: float, adjusted: float, df: int, alpha: float, margin: float,
            lower_is_better: bool) -> LevelEffect:
    if df > 0 and math.isfinite(e.se):
        half = float(sps.t.ppf(1 - alpha / 2, df)) * e.se
        low, high = math.exp(e.log_ratio - half), math.exp(e.log_ratio + half)
        hidden = math.expm1(max(abs(e.log_ratio - half), abs(e.log_ratio + half)))
        narrow = float(sps.t.ppf(1 - alpha, df)) * e.se
        eq_low, eq_high = math.exp(e.log_ratio - narrow), math.exp(e.log_ratio + narrow)
    else:
        low = high = hidden = eq_low = eq_high = math.nan
    v = verdict(adjusted, tost_p(e.log_ratio, e.se, df, margin), alpha) if math.isfinite(adjusted) else UNDECIDED
    ratio = math.exp(e.log_ratio)
    better = ((ratio < 1) == lower_is_better) if v == DIFFERENT else None
    return LevelEffect(e.factor.name, e.factor.values[e.level], e.factor.values[e.factor.reference], ratio, low, high,
                       p, adjusted, v, hidden, e.given, better, eq_low, eq_high, v == EQUIVALENT and adjusted < alpha)
