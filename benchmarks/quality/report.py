"""The outputs: the markdown table, the JSON of every figure, the plot (plotly + kaleido)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.quality.methods import METHODS, ROOT, Options
from benchmarks.quality.scoring import (
    ABLATIONS,
    REACH,
    Figures,
    curves,
    gpu_curves,
    savings,
    spread,
)
from benchmarks.quality.served import ServedCheck
from benchmarks.quality.study import StudyRun
from benchmarks.quality.truth import OptimumReport
from tuner.space import SearchSpace


def markdown(
    table: dict[str, dict[int, list[Figures]]],
    optimum: OptimumReport,
    space: SearchSpace,
    notes: list[str],
    checks: list[ServedCheck],
    opts: Options,
    wall_s: float,
) -> str:
    labels = {m.name: m.label for m in METHODS}
    seeds = opts.seeds
    lines = [
        "# Tuner quality on the simulator",
        "",
        f"Space: `{space.name}`; {seeds} seeds per method; budgets "
        f"{', '.join(map(str, opts.budgets))} trials; figures are "
        + ("the single seed's." if seeds == 1 else "median [min–max] over seeds."),
        "Reproduce: `python benchmarks/tuner_quality.py"
        + (
            f" --budgets {','.join(map(str, opts.budgets))}"
            if opts.budgets != Options().budgets
            else ""
        )
        + (f" --seeds {seeds}" if seeds != 5 else "")
        + (f" --dense-points {opts.dense_points}" if opts.dense_points != 6 else "")
        + ("" if opts.refine else " --no-refine")
        + (f" --served {opts.served}" if opts.served != 7 else "")
        + (f" --space {_shown(opts.space_path)}" if opts.space_path else "")
        + (f" --methods {','.join(opts.methods)}" if opts.methods != Options().methods else "")
        + (" --no-plot" if not opts.plot else "")
        + "`.",
        "",
    ]
    lines += [
        "",
        f"Oracle: best SLO-feasible {space.objectives.throughput} "
        f"**{optimum.best_throughput:.1f}** tok/s; Pareto front of {len(optimum.front)} "
        f"points ({space.objectives.throughput} vs {space.objectives.latency}); "
        f"{optimum.configurations} launchable configurations judged "
        f"({optimum.searched_configurations} by the dense grid and its refinement, the rest "
        "launched by the studies), "
        f"{optimum.feasible} SLO-feasible; "
        + (
            "**a study launched a better configuration than the search found**."
            if optimum.studies_beat_search
            else "no study launched a better configuration than the search found."
        ),
        f"Best configuration: `{json.dumps(optimum.best_params)}`",
        "",
        "| method | trials | best / oracle | noise-free within SLOs | hypervolume / oracle "
        "| trials to 95% | GPU h to 95% | GPU hours | crashed launches | pruned | skipped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by_budget in table.items():
        for budget, figs in by_budget.items():
            reached = sum(f.trials_to_reach is not None for f in figs)
            lines.append(
                f"| {labels[name]} | {budget} | {spread([f.best_fraction for f in figs], '.3f')} "
                f"| {spread([f.feasible_fraction for f in figs], '.3f')} "
                f"| {spread([f.hv_fraction for f in figs], '.3f')} "
                f"| {spread([f.trials_to_reach for f in figs], '.0f')} ({reached}/{len(figs)}) "
                f"| {spread([f.gpu_hours_to_reach for f in figs], '.2f')} "
                f"| {spread([f.gpu_hours for f in figs], '.2f')} "
                f"| {spread([f.crashed for f in figs], '.0f')} "
                f"| {spread([f.pruned for f in figs], '.0f')} "
                f"| {spread([f.skipped for f in figs], '.0f')} |"
            )
    lines += ["", *savings_markdown(table), "", *definitions(opts), ""]
    if checks:
        lines += served_markdown(checks, opts.served_time_scale)
    lines += ["", f"Wall time of this run: {wall_s / 60:.1f} min."]
    return "\n".join(lines) + "\n"


def savings_markdown(table: dict[str, dict[int, list[Figures]]]) -> list[str]:
    lines = [
        "Modelled GPU time the default saves against each ablation (paired by seed):",
        "",
        "| saved by | trials | GPU hours saved | % of the ablation's GPU time | "
        "crashed launches avoided |",
        "|---|---:|---:|---:|---:|",
    ]
    budgets = sorted(next(iter(table.values()))) if table else []
    for ablation, label in ABLATIONS:
        for budget in budgets:
            saved = savings(table, ablation, budget)
            if saved is None:
                continue
            lines.append(
                f"| {label} | {budget} | {spread(saved.hours, '.2f')} "
                f"| {spread(saved.percent, '.1f')} | {spread(saved.crashes, '.0f')} |"
            )
    return lines if len(lines) > 5 else []


def headline(table: dict[str, dict[int, list[Figures]]], optimum: OptimumReport) -> list[str]:
    """The README's figures: trials to 95% by method, and what pruning and feasibility save."""
    out = []
    for name, by_budget in table.items():
        horizon = max(by_budget)
        figs = by_budget[horizon]
        reached = [f.trials_to_reach for f in figs]
        n = sum(r is not None for r in reached)
        best = statistics.median(f.best_fraction for f in figs)
        when = (
            f"median {spread(reached, '.0f')} trials ({n}/{len(figs)} seeds within {horizon})"
            if n
            else f"not within {horizon} trials in any seed"
        )
        out.append(f"- {name}: reaches 95% {when}; best after {horizon}: {best:.3f}")
    for ablation, label in ABLATIONS:
        for budget in sorted(table.get("default", {})):
            saved = savings(table, ablation, budget)
            if saved is not None:
                out.append(
                    f"- {label} at {budget} trials saves {spread(saved.hours, '.2f')} GPU h "
                    f"({spread(saved.percent, '.1f')}%), {spread(saved.crashes, '.0f')} crashed "
                    "launches"
                )
    return out


