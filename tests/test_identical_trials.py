"""Two workers that propose the same flags at the same moment launch them once: the order in
which they write their flags and read each other's decides who waits (tuner/trial/objective.py).
"""

from __future__ import annotations

import threading
import time

import optuna
from optuna.trial import TrialState

from tuner.results import record
from tuner.trial.identical import wait_for_identical_running

FLAGS = {"model_path": "m", "mem_fraction_static": 0.8}


def _study_with_two_running() -> tuple[optuna.Study, optuna.Trial, optuna.Trial]:
    study = optuna.create_study(directions=["maximize", "minimize"])
    earlier, later = study.ask(), study.ask()
    for t in (earlier, later):
        t.set_user_attr(record.FLAGS, dict(FLAGS))
    return study, earlier, later


def _wait_in_thread(trial: optuna.Trial) -> threading.Thread:
    thread = threading.Thread(
        target=wait_for_identical_running, args=(trial, dict(FLAGS), 30.0, 0.02), daemon=True
    )
    thread.start()
    return thread


def _assert_waits_until_told(study: optuna.Study, waiter: optuna.Trial, owner: optuna.Trial):
    thread = _wait_in_thread(waiter)
    time.sleep(0.3)
    assert thread.is_alive()
    assert waiter.user_attrs.get(record.SAME_FLAGS) == "wait"
    study.tell(owner, [10.0, 1.0])
    thread.join(5)
    assert not thread.is_alive()


def test_the_later_trial_waits_for_the_earlier_one():
    study, earlier, later = _study_with_two_running()
    _assert_waits_until_told(study, later, earlier)


def test_the_earlier_trial_waits_for_a_later_one_that_read_first_and_launched():
    # The later trial read the study before the earlier one wrote its flags: it saw nobody.
    study, earlier, later = _study_with_two_running()
    later.set_user_attr(record.SAME_FLAGS, "launch")
    _assert_waits_until_told(study, earlier, later)


def test_the_earlier_trial_launches_when_the_later_one_waits_for_it():
    study, earlier, later = _study_with_two_running()
    later.set_user_attr(record.SAME_FLAGS, "wait")
    wait_for_identical_running(earlier, dict(FLAGS), 5.0, 0.02)
    assert earlier.user_attrs[record.SAME_FLAGS] == "launch"
    assert later.number in [t.number for t in study.get_trials(states=(TrialState.RUNNING,))]


def test_the_earlier_trial_waits_until_an_undecided_later_one_decides():
    _study, earlier, later = _study_with_two_running()
    thread = _wait_in_thread(earlier)
    time.sleep(0.3)
    assert thread.is_alive() and record.SAME_FLAGS not in earlier.user_attrs
    wait_for_identical_running(later, dict(FLAGS), 0.1, 0.02)  # sees the earlier one: waits
    assert later.user_attrs[record.SAME_FLAGS] == "wait"
    thread.join(5)
    assert not thread.is_alive()
    assert earlier.user_attrs[record.SAME_FLAGS] == "launch"


def test_other_flags_and_reused_duplicates_are_not_waited_for():
    study, earlier, later = _study_with_two_running()
    earlier.set_user_attr(record.FLAGS, {**FLAGS, "mem_fraction_static": 0.9})
    third = study.ask()
    third.set_user_attr(record.FLAGS, dict(FLAGS))
    third.set_user_attr(record.DUPLICATE_OF, 0)
    wait_for_identical_running(later, dict(FLAGS), 5.0, 0.02)
    assert later.user_attrs[record.SAME_FLAGS] == "launch"
