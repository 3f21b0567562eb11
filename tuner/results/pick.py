"""Which trial to recommend: the candidates within every constraint and SLO, and a pick rule."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from tuner.errors import UserError
from tuner.results.goals import MAXIMIZE, Slo
from tuner.results.pareto import Point, knee_point, pareto_front
from tuner.results.study_records import StudyMeta, TrialRecord, counts_by_category, is_candidate


class Pick(StrEnum):
    MAX_THROUGHPUT = "max-throughput"
    MIN_LATENCY = "min-latency"
    KNEE = "knee"


def candidates(
    trials: Sequence[TrialRecord], meta: StudyMeta, slos: Sequence[Slo] = ()
) -> list[TrialRecord]:
    """Trials that served the whole benchmark within every constraint and every extra SLO."""
    return [t for t in trials if is_candidate(t, meta, slos) and t.server_args]


def pick_trial(
    trials: Sequence[TrialRecord], meta: StudyMeta, pick: Pick, slos: Sequence[Slo] = ()
) -> TrialRecord:
    """Apply a pick rule to the candidates; UserError when there is none."""
    pool = candidates(trials, meta, slos)
    if not pool:
        raise UserError(_no_candidate_message(trials, meta, slos))
    sign = 1.0 if meta.throughput.direction == MAXIMIZE else -1.0
    lat_sign = 1.0 if meta.latency.direction == MAXIMIZE else -1.0

    def goodness(t: TrialRecord) -> tuple[float, float]:
        values = t.objective_values(meta)
        assert values is not None  # candidates are measured
        return sign * values[0], lat_sign * values[1]

    if pick is Pick.MAX_THROUGHPUT:
        return max(pool, key=lambda t: (*goodness(t), -t.number))
    if pick is Pick.MIN_LATENCY:
        return max(pool, key=lambda t: (goodness(t)[1], goodness(t)[0], -t.number))
    by_number = {t.number: t for t in pool}
    points = [Point(t.number, t.objective_values(meta)) for t in pool]  # type: ignore[arg-type]
    knee = knee_point(pareto_front(points, meta.directions), meta.directions)
    assert knee is not None  # a non-empty pool has a non-empty front
    return by_number[knee.key]


def choose_trial(
    trials: Sequence[TrialRecord],
    meta: StudyMeta,
    *,
    trial_number: int | None = None,
    pick: Pick | None = None,
    slos: Sequence[Slo] = (),
) -> tuple[TrialRecord, list[str]]:
    """The trial to export and the warnings to show. `--trial` wins; `knee` is the default."""
    _check_slo_metrics(trials, slos)
    if trial_number is None:
        return pick_trial(trials, meta, pick or Pick.KNEE, slos), []
    if pick is not None:
        raise UserError("give either --trial N or --pick RULE, not both")
    by_number = {t.number: t for t in trials}
    chosen = by_number.get(trial_number)
    if chosen is None:
        numbers = sorted(by_number)
        span = f"trials 0..{numbers[-1]}" if numbers else "no trials"
        raise UserError(f"study {meta.name!r} has no trial {trial_number} ({span})")
    if not chosen.server_args:
        raise UserError(
            f"trial {trial_number} recorded no server args ({chosen.why()}); nothing to export"
        )
    warnings = []
    if not is_candidate(chosen, meta):
        warnings.append(f"trial {trial_number} is not a recommended configuration: {chosen.why()}")
    unmet = [str(s) for s in slos if not s.satisfied_by(chosen.metrics)]
    if unmet:
        warnings.append(f"trial {trial_number} does not meet --slo {', '.join(unmet)}")
    return chosen, warnings


def _check_slo_metrics(trials: Sequence[TrialRecord], slos: Sequence[Slo]) -> None:
    # A misspelt metric would silently filter out every trial; name it instead.
    known = sorted({k for t in trials for k in t.metrics})
    for slo in slos:
        if slo.metric not in known:
            raise UserError(
                f"--slo {slo}: no trial measured {slo.metric!r}; metrics recorded: "
                + (", ".join(known) or "none")
            )


def _no_candidate_message(trials: Sequence[TrialRecord], meta: StudyMeta, slos: Sequence[Slo]):
    counts = ", ".join(f"{n} {c.value}" for c, n in counts_by_category(trials).items() if n)
    limits = [str(s) for s in (*meta.slos, *slos)]
    within = f" within {', '.join(limits)}" if limits else ""
    return (
        f"no trial of study {meta.name!r} served the whole benchmark{within} "
        f"({counts or 'no trials'}); relax --slo or run more trials"
    )
