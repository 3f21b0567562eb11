"""The stop rule (tuner/study/stopping.py) on crafted trial lists, and in the study loop."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tuner.results import record
from tuner.study import stopping
from tuner.study.loop import run_trials
from tuner.study.stopping import (
    BLIND_CHECK,
    STOP_CHECK,
    Outlook,
    Stopping,
    StopRule,
    decide,
    front_move,
    pooled_past,
)

RULE = StopRule(min_gain=0.01, min_trials=6, patience=4, max_checks=2)


def _study(points: list[Any]) -> optuna.Study:
    """A study whose trials are `points`: (throughput, latency) feasible, ("slo", thr, lat)
    violating an SLO, "pruned", "skipped" (rejected before launch), "repeat" (a duplicate),
    ("check", thr, lat): a feasible trial the stop rule queued, ("default", thr, lat):
    sglang's defaults, feasible, or ("over", thr, lat, by): over the SLO by that share."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    for point in points:
        trial = study.ask()
        trial.suggest_int("x", 0, 1000)
        if point in ("pruned", "skipped", "repeat"):
            if point == "skipped":
                trial.set_user_attr(record.OUTCOME, record.OUTCOME_SKIPPED)
            if point == "repeat":
                trial.set_user_attr(record.DUPLICATE_OF, 0)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        kind, thr, lat, *over = point if len(point) >= 3 else ("ok", *point)
        if kind == "check":
            trial.set_user_attr(record.GUIDED_BY, STOP_CHECK)
        if kind == "default":
            trial.set_user_attr(record.IS_DEFAULT, True)
        trial.set_constraint("launch", 0.0)
        violation = over[0] if over else 0.5 if kind == "slo" else -0.5
        trial.set_constraint("slo:p99_ttft_ms", violation)
        study.tell(trial, [thr, lat])
    return study


def _trials(points: list[Any]) -> list[optuna.trial.FrozenTrial]:
    return _study(points).get_trials()


def test_front_move_is_the_factor_a_new_point_beats_every_old_one_by():
    before = [(100.0, 10.0), (80.0, 8.0)]
    assert front_move(before, [(103.0, 10.0)]) == pytest.approx(0.03)
    # Between two old points and dominated by neither: it beats (100, 10) by 10/9 in latency.
    assert front_move(before, [(90.0, 9.0)]) == pytest.approx(10 / 9 - 1)
    assert front_move(before, [(50.0, 20.0)]) == 0.0  # dominated
    # A new low-latency end moves the front as much as it lowers the latency.
    assert front_move(before, [(60.0, 4.0)]) == pytest.approx(1.0)
    assert front_move([], [(1.0, 1.0)]) == math.inf
    assert front_move(before, []) == 0.0
    assert front_move(before, [(60.0, 4.0)], "throughput") == 0.0
    assert front_move(before, [(60.0, 4.0)], "latency") == pytest.approx(1.0)


def test_a_plateau_stops_the_study_after_the_window():
    plateau = [(100.0, 10.0), (120.0, 10.0)] + [(119.0, 10.0)] * 4
    decision = decide(_trials(plateau), RULE)
    assert decision.stop and decision.launched == 6 and decision.moved == 0.0
    assert "last 4 launched trials moved the front by 0.0%" in decision.reason
    assert decision.best_trial == 1


def test_not_before_min_trials_nor_while_the_front_moves():
    assert not decide(_trials([(100.0, 10.0)] * 5), RULE).stop
    rising = [(100.0, 10.0)] * 4 + [(100.0, 10.0), (103.0, 10.0)]
    decision = decide(_trials(rising), RULE)
    assert not decision.stop and decision.moved == pytest.approx(0.03)
    assert "moved the front by 3.0%" in decision.reason
    # The same move is below a larger min_gain.
    assert decide(_trials(rising), StopRule(0.05, min_trials=6, patience=4)).stop


