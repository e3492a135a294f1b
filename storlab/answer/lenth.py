"""Lenth's pseudo standard error: how a saturated two-level design run once is judged.

A screening run for one round fits as many terms as it has cells, so no residual is left to measure the
noise by. Lenth (1989, "Quick and easy analysis of unreplicated factorials", Technometrics 31:469-473)
reads it from the effects themselves, counting on most of them being nothing: of the m orthogonal
contrasts c, s0 = 1.5 median |c|, and the pseudo standard error is 1.5 times the median of the |c| below
2.5 s0 (the large, real effects left out). An effect's t = c / PSE is judged against its distribution when
every effect is nothing, drawn here by simulation with a fixed seed (Ye and Hamada 2000 tabulate the same
critical values), so the p-values are a pure function of the runs, and Holm's method holds the family-wise
error over the main effects as it does for the t tests of a replicated design.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

DRAWS = 20_000  # simulated null experiments behind each p-value: its Monte Carlo error near 5 % is 0.2 %
SEED = 1989


def pseudo_se(contrasts: np.ndarray) -> np.ndarray:
    """Lenth's PSE of each row of contrasts (experiments x m)."""
    c = np.abs(np.atleast_2d(contrasts))
    s0 = 1.5 * np.median(c, axis=1, keepdims=True)
    trimmed = np.where(c < 2.5 * s0, c, np.nan)
    return 1.5 * np.nanmedian(trimmed, axis=1)


@functools.lru_cache(maxsize=32)
def _null(m: int) -> np.ndarray:
    """|t| = |c| / PSE of every contrast of DRAWS experiments with m contrasts that are all noise, sorted."""
    draws = np.random.default_rng(SEED).normal(size=(DRAWS, m))
    return np.sort(np.abs(draws / pseudo_se(draws)[:, None]).ravel())


def p_value(t: float, m: int) -> float:
    """The chance that a contrast of m, all of them noise, reaches |t|."""
    null = _null(m)
    beyond = len(null) - np.searchsorted(null, abs(t), side="left")
    return float((1 + beyond) / (1 + len(null)))


def quantile(level: float, m: int) -> float:
    """The |t| that a contrast of m, all of them noise, stays below with probability `level`."""
    return float(np.quantile(_null(m), level))


def contrasts(coded: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Every orthogonal contrast of one run per cell of a two-level design (runs x factors, -1/+1): the main
    effects first (each the mean at +1 less the mean at -1), then the interactions, one for each column the
    cells can tell apart (products of two factors, then three, ...), on the main effects' scale."""
    n, k = coded.shape
    basis = [np.ones(n) / np.sqrt(n)]
    for order in range(1, k + 1):
        for combo in itertools.combinations(range(k), order):
            column = np.prod(coded[:, combo], axis=1)
            residual = column - sum((q @ column) * q for q in basis)
            norm = np.linalg.norm(residual)
            if norm > 1e-8 * np.sqrt(n):
                basis.append(residual / norm)
            if len(basis) == n:
                break
        if len(basis) == n:
            break
    Q = np.column_stack(basis[1:])
    return 2 / np.sqrt(n) * (Q.T @ y)
