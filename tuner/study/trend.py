"""The local search's trend: a ridge regression of every finished trial's rank on its params.

It ranks the local search's moves (tuner/study/local_search.py) towards what ranked well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner.space.model import SearchSpace, same_value
from tuner.study.moves import unit
from tuner.study.standing import informative, outcome


class Trend:
    """A ridge regression of the finished trials' ranks (crashed and skipped lowest, then by
    `standing`) on their params: numbers scaled to 0-1 (log ranges in log), one column per
    categorical choice. Fitted jointly, so a choice the sampler happened to draw with bad
    values of other params is not blamed for them, as a per-param average would."""

    def __init__(self, space: SearchSpace, columns: list[tuple[str, Any]], weights: Any) -> None:
        self.space = space
        self.columns = columns
        self.weights = weights
        self.size = 0

    @classmethod
    def fit(
        cls,
        space: SearchSpace,
        trials: Sequence[FrozenTrial],
        ridge: float = 1.0,
    ) -> Trend:
        import numpy as np

        finished = [
            t
            for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and informative(t) and t.params
        ]
        columns: list[tuple[str, Any]] = []
        for name, spec in space.params.items():
            if spec.kind == "categorical":
                columns += [(name, c) for c in (spec.choices or ())]
            elif spec.kind in ("int", "float"):
                columns.append((name, None))
        trend = cls(space, columns, np.zeros(len(columns) + 1))
        trend.size = len(finished)
        if len(finished) < 2:
            return trend
        order = sorted(range(len(finished)), key=lambda i: outcome(finished[i]))
        y = np.empty(len(finished))
        y[order] = np.arange(len(finished)) / (len(finished) - 1)
        x = np.array([trend.row(t.params) for t in finished])
        mean = y.mean()
        a = x.T @ x + ridge * np.eye(x.shape[1])
        a[-1, -1] -= ridge  # the intercept is not shrunk
        trend.weights = np.linalg.solve(a, x.T @ (y - mean))
        trend.weights[-1] += mean
        return trend

    def row(self, params: Mapping[str, Any]) -> list[float]:
        row = []
        for name, choice in self.columns:
            spec = self.space.params[name]
            if name not in params:
                row.append(0.0)
            elif spec.kind == "categorical":
                row.append(1.0 if same_value(params[name], choice) else 0.0)
            else:
                row.append(unit(spec, float(params[name])))
        return [*row, 1.0]

    def predict(self, params: Mapping[str, Any]) -> float:
        return float(sum(w * v for w, v in zip(self.weights, self.row(params), strict=True)))