def test_skips_and_repeats_do_not_count_as_launched_trials():
    points = [(100.0, 10.0)] * 4 + ["skipped", "repeat"] * 3 + [(100.0, 10.0)]
    decision = decide(_trials(points), RULE)
    assert decision.launched == 5 and not decision.stop
    pruned = [(100.0, 10.0)] * 4 + ["pruned", "pruned"]
    assert decide(_trials(pruned), RULE).stop  # a pruned trial was launched: it counts


def test_slo_violations_move_nothing_and_no_feasible_trial_means_no_judgement():
    # Better figures outside the SLO are not progress.
    points = [(100.0, 10.0)] * 2 + [("slo", 500.0, 1.0)] * 4
    assert decide(_trials(points), RULE).stop
    none_feasible = [("slo", 100.0, 10.0)] * 2 + [(100.0, 10.0)] * 4
    decision = decide(_trials(none_feasible), RULE)
    assert not decision.stop and "nothing to judge by" in decision.reason


def test_a_study_whose_front_is_still_sglangs_defaults_goes_on():
    # Only the defaults meet the SLOs; faster trials just over them, slower ones within.
    points = [("default", 100.0, 10.0)] + [("slo", 130.0, 9.0)] * 4 + [(90.0, 12.0)] * 4
    decision = decide(_trials(points), RULE)
    assert not decision.stop and "beaten sglang's defaults" in decision.reason
    # One trial that beats them (in throughput here) and a plateau after it: the rule applies.
    beaten = [("default", 100.0, 10.0), (104.0, 10.0)] + [(90.0, 12.0)] * 4
    assert decide(_trials(beaten), RULE).stop


def test_a_front_still_at_sglangs_defaults_stops_after_defaults_until_launches():
    # The defaults are this space's best: nothing within the SLOs beats them, run after run.
    points = [("default", 100.0, 10.0)] + [(99.0, 10.0), ("slo", 110.0, 9.0)] * 7
    assert RULE.min_trials + 2 * RULE.patience == 14  # the lapse's default for this rule
    decision = decide(_trials(points[:13]), RULE)
    assert not decision.stop and "beaten sglang's defaults" in decision.reason
    decision = decide(_trials(points[:14]), RULE)
    assert decision.stop
    assert "no trial beat sglang's defaults by more than 1% in 14 launches" in decision.reason
    # Set apart from the window's other conditions: a front still moving keeps it going.
    moving = [*points[:13], (98.0, 8.0)]
    assert not decide(_trials(moving), RULE).stop


def test_beating_sglangs_defaults_by_noise_alone_is_not_beating_them():
    # A trial 1.5% above the defaults (the same run measured again, say) and a plateau after it.
    points = [("default", 100.0, 10.0), (101.5, 10.0)] + [(90.0, 12.0)] * 4
    rule = replace(RULE, min_gain=0.02)
    decision = decide(_trials(points), rule)
    assert not decision.stop
    assert "beaten sglang's defaults by more than 2% yet" in decision.reason
    # 3% beats them by more than min_gain, but not by twice a known noise of 2%.
    above = [("default", 100.0, 10.0), (103.0, 10.0)] + [(90.0, 12.0)] * 4
    assert decide(_trials(above), rule).stop
    decision = decide(_trials(above), replace(rule, noise=0.02))
    assert not decision.stop and "by more than 4%" in decision.reason


def test_min_gain_0_turns_the_rule_off():
    flat = [(100.0, 10.0)] * 20
    decision = decide(_trials(flat), StopRule(min_gain=0.0, min_trials=6, patience=4))
    assert not decision.stop and "--min-gain 0" in decision.reason


