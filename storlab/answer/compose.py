"""The answer composed once from the statistics (storlab.answer.analysis): every number and every
sentence `show`, `show --json` and the report print, as one typed value (storlab.answer.model)."""

from __future__ import annotations

import json
import math

from storlab import engines, steady_state
from storlab.answer import (capability, chart_order, client_cpu, concerns, drawn_runs, effects, explain, io_sizes, machines,
                            model, noise_split, rate_curve, screening, steadiness, volumes)
from storlab.answer.analysis import CellResult, Results, verdicts_line
from storlab.answer.effects import FactorAnswer, LevelEffect
from storlab.answer.traced import traced
from storlab.answer.stats import NOISY_CV, describe_outliers, noise_warning, repetitions_needed_paired, spread
from storlab.experiment import design
from storlab.experiment.swept import canonical
from storlab.labels import short_name
from storlab.labels import format_value
from storlab.errors import UserError
from storlab.probes import costs, traced_waits, waiting_tasks
from storlab.probes.kept import KeptCell
from storlab.probes.part import Part
from storlab.probes import registry
from storlab.workloads import KINDS

# The differences the noise line says the rounds of (a fraction of the mean).
TOLD = (0.10, 0.05)


def _number(value: float | None) -> float | None:
    """JSON has no nan or infinity: an unknown figure is None."""
    return None if value is None or not math.isfinite(value) else float(value)


def _p(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.0e}" if value < 0.001 else f"{value:.3f}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.0f}" if fraction >= 0.1 else f"{100 * fraction:.1f}"


def confidence(answer: FactorAnswer) -> str:
    """The intervals' level: 95 %, or what a look of an experiment run until settled spends."""
    return f"{round(100 * (1 - answer.alpha), 1):g} % CI"


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


def _effect(e: LevelEffect, answer: FactorAnswer, aliases: dict[str, str] | None = None) -> model.Effect:
    return model.Effect(
        factor=e.factor, level=e.level, reference=e.reference, given=dict(e.given) if e.given is not None else None,
        ratio=e.ratio, ci_low=_number(e.ci_low), ci_high=_number(e.ci_high),
        equivalence_low=_number(e.equivalence_low), equivalence_high=_number(e.equivalence_high),
        p_value=_number(e.p_value), adjusted_p=_number(e.adjusted_p), verdict=e.verdict, hidden=_number(e.hidden),
        better=e.better, real=e.real, said=verdict_text(e, answer.margin, answer.alpha),
        aliases=(aliases or {}).get(e.factor) if e.given is None else None)


def _pair(i: effects.Interaction) -> str:
    """'a x b', or a fraction's chain 'a x b = c x d'."""
    return " = ".join(f"{a} x {b}" for a, b in [i.factors, *i.aliases])


def interaction_lines(answer: FactorAnswer) -> list[str]:
    significant = [i for i in answer.interactions if i.significant]
    lines = [f"{a} and {b} interact (adjusted p {_p(i.adjusted_p)}): each one's effect at each level of the other below"
             for i in significant if not i.aliases for a, b in [i.factors]]
    lines += [f"an interaction of the chain {_pair(i)} (adjusted p {_p(i.adjusted_p)}): the fraction cannot tell which pair; "
              "a follow-up of their factors can" for i in significant if i.aliases]
    quiet = [i for i in answer.interactions if not i.significant]
    if quiet:
        lines.append("no significant interaction: " + ", ".join(f"{_pair(i)} (adjusted p {_p(i.adjusted_p)})" for i in quiet))
    return lines


def factor_effects(answer: FactorAnswer, aliases: dict[str, str] | None = None) -> model.FactorEffects:
    return model.FactorEffects(
        effects=[_effect(e, answer, aliases) for e in answer.effects],
        interactions=[model.Interaction(factors=i.factors, p_value=_number(i.p_value), adjusted_p=_number(i.adjusted_p),
                                        significant=i.significant, aliases=list(i.aliases)) for i in answer.interactions],
        conditional=[_effect(e, answer) for e in answer.conditional],
        not_estimable=list(answer.not_estimable), settled=answer.settled, margin=answer.margin, rounds=answer.rounds,
        runs=answer.runs, residual_cv=_number(answer.residual_cv), formula=answer.formula, method=answer.method,
        alpha=answer.alpha, look=answer.look, max_looks=answer.max_looks, confidence=confidence(answer),
        interaction_lines=interaction_lines(answer))


