"""`tuner studies`: every study with its trial counts, best points within the SLOs and provenance.

It lists studies/ (or one storage) and judges feasibility by the same rule as the report; each
study says where its numbers came from (tuner/results/provenance.py).

Example:
    >>> print(format_listing(list_studies(None)))  # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from optuna.storages import BaseStorage

from tuner.errors import UserError
from tuner.results.goals import MAXIMIZE
from tuner.results.pareto import Point, pareto_front
from tuner.results.provenance import Provenance, read_provenance
from tuner.results.storage import (
    DEFAULT_STUDIES_DIR,
    describe_storage,
    open_existing_storage,
    storage_for_file,
    study_files,
)
from tuner.results.study_records import Category, is_candidate, load_records, metric_label

_STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


@dataclass(frozen=True)
class BestPoint:
    trial: int
    throughput: float
    latency: float
    rule: str | None = None  # the search rule that proposed it (tuner/study/policy.py)


@dataclass(frozen=True)
class StudyListing:
    name: str
    location: str  # file or URL (password hidden)
    trials: int
    by_state: dict[str, int]  # Optuna states
    feasible: int
    throughput_metric: str
    latency_metric: str
    best_throughput: BestPoint | None  # highest throughput within the constraints
    best_latency: BestPoint | None  # lowest latency within the constraints
    pareto_size: int
    error: str | None = None  # the study could not be read; the rest is empty
    provenance: Provenance | None = None  # None for a study made before it was recorded


def list_studies(
    storage: str | None, studies_dir: Path = DEFAULT_STUDIES_DIR
) -> list[StudyListing]:
    """Studies in `storage`, or in every *.db / *.journal file of `studies_dir` when None."""
    if storage is not None:
        return _listings_in(
            open_existing_storage(storage), describe_storage(storage, "", studies_dir)
        )
    listings: list[StudyListing] = []
    for path in study_files(studies_dir):
        try:
            opened = storage_for_file(path)
        except UserError as exc:  # one broken file must not hide the others
            listings.append(_unreadable(path.stem, str(path), str(exc)))
            continue
        listings.extend(_listings_in(opened, str(path)))
    return listings


def _listings_in(storage: BaseStorage, location: str) -> list[StudyListing]:
    try:
        names = sorted(s.study_name for s in storage.get_all_studies())
    except Exception as exc:  # e.g. a .db file that is not an Optuna database
        return [_unreadable("?", location, str(exc).splitlines()[0] if str(exc) else repr(exc))]
    return [summarize_study(storage, name, location) for name in names]


def summarize_study(storage: BaseStorage, name: str, location: str) -> StudyListing:
    meta, trials = load_records(storage, name)
    by_state = Counter(t.state for t in trials)
    pool = [t for t in trials if is_candidate(t, meta)]
    points = [Point(t.number, t.objective_values(meta)) for t in pool]  # type: ignore[arg-type]
    sign = 1.0 if meta.throughput.direction == MAXIMIZE else -1.0
    lat_sign = 1.0 if meta.latency.direction == MAXIMIZE else -1.0
    best_tput = max(
        points, key=lambda p: (sign * p.values[0], lat_sign * p.values[1]), default=None
    )
    best_lat = max(points, key=lambda p: (lat_sign * p.values[1], sign * p.values[0]), default=None)
    rules = {t.number: t.guided_by for t in pool}
    return StudyListing(
        name=name,
        location=location,
        trials=len(trials),
        by_state=dict(by_state),
        feasible=sum(1 for t in trials if t.category is Category.FEASIBLE),
        throughput_metric=meta.throughput.metric,
        latency_metric=meta.latency.metric,
        best_throughput=_best(best_tput, rules),
        best_latency=_best(best_lat, rules),
        pareto_size=len(pareto_front(points, meta.directions)),
        provenance=read_provenance(
            storage.get_study_user_attrs(storage.get_study_id_from_name(name))
        ),
    )


def _best(point: Point | None, rules: Mapping[int, str | None]) -> BestPoint | None:
    if point is None:
        return None
    return BestPoint(point.key, point.values[0], point.values[1], rules.get(point.key))


def _unreadable(name: str, location: str, error: str) -> StudyListing:
    return StudyListing(
        name=name,
        location=location,
        trials=0,
        by_state={},
        feasible=0,
        throughput_metric="",
        latency_metric="",
        best_throughput=None,
        best_latency=None,
        pareto_size=0,
        error=error or "unreadable",
    )


def format_listing(listings: Sequence[StudyListing]) -> str:
    """Plain text, one block per study, for the terminal."""
    if not listings:
        return "no studies found"
    blocks = []
    for s in listings:
        if s.error:
            blocks.append(f"{s.name}  ({s.location})\n  cannot read: {s.error}")
            continue
        states = ", ".join(f"{s.by_state[k]} {k.lower()}" for k in _STATES if s.by_state.get(k))
        lines = [
            f"{s.name}  ({s.location})",
            f"  trials: {s.trials} ({states or 'none'}); {s.feasible} feasible, "
            f"{s.pareto_size} on the Pareto front",
        ]
        if s.best_throughput is None or s.best_latency is None:
            lines.append("  best: no trial served the whole benchmark within the constraints")
        else:
            b, q = s.best_throughput, s.best_latency
            tput, lat = s.throughput_metric, s.latency_metric
            lines.append(
                f"  highest {_name(tput)}: trial {b.trial} ({_value(b.throughput, tput)} at "
                f"{_value(b.latency, lat)}){_proposed(b)}"
            )
            lines.append(
                f"  lowest {_name(lat)}: trial {q.trial} ({_value(q.latency, lat)} at "
                f"{_value(q.throughput, tput)}){_proposed(q)}"
            )
        if s.provenance is not None:
            lines += [f"  {line}" for line in s.provenance.lines()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _proposed(point: BestPoint) -> str:
    return f", proposed by {point.rule}" if point.rule else ""


def _name(metric: str) -> str:
    return metric_label(metric).replace(" (ms)", "")


def _value(value: float, metric: str) -> str:
    unit = "ms " if metric.endswith("_ms") else ""
    return f"{value:,.1f} {unit}{_name(metric)}"