def test_the_estimate_is_asked_only_when_the_trials_say_stop_and_can_veto_it():
    asked: list[int] = []

    def outlook(gain: float):
        def ask() -> Outlook:
            asked.append(1)
            return Outlook({"x": 7}, gain)

        return ask

    rising = [(100.0, 10.0)] * 5 + [(110.0, 10.0)]
    assert not decide(_trials(rising), RULE, outlook(0.5)).stop and not asked
    flat = [(100.0, 10.0)] * 6
    vetoed = decide(_trials(flat), RULE, outlook(0.05))
    assert not vetoed.stop and vetoed.outlook == Outlook({"x": 7}, 0.05)
    assert "the estimate expects +5.0%" in vetoed.reason
    agreed = decide(_trials(flat), RULE, outlook(0.005))
    assert (
        agreed.stop and agreed.outlook is None and "the estimate expects no more" in agreed.reason
    )


def test_after_max_checks_that_moved_nothing_the_estimate_is_not_believed():
    checked = [(100.0, 10.0)] * 4 + [("check", 100.0, 10.0)] * 2
    decision = decide(_trials(checked), RULE, lambda: Outlook({"x": 1}, 0.2))
    assert decision.stop and "last 2 checks of an expected gain found none" in decision.reason
    # The default believes it once: one check that moved nothing is enough.
    once = [(100.0, 10.0)] * 5 + [("check", 100.0, 10.0)]
    rule = replace(RULE, max_checks=StopRule().max_checks)
    assert rule.max_checks == 1
    decision = decide(_trials(once), rule, lambda: Outlook({"x": 1}, 0.2))
    assert decision.stop and "the check of an expected gain found none" in decision.reason
    assert not decide(_trials(once), RULE, lambda: Outlook({"x": 1}, 0.2)).stop


def test_a_window_trial_the_estimate_cannot_tell_from_an_earlier_launch_moves_nothing():
    """Four re-measurements of one configuration class (memory 0.84-0.95 that all run every
    client): one measured 2.5% more, noise alone. Without `alike` it keeps the study going; with
    it, the window moved nothing. A window trial of a new class still moves the front, and so
    does a re-measurement further off than the tolerance (3%): the estimate missed something."""
    points = [(100.0, 10.0), (60.0, 12.0), (101.0, 10.0), (102.5, 10.0), (99.0, 10.0)]
    points.append((100.5, 10.0))

    def classes(numbers: dict[int, str]):
        return lambda t: numbers.get(t.number)

    trials = _trials(points)
    plain = decide(trials, RULE)
    assert not plain.stop and "moved the front by 2.5%" in plain.reason
    same = classes({0: "a", 1: "b", 2: "a", 3: "a", 4: "a", 5: "a"})
    stopped = decide(trials, RULE, alike=same)
    assert stopped.stop and "4 of them re-measured configurations" in stopped.reason
    assert stopped.best_trial == 3  # still the best measured trial
    # Trial 3 is a class of its own (chunks of 4096 instead of 8192, say): its 2.5% counts.
    new = classes({0: "a", 1: "b", 2: "a", 3: "c", 4: "a", 5: "a"})
    assert not decide(trials, RULE, alike=new).stop
    # Two window trials of one new class: the first counts, the second re-measures it.
    later = _trials([(100.0, 10.0), (60.0, 12.0), (101.0, 10.0), (100.0, 10.0), (102.5, 10.0),
                     (100.5, 10.0)])  # fmt: skip
    twice = classes({0: "a", 1: "b", 2: "a", 3: "c", 4: "c", 5: "a"})
    assert decide(later, RULE, alike=twice).stop
    once = classes({0: "a", 1: "b", 2: "a", 3: "a", 4: "c", 5: "a"})
    assert not decide(later, RULE, alike=once).stop
    # 7.5% over the earlier launch of its class: more than noise, it counts.
    far = _trials([(100.0, 10.0), (60.0, 12.0), (101.0, 10.0), (107.5, 10.0), (99.0, 10.0),
                   (100.5, 10.0)])  # fmt: skip
    assert not decide(far, RULE, alike=same).stop