def hidden_effects(answer: FactorAnswer) -> dict[str, float]:
    """Each undecided factor's largest effect the noise still allows (its levels' largest)."""
    hidden: dict[str, float] = {}
    for e in answer.effects:
        if e.verdict == effects.UNDECIDED and math.isfinite(e.hidden):
            hidden[e.factor] = max(hidden.get(e.factor, 0.0), e.hidden)
    return hidden


def rounds_needed(answer: FactorAnswer) -> dict[str, int]:
    """The rounds two cells compared round by round need to tell each of TOLD apart at the residual noise."""
    if not math.isfinite(answer.residual_cv) or answer.residual_cv <= 0:
        return {}
    return {f"{100 * d:g} %": repetitions_needed_paired(answer.residual_cv, d) for d in TOLD}


def noise_line(answer: FactorAnswer) -> str | None:
    """How much runs vary once the rounds' drift is taken out, the rounds an effect takes to tell, and
    the effect each undecided factor could still hide."""
    if not math.isfinite(answer.residual_cv):
        return None
    needed = list(rounds_needed(answer).items())
    rounds = "" if not needed else (f"; {needed[0][0]} takes about {needed[0][1]} rounds to tell, "
                                    + ", ".join(f"{told} about {n}" for told, n in needed[1:]))
    line = f"runs vary {_percent(answer.residual_cv)} % (residual CV, the rounds' drift taken out{rounds})"
    hidden = hidden_effects(answer)
    if hidden:
        line += "; still hidden in it: " + ", ".join(f"{f} up to ±{_percent(h)} %" for f, h in hidden.items())
    return line


def cell_noise_lines(results: Results) -> list[str]:
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


def traces_line(results: Results) -> str | None:
    """When some runs' waits could not be counted, and why (a trace that could not run, or failed)."""
    reasons = traced_waits.unavailable_reasons([r.wait_source for c in results.measured for r in c.runs])
    if not reasons:
        return None
    return (f"wait counts, lock waits by relation and traced IO per file unavailable: {'; '.join(reasons)} "
            "(sampled waits kept)")


def probe_costs_line(results: Results) -> str | None:
    """What the probes each kept run had cost its load, as the benchmarks measured them."""
    if results.experiment is None:
        return None
    engine = engines.engine(results.experiment.engine)
    return costs.line([engine.probe_costs(r.wait_source, r.conditions.get("tracing"))
                       for c in results.measured for r in c.runs])


def shown_figures(results: Results) -> list:
    """The workload's figures after the headline that `show` has a column for: those it shows, where some
    cell has them (an engine's own counters, such as PostgreSQL's temporary MB, are not every engine's)."""
    return [f for f in results.figures[1:] if f.shown and any(f.name in c.figures for c in results.measured)]


def _ranked(results: Results) -> tuple[list[model.Ranked], str | None]:
    ranking = results.ranking()
    if not ranking:
        return [], None
    shown = shown_figures(results)
    pooled = results.pooled_hosts
    rows = []
    for place, ranked in enumerate(ranking, 1):
        c, v = ranked.result, ranked.versus_best
        several = c.headline.n > 1
        values = c.values()
        geometric = spread(values) if all(v > 0 for v in values) else None
        rows.append(model.Ranked(
            place=place, cell=c.cell.id, label=c.cell.label,
            factors={short_name(k): value for k, value in c.cell.factors.items()}, runs=len(c.runs),
            mean=_number(c.headline.mean), ci_half_width=_number(c.headline.half_width) if several else None,
            geometric_mean=None if geometric is None else geometric.mean,
            geometric_low=None if geometric is None else _number(geometric.low),
            geometric_high=None if geometric is None else _number(geometric.high),
            cv=_number(c.headline.cv) if several else None,
            noisy=several and math.isfinite(c.headline.cv) and c.headline.cv > NOISY_CV,
            figures={f.name: _number(c.figures[f.name].mean) if f.name in c.figures else None for f in shown},
            distance_percent=_number(ranked.distance_percent), verdict="best" if v is None else v.verdict,
            p_value=None if v is None else _number(v.p_value), adjusted_p=None if v is None else _number(v.adjusted_p),
            top_wait=c.top_wait, hosts=c.hosts if pooled else []))
    return rows, results.verdicts().correction


