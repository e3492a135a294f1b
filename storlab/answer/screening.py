"""What a screening, or the follow-up after it, tells: its design read back from the store, what each
main effect is aliased with in the cells that ran, which terms the factor table fits, how the rounds
are blocked, and which factors the screening names for a follow-up.

A screening fits every main effect, the rounds as blocks, and each chain of aliased two-factor
interactions as one term (the chain named whole: which pair of it interacts, the fraction cannot tell);
one round of it, every cell once, is judged by Lenth's pseudo standard error. A follow-up fits every run
of the results folder, the screening's included (its cells are cells of the same factors), with the
two-factor interactions of the factors it names; its runs did not share the screening's rounds'
moods, so its rounds are blocks of their own, numbered after the screening's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from storlab.answer import effects
from storlab.experiment import design, design_key
from storlab.experiment.swept import canonical
from storlab.results.experiment_record import StoredDesign


@dataclass(frozen=True)
class Designed:
    """A design other than the full factorial, as the answer reads it."""

    kind: str  # design_key.SCREENING or design_key.FOLLOW_UP
    method: str  # how its cells were chosen
    resolution: int | None  # None: no word of the fraction up to six factors (or a non-regular design)
    cells: int  # the design's cells
    full_cells: int  # the full factorial's
    aliases: dict[str, str]  # factor -> what its main effect is aliased with, in words, over the cells that ran
    aliased_with: dict[str, list[list[str]]]  # factor -> the interactions fully aliased with it
    chains: list[list[tuple[str, str]]]  # two-factor interactions that share one column of the cells that ran
    named: list[str] = field(default_factory=list)  # a follow-up's factors
    shared: int = 0  # a follow-up's cells that the screening ran before it
    after_run: int | None = None  # the last run before the design took over


def read(stored: StoredDesign | None, factors: dict[str, list[Any]], reference: dict[str, Any],
         ran: list[dict[str, Any]], runs_before: list[dict[str, Any]]) -> Designed | None:
    """The design the store keeps, for factors by short name (`reference`: each one's reference level);
    `ran`: the levels of each cell with runs; `runs_before`: those of the cells with runs before the design
    took over (a follow-up's screening)."""
    if stored is None or stored.kind == design_key.FULL:
        return None
    ordered = {name: [reference.get(name, values[0])] + [v for v in values if canonical(v) != canonical(reference.get(name, values[0]))]
               for name, values in factors.items()}
    full = math.prod(len(v) for v in ordered.values())
    two_level = [name for name, values in ordered.items() if len(values) == 2]
    coded = np.array([[-1.0 if canonical(cell[name]) == canonical(ordered[name][0]) else 1.0 for name in two_level]
                      for cell in _distinct(ran)]) if ran else np.zeros((0, len(two_level)))
    found = design.aliases(coded, two_level) if len(coded) else design.Aliases({}, {}, [], False)
    aliases = {name: design.alias_text(name, found, most=1) for name in two_level}
    aliased_with = {name: [list(t) for t in found.main.get(name, [])] for name in two_level}
    if stored.kind == design_key.SCREENING:
        key = design_key.DesignKey(kind=design_key.SCREENING, resolution=stored.resolution)
        fraction = design.fraction_of(key, ordered)
        return Designed(stored.kind, fraction.method, fraction.resolution, fraction.cells, full, aliases, aliased_with,
                        found.chains if not found.partial_pairs else [], after_run=stored.after_run)
    named = list(stored.factors or [])
    cells = design.follow_up(ordered, named)
    before = {canonical(c) for c in _distinct(runs_before)}
    shared = sum(1 for c in cells if canonical(c) in before)
    # Its factors are crossed whole in its cells: nothing of theirs is aliased, and the others' aliases are the screening's.
    return Designed(stored.kind, f"the full factorial of {', '.join(named)}, the other factors at their reference", None,
                    len(cells), full, {}, {}, [], named, shared, stored.after_run)


def _distinct(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for cell in cells:
        seen.setdefault(canonical(cell), cell)
    return list(seen.values())


def terms(designed: Designed | None, factors: list[str]) -> dict[str, Any]:
    """What effects.analyse fits for this design: the interactions (`pairs`, each chain by its first pair,
    `aliased` the rest), the factors that settle the answer, and Lenth's PSE for one round of a fraction."""
    if designed is None:
        return {}
    if designed.kind == design_key.SCREENING:
        return {"pairs": [chain[0] for chain in designed.chains],
                "aliased": {chain[0]: chain[1:] for chain in designed.chains}, "lenth_if_once": True}
    return {"pairs": [p for p in itertools.combinations([f for f in factors if f in designed.named], 2)],
            "settle": set(designed.named)}


def block(designed: Designed | None, run_id: int, repetition: int, rounds_before: int) -> int:
    """The block of a run: its round, numbered after the screening's for a follow-up's own runs."""
    if designed is None or designed.after_run is None or run_id <= designed.after_run:
        return repetition
    return rounds_before + repetition


def named(answer: effects.FactorAnswer) -> list[str]:
    """The factors a screening names: those with a level different from their reference."""
    return list(dict.fromkeys(e.factor for e in answer.effects if e.verdict == effects.DIFFERENT))