def definitions(opts: Options) -> list[str]:
    return [
        "How to read it:",
        "- *best / oracle*: the best noise-free throughput among the trials the tuner recorded as "
        "complete and SLO-feasible, over the oracle's best SLO-feasible throughput. *noise-free "
        "within SLOs*: the same among those that also meet the SLOs without noise (a trial "
        "measured just within a limit it exceeds noise-free counts in the first only).",
        "- *hypervolume / oracle*: area dominated by those trials' noise-free (throughput, "
        "latency) points, up to the worst feasible latency, over the oracle front's.",
        "- *trials to 95%*: trials until the best reaches 95% of the oracle's; (k/n): seeds that "
        "reached it within the budget; a median over seeds that did not all reach it can read "
        "'not reached'. *GPU h to 95%*: the modelled GPU time spent until then.",
        "- *GPU hours*: modelled (benchmarks/oracle_measurer.py): a launch about 2 minutes "
        "(weights at 1 GB/s + CUDA graph capture), a crashed launch what it ran before dying, "
        "a benchmark its modelled duration, a pruned trial its stages run, a skipped one nothing.",
        "- *trials* counts every finished trial, as `tuner optimize --trials` does: skipped, "
        "crashed, pruned and repeated configurations included.",
        "- The three TPE rows share each seed's sampler draws. To TPE a skipped configuration and "
        "a crashed launch look alike (PRUNED, launch constraint violated), and a trial the pruner "
        "stops is one TPE ranks low anyway, so they mostly find the same configurations and "
        "differ in what they spend.",
        "- *grid*: nested loops in the space file's order (first parameter outermost), 4 values "
        "per numeric range; the budget stops it early in the sweep, as it would any grid tool.",
        f"- Measurement noise: log-normal per stage, sigma {0.02 * opts.noise:.3f} on "
        f"throughput and TPOT, {0.05 * opts.noise:.3f} on TTFT.",
    ]


