"""Simulated factorial experiments for the statistics tests: many at once, no servers.

Each simulated run's figure is base x the cell's true ratio x the round's mood x its own noise, the mood and
the noise lognormal: the machine drifts from round to round (a run shares its round's mood) and every run
spreads by a CV of 5-20 %. `Fits` is the fit `effects.analyse` makes (its design matrix, contrasts, Holm and
two one-sided tests), done with numpy for thousands of responses at once; test_effects checks that both give
the same numbers on one experiment.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import special

from storlab import steady_state
from storlab.answer import effects
from storlab.rounds import DEFAULT_MARGIN


def cells(factors: Mapping[str, Sequence]) -> list[dict]:
    return [dict(zip(factors, combo)) for combo in itertools.product(*factors.values())]


def template(factors: Mapping[str, Sequence], rounds: int, exclude: Sequence[dict] = (),
             design: Sequence[dict] | None = None) -> list[effects.Observation]:
    """One observation per cell and round (value 1): the layout of a complete experiment (of `design`'s
    cells, a screening's, when given)."""
    out = []
    for r in range(1, rounds + 1):
        for levels in (cells(factors) if design is None else design):
            if levels in exclude:
                continue
            name = ",".join(f"{k}={v}" for k, v in levels.items())
            out.append(effects.Observation(name, r, levels, 1.0))
    return out


def responses(observations: Sequence[effects.Observation], ratio, sims: int, rng: np.random.Generator,
              cv: tuple[float, float] = (0.05, 0.20), drift: float = 0.15) -> np.ndarray:
    """Log figures, runs x sims. `ratio(levels) -> true ratio of that cell`. Each simulated experiment draws
    its CV uniformly from `cv`; the rounds' moods spread by `drift` (sd of the log)."""
    sigma = np.sqrt(np.log1p(rng.uniform(*cv, size=sims) ** 2))  # a lognormal's CV -> its log's sd
    rounds = sorted({o.round for o in observations})
    mood = {r: rng.normal(0, drift, size=sims) for r in rounds}
    truth = np.array([math.log(ratio(o.factors)) for o in observations])
    noise = rng.normal(size=(len(observations), sims)) * sigma
    return truth[:, None] + np.array([mood[o.round] for o in observations]) + noise


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each column (tests x sims)."""
    m = p.shape[0]
    order = np.argsort(p, axis=0)
    ranked = np.take_along_axis(p, order, axis=0) * (m - np.arange(m))[:, None]
    ranked = np.minimum(np.maximum.accumulate(ranked, axis=0), 1.0)
    out = np.empty_like(p)
    np.put_along_axis(out, order, ranked, axis=0)
    return out


class Fits:
    """effects.analyse's main effects and interaction tests for many responses of one design."""

    def __init__(self, observations: Sequence[effects.Observation], factors: Mapping[str, Sequence],
                 pairs: Sequence[tuple[str, str]] | None = None):
        self.model = effects.build(observations, factors, pairs=pairs)
        X = self.model.X
        self.df = self.model.df_resid
        self.xtx_inv = np.linalg.inv(X.T @ X)
        self.hat = self.xtx_inv @ X.T
        self.labels = [(f.name, f.values[level]) for f in self.model.factors for level in f.levels]
        self.contrasts = np.array([self.model.contrast(f, level) for f in self.model.factors for level in f.levels])
        self.restricted = []
        for cols in self.model.interactions.values():
            keep = [i for i in range(X.shape[1]) if i not in cols]
            Xr = X[:, keep]
            self.restricted.append((len(cols), Xr @ np.linalg.pinv(Xr)))

    def tests(self, Y: np.ndarray):
        """(log ratios, their standard errors, main-effect p-values, interaction p-values), each tests x sims."""
        beta = self.hat @ Y
        resid = Y - self.model.X @ beta
        rss = (resid**2).sum(axis=0)
        mse = rss / self.df
        est = self.contrasts @ beta
        se = np.sqrt(np.einsum("ij,jk,ik->i", self.contrasts, self.xtx_inv, self.contrasts)[:, None] * mse)
        p = 2 * special.stdtr(self.df, -np.abs(est) / se)
        inter = []
        for q, proj in self.restricted:
            rss_r = ((Y - proj @ Y) ** 2).sum(axis=0)
            inter.append(special.fdtrc(q, self.df, ((rss_r - rss) / q) / mse))
        return est, se, p, np.array(inter).reshape(len(inter), Y.shape[1])

    def verdicts(self, Y: np.ndarray, alpha: float, margin: float = DEFAULT_MARGIN):
        """(main-effect verdicts as 'D'/'E'/'U' codes, tests x sims; any interaction significant, per sim)."""
        est, se, p, inter = self.tests(Y)
        adjusted = holm(np.vstack([p, inter]))
        bound = math.log1p(margin)
        tost = np.maximum(special.stdtr(self.df, -(est + bound) / se), special.stdtr(self.df, (est - bound) / se))
        main = adjusted[: len(p)]
        codes = np.where(tost < alpha, "E", np.where(main < alpha, "D", "U"))
        return codes, (adjusted[len(p):] < alpha).any(axis=0)


def race_runs(means: Mapping[str, float], rounds: int, rng: np.random.Generator, cv: tuple[float, float] = (0.05, 0.20),
              drift: float = 0.15) -> dict[str, dict[int, float]]:
    """One simulated race's runs, as racing.rounds_from gives them: each cell's figure by round, its true mean
    times the round's mood times its own noise (a CV drawn from `cv` for the whole experiment)."""
    sigma = math.sqrt(math.log1p(rng.uniform(*cv) ** 2))
    mood = rng.normal(0, drift, size=rounds)
    return {cell: {r: mean * math.exp(mood[r - 1] + rng.normal(0, sigma)) for r in range(1, rounds + 1)}
            for cell, mean in means.items()}


def warmed_runs(levels: np.ndarray, warmups: np.ndarray, seconds: int, rng: np.random.Generator,
                cv: tuple[float, float] = (0.05, 0.20), start: float = 0.5) -> np.ndarray:
    """Per-second throughput of simulated runs (runs x sims x seconds): each run at its level (runs x sims)
    once its warm-up (seconds, one per run) has ended, reached along a straight ramp from `start` times it
    (a cache filling), each second spread by a CV drawn for each experiment from `cv`."""
    t = np.arange(seconds, dtype=float)
    ramp = np.minimum(1.0, start + (1 - start) * t[None, :] / np.maximum(warmups, 1e-9)[:, None])  # runs x seconds
    sigma = np.sqrt(np.log1p(rng.uniform(*cv, size=levels.shape[1]) ** 2))  # one per experiment
    noise = np.exp(rng.normal(size=(*levels.shape, seconds)) * sigma[None, :, None] - sigma[None, :, None] ** 2 / 2)
    return levels[:, :, None] * ramp[:, None, :] * noise


def run_figures(series: np.ndarray, cut: bool) -> np.ndarray:
    """Each simulated run's throughput figure (runs x sims): the mean of its seconds, from the warm-up
    MSER-5 finds in it (steady_state.warmup_to_cut, as `warmup_s = "found"` cuts it) when `cut`."""
    if not cut:
        return series.mean(axis=2)
    t = np.arange(series.shape[2], dtype=float)
    out = np.empty(series.shape[:2])
    for index in np.ndindex(*series.shape[:2]):
        x = series[index]
        out[index] = x[t >= steady_state.warmup_to_cut(t, x)].mean()
    return out