def test_launches_the_estimate_cannot_tell_apart_are_judged_against_the_slos_together():
    """Trial 2 measured within the SLO by 1% and trial 0, the same configuration to the
    estimate (HiCache ratios that change nothing), past it by 5%: on their mean (2% past, more
    than a rerun's 2% noise over the square root of two) the configuration is past, so trial 2
    is no point of the front. Without that the window's new configuration (80 tok/s, within by
    50%) moves nothing against trial 2's 109 and the study stops on a configuration past the
    limit; with it, the window moved the front from trial 1's 60 tok/s, and the study goes on."""
    points = [("over", 110.0, 10.0, 0.05), (60.0, 12.0), ("over", 109.0, 10.0, -0.01)]
    points += [(80.0, 11.0), (60.2, 12.0), (60.1, 12.0), (59.9, 12.0)]
    trials = _trials(points)
    classes = {0: "c", 1: "b", 2: "c", 3: "d", 4: "b", 5: "b", 6: "b"}

    def alike(t: optuna.trial.FrozenTrial) -> str | None:
        return classes.get(t.number)

    assert pooled_past(trials, alike) == {0, 2}
    pooled = decide(trials, RULE, alike=alike)
    assert not pooled.stop and pooled.best_trial == 3
    assert "moved the front by 33.3%" in pooled.reason
    assert "(trial 2 met the SLOs as measured, but not on the mean" in pooled.reason
    # 0.5% past on the mean (2% past, 1% within): less than the noise says, each stays as
    # measured; so does a group within on the mean.
    for first in (0.02, 0.005):
        closer = _trials([("over", 110.0, 10.0, first), *points[1:]])
        assert pooled_past(closer, alike) == set()
        assert decide(closer, RULE, alike=alike).best_trial == 2
    # Three launches past by 1.5% on the mean: more than 2% over the square root of three.
    three = _trials([*points, ("over", 108.0, 10.0, 0.005)])
    assert pooled_past(three, lambda t: classes.get(t.number, "c")) == {0, 2, 7}
    # A configuration measured once, or one the estimate cannot predict, is judged alone.
    assert pooled_past(trials, lambda t: None if t.number == 0 else classes[t.number]) == set()


class _Forecaster:
    """An estimate that expects `gain` from every untried configuration, after `blind` moves
    it cannot rank (each measured first, as the guide's are)."""

    def __init__(self, gain: float, blind: int = 0, estimates: bool = True) -> None:
        self.gain = gain
        self.blind = blind
        self.estimates = estimates
        self.queued: list[Outlook] = []

    def outlook(self, study: optuna.Study, min_gain: float = 0.0) -> Outlook:
        x = 500 + len(self.queued)
        if len(self.queued) < self.blind:
            return Outlook({"x": x}, math.inf, "a blind move", BLIND_CHECK)
        return Outlook({"x": x}, self.gain)

    def alike(self, study: optuna.Study) -> None:
        return None  # the estimate cannot tell any two trials alike

    def queue_check(self, study: optuna.Study, outlook: Outlook) -> None:
        self.queued.append(outlook)
        study.enqueue_trial(outlook.params, user_attrs={record.GUIDED_BY: outlook.check})


def _flat_objective(trial: optuna.Trial) -> tuple[float, float]:
    trial.suggest_int("x", 0, 1000)
    trial.set_constraint("launch", 0.0)
    return 100.0, 10.0


def test_the_loop_stops_by_the_rule_says_so_and_records_it():
    study = _study([])
    events: list[tuple[str, dict[str, Any]]] = []
    stopping = Stopping(RULE)
    run_trials(
        study, _flat_objective, 40, stopping=stopping, on_event=lambda k, d: events.append((k, d))
    )
    assert len(study.trials) == 6
    assert events[-1][0] == "stopped"
    assert events[-1][1]["message"].startswith("stopped after 6 of 40 trials: the last 4")
    assert study.user_attrs[record.STUDY_STOPPED]["launched"] == 6


