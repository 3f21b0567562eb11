"""The front cut in a whole study: the real objective and study loop, served by the simulator's
oracle with its seeded noise (benchmarks/quality/study.py), judged against noise-free truth."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from tuner.results import record


def benchmarks(name: str):
    return importlib.import_module(f"benchmarks.{name}")


def _cut_study(variant: str):
    from tuner.space.load import default_space_path, load_space
    from tuner.study.loop import quiet_optuna

    early_cut = benchmarks("early_cut")
    oracle_measurer = benchmarks("oracle_measurer")
    truth = benchmarks("quality.truth")
    methods = {m.name: m for m in benchmarks("quality.methods").METHODS}
    quiet_optuna()
    space = load_space(default_space_path())
    oracle = truth.Oracle(space, oracle_measurer.OracleCache(space))
    noise = oracle_measurer.NoiseModel()
    # The sampler draws the trials the guide leaves (model_share 0, as with a `--sampler` other
    # than the default): its draws are what the front cut acts on, while the corrected
    # estimate's picks seldom fall that far behind the front.
    method = dataclasses.replace(methods["default"], model=False)
    row, seen = early_cut.run_variant(method, variant, 0, space, oracle, noise)
    return space, oracle, row, seen


@pytest.fixture(scope="module")
def cut_study():
    """The front cut alone: with the SLO cut too, the trials it would cut are the SLO cut's."""
    return _cut_study("front-only")


@pytest.fixture(scope="module")
def slo_cut_study():
    return _cut_study("cut-1")


def _cut_by(trials, rule: str, phrase: str) -> list:
    """The trials the stage pruner stopped by `rule`; the reason each records says `phrase`."""
    cut = [t for t in trials if (t.user_attrs.get(record.PRUNED) or {}).get("rule") == rule]
    assert all(phrase in t.user_attrs[record.PRUNED]["reason"] for t in cut)
    return cut


def test_trials_cut_by_the_front_stop_early_and_could_not_have_reached_it(cut_study):
    space, oracle, row, seen = cut_study
    trials = seen.study.get_trials(deepcopy=False)
    cut = [
        t
        for t in _cut_by(trials, record.CUT_FRONT, "cannot reach the front")
        if record.DUPLICATE_OF not in t.user_attrs
    ]
    assert len(cut) >= 3 and row["cut_front"] == len(cut)
    feasible = [
        oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        for t in trials
        if t.state.name == "COMPLETE" and record.feasible(t.constraints)
    ]
    for t in cut:
        stage = t.user_attrs[record.PRUNED]["stage"]
        cost = seen.costs[t.number]
        # The benchmark stopped where the pruner said, and only the stages run were paid.
        assert stage < space.bench.stages - 1 and cost.stages_run == stage + 1 and cost.pruned
        assert t.user_attrs[record.PRUNED]["time_saved_s"] > 0
        # Noise-free, the whole run would not have reached the front either: a feasible
        # completed configuration beats it in both objectives (within the 2% noise).
        full = oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        assert any(
            f.throughput >= 0.98 * full.throughput and f.latency <= full.latency / 0.98
            for f in feasible
        ), (t.number, full)
    assert row["cut_saved_s"] > 0 and row["bench_s"] > 0


def test_trials_cut_for_an_slo_would_have_broken_it_noise_free(slo_cut_study):
    space, oracle, row, seen = slo_cut_study
    trials = seen.study.get_trials(deepcopy=False)
    cut = _cut_by(trials, record.CUT_SLO, "cannot meet SLO")
    assert cut and row["cut_slo"] == len(cut)
    for t in cut:
        stage = t.user_attrs[record.PRUNED]["stage"]
        assert stage < space.bench.stages - 1 and seen.costs[t.number].stages_run == stage + 1
        # The whole run, noise-free, breaks an SLO: the cut lost no feasible configuration.
        full = oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        assert full.launch_ok and not full.feasible, (t.number, full)