def _best_lines(results: Results) -> list[str]:
    ranking = results.ranking()
    if not ranking:
        return []
    best, head = ranking[0].result, results.headline
    spread = "" if best.headline.n < 2 else f" ± {model.figure(best.headline.half_width, head.unit)}"
    lines = [f"best: {best.cell.label} ({best.cell.id}), {model.figure(best.headline.mean, head.unit)}{spread} {head.unit}"]
    rest = [r for r in ranking[1:] if r.versus_best is not None]
    if rest and results.no_ratios is not None:
        lines.append(f"  verdicts: {results.verdicts().correction}")
    elif rest:
        worst = rest[-1]
        factor = worst.result.headline.mean / best.headline.mean
        factor = factor if results.lower_is_better else 1 / factor
        unsure = [r for r in rest if not r.versus_best.significant]
        if not unsure:
            told = "every difference from the best cell is significant at 95 %"
        else:
            told = "not significantly different from the best: " + ", ".join(
                r.result.cell.label for r in unsure[:4]) + (" …" if len(unsure) > 4 else "")
        lines.append(f"  {factor:.2f}x better than the worst cell ({worst.result.cell.label}); {told}")
        lines.append(f"  verdicts: {results.verdicts().correction}")
    return lines


def cell_waits(c: CellResult) -> model.CellWaits:
    resources = [] if not c.tasks else [
        model.WaitResources(wait_type=w.wait_type, resources=[
            model.Resource(resource=waiting_tasks.resource_label(r), named=bool(r.resource or r.others),
                           seconds=r.seconds, share=r.share)
            for r in w.resources])
        for w in waiting_tasks.resources_of(c.top, c.tasks) if w.wait_type != "CPU"]  # on CPU, no one waits on anything
    top = {w.wait_type for w in c.top}
    rest: dict[str, float] = {}
    for w in c.waits:
        if w.wait_type not in top:
            rest[w.wait_type] = rest.get(w.wait_type, 0.0) + w.wait_s
    return model.CellWaits(
        cell=c.cell.id, label=c.cell.label, factors={short_name(k): v for k, v in c.cell.factors.items()}, rest=rest,
        source=c.wait_source, extras=dict(c.extras), resources=resources, traced=traced(c),
        waits=[model.WaitRow(wait_type=w.wait_type, wait_s=w.wait_s, signal_s=w.signal_s, wait_count=w.wait_count,
                             percentage=w.percentage, avg_wait_s=w.avg_wait_s) for w in c.top])


def explanation(expl: explain.Explanation, what: str, baseline: str, candidate: str) -> model.Explanation:
    name, scale = explain.scale(expl)
    return model.Explanation(
        what=what, baseline=baseline, candidate=candidate, per=explain.title(expl), scale=scale,
        lines=[model.ExplanationLine(wait_type=ln.wait_type, baseline=ln.baseline, candidate=ln.candidate,
                                     difference=ln.difference, share=ln.share) for ln in expl.lines],
        notes=[line for line in (explain.note(expl), explain.summary(expl, candidate)) if line])