def served_markdown(checks: list[ServedCheck], time_scale: float) -> list[str]:
    lines = [
        f"Measurement check (real `python -m tuner.sim` processes at time scale {time_scale:g}, "
        "benchmarked over HTTP by `LaunchAndMeasure`), served / oracle:",
        "",
        "| configuration | output tok/s | median TPOT | median TTFT | cache hit rate | "
        "max running requests | served output tok/s | served p99 TTFT (ms) | "
        "SLOs met (served / oracle) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in checks:
        if c.failure != (None, None):
            lines.append(
                f"| {c.label} | launch failed: served `{c.failure[0]}`, oracle "
                f"`{c.failure[1]}` | | | | | | | |"
            )
            continue
        r = c.ratios
        lines.append(
            f"| {c.label} | {r['output_throughput']:.3f} | {r['median_tpot_ms']:.3f} "
            f"| {r['median_ttft_ms']:.3f} | {r['cache_hit_rate']:.3f} "
            f"| {r['max_running_requests']:.3f} | {c.served['output_throughput']:.1f} "
            f"| {c.served['p99_ttft_ms']:.0f} | {_yes(c.slos_met[0])} / {_yes(c.slos_met[1])} |"
        )
    ratios = [c.ratios for c in checks if c.ratios]
    if ratios:
        lines += ["", "Median ratio over the served configurations: " + ", ".join(
            f"{k} {statistics.median(r[k] for r in ratios):.3f}" for k in ratios[0]
        ) + "."]  # fmt: skip
    lines += [
        "",
        "The oracle is a headless run of the server's own scheduler driven like the "
        "benchmark (tuner/sim/oracle.py), and the served simulator measures in modelled time, so "
        "the two agree up to the order of requests due at the same modelled moment; the served "
        "p99 TTFT is what the seed's own SLO (`p99_ttft_ms <= 3000`) is judged on.",
    ]
    return lines


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def plot(runs: list[StudyRun], optimum: OptimumReport, budget: int, path: Path, title: str) -> Path:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from tuner.results.report import write_png

    labels = {m.name: m.label for m in METHODS}
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("vs trials (median over seeds)", "vs modelled GPU hours (median)"),
    )
    trials = list(range(1, budget + 1))
    gpu_x, by_gpu = gpu_curves(runs, optimum, budget)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f", "#9467bd"]
    by_trials = curves(runs, optimum, budget)
    colors = {name: palette[i % len(palette)] for i, name in enumerate(by_trials)}
    # The default last, thick, on top: its ablations often follow the very same steps.
    order = sorted(by_trials, key=lambda name: name == "default")
    for name in order:
        c = by_trials[name]
        color = colors[name]
        width = 5 if name == "default" else 2
        dash = "dash" if name.startswith("tpe-") else "solid"
        fig.add_trace(
            go.Scatter(
                x=trials,
                y=c["median"],
                name=labels[name],
                line_shape="hv",
                line={"color": color, "width": width, "dash": dash},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=gpu_x, y=by_gpu[name], name=labels[name], showlegend=False, line_shape="hv",
                line={"color": color, "width": width, "dash": dash},
            ),
            row=1,
            col=2,
        )  # fmt: skip
    for col in (1, 2):
        fig.add_hline(y=REACH, line_dash="dot", line_color="black", row=1, col=col)
    fig.update_yaxes(title_text="best feasible tok/s / oracle best", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    fig.update_xaxes(title_text="trials", row=1, col=1)
    fig.update_xaxes(title_text="modelled GPU hours", row=1, col=2)
    fig.update_layout(title=title, template="plotly_white", legend={"orientation": "h", "y": -0.2})
    return write_png(fig, path)


def to_json(
    table: dict[str, dict[int, list[Figures]]],
    optimum: OptimumReport,
    runs: list[StudyRun],
    checks: list[ServedCheck],
    notes: list[str],
    space: SearchSpace,
    opts: Options,
    wall_s: float,
) -> dict[str, Any]:
    budget = max(opts.budgets)
    return {
        "space": space.name,
        "slos": [str(s) for s in space.slos],
        "notes": notes,
        "options": {
            **asdict(opts),
            "out": _shown(opts.out),
            "space_path": _shown(opts.space_path),
            "oracle_store": None,  # a path of the machine that ran it
        },
        "oracle": {
            **{k: v for k, v in asdict(optimum).items() if k != "front"},
            "front": [list(p) for p in optimum.front],
        },
        "methods": {
            name: {
                "budgets": {str(b): [asdict(f) for f in figs] for b, figs in by_budget.items()},
                "curve": curves(runs, optimum, budget)[name],
            }
            for name, by_budget in table.items()
        },
        "served_check": [asdict(c) for c in checks],
        "headline": headline(table, optimum),
        "study_wall_s": {f"{r.method}/{r.seed}": round(r.wall_s, 2) for r in runs},
        "wall_s": wall_s,
    }


def _shown(path: Path | None) -> str | None:
    """A path as the output may show it: relative to the repository when inside it, else its
    name alone (the rest is the machine's)."""
    if path is None:
        return None
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return str(value)
