"""The end-of-study printout: the Pareto front as a table, and where the study lives."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from optuna.trial import FrozenTrial
from rich.console import Console
from rich.table import Table

from tuner.optimize.cost import StudyCost
from tuner.optimize.progress import format_flags
from tuner.results import record
from tuner.results.goals import (
    GOALS,
    SLO_NOISE,
    capacity_words,
    close_call,
    is_capacity,
    margin_words,
    slo_margins,
)
from tuner.space.model import SearchSpace
from tuner.study.options import StudySummary


def print_summary(
    console: Console,
    summary: StudySummary,
    space: SearchSpace,
    studies_dir: Path,
    saved: StudyCost | None = None,
    engine: str | None = None,
) -> None:
    """`saved`: what the trials the stop rule left unrun would have cost (optimize/cost.py);
    `engine`: what served the trials (tuner/results/engine_label.py), the first line."""
    if engine:
        console.print(f"engine: {engine}", markup=False, highlight=False, soft_wrap=True)
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(summary.counts.items()))
    console.print(f"study [bold]{summary.study_name}[/bold]: {counts or 'no trials'}")
    if summary.stopped_because:
        console.print(stopped_line(summary, saved), soft_wrap=True)
    if summary.pruned:
        console.print(pruned_line(summary), soft_wrap=True)
    thr_name, lat_name = space.objectives.throughput, space.objectives.latency
    capacity_study = is_capacity(thr_name)
    first = "{:.3g}" if capacity_study else "{:.1f}"  # req/s, or tok/s
    default = summary.default_trial
    if default is not None and default.values:
        if capacity_study:
            console.print(
                f"default (trial {default.number}): "
                f"{capacity_words(default.values[0], space.slos)}; {lat_name} "
                f"{default.values[1]:.1f} there",
                soft_wrap=True,
            )
        else:
            console.print(
                f"default (trial {default.number}): {default.values[0]:.1f} {thr_name}, "
                f"{default.values[1]:.1f} {lat_name}"
            )
    if not summary.pareto:
        console.print(_nothing_to_export(summary, studies_dir), soft_wrap=True)
    else:
        table = Table(title="Pareto front (feasible trials)")
        table.add_column("trial", justify="right")
        table.add_column(thr_name, justify="right")
        table.add_column(lat_name, justify="right")
        table.add_column("running cap", justify="right")
        table.add_column("KV tokens", justify="right")
        shown, repeats = _without_repeats(summary.pareto)
        for t in shown:
            capacity = t.user_attrs.get(record.CAPACITY) or {}
            more = repeats.get(t.number, 0)
            table.add_row(
                f"{t.number} (+{more} repeat{'s' if more > 1 else ''})" if more else str(t.number),
                first.format(t.values[0]),
                f"{t.values[1]:.1f}",
                str(capacity.get("max_running_requests", "?")),
                str(capacity.get("max_total_num_tokens", "?")),
            )
        console.print(table)
        if capacity_study:
            console.print(_best_capacity(summary, space), soft_wrap=True)
        for t in shown:
            flags = (
                "sglang defaults" if t.user_attrs.get(record.IS_DEFAULT) else format_flags(t.params)
            )
            margins = slo_margins(record.trial_constraints(t), space.slos)
            closest = f" ({margin_words(*margins[0], short=True)})" if margins else ""
            console.print(f"  trial {t.number}{closest}: {flags}", soft_wrap=True)
        for line in close_calls(summary, space, first):
            console.print(line, soft_wrap=True)
    if summary.pareto:
        prefix = _export_prefix(summary, studies_dir)
        pick = GOALS[goal].pick if (goal := summary.goal) in GOALS else "knee"
        console.print(f"export one with: {prefix} --pick {pick}", soft_wrap=True)
    console.print(f"study directory: {summary.study_dir}")
    console.print(f"storage: {summary.storage_description}")


def close_calls(
    summary: StudySummary, space: SearchSpace, number_format: str = "{:.1f}"
) -> list[str]:
    """Lines on the front's trials that meet an SLO by less than a rerun's noise (`SLO_NOISE`):
    measured again they may break it. Names the trial with the most throughput that meets
    every SLO by more, when it has less throughput than they do."""
    lines, top = [], 0.0
    for t in _without_repeats(summary.pareto)[0]:
        said = close_call(slo_margins(record.trial_constraints(t), space.slos))
        if said is not None:
            top = max(top, float(t.values[0]))
            lines.append(f"trial {t.number} {said}")
    steady = summary.steady
    if not lines:
        return []
    if steady is None or not steady.values:
        lines.append(f"no trial meets every SLO by {SLO_NOISE:.0%} or more of its limit")
    elif (value := float(steady.values[0])) < top:
        lines.append(
            f"the most {space.objectives.throughput} with every SLO met by {SLO_NOISE:.0%} or "
            f"more: trial {steady.number}, {number_format.format(value)} ({value / top - 1:+.1%})"
        )
    return lines


def _without_repeats(front: list[FrozenTrial]) -> tuple[list[FrozenTrial], Counter[int]]:
    """The front without the repeats of a trial on it (identical flags, or flags that cannot
    change the run: tuner/trial/same_run.py), and how many each such trial has."""
    numbers = {t.number for t in front}
    repeats: Counter[int] = Counter()
    shown = []
    for t in front:
        original = t.user_attrs.get(record.DUPLICATE_OF)
        if original in numbers:
            repeats[original] += 1
        else:
            shown.append(t)
    return shown, repeats


def _best_capacity(summary: StudySummary, space: SearchSpace) -> str:
    """The capacity answer in words: the highest sustained rate, against sglang's defaults."""
    best = max(summary.pareto, key=lambda t: (t.values[0], -t.values[1]))
    line = f"best: trial {best.number} {capacity_words(best.values[0], space.slos)}"
    default = summary.default_trial
    if default is not None and default.values and default.values[0] > 0:
        line += f", {best.values[0] / default.values[0]:.2f}x sglang's defaults"
    return line


