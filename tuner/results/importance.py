"""Which flags matter: PED-ANOVA importance of the tuned parameters, per objective metric.

Only trials that served the whole benchmark are used, with the objective read from their
metrics. Each objective is evaluated in its own single-objective in-memory study, which keeps
the direction right for each metric (PED-ANOVA looks at the best quantile) and leaves the
stored study untouched.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import optuna
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
from optuna.study import StudyDirection
from optuna.trial import TrialState

from tuner.results import record
from tuner.results.goals import as_float
from tuner.results.study_records import StudyMeta

# Below this many measured trials the top quantile is one or two trials: noise, not importance.
MIN_TRIALS = 5


def objective_importances(
    study: optuna.Study, meta: StudyMeta, served: Collection[int]
) -> Importances:
    """Importance per objective metric over the trials numbered in `served`."""
    by_metric: dict[str, dict[str, float]] = {}
    notes: dict[str, str] = {}
    frozen = [t for t in study.get_trials(deepcopy=False) if t.number in served]
    for objective in meta.objectives:
        rows = []
        for t in frozen:
            value = as_float((t.user_attrs.get(record.METRICS) or {}).get(objective.metric))
            if value is None and t.state == TrialState.COMPLETE and t.values:
                value = t.values[meta.objectives.index(objective)]
            if value is not None:
                rows.append((t, value))
        tuned = {k for t, _ in rows for k in t.params}
        if len(rows) < MIN_TRIALS or not tuned:
            notes[objective.metric] = (
                f"not enough data: {len(rows)} measured trials, {len(tuned)} tuned flags "
                f"(needs {MIN_TRIALS} and 1)"
            )
            continue
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "study created" line per call
        try:
            scratch = optuna.create_study(direction=StudyDirection[objective.direction.upper()])
        finally:
            optuna.logging.set_verbosity(verbosity)
        scratch.add_trials(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=v)
            for t, v in rows
        )
        try:
            with warnings.catch_warnings():
                # PED-ANOVA warns when a regime holds few trials; the note below says so.
                warnings.simplefilter("ignore")
                by_metric[objective.metric] = dict(
                    get_param_importances(scratch, evaluator=PedAnovaImportanceEvaluator())
                )
        except (ValueError, RuntimeError) as exc:
            notes[objective.metric] = f"importance not computed: {exc}"
    return Importances(by_metric=by_metric, notes=notes)


@dataclass(frozen=True)
class Importances:
    """Parameter importance per objective metric; a note where it could not be computed."""

    by_metric: Mapping[str, Mapping[str, float]]
    notes: Mapping[str, str]
