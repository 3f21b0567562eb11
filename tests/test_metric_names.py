"""optuna-dashboard names a study's objectives by the study's metric names, not "Objective 0/1"."""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.host import HostFacts
from tuner.launcher import LaunchTarget
from tuner.space import default_space_path, load_space
from tuner.study import StudyOptions
from tuner.study.loop import ensure_study_attrs, metric_name
from tuner.study.run import Run


def test_a_new_study_names_its_objectives_with_their_units():
    space = load_space(default_space_path())
    study = optuna.create_study(directions=["maximize", "minimize"])
    ensure_study_attrs(study, Run(StudyOptions(engine="sim"), space, Path("s.yaml"),
                                  LaunchTarget(), HostFacts()))  # fmt: skip
    names = study.metric_names
    assert names == [
        f"{space.objectives.throughput} (tok/s)",
        f"{space.objectives.latency} (ms)",
    ]
    # Read back from the storage, as optuna-dashboard reads them.
    again = optuna.load_study(study_name=study.study_name, storage=study._storage)
    assert again.metric_names == names


def test_each_kind_of_objective_gets_its_unit():
    assert metric_name("median_tpot_ms") == "median_tpot_ms (ms)"
    assert metric_name("total_throughput") == "total_throughput (tok/s)"
    assert metric_name("sustained_request_rate") == "sustained_request_rate (req/s)"
    assert metric_name("accept_length") == "accept_length"
