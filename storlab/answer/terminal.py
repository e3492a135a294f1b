"""The answer in the terminal: what each factor does first, then the ranking with confidence intervals,
the wait tables, comparisons; and the same answer as JSON (docs/answer-json.md)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storlab.answer import client_cpu, effects, explain, rate_curve
from storlab.answer.analysis import CellResult, Ranked, Results, fmt_figure, verdicts_line
from storlab.answer.effects import FactorAnswer, LevelEffect
from storlab.answer.stats import NOISY_CV, describe_outliers, noise_warning, repetitions_needed_paired
from storlab.errors import UserError
from storlab.experiment.matrix import format_value
from storlab.probes import waiting_tasks


def _plain(*cells) -> list[Text]:
    """Table cells as literal text: labels, wait names and messages are data, never rich markup."""
    return [Text(str(c)) for c in cells]


def _ci(result: CellResult, unit: str = "s") -> str:
    s = result.headline
    if s is None:
        return "—"
    if s.n < 2:
        return f"{fmt_figure(s.mean, unit)} (1 run)"
    return f"{fmt_figure(s.mean, unit)} ± {fmt_figure(s.half_width, unit)}"


def _versus(ranked: Ranked) -> str:
    if ranked.versus_best is None:
        return "best"
    return f"{ranked.distance_percent:+.1f} % ({ranked.versus_best.verdict})"


def _cv(result: CellResult) -> str:
    s = result.headline
    if s.n < 2:
        return "—"
    return f"{100 * s.cv:.1f} %" + (" !" if s.cv > NOISY_CV else "")


def show(results: Results, console: Console) -> None:
    exp = results.experiment
    head = results.headline
    if results.answer is not None:
        factor_answer(results, console)
        console.print()
    console.print(Text.assemble((str(exp.get("name", "?")), "bold"),
                                f" on {exp.get('engine', '?')}: {head.label}, mean ± 95 % CI"))
    others = [f for f in results.figures[1:] if f.shown]
    table = Table(show_edge=False)
    columns = [("#", "right"), ("cell", "left"), ("factors", "left"), (head.label, "right"), ("CV", "right")]
    columns += [(f.label, "right") for f in others]
    columns += [("runs", "right"), ("vs best", "right"), ("top wait", "left")]
    pooled = results.pooled_hosts
    if pooled:
        columns.append(("hosts", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    ranking = results.ranking()
    for place, ranked in enumerate(ranking, 1):
        c = ranked.result
        table.add_row(*_plain(
            place, c.cell.id, c.cell.label, _ci(c, head.unit), _cv(c),
            *[fmt_figure(c.figures[f.name].mean if f.name in c.figures else None, f.unit) for f in others],
            len(c.runs), _versus(ranked), c.top_wait, *([", ".join(c.hosts)] if pooled else []),
        ))
    for c in results.cells:
        if c.headline is None:
            table.add_row(*_plain("", c.cell.id, c.cell.label, "—", "—", *["—" for _ in others], "0", "not run", "—",
                                  *(["—"] if pooled else [])))
    console.print(table)
    if ranking:
        best = ranking[0].result
        console.print(Text.assemble("best: ", (best.cell.label, "bold"),
                                    f" ({best.cell.id}), {_ci(best, head.unit)} {head.unit}"))
        rest = [r for r in ranking[1:] if r.versus_best is not None]
        if rest:
            worst = rest[-1]
            factor = worst.result.headline.mean / best.headline.mean
            factor = factor if results.lower_is_better else 1 / factor
            console.print(Text(f"  {factor:.2f}x better than the worst cell ({worst.result.cell.label}); "
                               + _significance_line(rest)))
            console.print(Text(f"  verdicts: {results.verdicts().correction}"))
    for line in race_lines(results):
        console.print(Text(line))
    for line in noise_lines(results):
        console.print(Text.assemble(("noise: ", "yellow"), line))
    if results.conditions:
        console.print(Text(results.conditions))
    if results.note:
        console.print(Text(results.note))
    curve = rate_curve.answer(results)
    for line in (rate_curve.lines(curve) if curve else []) + client_cpu.lines(results):
        console.print(Text(line))
    for host, facts in results.machines:
        console.print(Text(facts_line(facts, host)))
    for note in results.facts_notes:
        console.print(Text.assemble(("warning: ", "yellow"), note))
    for cell_id, rep, message in results.failures:
        console.print(Text.assemble(("failed run: ", "red"), f"cell {cell_id} repetition {rep}: {message}"))


def _p(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.0e}" if value < 0.001 else f"{value:.3f}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.0f}" if fraction >= 0.1 else f"{100 * fraction:.1f}"


def verdict_text(effect: LevelEffect, margin: float, alpha: float) -> str:
    """'different: better', 'equivalent: [0.97, 1.08] (90 % CI) within ±5 %' (the interval that decided
    it, and a real difference said as one), or what the noise still hides."""
    if effect.verdict == effects.DIFFERENT:
        return f"different: {'better' if effect.better else 'worse'}"
    if effect.verdict == effects.EQUIVALENT:
        said = (f"equivalent: [{effect.equivalence_low:.2f}, {effect.equivalence_high:.2f}] "
                f"({round(100 * (1 - 2 * alpha), 1):g} % CI) within ±{_percent(margin)} %")
        if effect.real:
            said += f"; a real difference of {100 * (effect.ratio - 1):+.1f} %, inside what matters"
        return said
    if not math.isfinite(effect.hidden):
        return "undecided: too few runs to tell"
    return f"undecided: no effect beyond ±{_percent(effect.hidden)} % can be ruled out yet"


def _ratio(effect: LevelEffect) -> tuple[str, str]:
    if not math.isfinite(effect.ci_low):
        return f"{effect.ratio:.2f}x", "—"
    return f"{effect.ratio:.2f}x", f"[{effect.ci_low:.2f}, {effect.ci_high:.2f}]"


def confidence(answer: FactorAnswer) -> str:
    """The intervals' level: 95 %, or what a look of an experiment run until settled spends."""
    return f"{round(100 * (1 - answer.alpha), 1):g} % CI"