def explanations(results: Results) -> list[model.Explanation]:
    """What explains each difference: each factor's level against its reference level, the cells
    matched on the other factors; without factor effects, each cell against the first."""
    found = []
    answer = results.answer
    if answer is not None and answer.effects:
        for e in answer.effects:
            done = explain.level(results, e.factor, e.level, e.reference)
            if done:
                level, reference = f"{e.factor}={format_value(e.level)}", f"{e.factor}={format_value(e.reference)}"
                what = f"{level} against {reference}, over {done[1]} pairs of cells alike in the other factors"
                found.append(explanation(done[0], what, reference, level))
    elif results.measured:
        base = results.measured[0]
        for c in results.measured[1:]:
            done = explain.cells(results, base, c)
            if done:
                found.append(explanation(done, f"{c.cell.label} ({c.cell.id}) against {base.cell.label} ({base.cell.id})",
                                         base.cell.id, c.cell.id))
    return found


def half_normal(answer: FactorAnswer) -> list[model.EffectPoint]:
    """Each main effect's size against the half-normal quantile of its rank (Daniel 1959): the effects of
    nothing lie on a line through the origin, the real ones stand off it to the right."""
    from scipy.stats import norm

    ranked = sorted((e for e in answer.effects if e.given is None), key=lambda e: abs(math.log(e.ratio)))
    m = len(ranked)
    return [model.EffectPoint(factor=e.factor, level=e.level, size=abs(math.log(e.ratio)),
                              quantile=float(norm.ppf(0.5 + 0.5 * (i + 0.5) / m)), verdict=e.verdict)
            for i, e in enumerate(ranked)]


def design_answer(results: Results) -> model.Design | None:
    """A screening's or a follow-up's design in the answer: how its cells were chosen, the runs against
    the full factorial's, the aliases, what it names and the key that settles it."""
    designed, answer = results.design, results.answer
    if designed is None:
        return None
    runs = sum(len(c.runs) for c in results.cells)
    rounds = max((r.repetition for c in results.cells for r in c.runs), default=1)  # a follow-up's screening's too
    named = designed.named if designed.kind == "follow-up" else ([] if answer is None else screening.named(answer))
    follow, shared = None, designed.shared
    if designed.kind == "screening" and named:
        ran = {design_cell for c in results.cells if c.runs
               for design_cell in [canonical({short_name(k): v for k, v in c.cell.factors.items()})]}
        ordered = {short_name(d): [results.answer_settings.reference.get(short_name(d), v[0])]
                   + [x for x in v if canonical(x) != canonical(results.answer_settings.reference.get(short_name(d), v[0]))]
                   for d, v in results.factors.items()}
        cells = design.follow_up(ordered, named)
        shared = sum(1 for c in cells if canonical(c) in ran)
        follow = (f'design = {{ kind = "follow-up", factors = [{", ".join(json.dumps(n) for n in named)}] }}: the full '
                  f"factorial of what the screening named, {len(cells)} cells, {shared} of them already run here (their runs "
                  "are not made again); in the same results folder")
    resolution = "" if designed.resolution is None else f", resolution {design.ROMAN.get(designed.resolution, designed.resolution)}"
    if designed.kind == "screening":
        lines = [f"a screening of {len(designed.aliases)} factors in {designed.cells} cells{resolution} (the full factorial: "
                 f"{designed.full_cells}); {runs} runs against {designed.full_cells * rounds} for the full factorial's "
                 f"{rounds} rounds: {designed.method}"]
        lines.append("named: " + (", ".join(named) if named else "none (no factor different from its reference)"))
        if follow:
            lines.append(f"settle them: {follow}")
    else:
        lines = [f"a follow-up of {', '.join(designed.named)}: {designed.cells} cells, {designed.shared} of them shared with "
                 f"the screening (their runs reused); {runs} runs in this results folder, the screening's included, against "
                 f"{designed.full_cells * rounds} for the full factorial of every factor at {rounds} rounds; the factor table "
                 "reads them all, the follow-up's rounds blocks of their own after the screening's"]
    return model.Design(
        kind=designed.kind, method=designed.method, resolution=designed.resolution, cells=designed.cells,
        full_cells=designed.full_cells, runs=runs, full_runs=designed.full_cells * rounds, aliases=designed.aliases,
        aliased_with=designed.aliased_with, chains=designed.chains, named=named, shared=shared, follow_up=follow,
        points=[] if answer is None else half_normal(answer), lines=lines)