def test_a_guide_without_an_estimate_is_asked_nothing_and_the_reason_names_none():
    """A study on a CPU host or without the model's config.json runs the local search with no
    estimate: the stop rule asks that guide for no outlook, and its reason does not say that an
    estimate expects no more."""
    study = _study([])
    forecaster = _Forecaster(gain=0.3, estimates=False)
    run_trials(study, _flat_objective, 40, stopping=Stopping(RULE, forecaster))
    assert len(study.trials) == 6 and not forecaster.queued
    reason = study.user_attrs[record.STUDY_STOPPED]["reason"]
    assert "estimate" not in reason
    with_one = _study([])
    run_trials(with_one, _flat_objective, 40, stopping=Stopping(RULE, _Forecaster(gain=0.0)))
    assert "the estimate expects no more" in with_one.user_attrs[record.STUDY_STOPPED]["reason"]


def test_the_loop_measures_what_the_estimate_expects_a_gain_from_before_stopping():
    study = _study([])
    forecaster = _Forecaster(gain=0.3)
    run_trials(study, _flat_objective, 40, stopping=Stopping(RULE, forecaster))
    # Two checks (max_checks) are measured, then the rule stops: 6 + 2 trials.
    assert len(study.trials) == 8
    assert [t.params["x"] for t in study.trials[6:]] == [500, 501]
    assert all(t.user_attrs[record.GUIDED_BY] == STOP_CHECK for t in study.trials[6:])


def test_blind_moves_are_measured_without_using_up_the_checks_of_expected_gains():
    """A move the estimate cannot rank is measured once, and is no belief of the estimate's
    that failed: the two checks of an expected gain (max_checks) still follow. Counted
    together, the study stopped after the blind moves without asking the estimate (a 10 s
    seed of the quality benchmark stopped at 0.948 of its full study's best that way)."""
    study = _study([])
    forecaster = _Forecaster(gain=0.3, blind=3)
    run_trials(study, _flat_objective, 40, stopping=Stopping(RULE, forecaster))
    assert len(study.trials) == 6 + 3 + 2
    tags = [t.user_attrs[record.GUIDED_BY] for t in study.trials[6:]]
    assert tags == [BLIND_CHECK] * 3 + [STOP_CHECK] * 2


def test_early_checks_are_asked_for_once_part_of_the_window_moved_nothing(monkeypatch):
    """With early checks 2 launches before a window of 4 ends, the checks the rule asks for
    before stopping start once the last 2 launches moved nothing, though the window as a whole
    still moved the front; an expected gain of the estimate's still waits for the whole
    window."""
    rule = RULE
    rose = [(100.0, 10.0)] * 3 + [(110.0, 10.0)] * 3
    blind = Outlook({"x": 7}, math.inf, "a blind move", BLIND_CHECK)
    decision = decide(_trials(rose), rule, lambda: blind)
    assert not decision.stop and decision.outlook == blind and decision.reason == "a blind move"
    # The estimate's own expected gain: not early.
    gain = decide(_trials(rose), rule, lambda: Outlook({"x": 7}, 0.5))
    assert gain.outlook is None and "moved the front by 10.0%" in gain.reason
    # Off, or while the last 2 launches still move the front: no check is asked for.
    asked: list[int] = []

    def ask() -> Outlook:
        asked.append(1)
        return blind

    with monkeypatch.context() as patch:
        patch.setattr(stopping, "_EARLY_CHECKS", 0)
        assert decide(_trials(rose), RULE, ask).outlook is None
    rising = [(100.0, 10.0)] * 4 + [(110.0, 10.0), (121.0, 10.0)]
    assert decide(_trials(rising), rule, ask).outlook is None and not asked


def _rising_then_flat(trial: optuna.Trial) -> tuple[float, float]:
    trial.suggest_int("x", 0, 1000)
    trial.set_constraint("launch", 0.0)
    return 100.0 * 1.1 ** min(trial.number, 4), 10.0


