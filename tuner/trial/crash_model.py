"""A learned crash model: skip configurations this study's launches say will crash.

`CrashModel` is a scikit-learn classifier trained on this study's launch outcomes. It skips a
configuration whose predicted crash probability exceeds a threshold that adapts to the model's
own errors: a crash it failed to predict lowers the threshold, and a deliberate probe of a
predicted crash that then launched fine raises it. The analytic memory check runs before it
(tuner/predict/memory.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LaunchObservation:
    """One launched trial: its flags, whether it crashed, and what was predicted before."""

    flags: Mapping[str, Any]
    crashed: bool
    p_crash: float | None = None  # prediction made before the launch, if any
    threshold: float | None = None
    probe: bool = False  # launched although predicted to crash, to test the model


@dataclass(frozen=True)
class CrashPrediction:
    p_crash: float
    threshold: float
    skip: bool
    probe: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CrashModel:
    """Random-forest classifier of launch crashes over this study's flags."""

    def __init__(
        self,
        base_threshold: float = 0.8,
        step: float = 0.05,
        min_launches: int = 8,
        probe_rate: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.base_threshold = base_threshold
        self.step = step
        self.min_launches = min_launches
        self.probe_rate = probe_rate
        self._rng = random.Random(seed)

    def threshold(self, history: Sequence[LaunchObservation]) -> float:
        """Lower after missed crashes, higher after probes that launched fine."""
        missed = sum(
            1
            for h in history
            if h.crashed
            and h.p_crash is not None
            and h.threshold is not None
            and h.p_crash < h.threshold
        )
        wrong_skips = sum(1 for h in history if h.probe and not h.crashed)
        value = self.base_threshold - self.step * missed + self.step * 2 * wrong_skips
        return min(0.97, max(0.5, value))

    def predict(
        self, flags: Mapping[str, Any], history: Sequence[LaunchObservation]
    ) -> CrashPrediction | None:
        """None until there is enough history with both outcomes to learn from."""
        crashes = sum(1 for h in history if h.crashed)
        if len(history) < self.min_launches or crashes == 0 or crashes == len(history):
            return None
        from sklearn.ensemble import RandomForestClassifier

        keys = sorted({k for h in history for k in h.flags} | set(flags))
        x = np.array([_encode(h.flags, keys) for h in history])
        y = np.array([1 if h.crashed else 0 for h in history])
        forest = RandomForestClassifier(n_estimators=60, min_samples_leaf=1, random_state=0)
        forest.fit(x, y)
        p = float(forest.predict_proba(np.array([_encode(flags, keys)]))[0][1])
        threshold = self.threshold(history)
        if p < threshold:
            return CrashPrediction(
                p, threshold, False, False, f"p(crash) {p:.2f} < {threshold:.2f}"
            )
        if self._rng.random() < self.probe_rate:
            return CrashPrediction(
                p, threshold, False, True, f"p(crash) {p:.2f} >= {threshold:.2f}, probing anyway"
            )
        return CrashPrediction(
            p,
            threshold,
            True,
            False,
            f"predicted to crash: p(crash) {p:.2f} >= threshold {threshold:.2f} "
            f"(learned from {len(history)} launches, {crashes} crashed)",
        )


def _encode(flags: Mapping[str, Any], keys: Sequence[str]) -> list[float]:
    """Numbers as themselves (log for wide ranges), booleans as 0/1, strings hashed stably."""
    row: list[float] = []
    for key in keys:
        value = flags.get(key)
        if value is None:
            row.append(-1.0)
        elif isinstance(value, bool):
            row.append(1.0 if value else 0.0)
        elif isinstance(value, int | float):
            row.append(math.log1p(float(value)) if float(value) > 64 else float(value))
        else:
            row.append(float(sum(ord(c) for c in str(value)) % 997) / 997.0 + 2.0)
    return row