def _run_steadiness(run: steadiness.RunState) -> model.RunSteadiness:
    return model.RunSteadiness(
        repetition=run.repetition, measured_s=_number(run.measured_s), declared_warmup_s=run.declared_warmup_s,
        found_warmup_s=_number(run.found_warmup_s), steady=run.steady,
        series=[model.SeriesState(metric=j.metric, points=j.points, steady=j.steady, range=_number(j.range),
                                  excursion=_number(j.excursion), change_p=_number(j.change_p),
                                  changed_at_s=_number(j.changed_at_s), change=_number(j.change), drift=_number(j.drift),
                                  drift_low=_number(j.drift_low), drift_high=_number(j.drift_high), said=j.said)
                for j in run.judged],
        checkpoints=run.checkpoints, checkpoint_times_s=run.checkpoint_times_s,
        checkpoint_phases=[t / run.cycle_s for t in run.checkpoint_times_s] if run.cycle_s else [],
        checkpoint_setting=run.setting,
        checkpoint_value=run.value, checkpoint_cycle_s=run.cycle_s, checkpoint_cycle_bytes=run.cycle_bytes,
        log_bytes=run.log_bytes, warmup_found=run.warmup_found,
        stopped_by=None if run.stopped is None else run.stopped["by"],
        stopped_at_s=None if run.stopped is None else _number(run.stopped["at_s"]))


def steadiness_answer(results: Results) -> model.Steadiness | None:
    """Each run's steady state, warm-up found and checkpoints; each cell's runs not steady or measured
    without (or with unequal) checkpoints, and what that does to its verdicts."""
    cells, lines, short = [], [], set()
    for c in results.measured:
        runs = [steadiness.state(r) for r in c.series]
        if not any(r.judged or r.checkpoints is not None for r in runs):
            continue
        said = [line for line in (steadiness.not_steady_line(runs), steadiness.checkpoint_line(runs)) if line]
        short |= {j.points for r in runs for j in r.judged if j.steady is None}
        each = [steadiness.runs_line(runs)] if any(r.steady is not None for r in runs) else []  # else said below
        lines += [f"{c.cell.label} ({c.cell.id}): {line}" for line in [*each, *said]]
        cells.append(model.CellSteadiness(cell=c.cell.id, label=c.cell.label, runs=[_run_steadiness(r) for r in runs],
                                          lines=said))
    if not cells:
        return None
    if short:
        most = max(short)
        lines.append(f"not judged in runs of at most {most} measured second{'s' if most != 1 else ''}: below "
                     f"{steady_state.MIN_POINTS} the change test calls too many runs without a change not steady")
    judged = [r for c in cells for r in c.runs if r.steady is not None]
    if judged:
        lines.insert(0, f"{sum(r.steady for r in judged)} of {len(judged)} runs judged steady (SNIA's range 20 % and "
                        "excursion 10 % over 5 intervals, failing with a change the noise does not explain: "
                        "docs/statistics.md)")
    return model.Steadiness(rule=steadiness.RULE, cells=cells, lines=lines)


def split_answer(results: Results, effects: model.FactorEffects | None = None) -> model.NoiseSplit | None:
    """The noise between runs and inside a run, from each run's measured per-second throughput; with
    the factor table, the cheaper way to what its undecided levels need (more rounds or longer runs),
    within the budget left; nothing planned for a settled answer; under a planned run length, which rounds
    ran at which length and why (storlab.answer.noise_split)."""
    found = noise_split.of_results(results, effects)
    if found is None:
        return None
    planned = noise_split.lengths_said([(r.repetition, r.conditions) for c in results.measured for r in c.runs])
    return model.NoiseSplit(between_runs=found.between_runs, inside_run=found.inside_run, runs=found.runs,
                            seconds=found.seconds, run_cost_s=_number(found.run_cost_s),
                            best_seconds=_number(found.best_seconds), advice=found.advice, method=noise_split.METHOD,
                            line=noise_split.line(found, results.prepared_once) + (f"; {planned}" if planned else ""))


