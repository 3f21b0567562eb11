"""One offline HTML page per study: Pareto front, history, importance, flags, verdict, provenance.

The page embeds plotly.js once and loads nothing from the network, so it can be mailed, opened
from a file share, or read on an air-gapped GPU box.

Example:
    >>> write_report(None, "qwen-mtp")  # doctest: +SKIP
    PosixPath('studies/qwen-mtp/report.html')
"""

from __future__ import annotations

import datetime as dt
import html
import os
import shutil
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from optuna.storages import BaseStorage

from tuner import __version__
from tuner.results.engine_label import engine_label
from tuner.results.figures import (
    history_figure,
    importance_figure,
    parallel_figure,
    pareto_figure,
    rate_figure,
)
from tuner.results.goals import MAXIMIZE, capacity_words
from tuner.results.importance import Importances, objective_importances
from tuner.results.pareto import Point, hypervolume_history, knee_point, pareto_front
from tuner.results.provenance import Provenance, read_provenance
from tuner.results.server_config import launch_command
from tuner.results.storage import DEFAULT_STUDIES_DIR, open_storage, safe_file_stem
from tuner.results.study_records import (
    Category,
    StudyMeta,
    TrialRecord,
    counts_by_category,
    is_candidate,
    load_study,
    metric_label,
    read_study_meta,
    record_from_trial,
)
from tuner.results.verdict import Verdict, verdict

REPORT_FILE = "report.html"
PNG_FILE = "pareto.png"
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


@dataclass(frozen=True)
class Analysis:
    """Everything the page shows that is computed rather than read."""

    front: list[int]  # Pareto-optimal candidate trials, by the study's objectives
    knee: int | None
    hypervolume: list[float]  # after each trial in number order, share of the reference box
    verdict: Verdict


def analyse(meta: StudyMeta, trials: Sequence[TrialRecord]) -> Analysis:
    """Pareto front, knee, hypervolume history and verdict of the trials (pure)."""
    ordered = sorted(trials, key=lambda t: t.number)
    points: list[Point | None] = []
    for t in ordered:
        values = t.objective_values(meta) if is_candidate(t, meta) else None
        points.append(Point(t.number, values) if values is not None else None)
    feasible = [p for p in points if p is not None]
    front = pareto_front(feasible, meta.directions)
    knee = knee_point(front, meta.directions)
    history = [0.0] * len(ordered)
    if feasible:
        reference, box = _reference_box(feasible, meta.directions)
        history = [v / box for v in hypervolume_history(points, meta.directions, reference)]
    return Analysis(
        front=[p.key for p in front],
        knee=knee.key if knee else None,
        hypervolume=history,
        verdict=verdict(meta, trials),
    )


def _reference_box(
    points: Sequence[Point], directions: Sequence[str]
) -> tuple[tuple[float, float], float]:
    # Reference: 0 for a maximized metric (no throughput), 10 % past the worst feasible value
    # for a minimized one. The share is taken of the box between the reference and the ideal
    # point, so the curve reads 0..1 whatever the units.
    ref: list[float] = []
    ideal: list[float] = []
    for j, direction in enumerate(directions):
        column = [p.values[j] for p in points]
        if direction == MAXIMIZE:
            ref.append(min(0.0, min(column) * 1.1))
            ideal.append(max(column))
        else:
            worst = max(column)
            ref.append(worst * 1.1 if worst > 0 else worst + 1.0)
            ideal.append(min(column))
    box = abs(ideal[0] - ref[0]) * abs(ideal[1] - ref[1]) or 1.0
    return (ref[0], ref[1]), box


def write_report(
    storage: str | BaseStorage | None,
    study_name: str,
    out_path: Path | None = None,
    png: bool = False,
    *,
    studies_dir: Path = DEFAULT_STUDIES_DIR,
) -> Path:
    """Write studies/<study>/report.html (or `out_path`) and, with `png`, pareto.png beside it.

    `storage` is a `--storage` value (None for studies/<study>.db) or an open storage.
    Returns the path of the HTML file.
    """
    opened = (
        storage
        if isinstance(storage, BaseStorage)
        else open_storage(storage, study_name, studies_dir)
    )
    study = load_study(opened, study_name)
    meta = read_study_meta(study)
    trials = [record_from_trial(t, meta) for t in study.get_trials(deepcopy=False)]
    analysis = analyse(meta, trials)
    served = {t.number for t in trials if t.served_benchmark}
    importances = objective_importances(study, meta, served)

    pareto = pareto_figure(meta, trials, analysis.front)
    figures = [
        ("pareto", pareto),
        ("history", history_figure(meta, trials, analysis.hypervolume)),
        ("importance", importance_figure(meta, importances)),
        ("parallel", parallel_figure(meta, trials)),
    ]
    if any(t.rate_steps for t in trials):
        figures.append(("capacity", rate_figure(meta, trials)))
    path = out_path or studies_dir / safe_file_stem(study_name) / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render_page(
        meta, trials, analysis, importances, figures, read_provenance(study.user_attrs)
    )
    path.write_text(page, encoding="utf-8")
    if png:
        write_png(pareto, path.parent / PNG_FILE)
    return path


