from tuner.trial.pruning import StagePoint, StagePruner, StagePrunerConfig, decide

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
    assert d.prune
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