def effects_table(answer: FactorAnswer, rows: list[LevelEffect], conditional: bool = False) -> Table:
    table = Table(show_edge=False)
    columns = [("factor", "left"), ("level", "left"), ("against", "left")]
    columns += [("given", "left")] if conditional else []
    columns += [("ratio", "right"), (confidence(answer), "right"), ("adjusted p", "right"), ("verdict", "left")]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for e in rows:
        given = ", ".join(f"{k}={format_value(v)}" for k, v in (e.given or {}).items())
        table.add_row(*_plain(e.factor, format_value(e.level), format_value(e.reference), *([given] if conditional else []),
                              *_ratio(e), _p(e.adjusted_p), verdict_text(e, answer.margin, answer.alpha)))
    return table


def factor_answer(results: Results, console: Console) -> None:
    """What each factor does to the headline: each level against its factor's reference level."""
    answer = results.answer
    exp, head = results.experiment, results.headline
    order = ", each in a random order" if exp.get("order_seed") is not None else ""
    console.print(Text.assemble((str(exp.get("name", "?")), "bold"),
                                f": what each factor does to {head.label}, {answer.runs} runs in {answer.rounds} "
                                f"rounds{order} (ratio: level / reference, geometric means)"))
    if answer.effects:
        console.print(effects_table(answer, answer.effects))
    for line in interaction_lines(answer):
        console.print(Text(line))
    if answer.conditional:
        console.print(effects_table(answer, answer.conditional, conditional=True))
    for line in answer.not_estimable:
        console.print(Text(f"not estimable: {line}"))
    line = noise_line(answer)
    if line:
        console.print(Text.assemble(("noise: ", "yellow"), line))
    console.print(Text(status_line(results)))


def interaction_lines(answer: FactorAnswer) -> list[str]:
    significant = [i for i in answer.interactions if i.significant]
    lines = [f"{a} and {b} interact (adjusted p {_p(i.adjusted_p)}): each one's effect at each level of the other below"
             for i in significant for a, b in [i.factors]]
    quiet = [i for i in answer.interactions if not i.significant]
    if quiet:
        lines.append("no significant interaction: " + ", ".join(f"{a} x {b} (adjusted p {_p(i.adjusted_p)})"
                                                          for i in quiet for a, b in [i.factors]))
    return lines


