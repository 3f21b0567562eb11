"""The estimate corrected by what the study measured: a Gaussian process on its residuals.

    model = ResidualModel(space, estimator, flags_of)   # flags_of: params -> sglang flags
    model.fit(trials)                                  # after every measured trial
    params = model.best(candidates, tried)            # the next configuration to measure

The estimate (tuner/predict/estimate.py) is a formula: it refits a few scales to the trials,
but what it leaves out stays out, whatever is measured (three changes that pay only together,
a structural TTFT term it lacks). This model learns the rest: for every completed trial, the
log of measured over estimated throughput and of each latency SLO metric (p99 TTFT, TPOT), as
a Gaussian process over the configuration (the local search's encoding: numbers scaled to 0-1,
one column per categorical choice; a Matérn kernel with one length per column, plus noise).
Its prior mean is 0: where nothing was measured nearby, the estimate stands as it is.
Without an estimate (a GPU or model the tuner cannot estimate) the same GP is fitted to the
measured values' logs themselves, centred on their mean: Bayesian optimization with SLO
constraints.

A configuration's prediction is then the estimate times exp(the residual's mean), with the
residual's spread as its uncertainty. The next pick maximizes the expected improvement of
throughput over the best trial within the SLOs, times the probability that every SLO holds
(before any trial holds them: that probability alone), so it goes where the corrected estimate
is good or unsure, and not where it is sure the SLO breaks.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from tuner.predict.estimate import Estimator
from tuner.results import record
from tuner.space.model import SearchSpace
from tuner.study.moves import key
from tuner.study.standing import within_slos
from tuner.study.trend import Trend

Params = dict[str, Any]


def estimate_flags(trial: FrozenTrial, fallback: Mapping[str, Any]) -> Mapping[str, Any]:
    """The flags a launched trial ran with, as the estimate reads them: the recorded flags
    (`fallback` where none were recorded). They drop a param left at a None choice (no draft),
    which the estimate's prediction of an untried configuration reads: the corrected estimate's
    expected gain then counts that choice's correction twice, an optimism the stop rule's
    expected gain carries on purpose."""
    recorded = trial.user_attrs.get(record.FLAGS)
    return recorded or fallback


class ResidualModel:
    def __init__(
        self,
        space: SearchSpace,
        estimator: Estimator | None,
        flags_of: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        self.space = space
        self.estimator = estimator  # None: a GP on the measured values themselves
        self._flags = flags_of
        self._encoder = Trend.fit(space, [])
        self._metrics = [s.metric for s in space.slos if s.op in ("<=", "<")]
        self._models: dict[str, Any] = {}  # "throughput" and each SLO metric -> fitted GP
        self._best: float | None = None  # the best measured throughput within the SLOs
        self._fitted_on: tuple[int, ...] | None = None  # the completed trials of the last fit

    def fit(self, trials: Sequence[FrozenTrial]) -> None:
        """Fit one GP per target to the completed trials' log residuals. The same completed
        trials as the last fit (the stop rule's outlook, then the pick) keep that fit: it is
        deterministic."""
        import numpy as np

        done = tuple(t.number for t in trials if record.learned_from(t))
        if done == self._fitted_on:
            return
        self._fitted_on = done
        rows: list[list[float]] = []
        targets: dict[str, list[float]] = {"throughput": [], **{m: [] for m in self._metrics}}
        best = None
        for t in trials:
            # Repeats, same-run ones too, are left out: fed to the GP as points of their own, the
            # default lost its best seeds in tpot-8b (docs/same-run.md).
            if not record.learned_from(t) or record.DUPLICATE_OF in t.user_attrs:
                continue
            metrics = t.user_attrs.get(record.METRICS) or {}
            measured = float(metrics.get("output_throughput") or 0.0)
            expected = self._measured_expected(t)
            if measured <= 0 or expected is None or expected[0] <= 0:
                continue
            values = [metrics.get(m) for m in self._metrics]
            pairs = zip(values, self._metrics, strict=True)
            if any(not v or not expected[1].get(m) for v, m in pairs):
                continue
            rows.append(self._encoder.row(t.params)[:-1])
            targets["throughput"].append(math.log(measured / expected[0]))
            for m, v in zip(self._metrics, values, strict=True):
                targets[m].append(math.log(float(v or 0.0) / expected[1][m]))
            if within_slos(t):
                best = max(best or 0.0, float(t.values[0]))
        self._best = best
        self._models = {}
        if len(rows) < 2:
            return
        x = np.array(rows)
        for name, y in targets.items():
            self._models[name] = _gp(x, np.array(y), centred=self.estimator is None)

    def _measured_expected(self, t: FrozenTrial) -> tuple[float, dict[str, float]] | None:
        return self._expected(estimate_flags(t, self._flags(t.params)))

    def _expected(self, flags: Mapping[str, Any]) -> tuple[float, dict[str, float]] | None:
        if self.estimator is None:  # no estimate: the residual is the measured value's log
            return 1.0, dict.fromkeys(self._metrics, 1.0)
        return self.estimator.expected(flags)

    @property
    def fitted(self) -> bool:
        return bool(self._models)

    def acquisition(self, params_list: Sequence[Params]) -> list[float]:
        """The pick's value of each configuration (higher first; -inf when it does not fit)."""
        import numpy as np

        expected = [self._expected(self._flags(p)) for p in params_list]
        keep = [i for i, e in enumerate(expected) if e is not None and e[0] > 0]
        out = [-math.inf] * len(params_list)
        if not keep:
            return out
        x = np.array([self._encoder.row(params_list[i])[:-1] for i in keep])
        predicted = {n: m.predict(x, return_std=True) for n, m in self._models.items()}
        limits = {s.metric: s.limit for s in self.space.slos if s.op in ("<=", "<")}
        for j, i in enumerate(keep):
            thr, values = expected[i]  # type: ignore[misc]
            feasible = 1.0
            for metric in self._metrics:
                mu, sd = (a[j] for a in predicted[metric])
                log_value = math.log(values[metric]) + mu
                feasible *= _cdf((math.log(limits[metric]) - log_value) / max(sd, 1e-6))
            mu, sd = (a[j] for a in predicted["throughput"])
            log_thr = math.log(thr) + mu
            if self._best is None:
                out[i] = feasible + 1e-6 * log_thr  # nothing within the SLOs: get there first
                continue
            z = (log_thr - math.log(self._best)) / max(sd, 1e-6)
            improvement = max(sd, 1e-6) * (z * _cdf(z) + _pdf(z))
            out[i] = improvement * feasible
        return out

    def best(
        self,
        candidates: Iterable[Params],
        tried: set[tuple[Any, ...]],
        known: Callable[[Params], bool] | None = None,
    ) -> tuple[Params, float] | None:
        """The untried candidate of highest `acquisition` and that value, or None. Once a
        trial meets the SLOs the value is the expected relative gain over it (log units).
        `known`: candidates whose run a trial already measured (tuner/trial/same_run.py), passed
        over; the best `_KNOWN_CHECKS` are asked."""
        pool = {key(p): p for p in candidates if key(p) not in tried}
        if not pool or not self.fitted:
            return None
        options = list(pool.values())
        scores = self.acquisition(options)
        order = sorted(range(len(options)), key=lambda k: scores[k], reverse=True)
        for i in order[:_KNOWN_CHECKS] if known is not None else order[:1]:
            if not math.isfinite(scores[i]):
                return None
            if known is None or not known(options[i]):
                return options[i], scores[i]
        return None


_KNOWN_CHECKS = 200


def _gp(x: Any, y: Any, centred: bool = False) -> Any:
    """A GP of the log residuals: prior mean 0 (the estimate stands where nothing was measured),
    or, `centred` (no estimate), the measured values' mean and spread."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    d = x.shape[1]
    amplitude = (1.0, (1e-2, 10.0)) if centred else (0.01, (1e-4, 1.0))
    kernel = ConstantKernel(*amplitude) * Matern(
        length_scale=[1.0] * d, length_scale_bounds=(0.1, 20.0), nu=2.5
    ) + WhiteKernel(1e-3, (1e-5, 0.05))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=centred, n_restarts_optimizer=0,
                                  random_state=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(x, y)
    return gp


def _cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
