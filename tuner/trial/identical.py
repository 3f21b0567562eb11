"""Identical proposals launch once, however the workers that propose them interleave.

Two workers may propose the same flags at the same moment, and two workers starting together
may both queue the baseline.

A finished trial with the same flags has its result reused (tuner/trial/objective.py), but for
the stop rule's one re-measurement (`record.REMEASURE_CHECK`, tuner/study/guide.py); this
module covers the window before that, while both trials are RUNNING. Flags that differ only where
the run cannot (tuner/trial/same_run.py) reuse a finished result too, marked `SAME_RUN`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.trial.same_run import Launched, SameRunRules

_IDENTICAL_WAIT_S = 1800.0

_RESULT_ATTRS = (
    record.SERVER_ARGS,
    record.OUTCOME,
    record.FAILURE_CLASS,
    record.FAILURE_MSG,
    record.CAPACITY,
    record.METRICS,
    record.STAGES,
    record.PRUNED,
    record.PREDICTION,
    record.TIMINGS,
    record.CONSTRAINTS,
)


def wait_for_identical_running(
    trial: optuna.Trial, flags: Any, timeout_s: float = _IDENTICAL_WAIT_S, poll_s: float = 0.5
) -> None:
    """Another worker may be measuring these very flags (workers propose at the same moment):
    wait for its result instead of launching them twice.

    Every trial sets its flags before it reads the others, so of two identical trials at
    least one sees the other. A trial waits for every earlier identical running trial, and
    records what it decided (`SAME_FLAGS`); it also waits for a later one that decided to
    launch, which happens only when that one read the study before this one's flags were
    written. Nobody waits in a circle: a trial that decided to launch waits for no one. A
    dead worker's trial is failed by the recovery, which ends the wait; the wait is bounded.
    """
    deadline = time.monotonic() + timeout_s
    decided = False
    while time.monotonic() < deadline:
        identical = [
            t
            for t in trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != trial.number
            and t.user_attrs.get(record.FLAGS) == flags
            and record.DUPLICATE_OF not in t.user_attrs
        ]
        blocking = [
            t
            for t in identical
            if t.number < trial.number or t.user_attrs.get(record.SAME_FLAGS) == "launch"
        ]
        undecided = [
            t
            for t in identical
            if t.number > trial.number and record.SAME_FLAGS not in t.user_attrs
        ]
        if not decided and (blocking or not undecided):
            trial.set_user_attr(record.SAME_FLAGS, "wait" if blocking else "launch")
            decided = True
        if not blocking and not undecided:
            return
        time.sleep(poll_s)


def default_already_taken(trial: optuna.Trial) -> bool:
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return any(
        t.number < trial.number and t.user_attrs.get(record.IS_DEFAULT)
        for t in trial.study.get_trials(deepcopy=False, states=states)
    )


def launches(trials: Iterable[FrozenTrial]) -> list[Launched]:
    """(number, flags, capacity) of the finished trials whose launch worked (served the
    benchmark or was stopped by the stage pruner), repeats left out: what the same-run rule
    compares a proposal with."""
    outcomes = (record.OUTCOME_OK, record.OUTCOME_PRUNED)
    return [
        (t.number, t.user_attrs.get(record.FLAGS) or {}, t.user_attrs.get(record.CAPACITY))
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        and record.DUPLICATE_OF not in t.user_attrs
        and t.user_attrs.get(record.OUTCOME) in outcomes
    ]


def reuse_finished_identical(
    trial: optuna.Trial, rules: SameRunRules | None = None
) -> FrozenTrial | None:
    """The finished trial whose flags this one has, its result copied onto this one (marked
    `DUPLICATE_OF`), after waiting for an identical one that is still running; failing that,
    with `rules`, a finished trial whose launch worked and whose run these flags cannot change
    (also marked `SAME_RUN`, with the reason); None if none."""
    flags = trial.user_attrs[record.FLAGS]
    wait_for_identical_running(trial, flags)
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    finished = [
        t
        for t in trial.study.get_trials(deepcopy=False, states=states)
        if record.DUPLICATE_OF not in t.user_attrs
    ]
    previous = next((t for t in finished if t.user_attrs.get(record.FLAGS) == flags), None)
    reason = None
    if previous is None and rules is not None:
        launched = launches(finished)
        for number, measured, capacity in launched:
            reason = rules.repeats(flags, measured, capacity, launched)
            if reason is not None:
                previous = next(t for t in finished if t.number == number)
                break
    if previous is None:
        return None
    for key in _RESULT_ATTRS:
        if key in previous.user_attrs and (reason is None or key != record.SERVER_ARGS):
            trial.set_user_attr(key, previous.user_attrs[key])
    if reason is not None and rules is not None:
        capacity = previous.user_attrs.get(record.CAPACITY) or {}
        measured = previous.user_attrs.get(record.FLAGS) or {}
        trial.set_user_attr(record.CAPACITY, rules.capacity(capacity, flags, measured))
        trial.set_user_attr(record.SAME_RUN, reason)
    trial.set_user_attr(record.DUPLICATE_OF, previous.number)
    record.set_constraints(trial, record.named_constraints(previous.constraints))
    return previous
