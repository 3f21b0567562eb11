"""Adaptive speculative decoding as sglang 0.5.23 decides it (``--speculative-adaptive``).

Read from the 0.5.23 wheel (``srt/speculative/adaptive_spec_params.py``, in our own words):

- the configuration has batch-size tiers; the default (lines 28-53) is: from batch 1 the step
  counts 1 / 3 / 5 / 7, from 8: 0 / 1 / 3, from 32: 0 / 1, from 64: 0 (0 = no drafting);
  ``--speculative-adaptive-config FILE`` (JSON) replaces it: integer-string keys are tiers with
  ``candidate_steps``, other top-level keys are defaults for every tier;
- a decode batch is padded to the next captured CUDA-graph size, then routed to the largest tier
  at or below it (``_route``);
- each tier keeps an exponential moving average of accepted drafts per request (``ema_alpha``
  0.2, starting at its steps - 1); after ``warmup_batches`` (10) it reconsiders every
  ``update_interval`` (5) batches: down a candidate while the average is at or below the lower
  one's steps - 0.5 + ``down_hysteresis`` (-0.25; 0.5 for the zero candidate), else up while
  it is above the current steps - 0.5 + ``up_hysteresis`` (0); from 0 steps it probes the next
  candidate; ``ceiling_coeff`` > 0 caps a step-down target at ceil(average x coeff);
- server args (``arg_groups/speculative_hook.py`` lines 1365-1427): only EAGLE / EAGLE3 (NEXTN
  resolves to EAGLE) with topk 1, else a warning and static speculation; unset steps take the
  middle of all candidates (3 for the default), steps outside them are a ValueError; draft
  tokens = steps + 1.

    >>> policy = AdaptivePolicy(default_config(), initial_steps=3)
    >>> policy.steps_for(1, (1, 2, 4)), policy.steps_for(40, (1, 2, 4))
    (3, 1)
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TIERS: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "down_hysteresis": 0.0},
}


class AdaptiveConfigError(ValueError):
    """An adaptive configuration sglang would reject (its message)."""


@dataclass(frozen=True)
class Tier:
    """One batch-size tier's knobs."""

    min_batch: int
    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0.0


@dataclass(frozen=True)
class AdaptiveConfig:
    tiers: tuple[Tier, ...]

    @property
    def candidate_steps(self) -> list[int]:
        """Every tier's candidates (what sizes the buffers and the graphs)."""
        return sorted({s for t in self.tiers for s in t.candidate_steps})

    def tier_for(self, padded_batch: int) -> Tier:
        starts = [t.min_batch for t in self.tiers]
        return self.tiers[max(0, bisect.bisect_right(starts, padded_batch) - 1)]


def _tiers(raw: dict[str, Any], source: str) -> AdaptiveConfig:
    shared = {k: v for k, v in raw.items() if not str(k).isdigit()}
    tiers = []
    for key, entry in raw.items():
        if not str(key).isdigit():
            continue
        entry = {**shared, **(entry or {})}
        steps = entry.get("candidate_steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and s >= 0 for s in steps)
        ):
            raise AdaptiveConfigError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}"
            )
        tiers.append(
            Tier(
                min_batch=int(key),
                candidate_steps=tuple(sorted(set(steps))),
                ema_alpha=float(entry.get("ema_alpha", 0.2)),
                update_interval=int(entry.get("update_interval", 5)),
                warmup_batches=int(entry.get("warmup_batches", 10)),
                down_hysteresis=float(entry.get("down_hysteresis", -0.25)),
                up_hysteresis=float(entry.get("up_hysteresis", 0.0)),
                ceiling_coeff=float(entry.get("ceiling_coeff", 0)),
            )
        )
    if not tiers:
        raise AdaptiveConfigError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(raw)} ({source})'
        )
    return AdaptiveConfig(tuple(sorted(tiers, key=lambda t: t.min_batch)))


def default_config() -> AdaptiveConfig:
    return _tiers(DEFAULT_TIERS, "the default")


def load_config(path: str | None) -> AdaptiveConfig:
    """The default tiers, or those of a ``--speculative-adaptive-config`` JSON file."""
    if path is None:
        return default_config()
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AdaptiveConfigError(f"--speculative-adaptive-config {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise AdaptiveConfigError(f"--speculative-adaptive-config {path}: must be a JSON object")
    return _tiers(raw, path)


@dataclass
class _Slot:
    """One tier's running state: its current steps and the average it decides from."""

    tier: Tier
    steps: int
    ema: float
    batches: int = 0

    @classmethod
    def start(cls, tier: Tier, initial_steps: int) -> _Slot:
        c = tier.candidate_steps
        steps = initial_steps if initial_steps in c else c[len(c) // 2]
        return cls(tier, steps, float(steps - 1))

    def observe(self, mean_accepted_drafts: float) -> None:
        """One verify step's mean accepted drafts per request; may change ``steps``."""
        tier = self.tier
        if self.steps > 0:
            self.ema = (1 - tier.ema_alpha) * self.ema + tier.ema_alpha * mean_accepted_drafts
        self.batches += 1
        if self.batches <= tier.warmup_batches:
            return
        if (self.batches - tier.warmup_batches) % tier.update_interval != 0:
            return
        self._decide()

    def batches_to_decision(self) -> int:
        """Batches until the next point at which ``steps`` may change (>= 1)."""
        tier = self.tier
        done = self.batches
        if done < tier.warmup_batches + tier.update_interval:
            return tier.warmup_batches + tier.update_interval - done
        return tier.update_interval - (done - tier.warmup_batches) % tier.update_interval

    def _decide(self) -> None:
        c = self.tier.candidate_steps
        old = self.steps
        i = c.index(old)
        if old == 0:
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            self.steps = c[i]
            return
        start = i
        while i > 0:
            lower = c[i - 1]
            threshold = (0.5 if lower == 0 else lower - 0.5) + self.tier.down_hysteresis
            if self.ema > threshold:
                break
            i -= 1
        if i == start:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.tier.up_hysteresis:
                i += 1
        target = c[i]
        if self.tier.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema * self.tier.ceiling_coeff))
            if ceiling < target <= old:
                while i > 0 and c[i] > ceiling:
                    i -= 1
                target = c[i]
        self.steps = target


@dataclass
class AdaptivePolicy:
    """The per-tier state of one server's adaptive speculation."""

    config: AdaptiveConfig
    initial_steps: int
    slots: dict[int, _Slot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for tier in self.config.tiers:
            self.slots[tier.min_batch] = _Slot.start(tier, self.initial_steps)

    def _slot(self, batch: int, capture_bs: tuple[int, ...]) -> _Slot:
        padded = batch
        if capture_bs:
            i = bisect.bisect_left(capture_bs, batch)
            padded = capture_bs[i] if i < len(capture_bs) else batch
        return self.slots[self.config.tier_for(padded).min_batch]

    def steps_for(self, batch: int, capture_bs: tuple[int, ...]) -> int:
        return self._slot(batch, capture_bs).steps

    def batches_to_decision(self, batch: int, capture_bs: tuple[int, ...]) -> int:
        return self._slot(batch, capture_bs).batches_to_decision()

    def observe(self, batch: int, capture_bs: tuple[int, ...], accepted: list[float]) -> None:
        """Feed the per-step mean accepted drafts of a run of steps at batch ``batch``."""
        slot = self._slot(batch, capture_bs)
        for mean in accepted:
            slot.observe(mean)
