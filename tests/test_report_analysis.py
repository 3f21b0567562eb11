"""Pure computations behind the report and the export: Pareto front, knee, hypervolume,
trial classification and the verdict sentence."""

from __future__ import annotations

import math

import optuna
import pytest
from support.fixture_studies import FEASIBLE, PARETO, build_study

from tuner.results.goals import Slo
from tuner.results.pareto import (
    Point,
    dominates,
    hypervolume,
    hypervolume_history,
    knee_point,
    pareto_front,
)
from tuner.results.report import analyse
from tuner.results.study_records import Category, load_records, metric_label
from tuner.results.verdict import verdict

optuna.logging.set_verbosity(optuna.logging.WARNING)
MAX_MIN = ("maximize", "minimize")


def _records(**kwargs):
    storage = optuna.storages.InMemoryStorage()
    build_study(storage, "s", **kwargs)
    return load_records(storage, "s")


def test_dominance_respects_directions():
    assert dominates((200, 20), (100, 30), MAX_MIN)
    assert not dominates((200, 40), (100, 30), MAX_MIN)
    assert not dominates((100, 30), (100, 30), MAX_MIN)


def test_pareto_front_drops_dominated_and_non_finite_points():
    pts = [
        Point(0, (100.0, 20.0)),
        Point(1, (200.0, 30.0)),
        Point(2, (90.0, 40.0)),  # dominated by 0
        Point(3, (300.0, math.inf)),  # unmeasured latency: never optimal
        Point(4, (200.0, 30.0)),  # a tie with 1 stays
    ]
    assert [p.key for p in pareto_front(pts, MAX_MIN)] == [0, 1, 4]


def test_knee_is_the_bulge_of_the_front():
    front = [
        Point(0, (100.0, 10.0)),
        Point(1, (290.0, 12.0)),  # nearly all the throughput for little latency
        Point(2, (300.0, 40.0)),
    ]
    assert knee_point(front, MAX_MIN).key == 1


def test_knee_of_one_or_two_points_is_the_one_nearest_the_ideal():
    assert knee_point([], MAX_MIN) is None
    assert knee_point([Point(7, (1.0, 1.0))], MAX_MIN).key == 7
    two = [Point(0, (100.0, 10.0)), Point(1, (300.0, 11.0))]
    assert knee_point(two, MAX_MIN).key == 1


def test_hypervolume_counts_overlaps_once():
    # Boxes [1,4]x[3,4] and [2,4]x[1,4] (after flipping the maximised axis): union 7, not 9.
    pts = [Point(0, (-1.0, 3.0)), Point(1, (-2.0, 1.0))]
    assert hypervolume(pts, ("maximize", "minimize"), (-4.0, 4.0)) == pytest.approx(7.0)
    pts = [Point(0, (1.0, 3.0)), Point(1, (2.0, 1.0))]
    assert hypervolume(pts, ("minimize", "minimize"), (4.0, 4.0)) == pytest.approx(7.0)


def test_hypervolume_history_never_decreases():
    pts = [Point(0, (100.0, 30.0)), None, Point(2, (50.0, 40.0)), Point(3, (150.0, 20.0))]
    history = hypervolume_history(pts, MAX_MIN, (0.0, 50.0))
    assert history[0] == pytest.approx(100 * 20)
    assert history[1] == history[0] == history[2]  # None and a dominated point add nothing
    assert history[3] == pytest.approx(150 * 30)


def test_classification_of_the_sample_study():
    meta, trials = _records()
    by_cat = {c: sorted(t.number for t in trials if t.category is c) for c in Category}
    assert by_cat[Category.FEASIBLE] == FEASIBLE
    assert by_cat[Category.SLO_VIOLATED] == [1, 6]  # one COMPLETE, one PRUNED
    assert by_cat[Category.PRUNED] == [7, 8]
    assert by_cat[Category.CRASHED] == [4, 11]
    assert by_cat[Category.NOT_LAUNCHED] == [9, 10]
    assert by_cat[Category.ERROR] == [15]
    assert meta.slos == (Slo("p99_ttft_ms", "<=", 2000.0),)


def test_a_trial_recorded_without_constraints_is_rechecked_against_the_slos():
    _, trials = _records(slo_limit_ms=1000.0)
    # Constraints say trial 2 is feasible only under a 2000 ms limit; with 1000 ms it is not.
    assert next(t for t in trials if t.number == 2).category is Category.SLO_VIOLATED


def test_analysis_of_the_sample_study():
    meta, trials = _records()
    analysis = analyse(meta, trials)
    assert analysis.front == PARETO
    assert analysis.knee == 12
    assert analysis.hypervolume == sorted(analysis.hypervolume)  # monotone
    assert 0.0 < analysis.hypervolume[-1] <= 1.0
    assert analysis.hypervolume[0] > 0.0  # the default trial is feasible