def test_early_checks_run_inside_the_window_and_the_study_stops_sooner(monkeypatch):
    """The front rises until trial 4. The three blind moves start after 2 quiet launches
    instead of 4, and the window that follows holds them: two launches fewer."""
    runs = {}
    for early in (0, 2):
        monkeypatch.setattr(stopping, "_EARLY_CHECKS", early)
        study = _study([])
        rule = Stopping(RULE, _Forecaster(gain=0.3, blind=3))
        run_trials(study, _rising_then_flat, 40, stopping=rule)
        runs[early] = [t.user_attrs.get(record.GUIDED_BY) for t in study.trials]
    assert runs[0] == ["sampler"] * 9 + [BLIND_CHECK] * 3 + [STOP_CHECK] * 2
    assert runs[2] == ["sampler"] * 7 + [BLIND_CHECK] * 3 + [STOP_CHECK] * 2


def test_the_loop_runs_the_whole_budget_with_min_gain_0():
    study = _study([])
    run_trials(study, _flat_objective, 15, stopping=Stopping(StopRule(min_gain=0.0)))
    assert len(study.trials) == 15 and record.STUDY_STOPPED not in study.user_attrs


def test_limits_out_of_reach_stop_a_study_that_met_none(monkeypatch):
    """No trial met the SLOs: after min_trials + patience launches (10 here), a study whose
    closest trial broke a limit by more than the out-of-reach margin (half of it here) and
    whose last 4 came no closer stops, and says which trial came closest and by how much."""
    assert stopping._OUT_OF_REACH == 2.0  # the default: more than 3x an upper limit
    monkeypatch.setattr(stopping, "_OUT_OF_REACH", 0.5)
    rule = StopRule(min_gain=0.01, min_trials=6, patience=4)
    far = [("over", 100.0, 10.0, v) for v in (2.0, 1.2, 0.9, 1.5, 0.8, 1.1)]
    stuck = far + [("over", 100.0, 10.0, v) for v in (0.9, 1.0, 0.8, 3.0)]
    # Missed by a whole limit or more: said as a factor.
    twice = [("over", 100.0, 10.0, v) for v in (2.0, 1.2, 1.5, 1.3, 1.4, 1.6, 3, 3, 3, 3)]
    assert "measured p99_ttft_ms 2.2x its limit" in decide(_trials(twice), rule).reason
    decision = decide(_trials(stuck), rule)
    assert decision.stop and decision.launched == 10
    assert "no trial met the SLOs in 10 launches" in decision.reason
    assert "the closest, trial 4, measured p99_ttft_ms 80% past its limit" in decision.reason
    # Not before min_trials + patience launches.
    assert not decide(_trials(stuck[:9]), rule).stop
    # Not while the window still closes in (0.8 -> 0.7 is more than a tenth of the way) ...
    closing = far + [("over", 100.0, 10.0, v) for v in (0.9, 1.0, 0.7, 3.0)]
    assert not decide(_trials(closing), rule).stop
    # ... nor when the closest trial came within half the limit: the search may get there.
    near = [("over", 100.0, 10.0, 0.3), *stuck[1:]]
    assert not decide(_trials(near), rule).stop
    # A pruned trial's stage figures are no measurement of the whole benchmark: one within
    # 10% of the limit at its stage neither counts as closest nor keeps the study going.
    study = _study(stuck[:6])
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.PRUNED,
            params={"x": 1},
            distributions={"x": optuna.distributions.IntDistribution(0, 1000)},
            system_attrs={"constraints": [0.0, 0.1]},
            user_attrs={record.CONSTRAINTS: {"launch": 0.0, "slo:p99_ttft_ms": 0.1}},
        )
    )
    for point in stuck[7:]:
        study.add_trials(_study([point]).get_trials())
    decision = decide(study.get_trials(), rule)
    assert decision.stop and "trial 4," in decision.reason, decision.reason
    # Nor once one trial met the SLOs (the front rule decides then).
    met = [(90.0, 10.0), *stuck[1:]]
    assert "nothing to judge by" not in decide(_trials(met), rule).reason
    assert "no trial met" not in decide(_trials(met), rule).reason