def write_png(figure: go.Figure, path: Path) -> Path:
    """The figure as a PNG through kaleido, which drives a local Chromium."""
    from tuner.errors import UserError

    # Two tries: on a loaded host kaleido's page can run its call before its own script has
    # loaded ("ReferenceError: kaleido_scopes is not defined"); a missing kaleido fails at once.
    error: Exception | None = None
    for _ in range(2):
        try:
            with _browser_for_kaleido():
                figure.write_image(str(path), width=1400, height=760)
            return path
        except ImportError as exc:
            error = exc
            break
        except Exception as exc:  # no browser, or the race above on the first try
            error = exc
    raise UserError(
        f"cannot write {path}: {error} (PNG export needs kaleido (pip install "
        "'sglang-tuner[png]') and Chromium (Debian: apt install chromium; or set BROWSER_PATH))"
    ) from None


@contextmanager
def _browser_for_kaleido():
    # kaleido looks for Chrome; Debian ships the same engine as `chromium`. BROWSER_PATH is the
    # override kaleido honours; set it only for this call and only when the user has not.
    if os.environ.get("BROWSER_PATH"):
        yield
        return
    found = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    if found is None:
        yield
        return
    os.environ["BROWSER_PATH"] = found
    try:
        yield
    finally:
        os.environ.pop("BROWSER_PATH", None)


# -- the page ------------------------------------------------------------------------------