def noise_line(answer: FactorAnswer) -> str | None:
    """How much runs vary once the rounds' drift is taken out, and the effect each undecided factor
    could still hide."""
    if not math.isfinite(answer.residual_cv):
        return None
    # The rounds two cells compared round by round need to tell an effect apart (80 % power, 5 % level).
    rounds = "" if answer.residual_cv <= 0 else (
        f"; 10 % takes about {repetitions_needed_paired(answer.residual_cv, 0.10)} rounds to tell, 5 % about "
        f"{repetitions_needed_paired(answer.residual_cv, 0.05)}")
    line = f"runs vary {_percent(answer.residual_cv)} % (residual CV, the rounds' drift taken out{rounds})"
    hidden = hidden_effects(answer)
    if hidden:
        line += "; still hidden in it: " + ", ".join(f"{f} up to ±{_percent(h)} %" for f, h in hidden.items())
    return line


def hidden_effects(answer: FactorAnswer) -> dict[str, float]:
    """Each undecided factor's largest effect the noise still allows (its levels' largest)."""
    hidden: dict[str, float] = {}
    for e in answer.effects:
        if e.verdict == effects.UNDECIDED and math.isfinite(e.hidden):
            hidden[e.factor] = max(hidden.get(e.factor, 0.0), e.hidden)
    return hidden


def status_line(results: Results) -> str:
    """Settled or not, and why the runs stopped when the last `storlab run` said so."""
    if results.stopped:
        return results.stopped
    if results.settled:
        return f"settled after {results.rounds} rounds: {verdicts_line(results)}"
    more = "more rounds would tell (repetitions, or until = \"settled\")" if results.settling is None else \
        "more rounds would tell (run the same command to go on)"
    return f"not settled after {results.rounds} rounds: {verdicts_line(results)}; {more}"


def race_lines(results: Results) -> list[str]:
    """Which cells a race dropped, after which round and on what evidence; why it stopped."""
    race = results.race
    if race is None:
        return []
    labels = {c.cell.id: c.cell.label for c in results.cells}
    lines = [f"race: {len(race.drops)} of {len(labels)} cells dropped after {race.rounds} rounds"]
    lines += [f"  dropped {labels.get(d.cell, d.cell)} ({d.cell}) {d.evidence}" for d in race.drops]
    lines.append(f"  {race.finished}" if race.finished else f"  still racing: next is round {race.next_round}")
    return lines


def noise_lines(results: Results) -> list[str]:
    """Each noisy cell's warning and each cell's outliers (kept in the figures, never dropped)."""
    lines = []
    for c in results.measured:
        warning = noise_warning(c.headline.cv, c.headline.n) if c.headline.n > 1 else None
        if warning:
            lines.append(f"{c.cell.label} ({c.cell.id}): {warning}")
        outliers = describe_outliers(c.values(), [r.repetition for r in c.runs], results.headline.unit)
        if outliers:
            lines.append(f"{c.cell.label} ({c.cell.id}): {outliers}")
    return lines


def facts_line(facts: dict, host: str | None = None) -> str:
    """The machine the runs were measured on (named, when the runs name it), in one line."""
    cpu = facts.get("cpu", {})
    governor = cpu.get("governor") or ("unknown (virtualized)" if cpu.get("virtualized") else "unknown")
    places = "; ".join(
        f"{path}: {d.get('device') or '?'} {d.get('filesystem') or ''}".rstrip()
        for path, d in facts.get("paths", {}).items()
    )
    who = f"machine {host}" if host else "machine"
    line = f"{who}: {cpu.get('model') or '?'}, {cpu.get('cores')} cores, governor {governor}"
    return f"{line}; {places}" if places else line