def test_verdict_compares_with_the_default_at_no_worse_latency():
    meta, trials = _records()
    v = verdict(meta, trials)
    assert (v.best, v.default) == (2, 0)
    assert "x2.28 output tok/s" in v.text and "410 vs 180" in v.text
    assert "better median TPOT" in v.text
    assert v.kind == "improved"


def test_verdict_without_a_default_says_there_is_no_baseline():
    meta, trials = _records(with_default=False)
    v = verdict(meta, trials)
    best = next(t for t in trials if t.number == v.best)  # numbers shift without trial 0
    assert v.default is None and best.metric("output_throughput") == 410.0
    assert "No default trial" in v.text and " vs " not in v.text
    assert v.kind == "no-baseline"


def test_verdict_without_a_feasible_trial_recommends_nothing():
    meta, trials = _records(only=[0, 1, 4, 9], slo_limit_ms=100.0)
    v = verdict(meta, trials)
    assert v.best is None
    assert "nothing to recommend" in v.text and "p99_ttft_ms <= 100" in v.text
    assert v.kind == "nothing"


def test_verdict_when_the_default_breaks_an_slo():
    meta, trials = _records(slo_limit_ms=1600.0)  # default (1500 ms) within; 14 is the best
    assert verdict(meta, trials).best == 14
    meta, trials = _records(slo_limit_ms=1400.0)  # default (1500 ms) now breaks it
    v = verdict(meta, trials)
    assert "break slo:p99_ttft_ms" in v.text and v.best == 3
    assert v.kind == "no-baseline"


def test_verdict_when_nothing_beats_the_default():
    meta, trials = _records(only=[0, 3])  # 3 is faster but slower per token
    v = verdict(meta, trials)
    assert v.best == 0 and v.text.startswith("No configuration beat sglang's defaults")
    assert "costs latency" in v.text
    assert v.kind == "no-gain"


def test_slo_parsing():
    assert Slo.parse("p99_ttft_ms<=2000") == Slo("p99_ttft_ms", "<=", 2000.0)
    assert Slo.parse(" output_throughput > 1e2 ") == Slo("output_throughput", ">", 100.0)
    assert Slo("x", "<", 1.0).satisfied_by({"x": 0.5})
    assert not Slo("x", "<", 1.0).satisfied_by({})
    from tuner.errors import UserError

    with pytest.raises(UserError, match="METRIC<=NUMBER"):
        Slo.parse("p99_ttft_ms=<2000")


def test_metric_labels():
    assert metric_label("median_tpot_ms") == "median TPOT (ms)"
    assert metric_label("p99_e2e_latency_ms") == "p99 E2E latency (ms)"
    assert metric_label("total_throughput") == "total tok/s"
    assert metric_label("something_else") == "something_else"


def test_a_trial_with_only_stage_summaries_is_placed_by_its_last_stage():
    from optuna.trial import TrialState, create_trial

    from tuner.results.study_records import read_study_meta, record_from_trial

    storage = optuna.storages.InMemoryStorage()
    study = build_study(storage, "s", only=[0])
    stages = [{"output_throughput": 100.0, "median_tpot_ms": 50.0},
              {"output_throughput": 120.0, "median_tpot_ms": 40.0}]  # fmt: skip
    frozen = create_trial(
        state=TrialState.PRUNED,
        user_attrs={"outcome": "pruned", "stages": stages, "pruned": {"stage": 1}},
    )
    trial = record_from_trial(frozen, read_study_meta(study))
    assert trial.category is Category.PRUNED
    assert trial.objective_values(read_study_meta(study)) == (120.0, 40.0)


def test_parallel_axis_of_a_numeric_choice_has_ticks_at_its_choices_only():
    from dataclasses import replace

    from tuner.results.figures import parallel_figure

    meta, trials = _records()
    sizes = (2048, 4096, 8192, 16384)
    picked = {0: None, 2: 8192, 3: 2048, 5: 8192, 12: 16384}  # 0 runs sglang's default
    trials = [
        replace(
            t,
            params={**t.params, "chunked_prefill_size": picked[t.number]}
            if picked.get(t.number)
            else t.params,
            choices={**t.choices, "chunked_prefill_size": sizes},
        )
        for t in trials
    ]
    dims = {d["label"]: d for d in parallel_figure(meta, trials).to_dict()["data"][0]["dimensions"]}
    chunked = dims["chunked_prefill_size"]
    assert chunked["ticktext"] == ["2048", "4096", "8192", "16384", "unset"]
    assert list(chunked["tickvals"]) == [0, 1, 2, 3, 4]
    # A conditional float range keeps plain ticks too (no 9.22e+03 style).
    assert all("e+" not in t for d in dims.values() for t in d.get("ticktext", ()))
