"""The front cut in a whole study: the real objective and study loop, served by the simulator's
oracle with its seeded noise (benchmarks/quality/study.py), judged against noise-free truth."""

from __future__ import annotations

import importlib

import pytest

from tuner.results import record


def benchmarks(name: str):
    return importlib.import_module(f"benchmarks.{name}")


def _cut_study():
    from tuner.space.load import default_space_path, load_space
    from tuner.study.loop import quiet_optuna

    oracle_measurer = benchmarks("oracle_measurer")
    truth = benchmarks("quality.truth")
    methods = {m.name: m for m in benchmarks("quality.methods").METHODS}
    quiet_optuna()
    space = load_space(default_space_path())
    oracle = truth.Oracle(space, oracle_measurer.OracleCache(space))
    noise = oracle_measurer.NoiseModel()
    # The default method as `tuner optimize` runs it; with the SLO cut on, the front cut acts on
    # few trials (seed 1: 3 of 41, seeds 0-3 of the seed space: 1-3), the SLO cut on 13-23.
    method = methods["default"]
    run = benchmarks("quality.study").run_study(
        method, 1, 40, space, oracle, noise, keep_study=True
    )
    return space, oracle, run


@pytest.fixture(scope="module")
def cut_study():
    """One study with both cuts, as `tuner optimize` runs them."""
    return _cut_study()


def _cut_by(trials, rule: str, phrase: str) -> list:
    """The trials the stage pruner stopped by `rule`; the reason each records says `phrase`."""
    cut = [t for t in trials if (t.user_attrs.get(record.PRUNED) or {}).get("rule") == rule]
    assert all(phrase in t.user_attrs[record.PRUNED]["reason"] for t in cut)
    return cut


def test_trials_cut_by_the_front_stop_early_and_could_not_have_reached_it(cut_study):
    space, oracle, run = cut_study
    trials = run.study.get_trials(deepcopy=False)
    cut = [
        t
        for t in _cut_by(trials, record.CUT_FRONT, "cannot reach the front")
        if record.DUPLICATE_OF not in t.user_attrs
    ]
    assert cut
    feasible = [
        oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        for t in trials
        if t.state.name == "COMPLETE" and record.feasible(t.constraints)
    ]
    for t in cut:
        stage = t.user_attrs[record.PRUNED]["stage"]
        cost = run.costs[t.number]
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
    assert sum(c.bench_s for c in run.costs.values()) > 0


def test_trials_cut_for_an_slo_would_have_broken_it_noise_free(cut_study):
    space, oracle, run = cut_study
    trials = run.study.get_trials(deepcopy=False)
    cut = _cut_by(trials, record.CUT_SLO, "cannot meet SLO")
    assert cut
    for t in cut:
        stage = t.user_attrs[record.PRUNED]["stage"]
        assert stage < space.bench.stages - 1 and run.costs[t.number].stages_run == stage + 1
        # The whole run, noise-free, breaks an SLO: the cut lost no feasible configuration.
        full = oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        assert full.launch_ok and not full.feasible, (t.number, full)