def _significance_line(others) -> str:
    unsure = [r for r in others if not r.versus_best.significant]
    if not unsure:
        return "every difference from the best cell is significant at 95 %"
    names = ", ".join(r.result.cell.label for r in unsure[:4]) + (" …" if len(unsure) > 4 else "")
    return f"not significantly different from the best: {names}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def wait_table(result: CellResult) -> Table:
    """The seeds' columns; a column the source cannot fill honestly shows '—'."""
    table = Table(title=Text(f"{result.cell.label} ({result.cell.id}): waits per run, top 95 %, source {result.wait_source}"),
                  show_edge=False, title_justify="left")
    for col in ("WaitType", "Wait_S", "Signal_S", "WaitCount", "Percentage", "AvgWait_S"):
        table.add_column(col, justify="left" if col == "WaitType" else "right")
    for row in result.top:
        table.add_row(*_plain(
            row.wait_type, _fmt(row.wait_s), _fmt(row.signal_s), _fmt(row.wait_count, 0),
            f"{row.percentage:.2f}", _fmt(row.avg_wait_s, 6),
        ))
    return table


def extras_line(result: CellResult) -> str | None:
    if not result.extras:
        return None
    parts = []
    for key, value in result.extras.items():
        name = key.removeprefix("log.")
        parts.append(f"{name} {value:,.3f}" if key.endswith("_s") else f"{name} {value:,.0f}")
    return "  beside the table (per run): " + ", ".join(parts)


def resources(result: CellResult) -> list[Text | Table]:
    """Who waits on what (the seeds' sys.dm_os_waiting_tasks, summed): each top wait's resources and
    their share of the time the sampler saw sessions in that wait."""
    if not result.tasks:
        return [Text(f"{result.cell.label} ({result.cell.id}): no waiting tasks were recorded with these runs")]
    # The sampling period is not named: a results folder keeps the runs of whichever storlab recorded them.
    title = Text(f"{result.cell.label} ({result.cell.id}): who waits on what, waiting tasks sampled through "
                 "each run, seconds per run")
    table = Table(show_edge=False)
    for col in ("WaitType", "Resource", "Sampled_S", "Share"):
        table.add_column(col, justify="left" if col in ("WaitType", "Resource") else "right")
    for wait in waiting_tasks.resources_of(result.top, result.tasks):
        if wait.wait_type == "CPU":
            continue  # on CPU is no wait: no session waits on a resource there
        if not wait.resources:
            table.add_row(*_plain(wait.wait_type, "— (no session caught in it)", "", ""))
        for i, share in enumerate(wait.resources):
            table.add_row(*_plain(wait.wait_type if i == 0 else "", waiting_tasks.resource_label(share),
                                  _fmt(share.seconds), f"{share.share:.1f} %"))
    return [title, table]


def waits(results: Results, console: Console, cell: str | None = None, who_waits: bool = False) -> None:
    chosen = results.measured
    if cell is not None:
        found = results.cell(cell)
        if found is None:
            known = ", ".join(c.cell.id for c in results.cells)
            raise UserError(f"--cell {cell}: no such cell (cells: {known})")
        chosen = [found]
    for result in chosen:
        console.print(wait_table(result))
        line = extras_line(result)
        if line:
            console.print(Text(line))
        if who_waits:
            console.print()
            for part in resources(result):
                console.print(part)
        console.print()


