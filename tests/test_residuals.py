"""The estimate corrected by a Gaussian process on its residuals (tuner/study/residuals.py)."""

from __future__ import annotations

import random

import optuna
import pytest

from tuner.engines.model_config import ModelMemory
from tuner.predict.estimate import Calibration, Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.results import record
from tuner.results.goals import Slo
from tuner.space.load import load_space
from tuner.study.guide import complete_flags, random_params
from tuner.study.moves import key
from tuner.study.residuals import ResidualModel

MODEL = ModelMemory(weight_bytes=16.4e9, kv_bytes_per_token=36 * 8 * 128 * 2 * 2)


def _boosted(params: dict) -> bool:
    """What the estimate leaves out: lpm with HiCache serves 1.6x (neither alone does)."""
    return params["schedule_policy"] == "lpm" and bool(params["enable_hierarchical_cache"])


@pytest.fixture
def world():
    space = load_space("qwen3-8b-h200")
    gpu = gpu_spec("NVIDIA H200")
    assert gpu is not None
    estimator = Estimator(space, MODEL, gpu, 150.0, Calibration())

    def flags(params: dict) -> dict:
        return {"model_path": space.model_path, **space.fixed_flags,
                **complete_flags(space, params)}  # fmt: skip

    def measure(params: dict) -> optuna.trial.FrozenTrial:
        expected = estimator.expected(flags(params))
        assert expected is not None
        throughput = expected[0] * (1.6 if _boosted(params) else 1.0)
        ttft = expected[1]["p99_ttft_ms"]
        one = optuna.distributions.CategoricalDistribution
        dists = {n: one([repr(v)]) for n, v in params.items()}
        return optuna.trial.create_trial(
            params={n: repr(v) for n, v in params.items()},
            distributions=dists,
            values=[throughput, 10.0],
            user_attrs={
                record.METRICS: {"output_throughput": throughput, "p99_ttft_ms": ttft},
                record.FLAGS: flags(params),
            },
            system_attrs={"constraints": [0.0, (ttft - 1500) / 1500]},
        )

    return space, estimator, flags, measure


def test_the_model_learns_an_interaction_the_estimate_leaves_out(world):
    space, estimator, flags, measure = world
    rng = random.Random(0)
    measured = [random_params(space, rng) for _ in range(24)]
    trials = []
    for params in measured:
        t = measure(params)
        t.params = params  # the encoding reads the configuration, not Optuna's strings
        trials.append(t)
    model = ResidualModel(space, estimator, flags)
    model.fit(trials)
    assert model.fitted
    pool = [random_params(space, rng) for _ in range(400)]
    tried = {key(p) for p in measured}
    found = model.best(pool, tried)
    assert found is not None
    pick, gain = found
    assert key(pick) not in tried and gain > 0
    assert _boosted(pick)
    # A pick whose run a trial already measured (tuner/trial/same_run.py) is passed over for
    # the next best; with every candidate's run measured there is no pick.
    second = model.best(pool, tried, known=lambda p: key(p) == key(pick))
    assert second is not None and key(second[0]) != key(pick) and second[1] <= gain
    assert model.best(pool, tried, known=lambda p: True) is None
    # The estimate alone does not see it: its own best of the pool is another configuration
    # whenever the best boosted one scores below it, and the model ranks them the other way.
    by_estimate = max(pool, key=lambda p: estimator.score(flags(p)))
    if not _boosted(by_estimate):
        boosted = [p for p in pool if _boosted(p)]
        best_boosted = max(boosted, key=lambda p: estimator.score(flags(p)))
        scores = model.acquisition([by_estimate, best_boosted])
        assert scores[1] > scores[0]


def test_without_two_measured_trials_there_is_nothing_to_correct(world):
    space, estimator, flags, measure = world
    params = random_params(space, random.Random(1))
    t = measure(params)
    t.params = params
    model = ResidualModel(space, estimator, flags)
    model.fit([t])
    assert not model.fitted
    assert model.best([random_params(space, random.Random(2))], set()) is None


def test_a_trial_the_slo_cut_stopped_is_learned_from_by_its_stage_figures(world):
    """Stopped after a stage because it could no longer meet an SLO (tuner/trial/pruning.py),
    a trial still says how far the estimate is off there; one the front cut stopped does not
    (its figures are of a run that may yet have ended on the front)."""
    space, estimator, flags, measure = world
    rng = random.Random(3)
    first, second = random_params(space, rng), random_params(space, rng)
    done = measure(first)
    done.params = first
    for rule, fitted in ((record.CUT_SLO, True), (record.CUT_FRONT, False), (None, False)):
        like = measure(second)
        cut = optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED,
            params=like.params,
            distributions=like.distributions,
            user_attrs={**like.user_attrs, record.PRUNED: {"stage": 0, "rule": rule}},
        )
        cut.params = second
        model = ResidualModel(space, estimator, flags)
        model.fit([done, cut])
        assert model.fitted is fitted