def _headline(results: Results) -> model.Headline:
    head = results.headline
    return model.Headline(name=head.name, unit=head.unit, label=head.label,
                          better="lower" if results.lower_is_better else "higher")


def unavailable_line(results: Results) -> str:
    """What each factor does, when the runs cannot be read as ratios."""
    return f"{results.name or '?'}: what each factor does: unavailable: {results.no_ratios}"


def probe_summaries(results: Results) -> dict[str, Part | None]:
    """Each probe's part of the answer, the answer's key of its name (probes/kept.py), from what it kept of
    each measured cell's runs."""
    return {probe.name: probe.summary([KeptCell(c.cell.id, c.cell.label, [r.repetition for r in c.runs],
                                                c.kept[probe.name]) for c in results.measured])
            for probe in registry.PROBES if probe.summary}


def kind_part(results: Results, kind) -> dict[str, Part]:
    """The workload kind's own part of the answer (Workload.part), under the kind's name beside the probes'."""
    part = None if kind is None else kind.part([
        KeptCell(c.cell.id, c.cell.label, [r.repetition for r in c.runs], [r.conditions.get("workload") for r in c.runs])
        for c in results.measured])
    return {} if part is None else {kind.name: part}


def waits_ranked(cells: list[model.CellWaits]) -> list[str]:
    """Every wait in some cell's top 95 %, the most seconds over the cells first (ties by name): the rank
    every chart gives a wait its colour by."""
    totals: dict[str, float] = {}
    for c in cells:
        for row in c.waits:
            totals[row.wait_type] = totals.get(row.wait_type, 0.0) + row.wait_s
    return sorted(totals, key=lambda name: (-totals[name], name))


# A swept factor whose values span this factor or more is drawn on a log axis: 1, 2, 4, 8 data files
# evenly spaced, as each doubling is.
LOG_SPAN = 8


def swept_log(results: Results, swept: str | None) -> bool:
    """The swept factor's values all above 0 and spanning LOG_SPAN or more."""
    values = results.factors.get(swept, []) if swept else []
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return len(numbers) == len(values) > 1 and min(numbers) > 0 and max(numbers) / min(numbers) >= LOG_SPAN


def beside_headline(results: Results, swept: str | None) -> list[str]:
    """The shown figures counted in the headline's unit (a scan's CPU s beside its elapsed s): what the
    report draws beside the headline against the swept factor."""
    if swept is None:
        return []
    return [f.name for f in shown_figures(results) if f.unit == results.headline.unit]