def stopped_line(summary: StudySummary, saved: StudyCost | None) -> str:
    """Why the study ended before --trials, what that saved, and how to go on."""
    left = max(summary.budget - summary.launched, 0)
    hours = ""
    if saved is not None:
        how = "at this study's measured times" if saved.measured_launches else "modelled"
        hours = f", ~{saved.gpu_hours:.2f} {saved.hours_unit} ({how})"
    return (
        f"done after {summary.launched} of {summary.budget} trials: {summary.stopped_because}. "
        f"Saved {left} launches{hours}. To run them anyway, the same command with --min-gain 0 "
        "(or a smaller --min-gain) resumes the study."
    )


def pruned_line(summary: StudySummary) -> str:
    """What the stage pruner's early cuts saved (tuner/trial/pruning.py)."""
    minutes = summary.pruned_saved_s / 60.0
    trials = "trial" if summary.pruned == 1 else "trials"
    return (
        f"the stage pruner stopped {summary.pruned} {trials} before their last stage (they could "
        f"not meet an SLO or reach the front): ~{minutes:.0f} min of benchmark saved"
    )


def _nothing_to_export(summary: StudySummary, studies_dir: Path) -> str:
    """What `tuner export --pick knee` would say now: with SLOs nothing met, the trial that comes
    closest and an export command with limits it meets (tuner/results/pick.py)."""
    from tuner.results.pick import NoCandidate, Pick, pick_trial
    from tuner.results.storage import open_storage
    from tuner.results.study_records import load_records

    storage = open_storage(summary.storage, summary.study_name, studies_dir)
    meta, trials = load_records(storage, summary.study_name)
    try:
        pick_trial(trials, meta, Pick.KNEE)
    except NoCandidate as exc:
        if summary.interrupted:
            # The study did not end: resuming it (said next) is the advice, not more trials.
            return exc.problem
        return exc.command(_export_prefix(summary, studies_dir))
    return "no feasible completed trial yet"


def _export_prefix(summary: StudySummary, studies_dir: Path) -> str:
    """`tuner export` with the options that find this study (a URL's password hidden)."""
    from tuner.results.pick import export_prefix

    shown = summary.storage_description if summary.storage else None
    return export_prefix(summary.study_name, shown, studies_dir)
