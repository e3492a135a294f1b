"""Looking after every round without raising the error rates: the alpha each look may spend.

An experiment run `until = "settled"` refits after every round from the second and stops as soon as every
factor is "different" or "equivalent". Testing at 5 % at each of up to 11 looks would call identical cells
different far more often than 5 % of the time (about 20 % with 11 looks, Armitage, McPherson and Rowe 1969).

storlab spends the error rate over the looks with the Pocock-type spending function of Lan and DeMets
(Lan and DeMets 1983, "Discrete sequential boundaries for clinical trials", Biometrika 70:659-663; the
logarithmic form is Lan and DeMets' approximation of Pocock's boundary, Kim and DeMets 1987):

    alpha(t) = alpha * ln(1 + (e - 1) t),   t = look / max_looks

and look k tests at the alpha spent at that look, alpha(t_k) - alpha(t_{k-1}). These increments add up to
alpha, so by Bonferroni's inequality the chance of any false verdict over all the looks stays at or below
alpha whatever the correlation between the looks, the stopping rule, or the number of tests made at each
look (Holm within a look is valid at any level). It is conservative: the exact recursive boundary
(Armitage, McPherson and Rowe 1969; Jennison and Turnbull 2000, ch. 7) would allow slightly larger levels,
but it holds only for one test of a normal mean, not for Holm over t tests with a few degrees of freedom.
The Pocock shape spends evenly, so an effect that is clear early settles early, which is what a lab that
stops when settled wants; the same level serves the "different" test and the two one-sided tests of
equivalence, and the confidence intervals reported at that look have level 1 - alpha_k.
"""

from __future__ import annotations

import math

from storlab.rounds import ALPHA



def spent(fraction: float, alpha: float = ALPHA) -> float:
    """The error rate spent by the time `fraction` (0 to 1) of the looks are made: Lan-DeMets, Pocock type."""
    fraction = min(max(fraction, 0.0), 1.0)
    return alpha * math.log(1 + (math.e - 1) * fraction)


def alpha_at(look: int, max_looks: int, alpha: float = ALPHA) -> float:
    """The level look `look` (1 for the first look, after round 2) of at most `max_looks` tests at."""
    if max_looks < 1 or not 1 <= look <= max_looks:
        raise ValueError(f"look {look} is outside 1..{max_looks}")
    return spent(look / max_looks, alpha) - spent((look - 1) / max_looks, alpha)


def looks(rounds: int) -> int:
    """How many looks an experiment of at most `rounds` rounds makes: one after each round from the second."""
    return max(rounds - 1, 1)


def citation() -> str:
    return "Lan-DeMets alpha spending, Pocock type (Lan and DeMets 1983), each look at the alpha it spends"
