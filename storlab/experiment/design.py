"""Which cells of the factors' product run: every one (`design = "full"`), a screening fraction of
two-valued factors (`design = "screening"`), or the full factorial of the few factors a screening named,
the others held at their reference level (`design = { kind = "follow-up", factors = [...] }`).

A screening is a two-level fraction of the fewest cells at the resolution asked (IV unless the file says
`resolution = 3` or `5`), built with pyDOE3:
- a regular fraction 2^(k-p) of minimum aberration (`fracfact_opt`: of the generators that reach the
  resolution in the fewest cells, those aliasing the fewest low-order interactions), where its search is
  small (up to 8 factors at resolution IV);
- for more factors at resolution IV, a Plackett-Burman design (`pbdesign`) folded over (`fold`: every
  cell again with every factor at its other value), which clears each main effect of every two-factor
  interaction (Box and Wilson's foldover; Miller and Sitter 2001) in 2N cells, N the next multiple of 4
  above the number of factors: 24 cells for 9 to 11 factors, where a regular fraction needs 32; where a
  regular fraction needs fewer (16 factors: 32 cells), pyDOE3's `fracfact_by_res`;
- at resolution III, the Plackett-Burman design itself (main effects aliased with two-factor
  interactions: a first look, no more).
The columns' signs are set so that the first cell has every factor at its reference level: a follow-up
that holds the other factors there shares that cell (and its runs) with the screening.

Cells are ordinary cells (storlab.experiment.matrix): each has the stable id of its factor values, so the
cells a follow-up shares with the screening are the same cells, and their runs are not made again.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from storlab.experiment.design_key import FOLLOW_UP, FULL, SCREENING, DesignKey
from storlab.experiment.model import ExperimentModel
from storlab.experiment.swept import MAX_CELLS, MAX_RUNS, factor_loc, nested_in
from storlab.labels import short_name
from storlab.factors import show

# Exhaustive minimum-aberration searches cost (candidate generator sets) x (interactions checked) each:
# up to this many keeps a file's load under about a second (8 factors at resolution IV: 330 x 255).
SEARCH_LIMIT = 100_000
ROMAN = {2: "II", 3: "III", 4: "IV", 5: "V", 6: "VI"}


@dataclass(frozen=True)
class Fraction:
    """The cells a two-level design runs: `coded` is cells x factors, -1 the factor's reference level and
    +1 its other value, the factors in the file's order."""

    factors: tuple[str, ...]  # short names
    coded: np.ndarray
    resolution: int | None  # None: the full factorial, a non-regular design, or no word up to MAX_WORD factors
    method: str  # how it was built, in words

    @property
    def cells(self) -> int:
        return self.coded.shape[0]


MAX_WORD = 6  # a resolution above VI is said as none: nothing a screening fits is aliased then


def _resolution_of(coded: np.ndarray) -> int | None:
    """The length of the shortest word of a regular fraction's defining relation (a product of columns
    that is constant), None when there is none (a full factorial) or when no product is constant but
    some are partly correlated (a non-regular design, whose resolution this does not name), or when the
    shortest word is longer than MAX_WORD."""
    k = coded.shape[1]
    for order in range(2, min(k, MAX_WORD) + 1):
        for combo in itertools.combinations(range(k), order):
            product = np.prod(coded[:, combo], axis=1)
            if abs(product.sum()) == len(product):
                return order
    return None


def _aligned(coded: np.ndarray) -> np.ndarray:
    """Columns flipped so that the first cell has every factor at -1, its reference level."""
    return np.asarray(coded, dtype=float) * -np.sign(coded[0])[None, :]


