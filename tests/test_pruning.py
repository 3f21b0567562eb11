import math
from dataclasses import replace

import optuna
import pytest

from tuner.results import record
from tuner.trial import pruning
from tuner.trial.pruning import StagePoint, StagePruner, StagePrunerConfig, decide, slo_cut


@pytest.fixture(autouse=True)
def _three_full_runs_bound_a_cut(monkeypatch):
    """The front and the SLO cut judged by three full runs here, not the study's 8 and 4."""
    monkeypatch.setattr(pruning, "_FRONT_MIN_TRIALS", 3)
    monkeypatch.setattr(pruning, "_SLO_MIN_TRIALS", 3)


CONFIG = StagePrunerConfig(n_startup_trials=4, percentile=25, margin=0.1, min_dominators=2)
HISTORY = [
    StagePoint(200.0, 30.0),
    StagePoint(180.0, 25.0),
    StagePoint(150.0, 20.0),
    StagePoint(120.0, 15.0),
    StagePoint(100.0, 12.0),
]


def test_prunes_a_clearly_dominated_trial_and_estimates_time_saved():
    d = decide(1, 4, StagePoint(60.0, 40.0, duration_s=20.0), HISTORY, CONFIG)
    assert d.prune and d.rule == record.CUT_DOMINATED
    assert "dominate" in d.reason
    # two stages of 10 s each remain
    assert d.time_saved_s == 20.0


def test_keeps_low_throughput_trial_with_better_latency():
    # Nothing dominates it: every faster trial has worse latency, so it may be on the front.
    d = decide(1, 4, StagePoint(60.0, 5.0), HISTORY, CONFIG)
    assert not d.prune


def test_keeps_trial_above_the_percentile():
    d = decide(1, 4, StagePoint(130.0, 100.0), HISTORY, CONFIG)
    assert not d.prune


def test_waits_for_startup_trials():
    d = decide(1, 4, StagePoint(1.0, 1000.0), HISTORY[:3], CONFIG)
    assert not d.prune
    assert "start-up" in d.reason


def test_never_prunes_at_the_last_stage():
    d = decide(3, 4, StagePoint(1.0, 1000.0), HISTORY, CONFIG)
    assert not d.prune


def test_disabled_pruner_never_prunes():
    pruner = StagePruner(CONFIG, enabled=False)
    assert not pruner.decide(0, 4, StagePoint(1.0, 1000.0), HISTORY).prune
    assert StagePruner(CONFIG).decide(0, 4, StagePoint(1.0, 1000.0), HISTORY).prune


def test_requires_enough_dominators():
    strict = StagePrunerConfig(n_startup_trials=4, min_dominators=6)
    # all 5 completed trials dominate it, one fewer than required
    d = decide(1, 4, StagePoint(90.0, 35.0), HISTORY, strict)
    assert not d.prune
    assert decide(
        1,
        4,
        StagePoint(90.0, 35.0),
        HISTORY,
        StagePrunerConfig(n_startup_trials=4, min_dominators=5),
    ).prune


def test_infeasible_trials_do_not_count_as_dominators():
    infeasible = [StagePoint(p.throughput, p.latency, feasible=False) for p in HISTORY]
    assert not decide(1, 4, StagePoint(60.0, 40.0), infeasible, CONFIG).prune
    mixed = [*infeasible[:3], *HISTORY[3:]]  # two feasible dominators remain
    assert decide(1, 4, StagePoint(60.0, 40.0), mixed, CONFIG).prune


def test_only_trials_with_its_categorical_choices_dominate_it():
    # The first stage ramps by the categorical choices (a larger prefill chunk ramps up more):
    # the fixed margin compares only trials that share them.
    chunk_8k, chunk_16k = (("chunked_prefill_size", "8192"),), (("chunked_prefill_size", "16384"),)
    history = [replace(p, group=chunk_8k) for p in HISTORY]
    current = StagePoint(60.0, 40.0, group=chunk_16k)
    d = decide(1, 4, current, history, CONFIG)
    assert not d.prune and "0 trials with its categorical choices" in d.reason
    # Two dominators with its choices are enough again.
    mixed = [*history[:3], *(replace(p, group=chunk_16k) for p in history[3:])]
    d = decide(1, 4, current, mixed, CONFIG)
    assert d.prune and "2 of them with its categorical choices" in d.reason
    # Where the trial's choices are not known, any feasible trial dominates it.
    assert decide(1, 4, replace(current, group=None), history, CONFIG).prune


# -- the front cut: can the trial still reach the front of feasible full runs? ----------------

FRONT = StagePrunerConfig(n_startup_trials=100)  # the front cut alone
# Completed trials: stage-1 point and full run. Their full runs ended 1.1x to 1.3x above the
# first stage's throughput and 0.9x to 1.0x its latency.
FINISHED = [
    StagePoint(100.0, 20.0, final=(130.0, 18.0)),
    StagePoint(200.0, 30.0, final=(220.0, 30.0)),
    StagePoint(150.0, 25.0, final=(180.0, 24.0)),
]


def test_front_cut_cuts_a_trial_whose_best_case_a_full_run_beats():
    # Best case: 100 x 1.3 x 1.05 = 136.5 tok/s at 40 x 0.9 / 1.05 = 34.3 ms; 220 at 30 beats it.
    d = decide(0, 4, StagePoint(100.0, 40.0, duration_s=30.0), FINISHED, FRONT)
    assert d.prune and d.rule == record.CUT_FRONT and "cannot reach the front" in d.reason
    assert d.time_saved_s == 90.0  # three stages of 30 s left


