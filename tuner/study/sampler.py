"""The Optuna sampler a study uses: TPE set up for conditional params, NSGA-II, random or grid."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna

from tuner.errors import UserError
from tuner.space.model import SearchSpace

SAMPLERS = ("tpe", "nsga2", "random", "grid", "gp")


def make_sampler(name: str, space: SearchSpace, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        # multivariate is off by default for multi-objective TPE in Optuna 5.0; group=True lets
        # it model conditional parameters (HiCache ratio only when HiCache is on, ...).
        return optuna.samplers.TPESampler(
            multivariate=True, group=True, seed=seed, n_startup_trials=8
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=12)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        # Needs PyTorch (not a dependency). The default trial carries params
        # (tuner/study/baseline.py), so its intersection search space is not empty.
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UserError("--sampler gp needs PyTorch: pip install torch") from None
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=8)
    if name == "grid":
        return AskTellGridSampler(grid_search_space(space), seed=seed)
    raise UserError(f"--sampler {name!r} is not one of {', '.join(SAMPLERS)}")


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler for an ask/tell loop. Optuna's own calls `study.stop()` once the
    last grid point is told, and that raises outside `study.optimize` (which the tuner never
    calls: tuner/study/loop.py); here the loop asks `points_left` instead and stops itself."""

    def __init__(self, search_space: dict[str, list[Any]], seed: int | None = None) -> None:
        super().__init__(search_space, seed=seed)
        self.grid = {name: list(values) for name, values in sorted(search_space.items())}
        self.size = math.prod(len(values) for values in self.grid.values())

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        """Nothing: GridSampler's only work here is the `study.stop()` that ask/tell refuses."""

    def points_left(self, study: optuna.Study) -> int:
        """Grid points no trial of this grid has taken yet (finished, running or failed)."""
        taken = {
            t.system_attrs["grid_id"]
            for t in study.get_trials(deepcopy=False)
            if "grid_id" in t.system_attrs and t.system_attrs.get("search_space") == self.grid
        }
        return self.size - len(taken)


def grid_points_left(study: optuna.Study) -> int | None:
    """How many grid points the study has not taken yet; None when it samples no grid."""
    sampler = study.sampler
    return sampler.points_left(study) if isinstance(sampler, AskTellGridSampler) else None


def grid_search_space(space: SearchSpace, points: int = 4) -> dict[str, list[Any]]:
    """The grid a sweep tool would enumerate: every choice, `points` values of each range."""
    import numpy as np

    grid: dict[str, list[Any]] = {}
    for name, param in space.params.items():
        if param.kind == "categorical":
            grid[name] = list(param.choices or ())
        elif param.kind in ("int", "float"):
            low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
            values = (
                np.geomspace(low, high, points) if param.log else np.linspace(low, high, points)
            )
            if param.kind == "int":
                grid[name] = sorted({round(v) for v in values})
            else:
                step = float(param.step) if param.step else None
                grid[name] = [
                    round(round(v / step) * step, 6) if step else float(v) for v in values
                ]
    return grid
