"""What a capacity study ranks by: the open loop's queueing (tuner/predict/open_loop.py), the
estimate's sustained rate in a `--goal capacity` study (tuner/predict/estimate.py), the guide's
picks over it and the local search's first moves after a TTFT break."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from tuner.predict.estimate import Estimator, Observation
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.open_loop import OpenLoopLoad, erlang_c, sustained_rate
from tuner.results import record
from tuner.study.guide import Guide
from tuner.study.local_search import _queued
from tuner.study.options import StudyOptions
from tuner.study.run import Run, resolve_run

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "qwen3.6-27b-capacity.yaml"


def _load(slots: int = 20, prefill_s: float = 0.3) -> OpenLoopLoad:
    # A request decodes for about 12 s, a little longer in a fuller batch.
    return OpenLoopLoad(slots, prefill_s, prefill_s + 0.05, lambda n: 12.0 + 0.05 * n)


def test_erlang_c_is_the_textbook_chance_of_waiting():
    assert erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: the utilisation
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # (1/2 x 2) / (1 + 1 + 1)
    assert erlang_c(10, 0.0) == 0.0 and erlang_c(10, 10.0) == 1.0
    assert erlang_c(200, 150.0) < erlang_c(200, 190.0) < 1.0  # no overflow at large c


def test_the_sustained_rate_is_where_the_tail_reaches_the_allowed_share():
    load = _load()
    rate = sustained_rate(load, limit_s=3.0, quantile=0.99)
    assert 0 < rate < load.slots / 12.0
    assert load.ttft_tail(rate, 3.0) <= 0.01 < load.ttft_tail(rate * 1.01, 3.0)
    # More slots, a cheaper prefill or a looser limit carry more; a limit under the bare TTFT
    # carries nothing.
    assert sustained_rate(_load(slots=25), 3.0, 0.99) > rate
    assert sustained_rate(_load(prefill_s=0.1), 3.0, 0.99) > rate
    assert sustained_rate(load, 6.0, 0.99) > rate > sustained_rate(load, 3.0, 0.999)
    assert sustained_rate(load, 0.2, 0.99) == 0.0


def test_a_slow_prefill_bounds_the_rate_before_the_slots_do():
    load = _load(slots=200, prefill_s=0.5)
    rate = sustained_rate(load, 3.0, 0.99)
    assert rate < 2.0  # the prefill queue saturates at 1 / 0.5 s
    rho, running, e2e = load.latencies(rate)
    assert rho == pytest.approx(rate * 0.5) and running < 200 and e2e > 12.0 / (1 - 0.5 * 0)


@pytest.fixture(scope="module")
def run() -> Run:
    return resolve_run(StudyOptions(space_path=SPACE, goal="capacity", trials=1))


@pytest.fixture
def estimator(run: Run) -> Estimator:
    spec = gpu_spec(run.host.gpu_name)
    assert spec is not None and run.host.model is not None
    return Estimator(run.space, run.host.model, spec, run.host.gpu_memory_gb or spec.memory_gb)


def _flags(run: Run, **params: object) -> dict[str, object]:
    return {"model_path": run.space.model_path, **run.space.fixed_flags, **params}


def test_a_capacity_study_scores_by_the_sustained_rate_and_more_memory_carries_more(
    run: Run, estimator: Estimator
):
    assert estimator.capacity
    default = estimator.predict(_flags(run))
    more = estimator.predict(_flags(run, mem_fraction_static=0.95))
    assert more.load is not None and default.load is not None
    assert more.load.slots > default.load.slots  # sglang's slots grow with the state pool
    assert estimator.score(_flags(run)) == pytest.approx(estimator.sustained_rate(default))
    assert estimator.score(_flags(run, mem_fraction_static=0.95)) > estimator.score(_flags(run))
    # A cap above the slots sglang settles on changes nothing; one below them carries less.
    slots = more.load.slots
    high = _flags(run, mem_fraction_static=0.95, max_running_requests=slots + 10)
    low = _flags(run, mem_fraction_static=0.95, max_running_requests=slots - 8)
    assert estimator.score(high) == estimator.score(_flags(run, mem_fraction_static=0.95))
    assert estimator.score(low) < estimator.score(high)
    # The closed-loop figures are what they were: the open loop is an addition.
    assert default.throughput > 0 and math.isfinite(default.tpot_ms)


def test_the_fit_follows_the_measured_rates_and_learns_what_a_choice_costs(
    run: Run, estimator: Estimator
):
    nextn = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip
    configs = [
        ({}, 0.92, 54.0),
        ({"mem_fraction_static": 0.95}, 1.16, 59.0),
        ({"mem_fraction_static": 0.95, **nextn}, 0.88, 24.0),
        ({"mem_fraction_static": 0.95, "speculative_num_steps": 1, **{
            k: v for k, v in nextn.items() if k != "speculative_num_steps"}}, 0.92, 36.0),
    ]  # fmt: skip
    before = estimator.score(_flags(run, mem_fraction_static=0.95, **nextn))
    observations = [
        Observation(flags=_flags(run, **params), throughput=rate * 256, tpot_ms=tpot,
                    running=None, accept_length=None, params=params,
                    metrics={"sustained_request_rate": rate}, sustained_rate=rate)
        for params, rate, tpot in configs
    ]  # fmt: skip
    estimator.fit(observations)
    for params, rate, _tpot in configs[:2]:
        assert estimator.score(_flags(run, **params)) == pytest.approx(rate, rel=0.25)
    after = estimator.score(_flags(run, mem_fraction_static=0.95, **nextn))
    # Speculation measured worse than predicted: its correction brings it below no speculation.
    assert after < before
    assert after < estimator.score(_flags(run, mem_fraction_static=0.95))
    assert estimator.slo_scale == {}  # a sustained rate meets its SLO by construction


def test_the_guide_does_not_pick_what_the_estimate_scores_exactly_as_a_measured_trial(
    run: Run, estimator: Estimator
):
    guide = Guide(run.space, estimator, seed=0)
    first = guide.first_picks(1)[0]
    second = guide._best_candidate({record_key(first)}, [first])
    assert second is not None
    assert estimator.score(guide._flags(second)) != estimator.score(guide._flags(first))


def record_key(params: dict[str, object]) -> tuple[object, ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def _trial(steps: list[dict[str, object]]) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        params={}, distributions={}, values=[1.0, 50.0], user_attrs={record.RATE_STEPS: steps}
    )


def test_a_capacity_trial_that_broke_on_ttft_moves_towards_more_slots_first(run: Run):
    broke = {"rate": 1.2, "met": False, "broke": "p99_ttft_ms <= 3000"}
    met = {"rate": 1.1, "met": True, "broke": None}
    assert _queued(run.space, _trial([met, broke]))
    assert not _queued(run.space, _trial([met]))  # never broken: nothing says slots ran out
    assert not _queued(run.space, _trial([met, {**broke, "broke": "requests failed"}]))