def compare_cells(results: Results, console: Console, baseline: str | None = None) -> None:
    measured = results.measured
    if not measured:
        raise UserError("no finished runs to compare yet")
    if baseline is None:
        base = measured[0]
    else:
        base = results.cell(baseline)
        if base is None or base.headline is None:
            raise UserError(f"--baseline {baseline}: no such cell with finished runs")
    head = results.headline
    verdicts = results.against(base.cell.id)
    table = Table(title=Text(f"{head.label} against {base.cell.label} ({base.cell.id})"), show_edge=False,
                  title_justify="left")
    for col in ("cell", "factors", head.label, "change", "p", "adjusted p", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "factors", "verdict") else "right")
    for c in measured:
        if c is base:
            table.add_row(*_plain(c.cell.id, c.cell.label, _ci(c, head.unit), "baseline", "", "", ""))
            continue
        v = verdicts.cells[c.cell.id]
        table.add_row(*_plain(c.cell.id, c.cell.label, _ci(c, head.unit), f"{v.change_percent:+.1f} %",
                              _fmt(v.p_value, 3), _fmt(v.adjusted_p, 3), v.verdict))
    console.print(table)
    console.print(Text(f"verdicts: {verdicts.correction}, at 5 %"))
    for c in measured:
        if c is not base:
            explained = explain.cells(results, base, c)
            if explained is not None:
                console.print()
                console.print(Text(f"what explains the difference: {c.cell.label} ({c.cell.id}) against "
                                   f"{base.cell.label} ({base.cell.id}), {explain.title(explained)}"))
                console.print(explanation_table(explained, base.cell.id, c.cell.id))
                for line in (explain.note(explained), explain.summary(explained, c.cell.id)):
                    if line:
                        console.print(Text(line))


def explanation_table(explained: explain.Explanation, baseline: str, candidate: str) -> Table:
    """What explains the difference (storlab.answer.explain): the waits per unit of work, side by side."""
    table = Table(show_edge=False)

    for col in ("WaitType", baseline, candidate, "difference", "share"):
        table.add_column(col, justify="left" if col == "WaitType" else "right")
    for row in explain.rows(explained):
        table.add_row(*_plain(*row))
    return table


# -- the answer as JSON (storlab show --json; its schema: storlab/answer/answer_schema.json, docs/answer-json.md) --

SCHEMA_VERSION = 1


def _number(value: float | None) -> float | None:
    """JSON has no nan or infinity: an unknown figure is null."""
    return None if value is None or not math.isfinite(value) else float(value)


def as_json(results: Results) -> dict:
    """The whole answer: what each factor does, settled or not and why, the noise, and the ranking."""
    exp, head = results.experiment, results.headline
    answer = results.answer
    settling = results.settling
    ranking = []
    verdicts = results.verdicts() if results.measured else None
    for place, ranked in enumerate(results.ranking(), 1):
        c, v = ranked.result, ranked.versus_best
        ranking.append({
            "place": place, "cell": c.cell.id, "label": c.cell.label,
            "factors": {k.split(".", 1)[1]: value for k, value in c.cell.factors.items()},
            "runs": len(c.runs), "mean": _number(c.headline.mean),
            "ci_half_width": _number(c.headline.half_width) if c.headline.n > 1 else None,
            "cv": _number(c.headline.cv) if c.headline.n > 1 else None,
            "distance_percent": _number(ranked.distance_percent),
            "verdict": "best" if v is None else v.verdict,
            "p_value": None if v is None else _number(v.p_value),
            "adjusted_p": None if v is None else _number(v.adjusted_p),
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "experiment": {"name": exp.get("name"), "engine": exp.get("engine"),
                       "factors": {k.split(".", 1)[1]: v for k, v in exp.get("factors", {}).items()},
                       "order_seed": exp.get("order_seed")},
        "headline": {"name": head.name, "unit": head.unit, "label": head.label,
                     "better": "lower" if results.lower_is_better else "higher"},
        "rounds": results.rounds,
        "settled": results.settled,
        "status": status_line(results) if answer is not None else None,
        "stopped": results.stopped,
        "until_settled": None if settling is None else
        {"min_rounds": settling.min_rounds, "max_rounds": settling.max_rounds, "budget_s": settling.budget_s},
        "factor_effects": None if answer is None else answer.to_json(),
        "noise": {"residual_cv": None if answer is None else _number(answer.residual_cv),
                  "hidden": {} if answer is None else hidden_effects(answer),
                  "lines": ([noise_line(answer)] if answer is not None and noise_line(answer) else []) + noise_lines(results)},
        "ranking": ranking,
        "ranking_correction": None if verdicts is None else verdicts.correction,
        "not_run": [c.cell.id for c in results.cells if c.headline is None],
        "race": race_lines(results),
        "failures": [{"cell": cell, "repetition": rep, "message": message} for cell, rep, message in results.failures],
        "warnings": list(results.facts_notes),
    }
