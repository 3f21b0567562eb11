"""The front cut in a whole study: the real objective and study loop, served by the simulator's
oracle with its seeded noise (benchmarks/quality/study.py), judged against noise-free truth."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from tuner.results import record


def benchmarks(name: str):
    return importlib.import_module(f"benchmarks.{name}")


def _cut_study(slo_cut: bool):
    from tuner.space.load import default_space_path, load_space
    from tuner.study.loop import quiet_optuna

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
    settings = (("guide", "model_share", 0.0), ("pruner", "slo_cut", slo_cut))
    method = dataclasses.replace(methods["default"], settings=settings)
    run = benchmarks("quality.study").run_study(
        method, 0, 40, space, oracle, noise, keep_study=True
    )
    return space, oracle, run


@pytest.fixture(scope="module")
def cut_study():
    """The front cut alone: with the SLO cut too, the trials it would cut are the SLO cut's."""
    return _cut_study(slo_cut=False)


@pytest.fixture(scope="module")
def slo_cut_study():
    return _cut_study(slo_cut=True)


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
    assert len(cut) >= 3
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


def test_trials_cut_for_an_slo_would_have_broken_it_noise_free(slo_cut_study):
    space, oracle, run = slo_cut_study
    trials = run.study.get_trials(deepcopy=False)
    cut = _cut_by(trials, record.CUT_SLO, "cannot meet SLO")
    assert cut
    for t in cut:
        stage = t.user_attrs[record.PRUNED]["stage"]
        assert stage < space.bench.stages - 1 and run.costs[t.number].stages_run == stage + 1
        # The whole run, noise-free, breaks an SLO: the cut lost no feasible configuration.
        full = oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        assert full.launch_ok and not full.feasible, (t.number, full)


def test_trials_cut_for_an_slo_record_the_violations_their_full_run_would_likely_end_at(
    slo_cut_study,
):
    """A cut trial records each SLO's violation its full run would likely have ended at (its
    stage's load times the median factor of the completed trials' full runs): the local search
    ranks it by them (tuner/study/standing.py). On the seed space, whose first stages already
    measure about what full runs do, they stay near the stage's own and the full run's."""
    space, oracle, run = slo_cut_study
    trials = run.study.get_trials(deepcopy=False)
    cut = _cut_by(trials, record.CUT_SLO, "cannot meet SLO")
    names = [f"slo:{slo.metric}" for slo in space.slos]
    for t in cut:
        expected = t.user_attrs[record.PRUNED]["expected"]
        assert sorted(expected) == sorted(names) and any(v > 0 for v in expected.values())
        measured = record.trial_constraints(t)
        full = oracle.of_args(list(t.user_attrs[record.SERVER_ARGS]))
        for slo, name, value in zip(space.slos, names, full.slo_values, strict=True):
            truth = slo.violation(value)
            assert expected[name] != measured[name]
            assert abs(expected[name] - truth) < 0.3 * (1 + truth), (t.number, name)
