"""The estimate corrected by a Gaussian process on its residuals (tuner/study/residuals.py)."""

from __future__ import annotations

import random

import optuna
import pytest

from tuner.engines.model_config import ModelMemory
from tuner.predict.estimate import Calibration, Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.results import record
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


def test_an_explicitly_chosen_sampler_keeps_its_trials():
    from tuner.study.guide import GuideSettings
    from tuner.study.options import StudyOptions

    assert GuideSettings.of(StudyOptions()).model
    assert not GuideSettings.of(StudyOptions(sampler="random")).model
