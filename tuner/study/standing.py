"""How a finished trial stands for the local search (tuner/study/local_search.py).

Whether it says something of its params, whether it met the SLOs, by how much it missed them,
and what it measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.space.model import SearchSpace

# True: a trial the SLO cut stopped stands by the violations its full run would likely have
# ended at (tuner/trial/pruning.py `slo_cut`: its stage's loads times the median factor by
# which the completed trials' full runs ended from that stage), not by its last stage's. Under
# a closed loop a stage counts only the requests that finished: at 8 running slots of 48
# clients the first stage's p99 TTFT was 2.3x a 15 s limit where the full run's was 11x, and
# such a trial led the search without an estimate for 25 launches (the KV-dtype cell,
# docs/quality.md). Measured and left off (benchmarks/results/window_wide.md): on the
# development matrix it raised six model-free open-loop studies and lowered two, but on the
# held-out open loop (one TTFT limit, Poisson arrivals) three model-free seeds of five found
# nothing within the limit by 40 launches against one. False: the last stage's, as measured.
EXPECTED_CUT = False
Standing = tuple[int, float]  # (1, throughput) when SLO-feasible, (0, -violation) when not


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
    if EXPECTED_CUT:
        cut = attrs.get(record.PRUNED)
        expected = cut.get("expected") if isinstance(cut, dict) else None
        if isinstance(expected, dict) and expected:
            constraints = {**constraints, **expected}
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


def past_throughput(space: SearchSpace, t: FrozenTrial, bounds: bool = False) -> float | None:
    """The throughput a trial past an SLO measured: its value when it completed; the figure of
    its last stage when the SLO cut stopped it there (tuner/trial/pruning.py); with `bounds`,
    the most its full run could have measured when the dominated or the front cut stopped it
    (`record.throughput_bound`); else None."""
    if t.state == TrialState.COMPLETE:
        return float(t.values[0]) if t.values else None
    if not record.learned_from(t):
        return record.throughput_bound(t) if bounds else None
    value = (t.user_attrs.get(record.METRICS) or {}).get(space.objectives.throughput)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def sure_view(
    scored: list[tuple[FrozenTrial, Standing]], margin: float
) -> list[tuple[FrozenTrial, Standing]]:
    """`scored` with each trial within the SLOs by less than `margin` of a limit standing as
    one just past it (LocalSearchConfig.edge_margin); unchanged when no trial is within them
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
