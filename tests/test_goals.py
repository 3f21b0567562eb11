"""`--goal throughput | latency | balanced`: the objectives, SLOs and export pick a word stands
for, the space file's own settings winning, and each goal end to end on the simulator."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml
from support.fixture_studies import build_study
from support.sim_spaces import small_space

from tuner.errors import UserError
from tuner.optimize.command import run_optimize
from tuner.results import record
from tuner.results.export import export_trial
from tuner.results.goals import GOALS, Slo, goal_defaults, goal_named
from tuner.results.storage import open_storage
from tuner.study.loop import stop_rule
from tuner.study.options import StudyOptions, check_options
from tuner.study.run import resolve_run


def _space_without_goals(tmp_path: Path) -> Path:
    """The small simulator space with no `objectives:` and no `slos:`: a goal fills them in."""
    path = small_space(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["objectives"], data["slos"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_goal_fills_in_what_the_space_file_leaves_out_and_the_file_wins():
    latency = GOALS["latency"]
    assert goal_defaults(latency, {"params": {}}) == {
        "objectives": {"throughput": "output_throughput", "latency": "p99_tpot_ms"},
        "slos": ["p99_ttft_ms <= 2000"],
    }
    assert goal_defaults(latency, {"slos": []}) == {
        "objectives": {"throughput": "output_throughput", "latency": "p99_tpot_ms"}
    }
    assert goal_defaults(latency, {"objectives": {}, "slos": []}) == {}
    assert goal_defaults(None, {}) == {}


def test_resolve_run_applies_the_goal_unless_the_space_says_otherwise(tmp_path):
    bare = _space_without_goals(tmp_path)
    run = resolve_run(StudyOptions(space_path=bare, goal="latency"))
    assert run.space.objectives.latency == "p99_tpot_ms"
    assert run.space.slos == [Slo("p99_ttft_ms", "<=", 2000.0)]
    assert resolve_run(StudyOptions(space_path=bare, goal="throughput")).space.slos == []
    own = small_space(tmp_path, name="own")  # gives objectives and p99_ttft_ms <= 20000
    run = resolve_run(StudyOptions(space_path=own, goal="latency"))
    assert run.space.objectives.latency == "median_tpot_ms"
    assert run.space.slos == [Slo("p99_ttft_ms", "<=", 20000.0)]


def test_the_stop_rule_watches_what_the_goal_is_about():
    assert stop_rule(StudyOptions()).measure == "front"
    assert stop_rule(StudyOptions(goal="throughput")).measure == "throughput"
    assert stop_rule(StudyOptions(goal="latency")).measure == "latency"
    assert stop_rule(StudyOptions(goal="balanced", min_gain=0.02)).min_gain == 0.02


def test_an_unknown_goal_lists_the_goals():
    check_options(StudyOptions(goal="capacity"))  # built: tests/test_capacity_study.py
    with pytest.raises(UserError, match=r"--goal 'speed' is not a goal: choose one of throughput"):
        goal_named("speed")


@pytest.mark.parametrize(
    ("goal", "expected"), [("throughput", 2), ("latency", 5), ("balanced", 12), (None, 12)]
)
def test_export_without_pick_uses_the_studys_goal(tmp_path, goal, expected):
    storage = optuna.storages.InMemoryStorage()
    study = build_study(storage, "qwen-mtp")  # max-throughput 2, min-latency 5, knee 12
    if goal:
        study.set_user_attr(record.STUDY_GOAL, goal)
    result = export_trial(storage, "qwen-mtp", out_dir=tmp_path)
    assert result.trial_number == expected
    assert result.picked_by == (GOALS[goal].pick if goal else "knee")


# capacity needs an open-loop space: tests/test_capacity_study.py runs it end to end
@pytest.mark.parametrize("goal", sorted(set(GOALS) - {"capacity"}))
def test_each_goal_runs_end_to_end_on_the_simulator(tmp_path, capsys, goal):
    options = StudyOptions(
        trials=2, space_path=_space_without_goals(tmp_path), studies_dir=tmp_path, seed=0, goal=goal
    )
    assert run_optimize(options, workers=1, report=False) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--pick {GOALS[goal].pick}" in out
    storage = open_storage(None, "small", tmp_path)
    study = optuna.load_study(study_name="small", storage=storage)
    assert study.user_attrs[record.STUDY_GOAL] == goal
    assert study.user_attrs[record.STUDY_OBJECTIVES][1]["metric"] == GOALS[goal].latency
    slos = [f"{s['metric']} {s['op']} {s['limit']:g}" for s in study.user_attrs[record.STUDY_SLOS]]
    assert slos == list(GOALS[goal].slos)
    assert export_trial(storage, "small", out_dir=tmp_path).picked_by == GOALS[goal].pick
