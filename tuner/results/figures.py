"""The report's plotly figures, built from trial records (no storage access, no HTML).

Each function returns one `go.Figure`; tuner/results/report.py puts them on the page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tuner.results.goals import MAXIMIZE, Slo
from tuner.results.importance import Importances
from tuner.results.study_records import Category, StudyMeta, TrialRecord, metric_label

# One look per category, shared by every figure so a colour means the same thing everywhere.
STYLE: dict[Category, tuple[str, str, str]] = {
    # category: (legend name, colour, marker symbol)
    Category.FEASIBLE: ("feasible", "#1f77b4", "circle"),
    Category.SLO_VIOLATED: ("violates an SLO", "#ff7f0e", "triangle-up"),
    Category.PRUNED: ("pruned early (partial metrics)", "#8c8c8c", "circle-open"),
    Category.CRASHED: ("crashed", "#d62728", "x"),
    Category.NOT_LAUNCHED: ("not launched (rule / predicted failure)", "#9467bd", "x-thin-open"),
    Category.ERROR: ("tuner error", "#444444", "asterisk-open"),
}
FRONT_COLOUR = "#2ca02c"


def hover_text(trial: TrialRecord, meta: StudyMeta) -> str:
    lines = [f"<b>trial {trial.number}</b>" + (" (sglang defaults)" if trial.is_default else "")]
    lines.append(html.escape(trial.why()))
    shown = [meta.throughput.metric, "total_throughput", meta.latency.metric]
    shown += [s.metric for s in meta.slos]
    for key in dict.fromkeys(shown):  # ordered, no duplicates
        value = trial.metric(key)
        if value is not None:
            lines.append(f"{html.escape(metric_label(key))}: {value:,.1f}")
    for key, label in (
        ("max_running_requests", "max running requests"),
        ("max_total_num_tokens", "KV tokens"),
    ):
        if key in trial.capacity:
            lines.append(f"{label}: {html.escape(str(trial.capacity[key]))}")
    if trial.params:
        lines.append("flags:")
        lines += [f"  {html.escape(k)} = {html.escape(_fmt(v))}" for k, v in trial.params.items()]
    elif trial.is_default:
        lines.append("flags: sglang's defaults")
    return "<br>".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# Drawn as measured points: trials that ran a server and measured both objectives.
DRAWN = (Category.FEASIBLE, Category.SLO_VIOLATED, Category.PRUNED)


def pareto_figure(
    meta: StudyMeta, trials: Sequence[TrialRecord], front: Sequence[int]
) -> go.Figure:
    """The latency objective against the throughput objective, the axes the front is computed
    on. Trials without a measurement (crashed, never launched, tuner errors) are counted in a
    note, never drawn as points: they have no throughput or latency to place them by."""
    fig = go.Figure()
    front_set = set(front)
    tput, lat = meta.throughput.metric, meta.latency.metric
    measured = [t for t in trials if t.category in DRAWN and t.objective_values(meta) is not None]

    def xs(group: Sequence[TrialRecord]) -> list[float | None]:
        return [t.metric(tput) for t in group]

    def ys(group: Sequence[TrialRecord]) -> list[float | None]:
        return [t.metric(lat) for t in group]

    for category, (name, colour, symbol) in STYLE.items():
        group = [t for t in measured if t.category is category and t.number not in front_set]
        if not group:
            continue
        fig.add_trace(
            go.Scatter(
                x=xs(group),
                y=ys(group),
                mode="markers",
                name=f"{name} ({len(group)})",
                marker={"color": colour, "symbol": symbol, "size": 10, "line": {"width": 1.5}},
                hovertext=[hover_text(t, meta) for t in group],
                hoverinfo="text",
            )
        )

    on_front = sorted(
        (t for t in measured if t.number in front_set), key=lambda t: t.metric(tput) or 0.0
    )
    if on_front:
        fig.add_trace(
            go.Scatter(
                x=xs(on_front),
                y=ys(on_front),
                mode="lines+markers",
                name=f"Pareto-optimal within the SLOs ({len(on_front)})",
                line={"color": FRONT_COLOUR, "width": 2, "shape": "linear"},
                marker={"color": FRONT_COLOUR, "symbol": "star", "size": 15},
                hovertext=[hover_text(t, meta) for t in on_front],
                hoverinfo="text",
            )
        )

    for default in (t for t in measured if t.is_default):
        fig.add_trace(
            go.Scatter(
                x=xs([default]),
                y=ys([default]),
                mode="markers+text",
                name=f"sglang defaults (trial {default.number})",
                text=["defaults"],
                textposition="top center",
                marker={
                    "color": "rgba(0,0,0,0)",
                    "size": 22,
                    "line": {"color": "black", "width": 2.5},
                },
                hovertext=[hover_text(default, meta)],
                hoverinfo="text",
            )
        )

    drawn = {t.number for t in measured}
    unmeasured = [t for t in trials if t.number not in drawn and t.category is not Category.RUNNING]
    if unmeasured:
        fig.add_annotation(
            text=(
                f"not drawn: {len(unmeasured)} trials without a measurement "
                "(crashed, not launched, tuner errors; listed below the plots)"
            ),
            xref="paper",
            yref="paper",
            x=0.0,
            y=-0.14,
            showarrow=False,
            xanchor="left",
        )
    x_label, lat_label = metric_label(tput), metric_label(lat)
    lat_better = "higher" if meta.latency.direction == MAXIMIZE else "lower"
    tput_better = "more" if meta.throughput.direction == MAXIMIZE else "less"
    fig.update_layout(
        title=f"Pareto front: {lat_label} vs {x_label} ({lat_better} latency is better)",
        xaxis_title=f"{x_label} ({tput_better} is better)",
        yaxis_title=lat_label,
        hovermode="closest",
        template="plotly_white",
        height=620,
        legend={"orientation": "v", "x": 1.02, "y": 1.0},
        margin={"r": 330, "b": 110},
    )
    return fig


def history_figure(
    meta: StudyMeta, trials: Sequence[TrialRecord], hypervolume: Sequence[float]
) -> go.Figure:
    """Both objectives per trial with the best feasible so far, and the hypervolume."""
    ordered = sorted(trials, key=lambda t: t.number)
    objectives = (meta.throughput, meta.latency)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            metric_label(objectives[0].metric),
            metric_label(objectives[1].metric),
            "hypervolume of the feasible front (share of the reference box)",
        ),
    )
    for row, objective in enumerate(objectives, start=1):
        shown_legend = row == 1
        for category in (Category.FEASIBLE, Category.SLO_VIOLATED, Category.PRUNED):
            name, colour, symbol = STYLE[category]
            group = [t for t in ordered if t.category is category]
            points = [(t.number, t.metric(objective.metric), t) for t in group]
            points = [p for p in points if p[1] is not None]
            if not points:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in points],
                    y=[p[1] for p in points],
                    mode="markers",
                    name=name,
                    legendgroup=category.value,
                    showlegend=shown_legend,
                    marker={"color": colour, "symbol": symbol, "size": 8},
                    hovertext=[hover_text(p[2], meta) for p in points],
                    hoverinfo="text",
                ),
                row=row,
                col=1,
            )
        best_x, best_y = _best_so_far(ordered, objective.metric, objective.direction)
        if best_x:
            fig.add_trace(
                go.Scatter(
                    x=best_x,
                    y=best_y,
                    mode="lines",
                    name="best feasible so far",
                    legendgroup="best",
                    showlegend=shown_legend,
                    line={"color": FRONT_COLOUR, "shape": "hv"},
                    hoverinfo="skip",
                ),
                row=row,
                col=1,
            )
    fig.add_trace(
        go.Scatter(
            x=[t.number for t in ordered],
            y=list(hypervolume),
            mode="lines+markers",
            name="hypervolume",
            line={"color": "#17becf", "shape": "hv"},
            marker={"size": 5},
        ),
        row=3,
        col=1,
    )
    fig.update_xaxes(title_text="trial number", row=3, col=1)
    fig.update_layout(
        title="Optimization history", template="plotly_white", height=760, hovermode="closest"
    )
    return fig


def _best_so_far(
    ordered: Sequence[TrialRecord], metric: str, direction: str
) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    best: float | None = None
    for t in ordered:
        value = t.metric(metric) if t.category is Category.FEASIBLE else None
        if value is not None and (
            best is None or (value > best if direction == MAXIMIZE else value < best)
        ):
            best = value
        if best is not None:
            xs.append(t.number)
            ys.append(best)
    return xs, ys


def importance_figure(meta: StudyMeta, importances: Importances) -> go.Figure:
    metrics = [meta.throughput.metric, meta.latency.metric]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[f"importance for {metric_label(m)}" for m in metrics],
        horizontal_spacing=0.25,
    )
    for col, metric in enumerate(metrics, start=1):
        values = importances.by_metric.get(metric) or {}
        ordered = sorted(values.items(), key=lambda kv: kv[1])
        if ordered:
            fig.add_trace(
                go.Bar(
                    x=[v for _, v in ordered],
                    y=[k for k, _ in ordered],
                    orientation="h",
                    marker={"color": "#1f77b4" if col == 1 else "#ff7f0e"},
                    name=metric_label(metric),
                    hovertemplate="%{y}: %{x:.3f}<extra></extra>",
                    showlegend=False,
                ),
                row=1,
                col=col,
            )
        note = importances.notes.get(metric)
        if note:
            fig.add_annotation(
                text=html.escape(note),
                xref=f"x{col if col > 1 else ''} domain",
                yref=f"y{col if col > 1 else ''} domain",
                x=0.5,
                y=0.5,
                showarrow=False,
            )
    fig.update_layout(
        title="Parameter importance (PED-ANOVA over the trials that served the benchmark)",
        template="plotly_white",
        height=420,
    )
    return fig


def parallel_figure(meta: StudyMeta, trials: Sequence[TrialRecord]) -> go.Figure:
    """Each tuned flag as an axis, lines coloured by the throughput objective."""
    served = [t for t in trials if t.served_benchmark and t.objective_values(meta) is not None]
    names = list(dict.fromkeys(k for t in served for k in t.params))
    choices: dict[str, tuple[Any, ...]] = {}
    for t in trials:
        for name, options in t.choices.items():
            choices.setdefault(name, options)
    dimensions = [
        _dimension(name, [t.params.get(name) for t in served], choices.get(name)) for name in names
    ]
    for objective in (meta.throughput, meta.latency):
        values = [t.metric(objective.metric) for t in served]
        dimensions.append({"label": metric_label(objective.metric), "values": values})
    colour = [t.metric(meta.throughput.metric) for t in served]
    fig = go.Figure(
        go.Parcoords(
            dimensions=dimensions,
            # Flag names are long and the axes close: tilted labels with room above them
            # never run into each other.
            labelangle=-60,
            labelside="top",
            labelfont={"size": 11},
            tickfont={"size": 10},
            line={
                "color": colour,
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": metric_label(meta.throughput.metric)}},
            },
        )
    )
    fig.update_layout(
        title={
            "text": f"Flags vs {metric_label(meta.throughput.metric)} ({len(served)} trials "
            "that served the benchmark; 'unset' = sglang's default)",
            "y": 0.985,
            "yanchor": "top",  # above the tilted labels
        },
        template="plotly_white",
        height=640,
        margin={"l": 90, "r": 110, "t": 230, "b": 40},
    )
    return fig


def _dimension(
    name: str, values: Sequence[Any], choices: Sequence[Any] | None = None
) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    numeric = present and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in present
    )
    if choices or not numeric:
        # A choice (numbers too, e.g. chunked_prefill_size): one tick per choice, in the
        # space's order, "unset" for absent params; values seen outside the choices get theirs.
        labels = [_fmt(c) for c in choices or () if c is not None]
        labels += [label for label in dict.fromkeys(map(_fmt, present)) if label not in labels]
        if len(present) < len(values) or (choices and None in choices):
            labels.append("unset")
        index = {label: i for i, label in enumerate(labels)}
        return {
            "label": name,
            "values": [index["unset" if v is None else _fmt(v)] for v in values],
            "tickvals": list(range(len(labels))),
            "ticktext": labels,
            "range": [-0.2, max(len(labels) - 1, 0) + 0.2],
        }
    numbers = [float(v) for v in present]
    lo, hi = min(numbers), max(numbers)
    if len(present) == len(values):
        return {"label": name, "values": numbers}
    # Conditional numeric flag: put "unset" just below the range, with its own tick.
    gap = (hi - lo) * 0.2 or 1.0
    unset_at = lo - gap
    ticks = [lo + (hi - lo) * i / 4 for i in range(5)] if hi > lo else [lo]
    return {
        "label": name,
        "values": [unset_at if v is None else float(v) for v in values],
        "range": [unset_at, hi],
        "tickvals": [unset_at, *ticks],
        "ticktext": ["unset", *(_tick(t) for t in ticks)],
    }


def _tick(value: float) -> str:
    # 9216, not 9.22e+03: a tick is read as a flag value.
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def rate_figure(meta: StudyMeta, trials: Sequence[TrialRecord]) -> go.Figure:
    """A capacity study's rate steps: offered req/s against the latency of the study's first
    latency SLO (p99 TTFT for --goal capacity), one line per trial, met steps filled and broken
    ones crossed, the limit as a dashed line. A step stopped early shows what had completed."""
    slo = next((s for s in meta.slos if s.metric.endswith("_ms")), None)
    metric = slo.metric if slo is not None else "p99_ttft_ms"
    fig = go.Figure()
    for t in sorted(trials, key=lambda t: t.number):
        points = [
            (float(s["rate"]), float(value), bool(s.get("met")), s)
            for s in t.rate_steps
            if isinstance(value := (s.get("metrics") or {}).get(metric), int | float)
        ]
        if not points:
            continue
        points.sort(key=lambda p: p[0])
        sustained = t.metric(meta.throughput.metric)
        name = f"trial {t.number}" + (" (defaults)" if t.is_default else "")
        if sustained:
            name += f": {sustained:.3g} req/s"
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in points],
                y=[p[1] for p in points],
                mode="lines+markers",
                name=name,
                marker={
                    "symbol": ["circle" if p[2] else "x" for p in points],
                    "size": 9,
                },
                hovertext=[_step_hover(t.number, p[3], metric) for p in points],
                hoverinfo="text",
            )
        )
    if slo is not None:
        fig.add_hline(
            y=slo.limit,
            line_dash="dash",
            line_color="#d62728",
            annotation_text=_slo_label(slo),
            annotation_position="top left",
        )
    fig.update_layout(
        title="Request rate against latency: the capacity search of each trial",
        xaxis_title="offered request rate (req/s)",
        yaxis_title=metric_label(metric),
        yaxis_type="log",
        height=520,
        legend={"title": "circle: every SLO met, x: broken"},
    )
    return fig


def _step_hover(number: int, step: dict[str, Any], metric: str) -> str:
    metrics = step.get("metrics") or {}
    lines = [f"<b>trial {number}</b>: {float(step['rate']):.3g} req/s"]
    broke = html.escape(str(step.get("broke")))
    lines.append("every SLO met" if step.get("met") else f"broke {broke}")
    if step.get("stopped_early"):
        lines.append(f"stopped after {step.get('completed')} of {step.get('requests')} requests")
    for key, value in metrics.items():
        if isinstance(value, int | float):
            lines.append(f"{html.escape(metric_label(key))}: {value:,.1f}")
    return "<br>".join(lines)


def _slo_label(slo: Slo) -> str:
    return f"SLO {slo.metric} {slo.op} {slo.limit:g}"
