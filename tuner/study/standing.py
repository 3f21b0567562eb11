"""How a finished trial stands for the local search (tuner/study/local_search.py).

Whether it says something of its params, whether it met the SLOs, by how much it missed them,
and what it measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.space.model import SearchSpace

Standing = tuple[int, float]  # (1, throughput) when SLO-feasible, (0, -violation) when not


def within_slos(t: FrozenTrial) -> bool:
    """The one definition of a feasible trial: it served the whole benchmark (COMPLETE, with
    values) and met every constraint (the launch and each SLO; `record.feasible`). A trial
    that `standing` ranks (1, throughput) is one of these."""
    return t.state == TrialState.COMPLETE and bool(t.values) and record.feasible(t.constraints)


def best_feasible(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The best feasible trial: of those `within_slos`, the most throughput (the first asked
    on a tie); None when none is."""
    feasible = [t for t in trials if within_slos(t)]
    return max(feasible, key=lambda t: float(t.values[0])) if feasible else None


def informative(t: FrozenTrial) -> bool:
    """Does the trial say something of its own params? A launch does, and so does a same-run
    repeat (tuner/trial/same_run.py: its params ran the measured run, so a move to them changed
    nothing); a repeat of identical flags adds nothing."""
    attrs = t.user_attrs
    return record.DUPLICATE_OF not in attrs or record.SAME_RUN in attrs


def standing(t: FrozenTrial) -> Standing | None:
    """How good a measured trial is for the search; None when it says nothing comparable
    (not finished, a repeat of identical flags, rejected before launch, crashed, or stopped by
    the pruner: the pruner stops only trials that feasible ones clearly beat)."""
    if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
        return None
    attrs = t.user_attrs
    if not informative(t):
        return None
    constraints = slo_constraints(t)
    if constraints.get("launch", 0.0) > 0 or not attrs.get(record.METRICS):
        return None
    violation = sum(max(v, 0.0) for k, v in constraints.items() if k != "launch")
    if violation > 0:
        return (0, -violation)
    if t.state == TrialState.COMPLETE and t.values:
        return (1, float(t.values[0]))
    return None


def by_standing(trials: Sequence[FrozenTrial]) -> list[tuple[FrozenTrial, Standing]]:
    """The trials that say something comparable, best first (`standing`)."""
    scored = [(t, s) for t in trials if (s := standing(t)) is not None]
    scored.sort(key=lambda ts: ts[1], reverse=True)
    return scored


def outcome(t: FrozenTrial) -> Standing:
    """A trial's standing for comparisons: crashed, skipped and pruned ones rank lowest."""
    return standing(t) or (-1, 0.0)


def slo_constraints(t: FrozenTrial) -> dict[str, float]:
    return record.trial_constraints(t)


def broken_slos(t: FrozenTrial, margin: float = 0.0) -> frozenset[str]:
    """The SLO constraints a trial violates (with `margin`, or meets by less than that share
    of the limit)."""
    return frozenset(k for k, v in slo_constraints(t).items() if k != "launch" and v > -margin)


def past_throughput(space: SearchSpace, t: FrozenTrial) -> float | None:
    """The throughput a trial past an SLO measured: its value when it completed; the figure of
    its last stage when the SLO cut stopped it there (tuner/trial/pruning.py); else None."""
    if t.state == TrialState.COMPLETE:
        return float(t.values[0]) if t.values else None
    if not record.learned_from(t):
        return None
    value = (t.user_attrs.get(record.METRICS) or {}).get(space.objectives.throughput)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def sure_view(
    scored: list[tuple[FrozenTrial, Standing]], margin: float
) -> list[tuple[FrozenTrial, Standing]]:
    """`scored` with each trial within the SLOs by less than `margin` of a limit standing as
    one just past it (the local search's edge margin); unchanged when no trial is within them
    by more."""
    if margin <= 0:
        return scored

    def unsure(t: FrozenTrial, s: Standing) -> bool:
        slos = [v for k, v in slo_constraints(t).items() if k.startswith("slo:")]
        return s[0] == 1 and bool(slos) and max(slos) > -margin

    doubts = [unsure(t, s) for t, s in scored]
    if all(s[0] != 1 or doubt for (_t, s), doubt in zip(scored, doubts, strict=True)):
        return scored
    view = [(t, (0, 0.0) if doubt else s) for (t, s), doubt in zip(scored, doubts, strict=True)]
    return sorted(view, key=lambda ts: ts[1], reverse=True)
