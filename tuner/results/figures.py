"""The report's plotly figures, built from trial records (no storage access, no HTML).

Each function returns one `go.Figure`; tuner/results/report.py puts them on the page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tuner.results.goals import MAXIMIZE
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
PLOT_X = "total_throughput"  # the Pareto plot's x axis, as the issue asks


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


def plot_x(trial: TrialRecord, meta: StudyMeta) -> float | None:
    # Total tok/s when measured; a study that records only its objective still gets a plot.
    value = trial.metric(PLOT_X)
    return value if value is not None else trial.metric(meta.throughput.metric)


def pareto_figure(
    meta: StudyMeta, trials: Sequence[TrialRecord], front: Sequence[int]
) -> go.Figure:
    """Latency objective against total tok/s; every outcome drawn distinctly."""
    fig = go.Figure()
    front_set = set(front)
    lat = meta.latency.metric
    measured = [t for t in trials if plot_x(t, meta) is not None and t.metric(lat) is not None]
    measured_numbers = {t.number for t in measured}
    unmeasured = [
        t for t in trials if t.number not in measured_numbers and t.category is not Category.RUNNING
    ]
    latencies = [value for t in measured if (value := t.metric(lat)) is not None]
    lat_lo = min(latencies) if latencies else 0.0
    lat_hi = max(latencies) if latencies else 1.0

    for category, (name, colour, symbol) in STYLE.items():
        group = [t for t in measured if t.category is category and t.number not in front_set]
        if not group:
            continue
        fig.add_trace(
            go.Scatter(
                x=[plot_x(t, meta) for t in group],
                y=[t.metric(lat) for t in group],
                mode="markers",
                name=f"{name} ({len(group)})",
                marker={"color": colour, "symbol": symbol, "size": 10, "line": {"width": 1.5}},
                hovertext=[hover_text(t, meta) for t in group],
                hoverinfo="text",
            )
        )

    on_front = sorted(
        (t for t in measured if t.number in front_set), key=lambda t: plot_x(t, meta) or 0.0
    )
    if on_front:
        fig.add_trace(
            go.Scatter(
                x=[plot_x(t, meta) for t in on_front],
                y=[t.metric(lat) for t in on_front],
                mode="lines+markers",
                name=f"Pareto-optimal within the SLOs ({len(on_front)})",
                line={"color": FRONT_COLOUR, "width": 2, "shape": "linear"},
                marker={"color": FRONT_COLOUR, "symbol": "star", "size": 15},
                hovertext=[hover_text(t, meta) for t in on_front],
                hoverinfo="text",
            )
        )

    ys: list[float] = []
    if unmeasured:
        # No measurement to place them by: a column at 0 tok/s, spread over the latency range
        # so each one can be hovered.
        span = (lat_hi - lat_lo) or max(abs(lat_hi), 1.0)
        ys = [lat_lo + span * (i + 0.5) / len(unmeasured) for i in range(len(unmeasured))]
        for category, (name, colour, symbol) in STYLE.items():
            idx = [i for i, t in enumerate(unmeasured) if t.category is category]
            if not idx:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[0.0] * len(idx),
                    y=[ys[i] for i in idx],
                    mode="markers",
                    name=f"{name}, no measurement: drawn at 0 tok/s ({len(idx)})",
                    marker={"color": colour, "symbol": symbol, "size": 11, "line": {"width": 2}},
                    hovertext=[hover_text(unmeasured[i], meta) for i in idx],
                    hoverinfo="text",
                )
            )

    defaults = [t for t in trials if t.is_default]
    unmeasured_numbers = [t.number for t in unmeasured]
    for default in defaults:
        if default.number in measured_numbers:
            x, y = plot_x(default, meta), default.metric(lat)
        elif default.number in unmeasured_numbers:
            x, y = 0.0, ys[unmeasured_numbers.index(default.number)]
        else:
            continue
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
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

    x_label = (
        metric_label(PLOT_X)
        if any(t.metric(PLOT_X) is not None for t in measured)
        else (metric_label(meta.throughput.metric))
    )
    lat_better = "higher" if meta.latency.direction == MAXIMIZE else "lower"
    fig.update_layout(
        title=f"Pareto front: {metric_label(lat)} vs {x_label} ({lat_better} latency is better)",
        xaxis_title=f"{x_label} (more is better)",
        yaxis_title=metric_label(lat),
        hovermode="closest",
        template="plotly_white",
        height=620,
        legend={"orientation": "v", "x": 1.02, "y": 1.0},
        margin={"r": 330},
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
    dimensions = [_dimension(name, [t.params.get(name) for t in served]) for name in names]
    for objective in (meta.throughput, meta.latency):
        values = [t.metric(objective.metric) for t in served]
        dimensions.append({"label": metric_label(objective.metric), "values": values})
    colour = [t.metric(meta.throughput.metric) for t in served]
    fig = go.Figure(
        go.Parcoords(
            dimensions=dimensions,
            line={
                "color": colour,
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": metric_label(meta.throughput.metric)}},
            },
        )
    )
    fig.update_layout(
        title=(
            f"Flags vs {metric_label(meta.throughput.metric)} ({len(served)} trials that served "
            "the benchmark; 'unset' = sglang's default)"
        ),
        template="plotly_white",
        height=520,
        margin={"l": 80, "r": 80},
    )
    return fig


def _dimension(name: str, values: Sequence[Any]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    numeric = present and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in present
    )
    if not numeric:
        # Categorical (and booleans): one tick per value seen, "unset" for absent params.
        labels = list(dict.fromkeys(str(v) for v in present))
        if len(present) < len(values):
            labels.append("unset")
        index = {label: i for i, label in enumerate(labels)}
        return {
            "label": name,
            "values": [index["unset" if v is None else str(v)] for v in values],
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
        "ticktext": ["unset", *(f"{t:.3g}" for t in ticks)],
    }