def render_page(
    meta: StudyMeta,
    trials: Sequence[TrialRecord],
    analysis: Analysis,
    importances: Importances,
    figures: Sequence[tuple[str, go.Figure]],
    provenance: Provenance | None = None,
) -> str:
    blocks = {}
    for i, (name, figure) in enumerate(figures):
        # plotly.js goes into the first figure only; the others reuse it from the same page.
        blocks[name] = figure.to_html(
            full_html=False,
            include_plotlyjs=(i == 0),
            config=_PLOTLY_CONFIG,
            div_id=f"fig-{name}",
        )
    e = html.escape
    counts = counts_by_category(trials)
    counts_text = ", ".join(f"{n} {c.value.replace('_', ' ')}" for c, n in counts.items() if n)
    objectives = " and ".join(f"{o.direction} {metric_label(o.metric)}" for o in meta.objectives)
    if not meta.objectives_given:
        objectives += " (assumed: the study does not record its objectives)"
    slos = ", ".join(str(s) for s in meta.slos) or "none"
    sim_note = ""
    if meta.engine == "sim":
        sim_note = (
            '<p class="note" id="sim-note">Run on the simulated server: the numbers come from '
            "its performance model, not from a GPU. Re-measure the chosen configuration on the "
            "real hardware before relying on it.</p>"
        )
    engine = engine_label(meta.engine, meta.sglang_version, meta.engine_python)
    latency, throughput = metric_label(meta.latency.metric), metric_label(meta.throughput.metric)
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tuning report: {e(meta.name)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>Tuning report: study <code>{e(meta.name)}</code></h1>
<p class="meta">Engine: {e(engine)} · objectives: {e(objectives)}
· SLOs: {e(slos)} · {len(trials)} trials: {e(counts_text or "none")}</p>
<p class="verdict verdict-{e(analysis.verdict.kind)}" id="verdict">{e(analysis.verdict.text)}</p>
{sim_note}
<h2>Pareto front</h2>
<p>Each trial that served the benchmark is placed by its measured {e(throughput)} and
{e(latency)}, the study's objectives; pruned trials by the metrics of the stages they ran.
Trials without a measurement (crashes, rejected or skipped configurations, tuner errors) are not
drawn: they are listed at the end of the page. Hover a point for its flags and metrics. The
front is computed over feasible trials only.</p>
{blocks.get("pareto", "")}
<h2>Pareto-optimal trials</h2>
{_front_table(meta, trials, analysis)}
{_capacity_section(meta, trials, blocks.get("capacity", ""))}
<h2>Optimization history</h2>
{blocks.get("history", "")}
<h2>Parameter importance</h2>
{blocks.get("importance", "")}
<h2>Flags vs throughput</h2>
{blocks.get("parallel", "")}
<h2>Trials that did not serve the benchmark</h2>
{_failure_table(trials)}
<h2>Where these numbers come from</h2>
{_provenance_table(provenance)}
<footer>Generated by sglang-tuner {e(__version__)} on {generated}. Export a configuration with
<code>tuner export --study {e(meta.name)} --pick knee</code> (or <code>--trial N</code>).</footer>
</body>
</html>
"""


def _front_table(meta: StudyMeta, trials: Sequence[TrialRecord], analysis: Analysis) -> str:
    e = html.escape
    by_number = {t.number: t for t in trials}
    rows = [by_number[n] for n in reversed(analysis.front)]  # highest throughput first
    if not rows:
        return "<p>No trial served the whole benchmark within the constraints.</p>"
    metrics = list(
        dict.fromkeys(
            [meta.throughput.metric, "total_throughput", meta.latency.metric]
            + [s.metric for s in meta.slos]
        )
    )
    head = "".join(f"<th>{e(metric_label(m))}</th>" for m in metrics)
    body = []
    for t in rows:
        tags = []
        if t.number == analysis.knee:
            tags.append("knee")
        if t.number == analysis.verdict.best:
            tags.append("verdict")
        if t.is_default:
            tags.append("default")
        tag_html = "".join(f' <span class="tag">{e(tag)}</span>' for tag in tags)
        flags = "<br>".join(f"{e(k)} = {e(_fmt(v))}" for k, v in t.params.items()) or (
            "sglang defaults" if t.is_default else ""
        )
        cells = "".join(f"<td>{_metric_cell(t.metric(m))}</td>" for m in metrics)
        cap = t.capacity
        body.append(
            f"<tr><td>{t.number}{tag_html}</td><td>{e(t.guided_by or '')}</td><td>{flags}</td>"
            f"{cells}"
            f"<td>{e(str(cap.get('max_running_requests', '')))}</td>"
            f"<td>{e(str(cap.get('max_total_num_tokens', '')))}</td>"
            f"<td><code>{e(launch_command(t.server_args))}</code></td></tr>"
        )
    return (
        '<table id="pareto-table"><thead><tr><th>trial</th><th>proposed by</th>'
        "<th>tuned flags</th>"
        f"{head}<th>max running requests</th><th>KV tokens</th><th>launch command</th>"
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _capacity_section(meta: StudyMeta, trials: Sequence[TrialRecord], figure: str) -> str:
    """A capacity study's rate steps (tuner/trial/capacity.py), in words and as a figure."""
    if not figure:
        return ""
    e = html.escape
    lines = []
    for t in sorted(trials, key=lambda t: t.number):
        rate = t.metric(meta.throughput.metric)
        if not t.rate_steps or rate is None:
            continue
        tag = " (sglang defaults)" if t.is_default else ""
        lines.append(
            f"<li>trial {t.number}{e(tag)}: {e(capacity_words(rate, meta.slos))} "
            f"({len(t.rate_steps)} rate steps)</li>"
        )
    return (
        "<h2>Request rate against latency</h2>\n<p>Each trial searched the highest request rate "
        "at which every SLO held, in one server: rate steps, each stopped as soon as an SLO was "
        "clearly lost. Its sustained rate is its highest met step.</p>\n"
        f'<ul id="capacity-list">{"".join(lines)}</ul>\n{figure}'
    )


def _failure_table(trials: Sequence[TrialRecord]) -> str:
    e = html.escape
    failed = [
        t for t in trials if t.category in (Category.CRASHED, Category.NOT_LAUNCHED, Category.ERROR)
    ]
    if not failed:
        return "<p>None: every trial launched and served at least part of the benchmark.</p>"
    rows = "".join(
        f"<tr><td>{t.number}</td><td>{e(t.category.value.replace('_', ' '))}</td>"
        f"<td>{e(t.why())}</td>"
        f"<td>{'<br>'.join(f'{e(k)} = {e(_fmt(v))}' for k, v in t.params.items())}</td></tr>"
        for t in sorted(failed, key=lambda t: t.number)
    )
    return (
        '<table id="failure-table"><thead><tr><th>trial</th><th>outcome</th><th>why</th>'
        f"<th>tuned flags</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _provenance_table(provenance: Provenance | None) -> str:
    if provenance is None:
        return (
            '<p id="provenance">Not recorded: the study was made before the tuner recorded '
            "releases, GPU and model with each study.</p>"
        )
    e = html.escape
    rows = "".join(
        f"<tr><th>{e(label)}</th><td>{e(value)}</td></tr>" for label, value in provenance.rows()
    )
    return f'<table id="provenance"><tbody>{rows}</tbody></table>'


def _metric_cell(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 1400px; margin: 1.5rem auto; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta { color: #555; }
.verdict { font-size: 1.2rem; border-left: 5px solid; padding: .7rem 1rem; }
.verdict-improved { background: #eef7ee; border-color: #2ca02c; }
.verdict-no-baseline { background: #eaf2fb; border-color: #1f77b4; }
.verdict-no-gain { background: #f3f3f3; border-color: #7f7f7f; }
.verdict-nothing { background: #fdecea; border-color: #d62728; }
.note { background: #fff7e6; border-left: 5px solid #ff7f0e; padding: .6rem 1rem; }
table { border-collapse: collapse; font-size: .88rem; width: 100%; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .35rem .5rem; text-align: left;
         vertical-align: top; }
th { background: #f6f6f6; }
td code { font-size: .8rem; word-break: break-all; }
.tag { background: #2ca02c; color: white; border-radius: 3px; padding: 0 .3rem;
       font-size: .75rem; }
footer { margin: 2.5rem 0 1rem; color: #777; font-size: .85rem; }
"""
