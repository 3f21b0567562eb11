"""The model-free local search (tuner/study/local_search.py) and the guide that runs it."""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

import optuna
import pytest
from support.fixture_studies import add_graded_trial

from tuner.results import record
from tuner.results.record import GUIDED_BY
from tuner.space.load import space_from_dict
from tuner.space.model import SearchSpace
from tuner.study import local_search
from tuner.study.bisection import window_partner
from tuner.study.guide import Guide
from tuner.study.local_search import (
    LocalSearch,
    _extension,
    _move_effects,
    _untried_pair,
)
from tuner.study.loop import run_trials
from tuner.study.moves import complete, key, moves
from tuner.study.standing import by_standing, standing


@contextlib.contextmanager
def constants(**values: object) -> Iterator[None]:
    """The local search with some of its private constants set otherwise, for one block."""
    saved = {name: getattr(local_search, name) for name in values}
    for name, value in values.items():
        setattr(local_search, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(local_search, name, value)


SPACE = {
    "model_path": "m",
    "params": {
        "speculative_algorithm": {"choices": [None, "NEXTN"]},
        "speculative_num_steps": {"low": 1, "high": 5, "when": {"speculative_algorithm": "NEXTN"}},
        "mem_fraction_static": {"low": 0.70, "high": 0.95, "step": 0.01},
        "max_running_requests": {"low": 1, "high": 16, "log": True},
        "chunked_prefill_size": {"choices": [2048, 4096, 8192, 16384]},
    },
    "workload": {"kind": "random"},
    "bench": {"concurrency": 16},
    "slos": ["p99_ttft_ms <= 3000"],
}
START = {
    "speculative_algorithm": None,
    "mem_fraction_static": 0.87,
    "max_running_requests": 4,
    "chunked_prefill_size": 8192,
}


@pytest.fixture
def space():
    return space_from_dict(SPACE)


def test_numbers_move_to_their_ends_first_and_ordered_choices_to_their_neighbours(space):
    level0 = {(m.param, m.value) for m in moves(space, START) if m.level == 0}
    assert ("mem_fraction_static", 0.95) in level0 and ("mem_fraction_static", 0.7) in level0
    assert ("max_running_requests", 16) in level0 and ("max_running_requests", 1) in level0
    assert ("chunked_prefill_size", 4096) in level0 and ("chunked_prefill_size", 16384) in level0
    assert ("chunked_prefill_size", 2048) not in level0  # two choices away
    smallest = {(m.param, m.value) for m in moves(space, START) if m.level == 3}
    assert ("mem_fraction_static", 0.88) in smallest and ("mem_fraction_static", 0.86) in smallest


def test_switching_a_branch_on_tries_its_params_ends_too(space):
    on = [m for m in moves(space, START) if m.param == "speculative_algorithm"]
    assert {dict(m.switched_on).get("speculative_num_steps") for m in on} == {None, 1, 5}
    # Switched on without a donor: the middle of the range; switched off: dropped.
    params = complete(space, {**START, "speculative_algorithm": "NEXTN"}, {})
    assert params["speculative_num_steps"] == 3
    off = complete(space, {**params, "speculative_algorithm": None}, {})
    assert "speculative_num_steps" not in off


def _objective(limit_running: int = 16):
    """Throughput grows with every number and with NEXTN at 1 step; the SLO (p99 TTFT) is met
    only with at least `limit_running` running requests, as in a closed loop of 16 clients."""

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        algo = trial.suggest_categorical("speculative_algorithm", [None, "NEXTN"])
        steps = trial.suggest_int("speculative_num_steps", 1, 5) if algo else 0
        mem = trial.suggest_float("mem_fraction_static", 0.70, 0.95, step=0.01)
        running = trial.suggest_int("max_running_requests", 1, 16, log=True)
        chunk = trial.suggest_categorical("chunked_prefill_size", [2048, 4096, 8192, 16384])
        throughput = running * (1 + mem) * (1.4 - 0.1 * steps if algo else 1.0)
        throughput *= 1.0 if chunk == 4096 else 0.97
        ttft = 1000.0 * (16 / running) ** 2 * (1.0 if running >= limit_running else 4.0)
        trial.set_user_attr(record.OUTCOME, record.OUTCOME_OK)
        trial.set_user_attr(record.METRICS, {"output_throughput": throughput, "p99_ttft_ms": ttft})
        record.set_constraints(trial, {"launch": 0.0, "slo:p99_ttft_ms": (ttft - 3000) / 3000})
        return throughput, 10.0

    return objective


def _best(study: optuna.Study) -> float:
    feasible = [
        t.values[0]
        for t in study.trials
        if t.state == optuna.trial.TrialState.COMPLETE and record.feasible(t.constraints)
    ]
    return max(feasible, default=0.0)


def _study(seed: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=seed)
    )
    study.enqueue_trial(START)  # the default trial: infeasible (4 running of 16 clients)
    return study


OPTIMUM = 16 * 1.95 * 1.3  # NEXTN at 1 step, every client running, the largest fraction, 4096


def test_without_an_estimate_it_walks_to_the_slo_boundary_and_then_to_the_optimum(space):
    study = _study(seed=0)
    guide = Guide(space, None, seed=0)  # no estimate: the polish from trial 1
    run_trials(study, _objective(), 30, guide=guide)
    rules = [t.user_attrs.get(GUIDED_BY) for t in study.trials]
    assert rules[1].startswith("polish:")  # right after the default trial
    assert _best(study) >= 0.95 * OPTIMUM

    alone = _study(seed=0)  # the sampler alone, the same seed and budget
    run_trials(alone, _objective(), 30)
    assert _best(alone) < 0.95 * OPTIMUM


def test_it_proposes_nothing_tried_and_nothing_before_a_measurement(space):
    search = LocalSearch(space, seed=0)
    assert search.propose([], set()) is None
    study = _study(seed=1)
    run_trials(study, _objective(), 1)
    tried = {key(t.params) for t in study.trials}
    proposal = search.propose(study.trials, tried)
    assert proposal is not None and key(proposal) not in tried


def test_standing_ranks_feasible_above_violations_and_ignores_crashes(space):
    study = _study(seed=2)
    run_trials(study, _objective(), 6)
    ranked = sorted((s for t in study.trials if (s := standing(t)) is not None), reverse=True)
    assert all(a >= b for a, b in itertools.pairwise(ranked))
    crashed = optuna.trial.create_trial(
        params={},
        distributions={},
        values=None,
        state=optuna.trial.TrialState.PRUNED,
        user_attrs={record.CONSTRAINTS: {"launch": 1.0}, record.METRICS: {}},
    )
    assert standing(crashed) is None
    assert not math.isnan(ranked[0][1])


ADAPTIVE_SPACE = {
    **SPACE,
    "params": {
        **SPACE["params"],
        "speculative_adaptive": {
            "choices": [None, True],
            "when": {"speculative_num_steps": [1, 3, 5]},
        },
    },
}


