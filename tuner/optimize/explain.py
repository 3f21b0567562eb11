"""`tuner explain --trial N`: why the search launched a trial, in one sentence.

    >>> explain_trial(storage, "qwen-mtp", 12)  # doctest: +SKIP
    'Trial 12 was proposed by polish:window: each such number halfway between the two: ...'

The sentence names the rule the trial recorded in its `guided_by` user attr, what the rule
proposes and when it applies (the search's table, tuner/study/policy.py), and the trial it
moved from when the rule moved from one (`guided_from`).
"""

from __future__ import annotations

from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

from tuner.errors import UserError
from tuner.results import record
from tuner.results.study_records import load_study
from tuner.study.policy import DEFAULTS, RETRY, SAMPLER, Rule, rule_named


def explain_trial(storage: BaseStorage, study_name: str, number: int) -> str:
    """One sentence: why trial `number` of the study was launched."""
    trials = load_study(storage, study_name).get_trials(deepcopy=False)
    trial = next((t for t in trials if t.number == number), None)
    if trial is None:
        last = f" (its trials are 0-{len(trials) - 1})" if trials else " (it has no trials)"
        raise UserError(f"study {study_name!r} has no trial {number}{last}")
    return why(trial)


def why(trial: FrozenTrial) -> str:
    """The sentence for one trial (`explain_trial`)."""
    rule = _rule_of(trial)
    base = trial.user_attrs.get(record.GUIDED_FROM)
    moved = f", moving from trial {base}" if isinstance(base, int) else ""
    return (
        f"Trial {trial.number} was proposed by {rule.name}{moved}: {rule.proposes}; "
        f"it applies when {_lower_first(rule.when)}."
    )


def _rule_of(trial: FrozenTrial) -> Rule:
    name = trial.user_attrs.get(record.GUIDED_BY)
    if isinstance(name, str):
        try:
            return rule_named(name)
        except KeyError:
            raise UserError(
                f"trial {trial.number} names a rule this tuner does not know ({name!r})"
            ) from None
    # Studies written before every trial named its rule: sglang's defaults, a retry or a draw.
    if trial.user_attrs.get(record.IS_DEFAULT):
        return rule_named(DEFAULTS)
    if trial.user_attrs.get(record.RETRY_OF) is not None:
        return rule_named(RETRY)
    return rule_named(SAMPLER)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
