"""Range bounds relative to the workload (tuner/space/relative.py) and the honest trial budget
(tuner/study/budget.py)."""

from __future__ import annotations

import io

import optuna
import pytest
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.predict.capacity_bound import running_capacity
from tuner.results import record
from tuner.space.load import load_space, space_from_dict
from tuner.space.relative import PROVISIONAL_CAPACITY
from tuner.study.budget import SkipLimit, SpaceMostlyInfeasible, counts
from tuner.study.loop import run_trials
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run


def _space(bound: object, bench: dict | None = None) -> dict:
    return {
        "model_path": "m",
        "params": {"max_running_requests": {"low": 1, "high": bound, "log": True}},
        "workload": {"kind": "random"},
        "bench": bench or {"concurrency": 16},
    }


def test_a_bound_relative_to_the_client_count_resolves_at_load_time():
    space = space_from_dict(_space("concurrency"))
    param = space.params["max_running_requests"]
    assert (param.kind, param.low, param.high) == ("int", 1, 16)
    # The stored form keeps the relation, and reads back to the same space.
    assert param.to_dict()["high"] == "concurrency"
    again = space_from_dict(space.to_dict())
    assert again.to_dict() == space.to_dict()
    assert space_from_dict(_space("2 * concurrency")).params["max_running_requests"].high == 32


def test_a_relative_bound_follows_the_benchmark():
    space = space_from_dict(_space("concurrency", {"concurrency": 64}))
    assert space.params["max_running_requests"].high == 64


@pytest.mark.parametrize(
    ("bound", "bench", "expected"),
    [
        (
            "clients",
            {"concurrency": 16},
            "may name only concurrency, capacity",
        ),
        ("concurrency", {"concurrency": None, "request_rate": 4}, "write `capacity`"),
        ("concurrency", {"concurrency": None}, "no cap on requests in flight"),
        ("__import__('os')", {"concurrency": 16}, "only min(...) and max(...)"),
    ],
)
def test_a_relative_bound_that_cannot_resolve_names_the_key(bound, bench, expected):
    with pytest.raises(UserError, match=r"params\.max_running_requests\.high") as err:
        space_from_dict(_space(bound, bench))
    assert expected in str(err.value)


def test_a_capacity_bound_is_provisional_until_the_host_or_the_file_says():
    open_loop = {"concurrency": None, "request_rate": 4}
    space = space_from_dict(_space("capacity", open_loop))
    assert space.needs_capacity and space.capacity is None
    assert space.params["max_running_requests"].high == PROVISIONAL_CAPACITY
    assert "capacity" not in space.to_dict()
    fixed = space_from_dict({**_space("capacity // 2", open_loop), "capacity": 48})
    assert not fixed.needs_capacity and fixed.params["max_running_requests"].high == 24
    stored = fixed.to_dict()
    assert stored["capacity"] == 48 and stored["params"]["max_running_requests"]["high"] == (
        "capacity // 2"
    )
    assert space_from_dict(stored).to_dict() == stored
    with pytest.raises(UserError, match="capacity"):
        space_from_dict({**_space("capacity", open_loop), "capacity": 0})


def test_an_open_loop_study_bounds_the_running_cap_by_what_the_gpu_can_run(tmp_path):
    from support.sim_spaces import small_space

    path = small_space(
        tmp_path,
        name="openloop",
        bench={"concurrency": None, "request_rate": 8.0},
        params={"max_running_requests": {"low": 1, "high": "capacity", "log": True}},
    )
    run = resolve_run(StudyOptions(space_path=path, studies_dir=tmp_path / "studies"))
    model, gpu_gb = run.host.model, run.host.gpu_memory_gb
    capacity = running_capacity(load_space(path), model, gpu_gb)
    # The seed model on its 96 GB GPU: more than a handful of requests, fewer than the
    # provisional bound; and a lower memory fraction holds fewer.
    assert 8 < capacity < PROVISIONAL_CAPACITY
    space = run.space
    assert space.capacity == capacity
    assert space.params["max_running_requests"].high == capacity
    smaller = small_space(
        tmp_path,
        name="openloop-small",
        bench={"concurrency": None, "request_rate": 8.0},
        params={
            "mem_fraction_static": {"low": 0.7, "high": 0.75, "step": 0.01},
            "max_running_requests": {"low": 1, "high": "capacity", "log": True},
        },
    )
    assert running_capacity(load_space(smaller), model, gpu_gb) < capacity


def test_a_capacity_bound_without_the_model_config_says_how_to_fix_it(tmp_path):
    import yaml

    data = _space("capacity", {"concurrency": None, "request_rate": 4})
    path = tmp_path / "nocfg.yaml"
    # a repo id this host has not cached: sglang would fetch it, the estimate cannot read it
    path.write_text(yaml.safe_dump({**data, "model_path": "no-such-org/no-such-model"}))
    options = StudyOptions(space_path=path, engine="sglang", gpu_memory_gb=80.0)
    with pytest.raises(UserError, match=r"needs the model's config.json: .*capacity: N"):
        resolve_run(options)


def _objective_skipping(skip_every: int):
    """A fake objective: every `skip_every`-th proposal is rejected before launch."""

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        x = trial.suggest_int("x", 0, 1000)
        if trial.number % skip_every == 0:
            trial.set_user_attr(record.OUTCOME, record.OUTCOME_SKIPPED)
            trial.set_user_attr(record.FAILURE_MSG, "no KV cache would fit")
            raise optuna.TrialPruned("skipped")
        trial.set_user_attr(record.OUTCOME, record.OUTCOME_OK)
        return float(x), 1.0

    return objective


def test_skipped_proposals_do_not_count_against_the_budget():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    run_trials(study, _objective_skipping(3), total=10)
    trials = study.get_trials(deepcopy=False)
    assert sum(counts(t) for t in trials) == 10
    skipped = [t for t in trials if t.user_attrs.get(record.OUTCOME) == record.OUTCOME_SKIPPED]
    assert len(skipped) >= 4 and all(t.state == TrialState.PRUNED for t in skipped)


def test_a_mostly_infeasible_space_stops_with_a_clear_message():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    with pytest.raises(SpaceMostlyInfeasible, match=r"mostly infeasible.*no KV cache would fit"):
        run_trials(study, _objective_skipping(1), total=5)
    assert len(study.trials) == SkipLimit().max_free_in_a_row


def test_the_live_display_shows_skips_and_repeats_apart_from_the_trial_count():
    from rich.console import Console

    from tuner.optimize.progress import OptimizeDisplay

    display = OptimizeDisplay(Console(file=io.StringIO()), 40, "tok/s", "ms")
    display("start", {"done": 0})
    display("completed", {"number": 0, "throughput": 10.0, "latency": 5.0})
    display("failed", {"number": 1, "outcome": record.OUTCOME_SKIPPED, "message": "no KV"})
    display("completed", {"number": 2, "throughput": 10.0, "latency": 5.0, "duplicate": True})
    assert display.finished == 1
    assert display.counts["skipped"] == 1 and display.counts["repeated"] == 1
    assert "skipped 1  repeated 1" in display.render().renderables[0].plain


def test_a_space_smaller_than_the_budget_ends_the_study_normally():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        x = trial.suggest_categorical("x", [1, 2])
        same = [
            t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.params == {"x": x}
        ]  # fmt: skip
        if same:  # as TrialObjective does: the result is copied, nothing launched
            trial.set_user_attr(record.DUPLICATE_OF, same[0].number)
        return float(x), 1.0

    run_trials(study, objective, total=10)  # returns: only 2 configurations exist
    assert sum(counts(t) for t in study.trials) == 2
