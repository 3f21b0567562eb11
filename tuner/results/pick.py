"""Which trial to recommend: the candidates within every constraint and SLO, and a pick rule."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from tuner.errors import UserError
from tuner.results import record
from tuner.results.goals import GOALS, MAXIMIZE, Slo
from tuner.results.pareto import Point, knee_point, pareto_front
from tuner.results.study_records import (
    Category,
    StudyMeta,
    TrialRecord,
    counts_by_category,
    is_candidate,
    with_slos,
)


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
    """Apply a pick rule to the candidates; NoCandidate when there is none."""
    pool = candidates(trials, meta, slos)
    if not pool:
        raise NoCandidate(trials, meta, pick)
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


def default_pick(meta: StudyMeta) -> Pick:
    """The pick of the study's `--goal` (tuner/results/goals.py), `knee` without one."""
    goal = GOALS.get(meta.goal or "")
    return Pick(goal.pick) if goal is not None else Pick.KNEE


def choose_trial(
    trials: Sequence[TrialRecord],
    meta: StudyMeta,
    *,
    trial_number: int | None = None,
    pick: Pick | None = None,
    slos: Sequence[Slo] = (),
) -> tuple[TrialRecord, list[str]]:
    """The trial to export and the warnings to show. `--trial` wins; the study's goal's pick is
    the default (`knee` without a goal). `slos`, when given, replace the study's SLOs
    (`tuner export --slo`)."""
    _check_slo_metrics(trials, slos)
    if slos:
        meta, trials = with_slos(meta, trials, slos)
    if trial_number is None:
        return pick_trial(trials, meta, pick or default_pick(meta)), []
    if pick is not None:
        raise UserError("give either --trial N or --pick RULE, not both")
    by_number = {t.number: t for t in trials}
    chosen = by_number.get(trial_number)
    if chosen is None:
        numbers = sorted(by_number)
        span = f"trials 0..{numbers[-1]}" if numbers else "no trials"
        raise UserError(f"study {meta.name!r} has no trial {trial_number} ({span})")
    if chosen.outcome in _NEVER_SERVED or not chosen.server_args:
        raise UserError(
            f"trial {trial_number} never ran a server ({chosen.why()}): nothing measured to "
            "export; choose a trial that served the benchmark, or --pick knee"
        )
    warnings = []
    if not is_candidate(chosen, meta):
        warnings.append(f"trial {trial_number} is not a recommended configuration: {chosen.why()}")
    unmet = [str(s) for s in slos if not s.satisfied_by(chosen.metrics)]
    if unmet:
        warnings.append(f"trial {trial_number} does not meet --slo {', '.join(unmet)}")
    return chosen, warnings


# Trials whose server never came up: their flags were never shown to work.
_NEVER_SERVED = (record.OUTCOME_INVALID, record.OUTCOME_SKIPPED, record.OUTCOME_LAUNCH_FAILED)


def _check_slo_metrics(trials: Sequence[TrialRecord], slos: Sequence[Slo]) -> None:
    # A misspelt metric would silently filter out every trial; name it instead.
    known = sorted({k for t in trials for k in t.metrics})
    for slo in slos:
        if slo.metric not in known:
            raise UserError(
                f"--slo {slo}: no trial measured {slo.metric!r}; metrics recorded: "
                + (", ".join(known) or "none")
            )


class NoCandidate(UserError):
    """No trial to recommend. `relaxed` are SLOs that the closest trial meets (empty when no
    trial served the benchmark); `command(prefix)` is the error with a command that works."""

    def __init__(self, trials: Sequence[TrialRecord], meta: StudyMeta, pick: Pick) -> None:
        counts = ", ".join(f"{n} {c.value}" for c, n in counts_by_category(trials).items() if n)
        limits = ", ".join(str(s) for s in meta.slos)
        within = f" within {limits}" if limits else ""
        self.problem = (
            f"no trial of study {meta.name!r} served the whole benchmark{within} "
            f"({counts or 'no trials'})"
        )
        self.pick = pick
        self.closest, self.relaxed = _relaxed_slos(trials, meta)
        super().__init__(self.command(f"tuner export --study {shlex.quote(meta.name)}"))

    def command(self, prefix: str) -> str:
        """The message, with `prefix` (tuner export and the options that find the study)."""
        if self.closest is None:
            return f"{self.problem}; run more trials (tuner optimize with a larger --trials)"
        slos = " ".join(
            f"--slo {shlex.quote(f'{s.metric}{s.op}{s.limit:g}')}" for s in self.relaxed
        )
        return (
            f"{self.problem}; trial {self.closest} comes closest, within {_join(self.relaxed)}: "
            f"{prefix} --pick {self.pick.value} {slos} (--slo replaces the study's SLOs), "
            "or run more trials"
        )


def export_prefix(study_name: str, storage: str | None, studies_dir: Path) -> str:
    """`tuner export` with the options that find this study, for commands a message prints."""
    where = ["--study", study_name]
    if storage:
        where += ["--storage", storage]
    elif studies_dir != Path("studies"):
        where += ["--studies-dir", str(studies_dir)]
    return shlex.join(["tuner", "export", *where])


def _relaxed_slos(
    trials: Sequence[TrialRecord], meta: StudyMeta
) -> tuple[int | None, tuple[Slo, ...]]:
    # The trial that served the benchmark and broke only SLOs, by the least relative excess,
    # and the limits it meets: each SLO widened to the trial's value, rounded outwards.
    best: tuple[float, int, tuple[Slo, ...]] | None = None
    for t in trials:
        if t.category is not Category.SLO_VIOLATED or t.objective_values(meta) is None:
            continue
        if any(v > 0 for k, v in t.constraints.items() if not k.startswith("slo:")):
            continue
        relaxed, excess = [], 0.0
        for slo in meta.slos:
            value = t.metric(slo.metric)
            if value is None:
                break
            excess = max(excess, slo.violation(value))
            relaxed.append(_widened(slo, value))
        else:
            if best is None or (excess, t.number) < best[:2]:
                best = (excess, t.number, tuple(relaxed))
    return (best[1], best[2]) if best else (None, ())


def _widened(slo: Slo, value: float) -> Slo:
    upper = slo.op in ("<=", "<")
    if slo.satisfied_by({slo.metric: value}):
        return Slo(slo.metric, "<=" if upper else ">=", slo.limit)
    # Round outwards to 3 significant digits so the printed limit still holds the value.
    digits = 10 ** (math.floor(math.log10(abs(value))) - 2) if value else 1.0
    limit = (math.ceil if upper else math.floor)(value / digits) * digits
    return Slo(slo.metric, "<=" if upper else ">=", float(f"{limit:.6g}"))


def _join(slos: Sequence[Slo]) -> str:
    return ", ".join(str(s) for s in slos)