_DISTRIBUTIONS = {
    "speculative_algorithm": optuna.distributions.CategoricalDistribution([None, "NEXTN"]),
    "speculative_num_steps": optuna.distributions.IntDistribution(1, 5),
    "speculative_adaptive": optuna.distributions.CategoricalDistribution([None, True]),
    "mem_fraction_static": optuna.distributions.FloatDistribution(0.7, 0.95, step=0.01),
    "max_running_requests": optuna.distributions.IntDistribution(1, 16, log=True),
    "chunked_prefill_size": optuna.distributions.CategoricalDistribution([2048, 4096, 8192, 16384]),
    "schedule_policy": optuna.distributions.CategoricalDistribution(["fcfs", "lpm"]),
}


def _measured(
    study: optuna.Study,
    params: dict,
    throughput: float,
    slos: dict[str, float],
    repeat: dict | None = None,
    named: bool = False,
) -> None:
    """A completed trial of `params` with its SLO constraints graded (> 0: violated); with
    `repeat`, the user attributes that make it a repeat of another trial (or any others);
    `named`: its constraints recorded by name too."""
    add_graded_trial(study, params, _DISTRIBUTIONS, throughput, slos, repeat, named)


def _tpot_study(
    rows: tuple[tuple[dict, float, float], ...],
) -> tuple[optuna.Study, list[optuna.trial.FrozenTrial], set[tuple[Any, ...]]]:
    """A study of completed trials, one per (params, throughput, graded p99 TPOT violation), its
    trials and their keys."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    for params, throughput, tpot in rows:
        _measured(study, params, throughput, {"p99_tpot_ms": tpot})
    trials = study.get_trials(deepcopy=False)
    return study, trials, {key(t.params) for t in trials}


def _trial(study: optuna.Study, params: dict, throughput: float) -> None:
    """A finished, SLO-feasible trial with these params and this throughput."""
    _measured(study, params, throughput, {"p99_ttft_ms": -0.5})


def test_a_param_moves_with_each_choice_of_a_param_it_switches():
    """Draft steps 3 -> 1 also comes with adaptive speculation flipped: the two interact by the
    space's structure, so the move alone can hide what the pair gives."""
    space = space_from_dict(ADAPTIVE_SPACE)
    start = {**START, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3}
    start["speculative_adaptive"] = None
    pairs = [m for m in moves(space, start) if m.param == "speculative_num_steps" and m.value == 1]
    assert {dict(m.switched_on).get("speculative_adaptive", "alone") for m in pairs} == {
        "alone",
        True,
    }
    # Steps 2 switch adaptive off: no pair with it.
    two = [m for m in moves(space, start) if m.param == "speculative_num_steps" and m.value == 2]
    assert all(not m.switched_on for m in two)