def test_front_cut_keeps_a_trial_the_widest_factor_could_lift_onto_the_front():
    # 170 x 1.365 = 232: no full run has more throughput at no worse latency.
    assert not decide(0, 4, StagePoint(170.0, 40.0), FINISHED, FRONT).prune
    # Low throughput but a latency no full run matches: it may end on the front.
    assert not decide(0, 4, StagePoint(50.0, 15.0), FINISHED, FRONT).prune
    # A trial that once ended 2.5x above its first stage widens every best case.
    wide = [*FINISHED, StagePoint(60.0, 30.0, final=(150.0, 30.0))]
    assert not decide(0, 4, StagePoint(100.0, 40.0), wide, FRONT).prune


def test_front_cut_needs_feasible_full_runs_enough_of_them_and_a_stage_left():
    current = StagePoint(100.0, 40.0)
    infeasible = [replace(p, feasible=False) for p in FINISHED]
    assert not decide(0, 4, current, infeasible, FRONT).prune
    assert not decide(0, 4, current, FINISHED[:2], FRONT).prune
    no_finals = [replace(p, final=None) for p in FINISHED]
    assert not decide(0, 4, current, no_finals, FRONT).prune
    assert not decide(3, 4, current, FINISHED, FRONT).prune


def test_with_enough_full_runs_their_factors_replace_the_fixed_margin():
    # Both rules: dominance at the stage first (n_startup_trials 4), the front cut from 3 full
    # runs. A trial whose first stage two full runs beat by 10% at no worse latency...
    both = replace(FRONT, n_startup_trials=4, min_dominators=2)
    slow_start = StagePoint(70.0, 30.0)
    ramped = [*FINISHED, StagePoint(70.0, 32.0, final=(175.0, 30.0))]  # ended 2.5x its stage
    # ...is dominated there (four stage points; none a full run yet), and cut...
    assert decide(0, 4, slow_start, [replace(p, final=None) for p in ramped], both).prune
    # ...but not once the full runs show a start 2.5x below the end: at best 70 x 2.625 = 184.
    d = decide(0, 4, slow_start, ramped, both)
    assert not d.prune and "is not beaten" in d.reason


def test_the_summary_says_what_the_early_cuts_saved(tmp_path):
    from tuner.optimize.summary import pruned_line
    from tuner.study.loop import summarize
    from tuner.study.options import StudyOptions

    study = optuna.create_study(directions=["maximize", "minimize"])
    for saved_s in (300.0, 420.0):
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.PRUNED,
                user_attrs={record.PRUNED: {"stage": 1, "reason": "r", "time_saved_s": saved_s}},
            )
        )
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED))
    summary = summarize(study, tmp_path, StudyOptions(studies_dir=tmp_path))
    assert summary.pruned == 2 and summary.pruned_saved_s == 720.0
    assert pruned_line(summary) == (
        "the stage pruner stopped 2 trials before their last stage (they could not meet an "
        "SLO or reach the front): ~12 min of benchmark saved"
    )


# -- the SLO cut: can the trial still end within every SLO? ------------------------------------

SLO = StagePrunerConfig(n_startup_trials=100)  # asked of the SLO cut alone (`slo_cut`)
# Completed trials with one SLO (p99 TTFT): stage-1 load and full-run load (value / limit).
# Their full runs ended 0.8x to 1.0x their first stage's load.
ENDED = [
    StagePoint(100.0, 20.0, final=(130.0, 18.0), slos=(0.5,), final_slos=(0.4,)),
    StagePoint(200.0, 30.0, final=(220.0, 30.0), slos=(0.9,), final_slos=(0.9,)),
    StagePoint(150.0, 25.0, final=(180.0, 24.0), slos=(1.1,), final_slos=(0.99,)),
]


def test_slo_cut_cuts_a_trial_whose_best_case_still_breaks_an_slo():
    # The lowest latency of all, so the front cut would keep it; but 2.0 x 0.8 / 1.25 = 1.28:
    # even the best factor seen leaves its TTFT 28% over the limit.
    current = StagePoint(20.0, 5.0, duration_s=30.0, slos=(2.0,))
    d = slo_cut(0, 4, current, ENDED, SLO)
    assert d.prune and d.rule == record.CUT_SLO
    assert "cannot meet SLO 1" in d.reason and "x0.64" in d.reason
    assert d.time_saved_s == 90.0


def test_slo_cut_keeps_a_trial_that_may_still_end_within_its_slos():
    # 1.5 x 0.64 = 0.96: the factor one trial showed could bring it under the limit.
    assert not slo_cut(0, 4, StagePoint(20.0, 5.0, slos=(1.5,)), ENDED, SLO).prune
    # A second SLO has its own factors: its full runs ended where their stages were (x1.0),
    # so its best case is x0.8: 1.5 breaks it, 1.2 may not.
    two = [replace(p, slos=(*p.slos, 0.5), final_slos=(*p.final_slos, 0.5)) for p in ENDED]
    assert slo_cut(0, 4, StagePoint(20.0, 5.0, slos=(0.5, 1.5)), two, SLO).prune
    assert not slo_cut(0, 4, StagePoint(20.0, 5.0, slos=(0.5, 1.2)), two, SLO).prune


def test_slo_cut_needs_enough_full_runs_and_a_stage_left():
    current = StagePoint(20.0, 5.0, slos=(3.0,))
    assert not slo_cut(0, 4, current, ENDED[:2], SLO).prune
    assert not slo_cut(0, 4, current, [replace(p, final_slos=None) for p in ENDED], SLO).prune
    assert not slo_cut(3, 4, current, ENDED, SLO).prune
    assert not slo_cut(0, 4, StagePoint(20.0, 5.0), ENDED, SLO).prune  # no SLOs measured
    assert not slo_cut(0, 4, StagePoint(20.0, 5.0, slos=(math.inf,)), ENDED, SLO).prune
