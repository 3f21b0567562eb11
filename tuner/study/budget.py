"""What `--trials N` counts: configurations launched and measured, not proposals.

A proposal rejected before launch (an sglang start-up rule, the memory estimate, the crash
model) is recorded as a trial (PRUNED, outcome `invalid` or `skipped`, a violated `launch`
constraint, so the sampler learns the region is infeasible), and so is a proposal identical to a
configuration already measured (its result is copied, `duplicate_of`). Neither costs GPU time,
so neither counts against the budget: the study asks the sampler again. When the sampler keeps
proposing such configurations the study stops with `SpaceMostlyInfeasible` rather than spin:
after `max_free_per_trial` free trials in a row, or in total more than that many per measured
trial and at least `min_free_total` of them. When every one of those in a row repeated a
measured configuration, the space is exhausted instead (a small discrete space): the study ends
normally with what it measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from tuner.errors import UserError
from tuner.results import record

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
NOT_LAUNCHED = (record.OUTCOME_SKIPPED, record.OUTCOME_INVALID)


class SpaceMostlyInfeasible(UserError):
    """The sampler keeps proposing configurations that are rejected before launch."""


def is_free(trial: FrozenTrial) -> bool:
    """A finished trial that launched nothing: rejected before launch, or a duplicate."""
    attrs = trial.user_attrs
    return attrs.get(record.OUTCOME) in NOT_LAUNCHED or record.DUPLICATE_OF in attrs


def counts(trial: FrozenTrial) -> bool:
    """Does this trial count against `--trials`? Finished, and launched a configuration."""
    return trial.state in FINISHED and not is_free(trial)


def measured_count(trials: Iterable[FrozenTrial]) -> int:
    return sum(1 for t in trials if counts(t))


@dataclass(frozen=True)
class SkipLimit:
    """When proposals that launch nothing (skips before launch, repeats of a measured
    configuration) have taken over, the study stops instead of asking forever."""

    max_free_in_a_row: int = 50
    max_free_per_trial: float = 10.0
    min_free_total: int = 100

    def check(self, trials: list[FrozenTrial]) -> str | None:
        """Raise SpaceMostlyInfeasible when the proposals are mostly rejected; return a message
        when they only repeat measured configurations (the space is exhausted), else None."""
        finished = [t for t in trials if t.state in FINISHED]
        free = [t for t in finished if is_free(t)]
        in_a_row = 0
        for t in reversed(finished):
            if not is_free(t):
                break
            in_a_row += 1
        measured = len(finished) - len(free)
        recent = finished[len(finished) - in_a_row :]
        if in_a_row >= self.max_free_in_a_row and all(
            record.DUPLICATE_OF in t.user_attrs for t in recent
        ):
            return (
                f"the last {in_a_row} proposals repeated measured configurations: the space "
                f"seems to hold no other; stopping after {measured} launched"
            )
        if in_a_row >= self.max_free_in_a_row or (
            len(free) >= self.min_free_total
            and len(free) > self.max_free_per_trial * max(measured, 1)
        ):
            reasons = _top_reasons(free)
            raise SpaceMostlyInfeasible(
                f"the search space is mostly infeasible: {len(free)} of {len(finished)} proposals "
                f"were rejected before launch or repeated a measured configuration "
                f"({in_a_row} in a row), {measured} launched. Most frequent reasons: {reasons}. "
                "Narrow the ranges in the space file (e.g. mem_fraction_static, "
                "max_running_requests) or check --gpu-memory-gb."
            )
        return None


def _top_reasons(free: list[FrozenTrial], n: int = 3) -> str:
    seen: dict[str, int] = {}
    for t in free:
        if record.DUPLICATE_OF in t.user_attrs:
            reason = "same configuration as a measured trial"
        else:
            reason = str(t.user_attrs.get(record.FAILURE_MSG) or "?")[:160]
        seen[reason] = seen.get(reason, 0) + 1
    top = sorted(seen.items(), key=lambda kv: -kv[1])[:n]
    return "; ".join(f"{count}x {reason}" for reason, count in top) or "none"


def summary_counts(trials: Iterable[FrozenTrial]) -> dict[str, int]:
    """Trials by state, with skips (SKIPPED) and repeats (REPEATED) counted apart from PRUNED
    and COMPLETE, for the end-of-study summary."""
    out: dict[str, int] = {}
    for t in trials:
        key = t.state.name
        if t.state in FINISHED and record.DUPLICATE_OF in t.user_attrs:
            key = "REPEATED"  # a measured configuration proposed again: result copied
        elif t.state in FINISHED and t.user_attrs.get(record.OUTCOME) in NOT_LAUNCHED:
            key = "SKIPPED"  # rejected before launch; does not count against --trials
        out[key] = out.get(key, 0) + 1
    return out