def test_a_measured_effect_carries_over_only_where_the_switched_params_are_the_same():
    """Steps 3 -> 1 was worse without adaptive speculation; from an adaptive incumbent the same
    move is proposed first all the same (its effect there is unknown)."""
    space = space_from_dict(ADAPTIVE_SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    base = {**START, "speculative_algorithm": "NEXTN", "mem_fraction_static": 0.95}
    base["max_running_requests"] = 16
    _trial(study, {**base, "speculative_num_steps": 3, "speculative_adaptive": None}, 478.0)
    _trial(study, {**base, "speculative_num_steps": 1, "speculative_adaptive": None}, 426.0)
    _trial(study, {**base, "speculative_num_steps": 3, "speculative_adaptive": True}, 481.0)
    search = LocalSearch(space, seed=0)
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    proposal = search.propose(trials, tried)
    assert proposal is not None
    assert proposal["speculative_num_steps"] == 1 and proposal["speculative_adaptive"] is True


def test_moves_the_estimate_cannot_see_come_before_those_it_ranks():
    """An estimate that does not read adaptive speculation ranks every move by draft steps
    alone; the flip of the flag it cannot see is measured first all the same."""
    space = space_from_dict(ADAPTIVE_SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    base = {**START, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3}
    _trial(study, {**base, "speculative_adaptive": None}, 478.0)
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    deeper = lambda p: float(p.get("speculative_num_steps") or 0) + p["mem_fraction_static"]  # noqa: E731
    search = LocalSearch(space, seed=0, rank=deeper)
    search.blind = frozenset({"speculative_adaptive"})
    first = search.propose(trials, tried)
    assert first is not None and first.get("speculative_adaptive") is True
    search.blind = frozenset()
    assert search.propose(trials, tried).get("speculative_adaptive") is None


class _RefutedEstimate:
    """An estimate the test forbids the local search to use."""

    def fit(self, observations):
        raise AssertionError("the estimate was refitted while no trial met the SLOs")

    def score(self, flags):
        raise AssertionError("the estimate ranked a move while no trial met the SLOs")


def test_while_no_trial_meets_the_slos_the_estimate_does_not_rank_the_moves(space):
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(
        optuna.trial.create_trial(
            params={"mem_fraction_static": 0.87},
            distributions={
                "mem_fraction_static": optuna.distributions.FloatDistribution(0.7, 0.95, step=0.01)
            },
            values=[300.0, 10.0],
            user_attrs={
                record.OUTCOME: record.OUTCOME_OK,
                record.METRICS: {"output_throughput": 300.0},
                record.CONSTRAINTS: {"launch": 0.0, "slo:p99_ttft_ms": 0.4},
            },
            system_attrs={"constraints": [0.0, 0.4]},
        )
    )
    guide = Guide(space, _RefutedEstimate(), seed=0)  # type: ignore[arg-type]
    trials = study.get_trials(deepcopy=False)
    proposal = guide._polish(trials, {key(t.params) for t in trials})
    assert proposal is not None


def test_between_two_trials_that_break_different_slos_the_number_halfway_comes_first():
    space = space_from_dict({**SPACE, "slos": ["p99_ttft_ms <= 3000", "p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    # Too few slots queue the TTFT tail; too many slow every token past the TPOT limit.
    for running, ttft, tpot in ((4, 0.2, -0.1), (16, -0.1, 0.3)):
        _measured(
            study,
            {**START, "max_running_requests": running},
            100.0 * running,
            {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot},
        )
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    proposal = LocalSearch(space, seed=0).propose(trials, tried)
    assert proposal == {**START, "max_running_requests": 8}  # sqrt(4 x 16) on the log range


def test_a_trial_that_breaks_the_other_slo_in_other_company_marks_a_window_too():
    """The held-out KV-dtype cell: the best trial (an 8-bit pool at 16 running) misses the TPOT
    limit by 3%; the trials that break only TTFT ran fewer slots, but with another memory
    fraction and chunk size too, so none is one number away. The running cap is tried halfway
    to the nearest of them (4, not 2), at the best trial's other params."""
    space = space_from_dict({**SPACE, "slos": ["p99_ttft_ms <= 3000", "p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    best = {**START, "max_running_requests": 16, "mem_fraction_static": 0.95}
    _measured(study, best, 1600.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": 0.03})
    for running, mem in ((2, 0.9), (4, 0.88)):
        _measured(
            study,
            {**START, "max_running_requests": running, "mem_fraction_static": mem,
             "chunked_prefill_size": 2048},
            100.0 * running,
            {"p99_ttft_ms": 1.5, "p99_tpot_ms": -0.2},
        )  # fmt: skip
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    proposal = LocalSearch(space, seed=0).propose(trials, tried)
    assert proposal == {**best, "max_running_requests": 8}  # sqrt(16 x 4) on the log range


def test_where_the_window_meets_no_slo_its_partner_is_tried_with_another_choice():
    """The held-out Qwen3-30B cell over two H100s: with lpm, every running cap below the client
    count queues the TTFT tail past its limit, and the caps that meet the TPOT limit are below
    the one that meets TTFT; the window between 16 and 8 running (11 breaks both) is spent.
    The partner (lpm at 8, the nearest trial that breaks TTFT alone, not lpm at 12 with other
    chunks) is tried with the other policy: fcfs at 8 does not queue the tail."""
    space = space_from_dict(
        {
            **SPACE,
            "params": {**SPACE["params"], "schedule_policy": {"choices": ["fcfs", "lpm"]}},
            "slos": ["p99_ttft_ms <= 3000", "p99_tpot_ms <= 11"],
        }
    )
    study = optuna.create_study(directions=["maximize", "minimize"])
    best = {**START, "schedule_policy": "lpm", "max_running_requests": 16}
    _measured(study, best, 1600.0, {"p99_ttft_ms": -0.9, "p99_tpot_ms": 0.09})
    _measured(study, {**best, "schedule_policy": "fcfs"}, 1600.0,
              {"p99_ttft_ms": -0.9, "p99_tpot_ms": 0.10})  # fmt: skip
    for running, chunk, ttft, tpot in ((8, 8192, 2.4, -0.01), (11, 8192, 2.3, 0.02),
                                       (12, 4096, 2.2, -0.01)):  # fmt: skip
        _measured(
            study,
            {**best, "max_running_requests": running, "chunked_prefill_size": chunk},
            100.0 * running,
            {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot},
        )
    trials = study.get_trials(deepcopy=False)
    partner = window_partner(space, by_standing(trials))
    assert partner is not None and partner.params["max_running_requests"] == 8
    flipped = {**best, "max_running_requests": 8, "schedule_policy": "fcfs"}

    search, tried, out = LocalSearch(space, seed=0), {key(t.params) for t in trials}, []
    while len(out) < 6 and (p := search.propose(trials, tried)) is not None:
        out.append(p)
        tried.add(key(p))
    assert flipped in out


def test_between_the_best_trial_and_one_past_an_slos_edge_the_number_halfway_comes_first():
    """tpot-8b: a running cap buys throughput until p99 TPOT passes its limit; the best cap is
    on that edge, between the best feasible trial and the nearest one past it."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    for running, tpot in ((4, -0.2), (16, 0.3)):
        _measured(
            study,
            {**START, "max_running_requests": running},
            100.0 * running,
            {"p99_tpot_ms": tpot},
        )
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    proposal = LocalSearch(space, seed=0).propose(trials, tried)
    assert proposal == {**START, "max_running_requests": 8}  # sqrt(4 x 16) on the log range


def test_the_stop_rule_is_told_of_an_edge_not_yet_bisected_and_what_it_can_gain():
    """Before it stops, the study measures the halfway cap between the best trial and one past
    the TPOT edge (tuner/study/guide.py): it can gain up to what the trial past it measured.
    Once the halfway cap is measured the next bisection is offered; once no trial past the
    edge beats the best, none is."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    for running, throughput, tpot in ((4, 400.0, -0.2), (16, 1500.0, 0.3)):
        _measured(
            study, {**START, "max_running_requests": running}, throughput, {"p99_tpot_ms": tpot}
        )
    search = LocalSearch(space, seed=0)

    def edge() -> tuple[dict, float] | None:
        trials = study.get_trials(deepcopy=False)
        return search.edge_move(trials, {key(t.params) for t in trials})

    assert edge() == ({**START, "max_running_requests": 8}, 1500.0)
    _measured(study, {**START, "max_running_requests": 8}, 800.0, {"p99_tpot_ms": -0.05})
    assert edge() == ({**START, "max_running_requests": 11}, 1500.0)  # sqrt(8 x 16)
    _measured(study, {**START, "max_running_requests": 11}, 1100.0, {"p99_tpot_ms": 0.1})
    assert edge() == ({**START, "max_running_requests": 9}, 1100.0)  # the nearer trial past it
    _measured(study, {**START, "max_running_requests": 9}, 850.0, {"p99_tpot_ms": 0.02})
    _measured(study, {**START, "max_running_requests": 10}, 900.0, {"p99_tpot_ms": 0.05})
    assert edge() is None  # 8 and 9 are adjacent: nothing lies between


def test_an_edge_is_bisected_from_a_trial_within_the_noise_of_the_best_too():
    """tpot-8b, seed 4: the best trial (4 running) had an edge under way (16 running, past the
    TPOT limit) when a trial in another configuration measured 1% more, within the noise, and
    became the best. The bisection goes on from the first one (8 running) instead of starting
    over from the new best's range ends; with `edge_tie` 0 it starts over."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study, trials, tried = _tpot_study(
        (
            ({**START, "max_running_requests": 4}, 400.0, -0.2),
            ({**START, "max_running_requests": 16}, 1500.0, 0.3),
            ({**START, "mem_fraction_static": 0.95}, 404.0, -0.2),
        )
    )
    halfway = {**START, "max_running_requests": 8}
    assert LocalSearch(space, seed=0).propose(trials, tried) == halfway
    assert LocalSearch(space, seed=0).edge_move(trials, tried) == (halfway, 1500.0)
    with constants(EDGE_TIE=0.0):
        alone = LocalSearch(space, seed=0)
        assert alone.edge_move(trials, tried) is None
        assert alone.propose(trials, tried) != halfway
    # Beyond the tie (a best 5% above the first trial), the first trial's edge waits.
    _measured(study, {**START, "mem_fraction_static": 0.7}, 420.0, {"p99_tpot_ms": -0.2})
    trials = study.get_trials(deepcopy=False)
    assert LocalSearch(space, seed=0).edge_move(trials, {key(t.params) for t in trials}) is None


def test_an_edge_is_carried_to_a_tied_trial_with_more_room_under_the_slo():
    """The retrieval cell on an H100 (docs/decisions.md#carried-edges): 8 running at chunks of 8,192
    meets the TPOT limit, 9 is past it, and chunks of 4,096 at 6 running serve about the same with a
    lower p99 TPOT (3% less throughput: beyond `edge_tie`, within the noise of the benchmark's
    best). With `carry_tie`, the edge is carried: chunks of 4,096 at 9 running (the nearest value
    past the first edge) is an edge move; without it no edge move is left (8 and 9 are adjacent, and
    9 differs from the tied trial in two params)."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    small = {**START, "chunked_prefill_size": 4096}
    study, trials, tried = _tpot_study(
        (
            ({**START, "max_running_requests": 8}, 800.0, -0.02),
            ({**START, "max_running_requests": 9}, 900.0, 0.05),
            ({**small, "max_running_requests": 6}, 770.0, -0.15),
        )
    )
    carried = {**small, "max_running_requests": 9}
    on = LocalSearch(space, seed=0)  # the carry tie, 5%
    assert on.edge_move(trials, tried) == (carried, 900.0)
    assert on.propose(trials, tried) == carried
    with constants(_CARRY_TIE=0.0):
        off = LocalSearch(space, seed=0)
        assert off.edge_move(trials, tried) is None and off.propose(trials, tried) != carried
    # Measured past the limit too, it is bisected against the tied trial: sqrt(6 x 9) = 7.
    _measured(study, carried, 905.0, {"p99_tpot_ms": 0.01})
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    assert on.edge_move(trials, tried) == ({**small, "max_running_requests": 7}, 905.0)
    with constants(_CARRY_TIE=0.0):
        assert off.edge_move(trials, tried) is None
    # Too far below the best (more than the tie), or no more room under the limit than the
    # best's edge leaves (by the 2% margin): nothing to carry.
    with constants(_CARRY_TIE=0.01):
        assert LocalSearch(space, seed=0).edge_move(trials, tried) is None
    study, trials, tried = _tpot_study(
        (
            ({**START, "max_running_requests": 8}, 800.0, -0.05),
            ({**START, "max_running_requests": 9}, 900.0, 0.05),
            ({**small, "max_running_requests": 6}, 790.0, -0.06),
        )
    )
    assert on.edge_move(trials, tried) is None


def test_moves_from_the_boundary_trial_need_not_extend_the_move_that_reached_it():
    """The retrieval cell on an H100, seed 4: the boundary trial (54 running, past the TPOT
    limit by the least) was reached from 64 by a lower cap, so its moves went on lower first:
    caps of 1, 7 and 20 below the best trial's 46, in the region the best already rules. With
    the extension left to the best trial they do not."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    high = {**START, "mem_fraction_static": 0.95}
    _study, trials, tried = _tpot_study(
        (
            ({**START, "max_running_requests": 8}, 800.0, -0.05),
            ({**high, "max_running_requests": 16}, 1500.0, 0.3),
            ({**high, "max_running_requests": 12}, 1200.0, 0.05),
        )
    )
    first = LocalSearch(space, seed=0).propose(trials, tried)
    assert first is not None
    assert not (first["mem_fraction_static"] == 0.95 and first["max_running_requests"] < 12)


def test_a_probe_moves_the_best_trial_towards_a_trial_past_the_edge_one_number_at_a_time():
    """tpot-8b, seed 4: the best trial ran 35 (memory 0.93); the trials past the TPOT edge with
    more throughput differed in the memory fraction too, so no edge move existed and the study
    stopped at 0.935 of what its full study found at 38 running. The probes set each number in
    which they differ halfway, the widest gap on its range's scale first (the cap: half its log
    range; the memory fraction: 0.28 of its range); measured past the edge, a probe is an edge
    move's bound. A trial past the edge that differs in a choice only gives no probe."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    _measured(study, START, 400.0, {"p99_tpot_ms": -0.2})
    _measured(study, {**START, "chunked_prefill_size": 16384}, 2000.0, {"p99_tpot_ms": 0.3})
    search = LocalSearch(space, seed=0)

    def tried() -> tuple[list, set]:
        trials = study.get_trials(deepcopy=False)
        return trials, {key(t.params) for t in trials}

    assert search.edge_probes(*tried()) == []  # a choice has no halfway
    past = {**START, "max_running_requests": 16, "mem_fraction_static": 0.8}
    _measured(study, past, 1500.0, {"p99_tpot_ms": 0.3})
    assert search.edge_move(*tried()) is None  # two numbers differ: no edge move
    probe = {**START, "max_running_requests": 8}
    memory = {**START, "mem_fraction_static": 0.84}  # halfway 0.835, on the range's 0.01 steps
    assert search.edge_probes(*tried()) == [(probe, 1500.0), (memory, 1500.0)]
    _measured(study, probe, 900.0, {"p99_tpot_ms": 0.1})
    assert search.edge_move(*tried()) == ({**START, "max_running_requests": 6}, 900.0)


def test_a_probe_goes_halfway_to_the_nearest_value_past_the_edge():
    """A held-out chat cell on an H200 (Llama-3.1-8B, 64 clients, p99 TPOT <= 12 ms): the best
    trial ran 36 (memory 0.76); 39 running (memory 0.6) and 64 were past the TPOT limit, and
    the probe went halfway to 64 (48), which 39 already showed past it; the study stopped at
    0.95 of the optimum at 38. With `probe_nearest` a number moves halfway to the nearest of
    its values that a trial past the edge has on that side: the cap to 5 between 4 and 6 here,
    not to 8 between 4 and 16; the memory fraction to its nearest such value's halfway. That is
    the stop rule's probe; the polish's stays as it was."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    _measured(study, START, 400.0, {"p99_tpot_ms": -0.2})
    _measured(
        study,
        {**START, "max_running_requests": 16, "mem_fraction_static": 0.8},
        1500.0,
        {"p99_tpot_ms": 0.3},
    )
    _measured(
        study,
        {**START, "max_running_requests": 6, "mem_fraction_static": 0.75},
        700.0,
        {"p99_tpot_ms": 0.05},
    )
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    memory = {**START, "mem_fraction_static": 0.84}  # halfway to 0.8, nearer than 0.75
    near = LocalSearch(space, seed=0).edge_probes(trials, tried)
    assert near == [({**START, "max_running_requests": 5}, 1500.0), (memory, 1500.0)]
    far = LocalSearch(space, seed=0)._probes(by_standing(trials), tried, nearest=False)
    assert far == [
        ({**START, "max_running_requests": 8}, 1500.0),
        (memory, 1500.0),
    ]
    # The polish's own probe keeps the trial's value: it steers full studies.
    polish = LocalSearch(space, seed=0)
    assert polish.propose(trials, tried) == {**START, "max_running_requests": 8}


def test_the_polish_probes_an_edge_no_trial_one_number_away_marks():
    """The same probe as the stop rule's, made by the polish as soon as it can, of the first
    number whose move the ranking estimate sees; once a trial one number away marks the edge,
    its bisection goes on instead."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    _measured(study, START, 400.0, {"p99_tpot_ms": -0.2})
    past = {**START, "max_running_requests": 16, "mem_fraction_static": 0.8}
    _measured(study, past, 1500.0, {"p99_tpot_ms": 0.3})
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    probe = {**START, "max_running_requests": 8}
    assert LocalSearch(space, seed=0).propose(trials, tried) == probe
    # An estimate that reads the memory fraction only: the cap's probe changes nothing it
    # predicts, so the memory fraction's is made.
    ranked = LocalSearch(space, seed=0)
    ranked.rank = lambda params: float(params["mem_fraction_static"])
    assert ranked.propose(trials, tried) == {**START, "mem_fraction_static": 0.84}
    _measured(study, probe, 900.0, {"p99_tpot_ms": 0.1})
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    edge = {**START, "max_running_requests": 6}  # the bisection between 4 and 8
    assert LocalSearch(space, seed=0).propose(trials, tried) == edge


def test_a_best_trial_within_the_margin_of_a_limit_is_taken_as_past_the_edge():
    """tpot-8b shipped seed 0 with the polish's probe: 39 running measured a p99 TPOT just
    under its limit (it is past it, measured without noise), became the best, and every edge
    move went above it, so 37-38 running (within it) was never measured. With `edge_margin`,
    a trial within a limit by less than the margin is a bound past the edge: the bisection
    goes between the best trial within it by more and that one."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    for running, throughput, tpot in ((4, 400.0, -0.2), (8, 800.0, -0.01), (16, 1500.0, 0.3)):
        _measured(
            study, {**START, "max_running_requests": running}, throughput, {"p99_tpot_ms": tpot}
        )
    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    above = ({**START, "max_running_requests": 11}, 1500.0)  # sqrt(8 x 16)
    with constants(_EDGE_MARGIN=0.0):
        assert LocalSearch(space, seed=0).edge_move(trials, tried) == above
    sure = LocalSearch(space, seed=0)  # the default margin, 0.02
    # between 4 and 8 (halfway to 16 is 8, measured): it can gain what 8 measured
    assert sure.edge_move(trials, tried) == ({**START, "max_running_requests": 6}, 800.0)
    assert sure.propose(trials, tried) == {**START, "max_running_requests": 6}
    # Every trial within the SLOs inside the margin: nothing surer to start from, as before.
    alone = optuna.create_study(directions=["maximize", "minimize"])
    for running, throughput, tpot in ((8, 800.0, -0.01), (16, 1500.0, 0.3)):
        _measured(
            alone, {**START, "max_running_requests": running}, throughput, {"p99_tpot_ms": tpot}
        )
    trials = alone.get_trials(deepcopy=False)
    assert sure.edge_move(trials, {key(t.params) for t in trials}) == above


def _cut(study: optuna.Study, running: int, stage: float, tpot: float, rule: str | None) -> None:
    """A trial at `running` stopped by the stage pruner's `rule` after its first stage, at a
    stage throughput of `stage` and a p99 TPOT past its limit by `tpot`."""
    constraints = {"launch": 0.0, "slo:p99_tpot_ms": tpot}
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED,
            params={**START, "max_running_requests": running},
            distributions={k: _DISTRIBUTIONS[k] for k in START},
            user_attrs={
                record.OUTCOME: record.OUTCOME_PRUNED,
                record.METRICS: {"output_throughput": stage},
                record.CONSTRAINTS: constraints,
                record.PRUNED: {"stage": 0, "reason": "r", "rule": rule},
            },
            system_attrs={"constraints": list(constraints.values())},
        )
    )


def test_a_trial_the_slo_cut_stopped_marks_the_edge_with_its_stage_figures():
    """A cap far past the TPOT limit may be stopped after its first stage (the SLO cut,
    tuner/trial/pruning.py): its stage throughput still marks the edge to bisect. One the
    dominated or the front cut stopped does not: its stage ran below what a full run would."""
    space = space_from_dict({**SPACE, "slos": ["p99_tpot_ms <= 11"]})
    cases = (
        (record.CUT_SLO, 1500.0, True),
        (record.CUT_FRONT, 1500.0, False),
        (record.CUT_DOMINATED, 300.0, False),
        (None, 1500.0, False),
    )
    for rule, stage, edge in cases:
        study = optuna.create_study(directions=["maximize", "minimize"])
        _measured(study, {**START, "max_running_requests": 4}, 400.0, {"p99_tpot_ms": -0.2})
        _cut(study, 16, stage, 0.6, rule)
        trials = study.get_trials(deepcopy=False)
        assert record.learned_from(trials[1]) is (rule == record.CUT_SLO)
        search = LocalSearch(space, seed=0)
        tried = {key(t.params) for t in trials}
        proposal = search.propose(trials, tried)
        assert (proposal == {**START, "max_running_requests": 8}) is edge, (rule, stage)
        assert (search.edge_move(trials, tried) is not None) is edge


def test_a_halfway_number_that_switches_a_param_on_proposes_it_too():
    """Window moves bisect draft steps 2 and 4 to 3, where adaptive speculation is a choice: the
    proposal carries it (at its first choice). Without it the sampler drew one, the proposal
    never matched the trial it became, and it was proposed again until the study gave up
    after 50 repeats (benchmarks/search_ab.py, slow constants at 10 s, model-free seed 8)."""
    adaptive = {"choices": [None, True], "when": {"speculative_num_steps": [1, 3, 5]}}
    params = {**SPACE["params"], "speculative_adaptive": adaptive}
    slos = [*SPACE["slos"], "p99_tpot_ms <= 11"]
    space = space_from_dict({**SPACE, "params": params, "slos": slos})
    study = optuna.create_study(directions=["maximize", "minimize"])
    base = {**START, "speculative_algorithm": "NEXTN"}
    # Fewer draft steps: the TTFT tail over its limit; more: every token over the TPOT one.
    for steps, ttft, tpot in ((2, 0.2, -0.1), (4, -0.1, 0.3)):
        _measured(
            study,
            {**base, "speculative_num_steps": steps},
            100.0 * steps,
            {"p99_ttft_ms": ttft, "p99_tpot_ms": tpot},
        )
    trials = study.get_trials(deepcopy=False)
    proposal = LocalSearch(space, seed=0).propose(trials, {key(t.params) for t in trials})
    assert proposal == {**base, "speculative_num_steps": 3, "speculative_adaptive": None}


def test_a_same_run_repeat_tells_the_search_its_move_changed_nothing(space):
    """A repeat of identical flags says nothing new; a same-run repeat (tuner/trial/same_run.py)
    says its own params ran the measured run, so it ranks, and its moves count, as that run."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    feasible = {"p99_ttft_ms": -0.5}
    _measured(study, START, 400.0, feasible)
    same_run = {record.DUPLICATE_OF: 0, record.SAME_RUN: "memory fraction 0.8 vs 0.87: ..."}
    _measured(study, {**START, "mem_fraction_static": 0.8}, 400.0, feasible, same_run)
    _measured(study, START, 400.0, feasible, {record.DUPLICATE_OF: 0})
    low, identical = study.trials[1:]
    assert standing(low) == (1, 400.0) and standing(identical) is None
    # From the same-run repeat, a larger chunk was worse: the move is known there too.
    _measured(
        study, {**START, "mem_fraction_static": 0.8, "chunked_prefill_size": 16384}, 300.0, feasible
    )
    effects = _move_effects(space, study.trials)
    assert effects[("chunked_prefill_size", "8192", "16384", ())] == -1.0


def test_a_gain_within_the_noise_sets_no_direction(space):
    """The move that reached the best trial is extended first, unless (with a minimum gain, as
    without an estimate) the best beat the trial it moved from by no more than that share: a 1%
    gain at 2% noise says nothing of which way the number should go."""
    feasible = {"p99_ttft_ms": -0.5}

    def extension(gain: float, min_gain: float) -> tuple[str, float] | None:
        study = optuna.create_study(directions=["maximize", "minimize"])
        _measured(study, START, 400.0, feasible)
        _measured(study, {**START, "mem_fraction_static": 0.91}, 400.0 * (1 + gain), feasible)
        scored = [(t, standing(t)) for t in study.trials]
        scored.sort(key=lambda ts: ts[1], reverse=True)
        return _extension(space, scored[0][0], scored, min_gain)  # type: ignore[arg-type]

    assert extension(0.01, 0.0) == ("mem_fraction_static", 0.87)
    assert extension(0.01, 0.03) is None
    assert extension(0.06, 0.03) == ("mem_fraction_static", 0.87)


def test_without_an_estimate_a_gain_within_the_noise_is_not_extended_first(space):
    """Model-free search (no estimate ranks the moves) extends the move that reached the best
    trial first only when it gained more than `unranked_extend_min_gain` (3%): copies of a
    plateau that measure alike would otherwise lead it from one to the next. With an estimate
    any gain is extended, as before."""
    feasible = {"p99_ttft_ms": -0.5}
    further = {**START, "mem_fraction_static": 0.95}  # the move 0.87 -> 0.91, extended

    def first(gain: float, rank: Any) -> dict | None:
        study = optuna.create_study(directions=["maximize", "minimize"])
        _measured(study, START, 400.0, feasible)
        _measured(study, {**START, "mem_fraction_static": 0.91}, 400.0 * (1 + gain), feasible)
        trials = study.get_trials(deepcopy=False)
        search = LocalSearch(space, seed=0, rank=rank)
        return search.propose(trials, {key(t.params) for t in trials})

    assert first(0.01, None) != further
    assert first(0.06, None) == further
    assert first(0.01, lambda params: 1.0) == further


def test_while_no_trial_meets_the_slos_an_untried_pair_of_choices_comes_first(space):
    """Every trial is over the TTFT limit; chunks of 2048 measured furthest over it, but only
    without speculation. The trend, additive, blames 2048 for it and holds the move back from
    the NEXTN trial closest to the limit. With the pair bonus the move loses nothing to that blame
    and gains a level, since 2048 beside NEXTN is untried; once a trial has run that pair, or
    once a trial meets the SLOs, the trend's blame counts again."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    nextn = {**START, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3}
    over = lambda params, ttft: _measured(study, params, 100.0, {"p99_ttft_ms": ttft})  # noqa: E731
    over(START, 0.5)
    over({**START, "chunked_prefill_size": 2048}, 0.9)
    over({**START, "chunked_prefill_size": 2048, "max_running_requests": 8}, 0.8)
    over({**START, "mem_fraction_static": 0.95}, 0.45)
    over({**START, "max_running_requests": 8}, 0.4)
    over(nextn, 0.3)

    def priority(pair_bonus: float) -> float:
        trials = study.get_trials()
        scored = sorted(
            ((t, s) for t in trials if (s := standing(t)) is not None),
            key=lambda ts: ts[1],
            reverse=True,
        )
        with constants(_PAIR_BONUS=pair_bonus):
            search = LocalSearch(space, seed=0)
            search.propose(trials, set())  # fits the trend
            options = search._from(scored[0][0], scored, {}, set())
        return next(p for p, _r, _t, c in options if c["chunked_prefill_size"] == 2048)

    move = next(
        m for m in moves(space, nextn) if m.param == "chunked_prefill_size" and m.value == 2048
    )
    assert priority(1.0) <= move.level - 1.0 + 1e-9
    assert priority(2.0) <= move.level - 2.0 + 1e-9
    measured = study.get_trials()
    assert _untried_pair(space, measured, move, {**nextn, "chunked_prefill_size": move.value})
    memory = next(m for m in moves(space, nextn) if m.param == "mem_fraction_static")
    assert not _untried_pair(space, measured, memory, {**nextn, memory.param: memory.value})
    tried = study.get_trials()
    over({**nextn, "chunked_prefill_size": 2048}, 0.7)
    assert priority(1.0) == pytest.approx(priority(0.0)) and priority(1.0) > move.level + 0.5
    # The same trials but the NEXTN one within the SLOs: the search is no longer lost.
    study = optuna.create_study(directions=["maximize", "minimize"])
    for t in tried[:-1]:
        study.add_trial(t)
    _trial(study, nextn, 100.0)
    assert priority(1.0) == pytest.approx(priority(0.0)) and priority(1.0) > move.level + 0.5


def test_the_stop_rules_blind_check_passes_over_a_move_the_study_measured_worse():
    """The estimate does not read adaptive speculation, so the stop rule checks the flip from
    the best trial before it stops (`blind_move`). The same flip, from a trial that differs
    only in its memory fraction, already measured worse: the check passes over it to the next
    blind move; once the flip measured better, it is checked."""
    space = space_from_dict(ADAPTIVE_SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    base = {**START, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3}
    base["speculative_adaptive"] = None
    _trial(study, base, 478.0)
    _trial(study, {**base, "speculative_adaptive": True}, 420.0)
    _trial(study, {**base, "mem_fraction_static": 0.9}, 490.0)
    trials = study.get_trials()
    best = trials[-1]
    tried = {key(t.params) for t in trials}

    def check(seen: list[Any]) -> tuple[str, dict[str, Any]] | None:
        search = LocalSearch(space, seed=0)
        search.blind = frozenset({"speculative_adaptive"})
        return search.blind_move(best, tried, seen)

    plain = check([])  # no trials given: nothing is known
    assert plain is not None and plain[0] == "speculative_adaptive"
    assert plain[1]["speculative_adaptive"] is True and plain[1]["mem_fraction_static"] == 0.9
    skipped = check(trials)
    # The next blind move: other draft steps with the flip (two moves; none measured).
    assert skipped is not None and skipped[0] == "speculative_num_steps"
    assert skipped[1]["speculative_num_steps"] != 3 and skipped[1]["speculative_adaptive"] is True
    # The flip measured better from another trial: its check comes back.
    study = optuna.create_study(directions=["maximize", "minimize"])
    _trial(study, base, 478.0)
    _trial(study, {**base, "speculative_adaptive": True}, 500.0)
    _trial(study, {**base, "mem_fraction_static": 0.9}, 510.0)
    trials = study.get_trials()
    best, tried = trials[-1], {key(t.params) for t in trials}
    assert check(trials) == plain


def test_the_stop_rules_neighbour_check_moves_the_best_trial_one_draft_step():
    """Two stopped seed 10 s studies kept 3 and 5 draft steps where their full studies found 4
    best (0.977-0.978): before it stops, the stop rule measures the best trial one step away
    in a number of few values (`neighbour_move`), the value fewer trials ran first, then the
    smaller, not one whose same move measured worse from another trial, and never a number of
    more values than asked."""
    space = space_from_dict(ADAPTIVE_SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    _trial(study, _steps(3), 478.0)
    best = study.get_trials()[-1]

    def near(upto: int) -> tuple[str, dict[str, Any]] | None:
        search = LocalSearch(space, seed=0)
        trials = study.get_trials()
        return search.neighbour_move(best, {key(t.params) for t in trials}, trials, upto)

    assert near(0) is None and near(4) is None  # draft steps have 5 values
    name, down = near(5) or ("", {})
    assert name == "speculative_num_steps" and down["speculative_num_steps"] == 2
    assert "speculative_adaptive" not in down  # inactive at 2 steps
    others = ("speculative_num_steps", "speculative_adaptive")
    assert {k: v for k, v in down.items() if k not in others} == {
        k: v for k, v in best.params.items() if k not in others
    }
    # A value the study has run less goes first: 4 steps, which no trial ran, before 2.
    _trial(study, {**_steps(2), "mem_fraction_static": 0.8}, 300.0)
    _trial(study, {**_steps(2), "mem_fraction_static": 0.75}, 290.0)
    assert (near(5) or ("", {}))[1]["speculative_num_steps"] == 4
    # 3 -> 4 steps measured worse from a trial that differs only in its memory fraction: the
    # check passes over it to 2 steps (as blind checks do).
    _trial(study, {**_steps(3), "mem_fraction_static": 0.9}, 476.0)
    _trial(study, {**_steps(4), "mem_fraction_static": 0.9}, 440.0)
    assert (near(5) or ("", {}))[1]["speculative_num_steps"] == 2
    _trial(study, _steps(2), 470.0)
    assert near(5) is None  # 4 known worse, 2 measured
    # A running cap of 1-16 moves by one step once 16 values are allowed: 4 -> 3 first.
    wide = near(16)
    assert wide is not None and wide[0] == "max_running_requests"
    assert wide[1]["max_running_requests"] == 3


def _valley_space() -> Any:
    """The search space of the held-out Qwen3.6-27B cell, cut down: MTP steps 1-5 with adaptive
    speculation at 1, 3 and 5 steps, p99 TTFT <= 3 s and p99 TPOT <= 18 ms."""
    adaptive = {"choices": [None, True], "when": {"speculative_num_steps": [1, 3, 5]}}
    params = {**SPACE["params"], "speculative_adaptive": adaptive}
    slos = [*SPACE["slos"], "p99_tpot_ms <= 18"]
    return space_from_dict({**SPACE, "params": params, "slos": slos})


def _steps(steps: int) -> dict:
    spec = {**START, "speculative_algorithm": "NEXTN", "speculative_num_steps": steps}
    return {**spec, "speculative_adaptive": None} if steps in (1, 3, 5) else spec


@pytest.mark.parametrize("four", [0.011, -0.005])  # past the limit; within it by less than 2%
def test_the_bottom_of_an_slo_metric_between_two_step_counts_that_both_miss_it_is_tried(four):
    """docs/decisions.md#valley-moves: in the held-out Qwen3.6-27B chat cell p99 TPOT was 21.4, 18.9
    and 18.8 ms at 1, 2 and 5 draft steps against an 18 ms limit, and 3 steps met it with 1.19x the
    throughput of no speculation; the search never launched 3 steps without adaptive speculation.
    The two trials beside the one that misses by least, both missing by a little with more
    throughput than the best feasible trial, have the steps between them tried, at the edge moves'
    level, until a value of the row meets the SLO by more than 2% of its limit (closer, under 2%
    noise, it may be past it: `edge_margin`)."""
    space = _valley_space()
    study = optuna.create_study(directions=["maximize", "minimize"])
    _measured(study, START, 858.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": -0.03})
    for steps, throughput, tpot in ((5, 1029.0, 0.044), (2, 954.0, 0.049), (1, 803.0, 0.19)):
        _measured(study, _steps(steps), throughput, {"p99_ttft_ms": -0.8, "p99_tpot_ms": tpot})
    search = LocalSearch(space, seed=0)

    def valley() -> tuple[dict, float] | None:
        trials = study.get_trials(deepcopy=False)
        return search.valley_move(trials, {key(t.params) for t in trials})

    trials = study.get_trials(deepcopy=False)
    tried = {key(t.params) for t in trials}
    assert valley() == (_steps(4), 954.0)  # halfway between 5 and 2, rounded
    assert search.propose(trials, tried) == _steps(4)
    _measured(study, _steps(4), 1026.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": four})
    assert valley() == (_steps(3), 954.0)  # 4 misses by least now; 4 and 5 are adjacent
    _measured(study, _steps(3), 1022.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": -0.03})
    assert valley() is None  # a value of the row meets the SLO: an edge, if anything


@pytest.mark.parametrize(
    ("near_tpot", "near_throughput", "far_tpot", "valley"),
    [
        (0.049, 954.0, 0.19, True),
        (0.15, 954.0, 0.19, False),  # the neighbour misses by more than valley_near (10%)
        (0.049, 850.0, 0.19, False),  # the neighbour measured less than the best feasible trial
        # The neighbour measured 1.4% more than the best feasible trial (858), under the 3% a
        # move must be able to gain: in slow constants' seed-tpot cell (seed 0, stop rule) such
        # a move between memory fractions 0.90 and 0.95 (284 and 308 tok/s against 281) led
        # the stopped study from 1.000 to 0.925 of its full study's best.
        (0.049, 870.0, 0.19, False),
        (0.049, 954.0, None, True),  # two values of the row are enough
        # Throughputs within 3% of each other: the number changed nothing measurable, as memory
        # fractions that run alike (slow constants, seed 3 s: 0.93 and 0.95, 6% and 8% past
        # the TTFT limit, 297.6 tok/s each noise-free).
        (0.049, 1010.0, 0.19, False),
    ],
)
def test_a_valley_needs_both_trials_close_to_the_limit_and_above_the_best(
    near_tpot: float, near_throughput: float, far_tpot: float | None, valley: bool
):
    space = _valley_space()
    study = optuna.create_study(directions=["maximize", "minimize"])
    _measured(study, START, 858.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": -0.03})
    _measured(study, _steps(5), 1029.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": 0.044})
    _measured(study, _steps(2), near_throughput, {"p99_ttft_ms": -0.8, "p99_tpot_ms": near_tpot})
    if far_tpot is not None:
        _measured(study, _steps(1), 803.0, {"p99_ttft_ms": -0.8, "p99_tpot_ms": far_tpot})
    trials = study.get_trials(deepcopy=False)
    found = LocalSearch(space, seed=0).valley_move(trials, {key(t.params) for t in trials})
    assert (found is not None) is valley


def test_a_value_every_trial_ran_far_below_the_base_waits():
    """A flat landscape under noise (a held-out retrieval cell, spent): the best trial changed
    between caps that ran alike, and a running cap of 1, a range end, was launched again from
    each new best, six times in one study at a seventh of the plateau's throughput. With
    `known_low_penalty`, a move to a value that every complete trial running it measured below
    `known_low_share` of the base waits; a value some trial ran well does not."""
    from tuner.study.local_search import _known_low, _value_best

    space = space_from_dict(SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    _trial(study, {**START, "max_running_requests": 1, "mem_fraction_static": 0.7}, 140.0)
    _trial(study, {**START, "max_running_requests": 16, "mem_fraction_static": 0.7}, 1900.0)
    _trial(study, {**START, "max_running_requests": 12}, 2000.0)  # the best
    trials = study.get_trials(deepcopy=False)
    scored = [(t, standing(t)) for t in trials]
    scored.sort(key=lambda ts: ts[1], reverse=True)
    best = scored[0][0]
    low = _known_low(_value_best(space, scored), best, 0.5)
    assert ("max_running_requests", "1") in low
    assert ("mem_fraction_static", "0.7") not in low  # 1,900 tok/s there: not below half

    def priority(penalty: float, params: dict) -> float:
        with constants(_KNOWN_LOW_PENALTY=penalty):
            search = LocalSearch(space, seed=0)
            search._value_best = _value_best(space, scored)  # what `propose` sets first
            tried = {key(t.params) for t in trials}
            options = search._from(best, scored, {}, tried)
        return next(p for p, _r, _t, c in options if c == params)

    to_one = {**best.params, "max_running_requests": 1}
    to_low_memory = {**best.params, "mem_fraction_static": 0.7}
    assert local_search._KNOWN_LOW_PENALTY == 3.0
    assert priority(3.0, to_one) == priority(0.0, to_one) + 3.0
    assert priority(3.0, to_low_memory) == priority(0.0, to_low_memory)


def _plain_then_nextn(draft_ttft: float) -> tuple[SearchSpace, optuna.Study]:
    """A space whose adaptive speculation hangs on the draft steps, and a study of two trials:
    no draft at 300 tok/s within the TTFT limit, then NEXTN at 1 step at 380 (adaptive
    speculation unset) at `draft_ttft` of the limit past it."""
    adaptive = {"choices": [None, True], "when": {"speculative_num_steps": [1, 3, 5]}}
    space = space_from_dict(
        {**SPACE, "params": {**SPACE["params"], "speculative_adaptive": adaptive}}
    )
    study = optuna.create_study(directions=["maximize", "minimize"])
    plain = {**START, "max_running_requests": 16}
    _measured(study, plain, 300.0, {"p99_ttft_ms": -0.3})
    draft = {**plain, "speculative_algorithm": "NEXTN", "speculative_num_steps": 1}
    _measured(study, {**draft, "speculative_adaptive": None}, 380.0, {"p99_ttft_ms": draft_ttft})
    return space, study


def test_a_branch_is_found_across_the_params_its_choice_switches_on_in_turn():
    """Adaptive speculation hangs on the draft steps, which hang on the algorithm: a NEXTN
    trial sets it (None), the best trial without a draft sets neither. Counting the
    algorithm's children alone, the NEXTN trial matched no branch of the best, and model-free
    search in the effects world at 3 s never moved its draft steps at the memory its slots
    needed (0.783 of the optimum in six seeds of ten,
    docs/decisions.md#branches-count-every-param-a-choice-switches-on-in-turn)."""
    space, study = _plain_then_nextn(0.5)
    scored = by_standing(study.get_trials(deepcopy=False))
    branches = LocalSearch(space, seed=0)._branches(scored[0][0], scored)
    assert [(t.number, name) for t, name in branches] == [(1, "speculative_algorithm")]


def test_a_moves_effect_is_learnt_across_the_params_its_choice_switches_on_in_turn():
    """The move None -> NEXTN, from a trial without a draft to one at 1 step: the NEXTN trial
    sets adaptive speculation too (it hangs on the steps), so a pair grouped by every param but
    the algorithm and its children never matched. With `deep_context` the pair is one move,
    and its effect is learnt."""
    space, study = _plain_then_nextn(-0.2)
    trials = study.get_trials(deepcopy=False)
    move = ("speculative_algorithm", "None", "'NEXTN'", ())
    assert _move_effects(space, trials)[move] == 1.0
    back = ("speculative_algorithm", "'NEXTN'", "None")
    deep_back = [k for k in _move_effects(space, trials) if k[:3] == back]
    assert len(deep_back) == 1 and dict(deep_back[0][3])["speculative_adaptive"] == "None"


def test_an_untried_pair_leaves_out_the_params_its_choice_switches_on_in_turn():
    """The move None -> NEXTN sets adaptive speculation too (it hangs on the draft steps): a
    value of it that no NEXTN trial ran is the move's own, not an untried pair of two params
    the trials ran apart; counting the algorithm's children alone, it was."""
    space, study = _plain_then_nextn(0.5)
    trials = study.get_trials(deepcopy=False)
    plain = trials[0].params
    move = next(m for m in moves(space, plain) if m.param == "speculative_algorithm")
    candidate = {**plain, move.param: move.value, "speculative_num_steps": 3}
    candidate["speculative_adaptive"] = True  # the NEXTN trial ran it unset
    assert not _untried_pair(space, trials, move, candidate)


def _queued_nextn(stage_share: float, running: int) -> tuple[SearchSpace, list, dict]:
    """No draft at 16 of 16 clients within the TTFT limit (330 tok/s, memory 0.91), and NEXTN
    at 1 step and the same memory, past the limit, that ran `running` requests at once and
    measured `stage_share` of the best's throughput: its trials and the NEXTN params."""
    space = space_from_dict(SPACE)
    study = optuna.create_study(directions=["maximize", "minimize"])
    plain = {**START, "max_running_requests": 16, "mem_fraction_static": 0.91}
    ran = {record.CAPACITY: {"max_running_requests": 16}}
    _measured(study, plain, 330.0, {"p99_ttft_ms": -0.3}, ran, named=True)
    draft = {**plain, "speculative_algorithm": "NEXTN", "speculative_num_steps": 1}
    queued = {record.CAPACITY: {"max_running_requests": running}}
    _measured(study, draft, 330.0 * stage_share, {"p99_ttft_ms": 1.4}, queued, named=True)
    return space, study.get_trials(deepcopy=False), draft


def test_a_trial_that_queued_past_the_ttft_limit_is_given_more_slots():
    """Model-free search, seed space at 3 s (shipped, seed 1): NEXTN at 1 step and memory 0.91
    ran 15 of 16 clients at once and queued the TTFT tail past the limit; cut after its first
    stage, it measured 0.9 of the best trial's throughput (no draft). The same at memory 0.95
    is the optimum, but the search moved from NEXTN at 5 steps (the branch's least violation),
    and this trial was never a base. The slot repair moves it to its most running slots."""
    space, trials, draft = _queued_nextn(0.9, 15)
    tried = {key(t.params) for t in trials}
    search = LocalSearch(space, seed=0)
    repaired = [c for *_, c in search._repairs(by_standing(trials), {}, tried, 0.0)]
    # Each slot flag to the top of its range (the cap is there already), nothing else.
    assert repaired == [{**draft, "mem_fraction_static": 0.95}]
    # It ran every client (nothing queued), or measured too little to matter: no repair.
    for share, running in ((0.9, 16), (0.8, 15)):
        space, trials, _draft = _queued_nextn(share, running)
        assert not search._repairs(by_standing(trials), {}, tried, 0.0)


def test_a_slot_repair_of_a_trial_that_measured_more_than_the_best_comes_first():
    """Model-free search, seed space at 3 s (shipped, seed 9): NEXTN at 1 step and memory 0.90
    queued past the TTFT limit and measured more than the best trial (no draft), but its
    repair waited at level 0 behind moves of the plateau's memory and HiCache ratio that all
    measured alike, until the best rose above it and the repair was gone. A repair whose
    trial measured more than the best by more than the noise comes before the extension
    (`repair_ahead`); one that measured less waits at the repairs' level."""
    space, trials, draft = _queued_nextn(1.2, 15)
    tried = {key(t.params) for t in trials}
    search = LocalSearch(space, seed=0)
    assert search.propose(trials, tried) == {**draft, "mem_fraction_static": 0.95}
    ahead = local_search._REPAIR_AHEAD
    assert ahead < local_search._EXTENSION
    [(priority, *_rest)] = search._repairs(by_standing(trials), {}, tried, 0.0)
    assert priority <= ahead + 1
    space, trials, draft = _queued_nextn(0.9, 15)
    [(priority, *_rest)] = search._repairs(by_standing(trials), {}, tried, 0.0)
    assert priority > ahead + 5


def test_slot_repairs_are_made_only_without_an_estimate(monkeypatch):
    """With an estimate to rank the moves (the default), the repairs are not made: there the
    full studies ran the same and the stopped ones spent more
    (docs/decisions.md#slot-repairs-model-free-search)."""
    space, trials, _draft = _queued_nextn(0.9, 15)
    tried = {key(t.params) for t in trials}
    search = LocalSearch(space, seed=0)
    calls = []
    real = search._repairs
    monkeypatch.setattr(search, "_repairs", lambda *a: calls.append(1) or real(*a))
    search.propose(trials, tried)
    assert calls == [1]
    search.rank = lambda params: 0.0
    search.propose(trials, tried)
    assert calls == [1]
