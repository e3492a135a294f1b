"""The answer in the terminal: what each factor does first, then the ranking, then what it rests on;
the wait tables and the comparisons. Everything here reads the typed answer (storlab.answer.model):
user text is printed as text, never as terminal markup."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storlab.answer import model
from storlab.errors import UserError
from storlab.labels import format_value


def _plain(*cells) -> list[Text]:
    """Table cells as literal text: labels, wait names and messages are data, never rich markup."""
    return [Text(str(c)) for c in cells]


def _p(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0e}" if value < 0.001 else f"{value:.3f}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def effects_table(factors: model.FactorEffects, rows: list[model.Effect], conditional: bool = False) -> Table:
    table = Table(show_edge=False)
    columns = [("factor", "left"), ("level", "left"), ("against", "left")]
    columns += [("given", "left")] if conditional else []
    columns += [("ratio", "right"), (factors.confidence, "right"), ("adjusted p", "right"), ("verdict", "left")]
    aliased = any(e.aliases for e in rows)
    columns += [("aliased with", "left")] if aliased else []
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for e in rows:
        given = ", ".join(f"{k}={format_value(v)}" for k, v in (e.given or {}).items())
        interval = "—" if e.ci_low is None else f"[{e.ci_low:.2f}, {e.ci_high:.2f}]"
        table.add_row(*_plain(e.factor, format_value(e.level), format_value(e.reference), *([given] if conditional else []),
                              f"{e.ratio:.2f}x", interval, _p(e.adjusted_p), e.said, *([e.aliases or ""] if aliased else [])))
    return table


def factor_answer(answer: model.Answer, console: Console, details: bool = True) -> None:
    """What each factor does to the headline: each level against its factor's reference level; by default
    only the interactions that matter, with --details the others and the noise too."""
    factors = answer.factor_effects
    order = ", each in a random order" if answer.experiment.order_seed is not None else ""
    console.print(Text.assemble((answer.experiment.name, "bold"),
                                f": what each factor does to {answer.headline.label}, {factors.runs} runs in "
                                f"{factors.rounds} rounds{order} (ratio: level / reference, geometric means)"))
    for line in answer.design.lines if answer.design else []:
        console.print(Text(line))
    if factors.effects:
        console.print(effects_table(factors, factors.effects))
    significant = sum(i.significant for i in factors.interactions)
    # interaction_lines says the significant interactions first, then the others in one line.
    for line in factors.interaction_lines if details else factors.interaction_lines[:significant]:
        console.print(Text(line))
    if factors.conditional:
        console.print(effects_table(factors, factors.conditional, conditional=True))
    for line in factors.not_estimable:
        console.print(Text(f"not estimable: {line}"))
    if answer.noise.line and details:
        console.print(Text.assemble(("noise: ", "yellow"), answer.noise.line))
    console.print(Text(answer.status))


def ranking_table(answer: model.Answer, details: bool = True) -> Table:
    table = Table(show_edge=False)
    columns = [c for c in model.columns(answer) if details or c.glance]
    for column in columns:
        table.add_column(column.title(answer), justify="left" if column.left else "right")
    for row in answer.ranking:
        table.add_row(*_plain(*(column.text(row, answer) for column in columns)))
    for cell in answer.not_run:
        texts = {"cell": cell, "factors": answer.labels.get(cell, ""), "runs": "0", "vs best": "not run"}
        table.add_row(*_plain(*(texts.get(column.title(answer), "—" if not column.left else "") for column in columns)))
    return table


DETAILS = "show --details: each cell's noise, each run's steady state, the limits, the conditions, the machine, the probes"


def show(answer: model.Answer, console: Console, details: bool = False) -> None:
    """The answer on one screen: what each factor does, the ranking and the best cell, the rate curve,
    each kind of warning in one line naming its cells, the runs set aside and the failed runs; `details`
    adds every sentence behind the warnings."""
    if answer.factor_effects is not None:
        factor_answer(answer, console, details)
        console.print()
    elif answer.status is not None:  # no factor table: the runs cannot be read as ratios, and why
        console.print(Text(answer.status))
        console.print()
    console.print(Text.assemble((answer.experiment.name, "bold"),
                                f" on {answer.experiment.engine}: {answer.headline.label}, mean ± 95 % CI"))
    console.print(ranking_table(answer, details))
    # A race's first line says how many cells it dropped and its last why it stopped; each drop between.
    race = answer.race if details or len(answer.race) < 3 else [answer.race[0], answer.race[-1]]
    for line in answer.best + race + answer.rate:
        console.print(Text(line))
    if details:
        rest(answer, console)
        return
    for concern in answer.concerns:
        console.print(Text.assemble((f"{concern.kind}:", "yellow"), concern.line.removeprefix(f"{concern.kind}:")))
    warnings(answer, console)
    console.print(Text(DETAILS, style="dim"))


def rest(answer: model.Answer, console: Console) -> None:
    """Everything under the ranking, in sentences: the noise per cell and its split, what each probe's part
    says (the limits'), the volumes, what each run held, the conditions and the machine, the warnings and
    each failed run."""
    for line in answer.noise.cells:
        console.print(Text.assemble(("noise: ", "yellow"), line))
    if answer.noise.split is not None:
        console.print(Text.assemble(("noise split: ", "yellow"), answer.noise.split.line))
    for part in answer.parts().values():
        for line in part.sentences():
            console.print(Text(line))
    if answer.volumes:
        console.print(volumes_table(answer))
    for line in answer.steadiness.lines if answer.steadiness else []:
        console.print(Text.assemble(("steady state: ", "yellow"), line))
    for line in answer.notes:
        console.print(Text(line))
    warnings(answer, console)


VOLUME_HEADERS = ["cell", "placement", "property", "declared and observed"]


def volume_rows(answer: model.Answer) -> list[list[str]]:
    """Each cell's volumes, a row for each property of each placement: what it declared and what its runs
    observed, in the part's one line; a part alike in every cell is one row."""
    cells = {part.cell for part in answer.volumes}
    alike: dict[tuple[str, str, str], list[str]] = {}
    for part in answer.volumes:
        alike.setdefault((part.placement, part.property, part.said), []).append(part.cell)
    return [["every cell" if len(named) == len(cells) > 1 else ", ".join(answer.labels.get(c, c) for c in named),
             placement, prop, said] for (placement, prop, said), named in alike.items()]


def volumes_table(answer: model.Answer) -> Table:
    grid = Table(title="volumes, per cell", title_justify="left", box=None, pad_edge=False)
    for name in VOLUME_HEADERS:
        grid.add_column(name, overflow="fold")
    for row in volume_rows(answer):
        grid.add_row(*row)
    return grid


def warnings(answer: model.Answer, console: Console) -> None:
    """The runs set aside and each failed run, with why: never behind --details."""
    for note in answer.warnings:
        console.print(Text.assemble(("warning: ", "yellow"), note))
    for failed in answer.failures:
        console.print(Text.assemble(("failed run: ", "red"), f"cell {failed.cell} repetition {failed.repetition}: "
                                    f"{failed.message}"))


def wait_table(cell: model.CellWaits) -> Table:
    """The seeds' columns; a column the source cannot fill honestly shows '—'."""
    table = Table(title=Text(f"{cell.label} ({cell.cell}): waits per run, top 95 %, source {cell.source}"),
                  show_edge=False, title_justify="left")
    for col in ("WaitType", "Wait_S", "Signal_S", "WaitCount", "Percentage", "AvgWait_S"):
        table.add_column(col, justify="left" if col == "WaitType" else "right")
    for row in cell.waits:
        table.add_row(*_plain(row.wait_type, _fmt(row.wait_s), _fmt(row.signal_s), _fmt(row.wait_count, 0),
                              f"{row.percentage:.2f}", _fmt(row.avg_wait_s, 6)))
    return table


def extras_line(cell: model.CellWaits) -> str | None:
    if not cell.extras:
        return None
    parts = []
    for key, value in cell.extras.items():
        name = key.removeprefix("log.")
        parts.append(f"{name} {value:,.3f}" if key.endswith("_s") else f"{name} {value:,.0f}")
    return "  beside the table (per run): " + ", ".join(parts)


def resources(cell: model.CellWaits) -> list[Text | Table]:
    """Who waits on what (the seeds' sys.dm_os_waiting_tasks, summed): each top wait's resources and
    their share of the time the sampler saw sessions in that wait."""
    if not cell.resources:
        return [Text(f"{cell.label} ({cell.cell}): no waiting tasks were recorded with these runs")]
    # The sampling period is not named: a results folder keeps the runs of whichever storlab recorded them.
    title = Text(f"{cell.label} ({cell.cell}): who waits on what, waiting tasks sampled through each run, "
                 "seconds per run")
    table = Table(show_edge=False)
    for col in ("WaitType", "Resource", "Sampled_S", "Share"):
        table.add_column(col, justify="left" if col in ("WaitType", "Resource") else "right")
    for wait in cell.resources:
        if not wait.resources:
            table.add_row(*_plain(wait.wait_type, "— (no session caught in it)", "", ""))
        for i, share in enumerate(wait.resources):
            table.add_row(*_plain(wait.wait_type if i == 0 else "", share.resource, _fmt(share.seconds),
                                  f"{share.share:.1f} %"))
    return [title, table]


def chosen(answer: model.Answer, cell: str | None) -> list[model.CellWaits]:
    """Every measured cell, or the one `--cell` names (its id or a unique prefix)."""
    if cell is None:
        return answer.cells
    found = [c for c in answer.cells if c.cell.startswith(cell)]
    if len(found) != 1:
        known = ", ".join(answer.labels)
        raise UserError(f"--cell {cell}: no such cell (cells: {known})")
    return found


def waits(answer: model.Answer, console: Console, cell: str | None = None, who_waits: bool = False) -> None:
    for found in chosen(answer, cell):
        console.print(wait_table(found))
        line = extras_line(found)
        if line:
            console.print(Text(line))
        if who_waits:
            console.print()
            for part in resources(found):
                console.print(part)
        console.print()


def explanation_table(explained: model.Explanation) -> Table:
    """What explains the difference (storlab.answer.explain): the waits per unit of work, side by side."""
    table = Table(show_edge=False)
    for col in ("WaitType", explained.baseline, explained.candidate, "difference", "share"):
        table.add_column(col, justify="left" if col == "WaitType" else "right")
    for row in explanation_rows(explained):
        table.add_row(*_plain(*row))
    return table


def explanation_rows(explained: model.Explanation) -> list[list[str]]:
    """The table's rows as text: wait type, baseline, candidate, difference, share."""
    k = explained.scale
    return [[ln.wait_type, f"{k * ln.baseline:.3f}", f"{k * ln.candidate:.3f}", f"{k * ln.difference:+.3f}",
             "—" if ln.share is None else f"{100 * ln.share:+.0f} %"] for ln in explained.lines]


def compare(comparison: model.Comparison, console: Console) -> None:
    head = comparison.headline
    table = Table(title=Text(f"{head.label} against {comparison.baseline_label} ({comparison.baseline})"),
                  show_edge=False, title_justify="left")
    for col in ("cell", "factors", head.label, "change", "p", "adjusted p", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "factors", "verdict") else "right")
    for c in comparison.cells:
        if c.change_percent is None and c.verdict == "baseline":
            table.add_row(*_plain(c.cell, c.label, c.mean, "baseline", "", "", ""))
            continue
        change = "—" if c.change_percent is None else f"{c.change_percent:+.1f} %"
        table.add_row(*_plain(c.cell, c.label, c.mean, change, _fmt(c.p_value), _fmt(c.adjusted_p), c.verdict))
    console.print(table)
    console.print(Text(f"verdicts: {comparison.correction}"))
    for explained in comparison.explanations:
        console.print()
        console.print(Text(f"what explains the difference: {explained.what}, {explained.per}"))
        console.print(explanation_table(explained))
        for line in explained.notes:
            console.print(Text(line))