def _regular_cells(k: int, resolution: int) -> int:
    """The fewest cells of a regular two-level fraction of k factors at a resolution: the most factors
    2^p cells hold is 2^p - 1 at III, 2^(p-1) at IV (the saturated design folded over) and, at V, the
    known maxima (Box, Hunter and Hunter 2005, table 6.22)."""
    most_at_v = {16: 5, 32: 6, 64: 8, 128: 11, 256: 17, 512: 23}
    runs = 4
    while runs < 2**k:
        most = {3: runs - 1, 4: runs // 2 if runs >= 8 else 0, 5: most_at_v.get(runs, 0)}[resolution]
        if most >= k:
            return runs
        runs *= 2
    return 2**k


Generators = tuple[tuple[int, tuple[int, ...]], ...]  # generated factor -> the base factors it is the product of


def _searchable(k: int, resolution: int) -> bool:
    """Whether the minimum-aberration search for a regular fraction of k factors is small enough."""
    runs = _regular_cells(k, resolution)
    if runs >= 2**k:
        return True
    base = int(math.log2(runs))
    return math.comb(2**base - 1 - base, k - base) * (2**k - 1) <= SEARCH_LIMIT


@functools.lru_cache(maxsize=64)
def _regular(k: int, resolution: int) -> tuple[np.ndarray, Generators | None, str]:
    import pyDOE3  # imported when a screening is asked for: most files never need it

    runs = _regular_cells(k, resolution)
    if runs >= 2**k:
        return pyDOE3.ff2n(k), None, f"the full factorial: no fraction of {k} factors reaches resolution {ROMAN[resolution]}"
    base = int(math.log2(runs))
    text, _, _ = pyDOE3.fracfact_opt(k, k - base)
    words = text.split()[base:]
    generators = tuple((base + i, tuple(ord(c) - ord("a") for c in word)) for i, word in enumerate(words))
    return (pyDOE3.fracfact(text), generators,
            f"a regular fraction 2^({k}-{k - base}) of minimum aberration (pyDOE3 fracfact_opt, every generator set searched)")


@functools.lru_cache(maxsize=64)
def _plackett_burman(k: int, folded: bool) -> tuple[np.ndarray, Generators | None, str]:
    import pyDOE3

    coded = pyDOE3.pbdesign(k)
    if not folded:
        return coded, None, f"a Plackett-Burman design of {coded.shape[0]} cells (pyDOE3 pbdesign)"
    return pyDOE3.fold(coded), None, (f"a Plackett-Burman design of {coded.shape[0]} cells folded over (pyDOE3 "
                                      "pbdesign, fold): each main effect clear of every two-factor interaction")


MAX_FACTORS = 20  # a Plackett-Burman design of 24 cells; pyDOE3 builds them for 4 x 2^e, 12 x 2^e and 20 x 2^e cells


def screening(factors: list[str], resolution: int) -> Fraction:
    """The two-level fraction of the fewest cells at `resolution` or better for these factors (in order):
    a regular fraction of minimum aberration where the search is small, a folded Plackett-Burman design
    for more factors at IV; ValueError when storlab builds none."""
    k = len(factors)
    if k > MAX_FACTORS:
        raise ValueError(f"{k} factors; a screening takes at most {MAX_FACTORS}")
    if resolution == 3:
        coded, generators, method = _plackett_burman(k, folded=False)
    elif _searchable(k, resolution):
        coded, generators, method = _regular(k, resolution)
    elif resolution == 4:
        coded, generators, method = _plackett_burman(k, folded=True)
    else:
        raise ValueError(f"a resolution V fraction of {k} factors needs {_regular_cells(k, 5)} cells, and storlab searches "
                         f"for it up to {max(n for n in range(2, MAX_FACTORS) if _searchable(n, 5))} factors; "
                         "ask resolution = 4")
    if generators:
        method += ": " + ", ".join(f"{factors[g]} = {' x '.join(factors[b] for b in product)}" for g, product in generators)
    coded = _aligned(coded)
    return Fraction(tuple(factors), coded, _resolution_of(coded) if coded.shape[0] < 2**k else None, method)


def follow_up(factors: dict[str, list[Any]], named: list[str]) -> list[dict[str, Any]]:
    """The follow-up's cells as levels by short name: the product of the named factors' values, every other
    factor at its reference (its first value here: `factors` lists each reference first)."""
    at_reference = {name: values[0] for name, values in factors.items() if name not in named}
    cells = []
    for combo in itertools.product(*(factors[name] for name in named)):
        levels = dict(zip(named, combo))
        cells.append({name: levels.get(name, at_reference.get(name)) for name in factors})
    return cells


def fraction_of(key: DesignKey, factors: dict[str, list[Any]]) -> Fraction | None:
    """The screening fraction a key asks of these factors (short name -> its values, reference first), or
    None for a design that is not a screening."""
    if key.kind != SCREENING:
        return None
    return screening(list(factors), key.wanted_resolution)


def levels_of(fraction: Fraction, factors: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Each cell of a fraction as levels by short name: -1 the reference (listed first), +1 the other value."""
    return [{name: factors[name][0 if x < 0 else 1] for name, x in zip(fraction.factors, row)} for row in fraction.coded]


# -- what the cells can tell apart ------------------------------------------------------------------------


@dataclass(frozen=True)
class Aliases:
    """What each main effect is aliased with in a set of two-level cells: the interactions (up to three
    factors) whose column over the cells is the main effect's own, or its negative (fully aliased), and
    how many more are partly correlated with it; and the chains of two-factor interactions that are one
    column (a regular fraction of resolution IV fits each chain as one term)."""

    main: dict[str, list[tuple[str, ...]]]  # factor -> the interactions fully aliased with it
    partial: dict[str, dict[int, int]]  # factor -> order (2, 3) -> how many interactions are partly aliased with it
    chains: list[list[tuple[str, str]]]  # two-factor interactions, one list per column they share
    partial_pairs: bool  # some two-factor interactions are partly, not fully, aliased (a non-regular design)


def aliases(coded: np.ndarray, factors: tuple[str, ...] | list[str]) -> Aliases:
    """The alias structure of two-level cells (rows, -1/+1 columns in `factors`' order)."""
    coded = np.asarray(coded, dtype=float)
    n, k = coded.shape
    names = list(factors)
    terms = [combo for order in (2, 3) for combo in itertools.combinations(range(k), order)]
    columns = {combo: np.prod(coded[:, combo], axis=1) for combo in terms}
    main: dict[str, list[tuple[str, ...]]] = {}
    partial: dict[str, dict[int, int]] = {}
    for i, name in enumerate(names):
        found, part = [], {2: 0, 3: 0}
        for combo, column in columns.items():
            if i in combo:
                continue
            overlap = abs(float(column @ coded[:, i])) / n
            if overlap > 1 - 1e-9:
                found.append(tuple(names[j] for j in combo))
            elif overlap > 1e-9:
                part[len(combo)] += 1
        main[name], partial[name] = found, part
    pairs = [c for c in terms if len(c) == 2]
    chains: list[list[tuple[str, str]]] = []
    seen: set[tuple[int, ...]] = set()
    partly = False
    for i, a in enumerate(pairs):
        if a in seen or _aliased_with_main(columns[a], coded):
            continue
        chain = [a]
        for b in pairs[i + 1:]:
            overlap = abs(float(columns[a] @ columns[b])) / n
            if overlap > 1 - 1e-9:
                chain.append(b)
                seen.add(b)
            elif overlap > 1e-9:
                partly = True
        chains.append([(names[x], names[y]) for x, y in chain])
    return Aliases(main, partial, chains, partly)


def _aliased_with_main(column: np.ndarray, coded: np.ndarray) -> bool:
    return bool((np.abs(column @ coded) / len(column) > 1 - 1e-9).any())


def alias_text(factor: str, found: Aliases, most: int = 3) -> str:
    """'log_on = data_files x page_size x striping = …' or 'clear of two-factor interactions' and the like."""
    full = found.main.get(factor, [])
    if full:
        shown_terms = " = ".join(" x ".join(t) for t in full[:most])
        return f"{factor} = {shown_terms}" + (" = …" if len(full) > most else "")
    part = found.partial.get(factor, {})
    if part.get(2):
        return f"partly aliased with {part[2]} two-factor interactions" + (f" and {part[3]} of three" if part.get(3) else "")
    if part.get(3):
        return f"clear of two-factor interactions; partly aliased with {part[3]} three-factor interactions"
    return "clear of interactions up to three factors"


def described(key: DesignKey, factors: dict[str, list[Any]], cells: list[dict[str, Any]], full_cells: int) -> list[str]:
    """What --dry-run says of a design: how its cells were chosen, against the full factorial's, and what
    each main effect is aliased with. `factors`: short name -> values, reference first; `cells`: its cells'
    levels by short name."""
    if key.kind == FULL:
        return []
    if key.kind == FOLLOW_UP:
        at_reference = ", ".join(f"{name}={show(values[0])}" for name, values in factors.items()
                                 if name not in (key.factors or []))
        return [f"a follow-up: the full factorial of {', '.join(key.factors or [])} in {len(cells)} cells (the full factorial "
                f"of every factor: {full_cells}), the others at their reference ({at_reference or 'none'}); cells the results "
                "folder already ran are not run again, and the answer reads every run in it"]
    fraction = fraction_of(key, factors)
    resolution = "" if fraction.resolution is None else f", resolution {ROMAN.get(fraction.resolution, fraction.resolution)}"
    found = aliases(fraction.coded, fraction.factors)
    lines = [f"a screening of {len(factors)} factors in {fraction.cells} cells (the full factorial: {full_cells}){resolution}: "
             f"{fraction.method}",
             "  what each main effect is aliased with (interactions up to three factors; -1 is the reference level):"]
    lines += [f"    {alias_text(name, found)}" for name in fraction.factors]
    if found.chains:
        lines.append(f"  two-factor interactions in {len(found.chains)} aliased chains (the answer fits each chain as one term):")
        lines += ["    " + " = ".join(f"{a} x {b}" for a, b in chain) for chain in found.chains]
    elif found.partial_pairs:
        lines.append("  two-factor interactions partly aliased with one another: not fitted")
    return lines


def check_design(model: ExperimentModel, declared: dict[str, list[Any]]) -> tuple[tuple, str] | None:
    """A screening takes factors of two values (and no hosts, versions' own settings, exclusions or race);
    a follow-up names factors of the experiment; neither races."""
    key = model.design
    if key.kind == FULL:
        if key.resolution is not None or key.factors is not None:
            return ("design",), "resolution is a screening's and factors a follow-up's; a full design takes neither"
        return None
    if model.race and key.kind == SCREENING:
        return ("design",), ("a race drops cells and a screening needs all of its cells; race its follow-up's cells "
                             "with design = \"full\" and race = true")
    if model.race:
        return ("design",), ("a follow-up reuses runs the screening made in its own rounds, which a race cannot block "
                             "with its own; race the named factors' cells with design = \"full\" in a folder of their own")
    if model.exclude:
        return ("exclude",), f"a {key.kind} runs the cells its design names; leave exclude out"
    if key.kind == SCREENING:
        if key.factors is not None:
            return ("design",), "factors: a follow-up's key; a screening runs every factor with a list of values"
        swept = {d: values for d, values in declared.items() if len(values) > 1}
        for dotted, values in declared.items():
            if nested_in(dotted) or dotted.startswith("fleet."):
                return factor_loc(dotted), (f"a screening's factors are crossed with one another; {short_name(dotted)} "
                                            "is not (a host, or a setting of one engine version)")
            if len(values) != 2:
                return factor_loc(dotted), (
                    f"{short_name(dotted)} has {len(values)} values; a screening takes factors of two values (a two-level "
                    "fraction; three-level factors through a definitive screening design are not supported): give it "
                    'two, or run design = "full"')
        if len(swept) < 2:
            return ("design",), "a screening needs two factors or more (keys with a list of two values)"
        try:
            cells = screening([short_name(d) for d in declared], key.wanted_resolution).cells
        except ValueError as exc:
            return ("design",), str(exc)
        return _sized(model, cells)
    if key.resolution is not None:
        return ("design",), "resolution: a screening's key; a follow-up runs the full factorial of its factors"
    by_short = {short_name(d): values for d, values in declared.items()}
    for name in key.factors or []:
        if name not in by_short:
            return ("design",), f"factors: {show(name)} is not a factor (factors: {', '.join(by_short) or 'none'})"
    if not key.factors:
        return ("design",), 'a follow-up names the factors it runs: design = { kind = "follow-up", factors = ["log_on"] }'
    return _sized(model, math.prod(len(by_short[name]) for name in key.factors))


def _sized(model: ExperimentModel, cells: int) -> tuple[tuple, str] | None:
    if cells > MAX_CELLS:
        return ("design",), f"{cells:,} cells; the limit is {MAX_CELLS:,}"
    if cells * model.most_repetitions > MAX_RUNS:
        return ("repetitions",), f"{cells:,} cells x {model.most_repetitions} repetitions; the limit is {MAX_RUNS:,} runs"
    return None