def compose(results: Results, over_time: str | None = None) -> model.Answer:
    """`over_time`: the cell (an id or a unique prefix) whose median run the waits over time draw;
    default the best cell."""
    exp, answer = results.experiment, results.answer
    settling = results.settling
    ranking, correction = _ranked(results)
    notes = [line for line in (results.conditions, results.note) if line] + client_cpu.lines(results)
    notes += [facts_line(facts, host) for host, facts in results.machines]
    curve = rate_curve.answer(results)
    kind = KINDS.get(exp.kind or "") if exp else None
    curves = rate_curve.typed(curve) if curve else None
    notes += [line for line in (traces_line(results), probe_costs_line(results)) if line]
    swept, ordered = chart_order.swept_factor(results), chart_order.in_factor_order(results)
    steadiness_of_runs = steadiness_answer(results)
    waits = [cell_waits(c) for c in results.measured]
    fx = None if answer is None else factor_effects(answer, results.design.aliases if results.design else None)
    probed = probe_summaries(results)
    return model.Answer(
        experiment=model.AnsweredExperiment(name=results.name or "?", engine=exp.engine if exp else "?",
                                            factors={short_name(k): v for k, v in results.factors.items()},
                                            order_seed=exp.order_seed if exp else None,
                                            kind=None if kind is None else kind.name,
                                            throughput=None if kind is None or kind.throughput is None else kind.throughput.name,
                                            declared=exp is not None),
        headline=_headline(results),
        figures=[model.Figure(name=f.name, unit=f.unit, label=f.label) for f in shown_figures(results)],
        rounds=results.rounds, settled=results.settled,
        status=status_line(results) if answer is not None else
        unavailable_line(results) if results.no_ratios is not None else None, stopped=results.stopped,
        until_settled=None if settling is None else model.UntilSettled(
            min_rounds=settling.min_rounds, max_rounds=settling.max_rounds, budget_s=settling.budget_s),
        factor_effects=fx,
        noise=model.Noise(residual_cv=None if answer is None else _number(answer.residual_cv),
                          rounds_needed={} if answer is None else rounds_needed(answer),
                          hidden={} if answer is None else hidden_effects(answer),
                          line=None if answer is None else noise_line(answer), cells=cell_noise_lines(results),
                          split=split_answer(results, fx)),
        ranking=ranking, ranking_correction=correction, best=_best_lines(results),
        not_run=[c.cell.id for c in results.cells if c.headline is None],
        labels={c.cell.id: c.cell.label for c in results.cells},
        race=race_lines(results), rate=rate_curve.lines(curves) if curves else [], rate_curves=curves,
        failures=[model.Failure(cell=cell, repetition=rep, message=message) for cell, rep, message in results.failures],
        warnings=list(results.facts_notes), notes=notes,
        cells=waits, volumes=volumes.parts(results.experiment, results.measured, probed.get("limits")),
        swept=None if swept is None else short_name(swept),
        chart_order=[c.cell.id for c in ordered],
        io_sizes=[sizes for c in ordered if (sizes := io_sizes.cell_sizes(c))],
        capability=capability.answer(results.io_measured, results.experiment, results.facts,
                                     {c.cell.id: c.cell.label for c in results.cells}),
        machines=[machines.judged(host, facts) for host, facts in results.machines if facts],
        waits_over_time=drawn_runs.waits_over_time(results, over_time),
        first_runs=drawn_runs.first_runs(ordered),
        explanations=explanations(results),
        design=design_answer(results),
        steadiness=steadiness_of_runs,
        concerns=concerns.concerns(results, ranking, steadiness_of_runs),
        waits_ranked=waits_ranked(waits),
        swept_log=swept_log(results, swept),
        beside_headline=beside_headline(results, swept),
        **probed,
        **kind_part(results, kind),
    )


def comparison(results: Results, baseline: str | None = None) -> model.Comparison:
    """Every measured cell against `baseline` (default: the first cell with runs), paired by round."""
    measured = results.measured
    if not measured:
        raise UserError("no finished runs to compare yet")
    base = measured[0] if baseline is None else results.cell(baseline)
    if base is None or base.headline is None:
        raise UserError(f"--baseline {baseline}: no such cell with finished runs")
    verdicts = results.against(base.cell.id)
    head = results.headline
    compared, explained = [], []
    for c in measured:
        several = c.headline.n > 1
        mean = f"{model.figure(c.headline.mean, head.unit)}" + (
            f" ± {model.figure(c.headline.half_width, head.unit)}" if several else " (1 run)")
        if c is base:
            compared.append(model.Compared(cell=c.cell.id, label=c.cell.label, mean=mean, change_percent=None,
                                           p_value=None, adjusted_p=None, verdict="baseline"))
            continue
        v = verdicts.cells[c.cell.id]
        compared.append(model.Compared(cell=c.cell.id, label=c.cell.label, mean=mean,
                                       change_percent=_number(v.change_percent), p_value=_number(v.p_value),
                                       adjusted_p=_number(v.adjusted_p), verdict=v.verdict))
        done = explain.cells(results, base, c)
        if done is not None:
            explained.append(explanation(done, f"{c.cell.label} ({c.cell.id}) against {base.cell.label} ({base.cell.id})",
                                         base.cell.id, c.cell.id))
    return model.Comparison(headline=_headline(results), baseline=base.cell.id, baseline_label=base.cell.label, cells=compared,
                            correction=verdicts.correction + (", at 5 %" if results.no_ratios is None else ""),
                            explanations=explained)