def _cut(
    trial: optuna.trial.FrozenTrial,
    params: dict,
    rule: str | None,
    up: float | None,
    stage_share: float,
) -> optuna.trial.FrozenTrial:
    """`trial`'s configuration stopped after a stage that measured `stage_share` of its
    throughput, by `rule`, with the factor `up` recorded."""
    metrics = dict(trial.user_attrs[record.METRICS])
    metrics["output_throughput"] *= stage_share
    cut = optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs={**trial.user_attrs, record.METRICS: metrics,
                    record.PRUNED: {"stage": 0, "rule": rule, "up": up}},
    )  # fmt: skip
    cut.params = params
    return cut


def test_a_cut_trial_bounds_its_throughput_by_its_stage_times_the_widest_factor(world):
    space, _estimator, _flags, measure = world
    params = random_params(space, random.Random(4))
    done = measure(params)
    stage = done.user_attrs[record.METRICS]["output_throughput"] * 0.5
    for rule in (record.CUT_FRONT, record.CUT_DOMINATED):
        bound = record.throughput_bound(_cut(done, params, rule, 1.2, 0.5))
        assert bound == pytest.approx(stage * 1.2)
    # An SLO cut's stage figures are learnt from as they are; no factor, no bound; a completed
    # trial measured its whole run.
    assert record.throughput_bound(_cut(done, params, record.CUT_SLO, 1.2, 0.5)) is None
    assert record.throughput_bound(_cut(done, params, record.CUT_FRONT, None, 0.5)) is None
    assert record.throughput_bound(done) is None


def test_the_corrected_estimate_reads_a_cut_trial_at_its_bound(world):
    """A configuration the front cut stopped at half what the estimate expects, with a full
    run at most 1.2x its stage, is worth at most 0.6 of the estimate: the corrected estimate
    with cut_bounds expects less there than when it skips the cut trial (the default), and
    less than the estimate alone."""
    space, estimator, flags, measure = world
    rng = random.Random(5)
    trials = []
    for _ in range(6):
        params = random_params(space, rng)
        t = measure(params)
        t.params = params
        trials.append(t)
    target = random_params(space, rng)
    cut = _cut(measure(target), target, record.CUT_FRONT, 1.2, 0.5)
    predicted = {}
    for bounds in (True, False):
        model = ResidualModel(space, estimator, flags, cut_bounds=bounds)
        model.fit([*trials, cut])
        x = [model._encoder.row(target)[:-1]]
        predicted[bounds] = float(model._models["throughput"].predict(x)[0])
    assert predicted[True] < predicted[False] - 0.1
    assert predicted[True] < -0.1  # the log of corrected over estimated throughput


def test_an_explicitly_chosen_sampler_keeps_its_trials():
    from tuner.study.guide import GuideSettings
    from tuner.study.options import StudyOptions

    assert GuideSettings.of(StudyOptions()).model
    assert not GuideSettings.of(StudyOptions(sampler="random")).model


def test_plug_in_counts_from_the_predicted_best_not_a_lucky_launch(world):
    """Twelve configurations measured as the estimate expects and one launch of the best 8%
    above it (the noise's luck): with `plug_in` the expected improvement counts from the
    corrected estimate's prediction of the best trial, below the lucky figure, so an untried
    configuration's expected gain is larger than over the lucky figure itself."""
    space, estimator, flags, measure = world
    # A limit every configuration meets: the acquisition is the expected improvement alone.
    loose = space.model_copy(update={"slos": [Slo("p99_ttft_ms", "<=", 1e9)]})
    rng = random.Random(6)

    def launched(params: dict, luck: float = 1.0) -> optuna.trial.FrozenTrial:
        t = measure(params)
        metrics = dict(t.user_attrs[record.METRICS])
        metrics["output_throughput"] *= luck
        within = optuna.trial.create_trial(
            params=t.params,
            distributions=t.distributions,
            values=[metrics["output_throughput"], 10.0],
            user_attrs={**t.user_attrs, record.METRICS: metrics},
            system_attrs={"constraints": [-0.1, -0.1]},  # every SLO met
        )
        within.params = params
        return within

    measured = [random_params(space, rng) for _ in range(13)]
    for params in measured:
        params["schedule_policy"] = "fcfs"  # none boosted: the estimate is right everywhere
    trials = [launched(p) for p in measured]
    best = max(range(len(trials)), key=lambda i: trials[i].values[0])
    trials[best] = launched(measured[best], 1.08)
    pool = [random_params(space, rng) for _ in range(200)]
    tried = {key(p) for p in measured}
    gains = {}
    for plug_in in (False, True):
        model = ResidualModel(loose, estimator, flags, plug_in=plug_in)
        model.fit(trials)
        assert model._best is not None
        if plug_in:
            assert model._best < trials[best].values[0]
        else:
            assert model._best == trials[best].values[0]
        found = model.best(pool, tried)
        assert found is not None
        gains[plug_in] = found[1]
    assert gains[True] > gains[False]
