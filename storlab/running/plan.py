"""The plan of an experiment's runs, which `storlab run` and the fleet both follow: what is checked
before anything starts (preflight), where the placements are, the runs to do next (the whole matrix,
the next round until settled, or a race's next round) and, under a planned run length, how long each
round's runs last, why the runs stop, and the plan in words for --dry-run."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from storlab import engines
from storlab.answer import analysis, noise_split, racing
from storlab.errors import RunFailed, UserError
from storlab.experiment import design, design_key, matrix, places, swept
from storlab.experiment.file import Experiment
from storlab.labels import short_name
from storlab.lab import os_users, placements, templates
from storlab.lab.placements import TMPFS
from storlab.results.folder_store import exists
from storlab.results.store import Store
from storlab.rounds import RaceSettings
from storlab.running import capacity


def default_folder(experiment: Experiment) -> Path:
    return Path("results") / experiment.name


def placement_paths(experiment: Experiment) -> dict[str, Path]:
    """The directory placements (a device placement's directory is its mount, made for each run)."""
    return {name: experiment.placement_path(name) for name in experiment.directories}


def prepare_placements(experiment: Experiment) -> dict[str, Path]:
    """Make the missing placement directories, after checking each again (the load checked them by
    looking only; the servers' OS user may have been made since)."""
    found = placement_paths(experiment)
    user = os_users.server_user()
    for name, path in found.items():
        problem = placements.path_problem(path, user)
        if problem:
            raise UserError(f"{experiment.where(('placements', name))}: placements.{name}: {problem}")
        if places.path_text(experiment.model.placements[name]) != TMPFS:
            try:
                placements.make(path)
            except OSError as exc:
                raise RunFailed(f"{experiment.path.name}: placements.{name}: cannot create {path}: {exc.strerror}") from None
    return found


def preflight(experiment: Experiment, cells: list[matrix.Cell]) -> list[str]:
    """What is checked before anything starts (and by --dry-run): the installed engine's verdict on the
    settings, and whether one run fits in each placement. Refusals raise UserError; returns warnings."""
    for version in experiment.model.versions():  # each engine_version's server is there (RunFailed says how to install it)
        engines.engine(experiment.engine).installed(version)
    problem = templates.folder_problem()
    if problem:
        raise UserError(f"the folder of templates: {problem}")
    warnings = engines.engine(experiment.engine).settings.verify(experiment)
    return warnings + capacity.check(experiment, cells, placement_paths(experiment))


def describe_plan(experiment: Experiment, folder: Path) -> list[str]:
    """The cells and the runs still to do, for --dry-run."""
    cells = matrix.cells(experiment)
    warnings = preflight(experiment, cells)
    done: set[tuple[str, int]] = set()
    seed = experiment.model.order_seed
    if exists(folder):
        with Store.open(folder, create=False) as store:
            done = store.done()
            stored = store.experiment()
            if seed is None and stored is not None:
                seed = stored.order_seed
    todo = matrix.plan(cells, experiment.repetitions, done, seed)
    lines = [f"warning: {w}" for w in warnings]
    settings, settling = experiment.race(), experiment.settling()
    ordered = matrix.reference_first(experiment)
    lines += design.described(experiment.model.design, ordered, [{short_name(k): v for k, v in c.factors.items()} for c in cells],
                              swept.cell_count(experiment.factors))
    if settings is None:
        full = swept.cell_count(experiment.factors) * experiment.repetitions
        against = f" ({len(cells) * experiment.repetitions} runs; the full factorial's: {full})" \
            if experiment.model.design.kind != design_key.FULL else ""
        lines.append(f"{experiment.name}: {len(cells)} cells x {experiment.repetitions} repetitions on {experiment.engine}{against}")
    else:
        lines.append(f"{experiment.name}: a race of {len(cells)} cells on {experiment.engine}, {settings.min_rounds} to "
                     f"{settings.max_rounds} rounds: after each round from {settings.min_rounds}, cells clearly worse "
                     "than the best get no more runs; at most:")
    if settling is not None:
        budget = f", or once {settling.budget_s:g} s of wall time are spent" if settling.budget_s else ""
        lines.append(f"  until settled: after each round from {settling.min_rounds}, the factor effects are fitted "
                     f"again; the runs stop once every factor is different or equivalent{budget}; at most:")
        if settling.plans_length:
            lines.append(f"  run length: rounds 1 to {settling.min_rounds} of the declared "
                         f"{experiment.model.workload.duration:g} s; before each later round, the noise split plans "
                         f"it between {settling.shortest_s:g} and {settling.longest_s:g} s (the cheaper way to the "
                         "interval the verdicts need: more rounds, or longer runs)")
    lines += [f"  cell {c.id}  {c.label}" for c in cells]
    order = "in this order" if seed is not None else \
        "listed in the matrix order (each round's order is drawn at the first run; order_seed fixes it)"
    lines.append(f"{len(todo)} runs to do ({len(done)} already in {folder}), {order}:")
    lines += [f"  {i:>4}. repetition {rep} of {c.id}  {c.label}" for i, (c, rep) in enumerate(todo, 1)]
    return lines


def race_settings(experiment: Experiment, cells: list[matrix.Cell]) -> RaceSettings | None:
    """The file's race with each cell's factor levels, which let it drop a factor's level at once; the store
    keeps them, so `show` replays the same race."""
    settings = experiment.race()
    if settings is None:
        return None
    levels = racing.levels_of({c.id: {short_name(k): v for k, v in c.factors.items()} for c in cells})
    return settings.model_copy(update={"levels": levels})


def race_state(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> racing.RaceState:
    values = racing.rounds_from([c.id for c in cells], store.runs(), store.failures(), experiment.figures[0].name)
    return racing.race(values, race_settings(experiment, cells))


def stop_reason(experiment: Experiment, store: Store, started: float | None = None) -> str | None:
    """Why an experiment run until settled takes no more runs: its answer settled (after its `min`
    rounds), or the budget of wall time of this invocation (since `started`, monotonic) is spent.
    None while it goes on (or without until settled; `max` is where its plan ends)."""
    settling = experiment.settling()
    if settling is None:
        return None
    results = analysis.load(store, cached=True)
    if results.settled:
        return f"settled after {results.rounds} rounds: {analysis.verdicts_line(results)}"
    if settling.budget_s is not None and started is not None and time.monotonic() - started >= settling.budget_s:
        return f"budget spent: {settling.budget_s:g} s after {results.rounds} rounds, not settled: " \
            + analysis.verdicts_line(results)
    return None


def round_length(experiment: Experiment, store: Store, rnd: int, started: float | None = None) -> tuple[float, str] | None:
    """How long round `rnd`'s runs last and why, under a planned run length (None otherwise): the declared
    duration_s up to the first look; after it the length the noise split plans from every run so far (within
    the file's run_length, its max and the budget left of this invocation since `started`), or the last
    round's when nothing is planned. A round some of whose runs are recorded keeps their length (a resume)."""
    settling = experiment.settling()
    if settling is None or not settling.plans_length:
        return None
    declared = experiment.model.workload.duration
    if rnd <= settling.min_rounds:
        return declared, "declared duration_s, until the first look"
    planned = {r.repetition: r.conditions[noise_split.RUN_LENGTH] for r in store.runs()
            if noise_split.RUN_LENGTH in (r.conditions or {})}
    if rnd in planned:
        return planned[rnd]["s"], planned[rnd]["why"]
    last = planned[max(planned)]["s"] if planned else declared
    results = analysis.load(store, cached=True)
    left = None
    if settling.budget_s is not None and started is not None:
        left = max(settling.budget_s - (time.monotonic() - started), 0.0)
    found = noise_split.of_results(results, results.answer, left)
    if found is None:
        return last, "kept, nothing planned (no noise split yet: two runs of a cell of three seconds or more)"
    if found.costed is None:
        return last, f"kept, nothing planned ({found.plan})"
    return found.costed.length, f"planned: {found.plan}"


def with_lengths(experiment: Experiment, store: Store, todo: list[tuple[matrix.Cell, int]],
                 started: float | None = None) -> tuple[list[tuple[matrix.Cell, int]], dict[int, tuple[float, str]]]:
    """`todo` with each round's runs at their length (round_length: the cell's workload duration_s), and
    each round's length and why; `todo` as it is without a planned run length."""
    lengths = {rnd: found for rnd in sorted({rep for _, rep in todo})
               if (found := round_length(experiment, store, rnd, started)) is not None}
    if not lengths:
        return todo, {}
    return [(dataclasses.replace(cell, workload=cell.workload.model_copy(update={"duration_s": int(lengths[rep][0])})), rep)
            for cell, rep in todo], lengths


def lengths_line(experiment: Experiment, store: Store) -> str | None:
    """Which rounds ran at which length, for the line that says why the runs stopped."""
    settling = experiment.settling()
    if settling is None or not settling.plans_length:
        return None
    by_round = {r.repetition: r.conditions[noise_split.RUN_LENGTH]["s"] for r in store.runs()
                if noise_split.RUN_LENGTH in (r.conditions or {})}
    spans: list[list] = []
    for rnd in sorted(by_round):
        if spans and spans[-1][2] == by_round[rnd] and spans[-1][1] == rnd - 1:
            spans[-1][1] = rnd
        else:
            spans.append([rnd, rnd, by_round[rnd]])
    said = [f"round{'s' if a != b else ''} {a}{'' if a == b else f'-{b}'} {s:g} s" for a, b, s in spans]
    return "runs of " + ", ".join(said) + " (run_length planned: show --details says why)" if said else None


def max_reason(experiment: Experiment, store: Store) -> str | None:
    """Why runs stopped where the plan ended: max reached (or the race over) before the answer settled."""
    if experiment.settling() is None:
        return None
    results = analysis.load(store, cached=True)
    if results.rounds >= experiment.repetitions:
        why = f"max reached: {results.rounds} rounds"
    elif results.race is not None and results.race.finished:
        why = f"race over after {results.rounds} rounds ({results.race.finished})"
    else:  # the runs this invocation could not make failed; the next `storlab run` tries them again
        why = f"stopped after {results.rounds} rounds, runs failed"
    return f"{why}, not settled: {analysis.verdicts_line(results)}"


def next_runs(experiment: Experiment, cells: list[matrix.Cell], store: Store, tried: set,
              started: float | None = None) -> list[tuple[matrix.Cell, int]]:
    """The runs to do next, each round in the order drawn from the experiment's seed. The whole
    matrix at once, interleaved; until settled, the next round (every round up to `min` at once; none
    once the answer is settled or the budget spent); in a race, the next round of the cells still
    racing (none when the race is over). `tried`: runs already attempted in this invocation, never
    repeated in it (a failed run is retried by running the command again)."""
    settings, settling = experiment.race(), experiment.settling()
    done = store.done() | tried
    stored = store.experiment()
    seed = None if stored is None else stored.order_seed
    if settling is not None and stop_reason(experiment, store, started) is not None:
        return []
    if settings is None:
        todo = matrix.plan(cells, experiment.repetitions, done, seed)
        if settling is None or not todo:
            return todo
        upto = max(todo[0][1], settling.min_rounds)
        return [(c, rep) for c, rep in todo if rep <= upto]
    state = race_state(experiment, cells, store)
    if state.finished:
        return []
    alive = set(state.alive)
    return [(c, state.next_round) for c in matrix.round_order(cells, seed, state.next_round)
            if c.id in alive and (c.id, state.next_round) not in done]


def most_left(experiment: Experiment, cells: list[matrix.Cell], store: Store) -> int:
    """The runs still possible (a race may drop cells and stop sooner; until settled, the answer may
    settle sooner): the progress bar's total."""
    done = store.done()
    settings = experiment.race()
    if settings is None:
        return len(matrix.plan(cells, experiment.repetitions, done))
    state = race_state(experiment, cells, store)
    if state.finished:
        return 0
    return sum(1 for c in cells if c.id in set(state.alive)
               for rep in range(state.rounds + 1, settings.max_rounds + 1) if (c.id, rep) not in done)
