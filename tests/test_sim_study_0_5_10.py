"""A simulated sglang 0.5.10 study launches HiCache configurations (0.5.10 has no refusal for
HiCache on hybrid models or with speculation, and its host pool is rounded up by a page, so
--hicache-ratio 1.0 starts too)."""

from __future__ import annotations

import optuna
import yaml
from support.sim_spaces import small_space

from tuner.results import record
from tuner.results.storage import open_storage
from tuner.study.loop import run_study
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run


def test_a_0_5_10_study_launches_hicache_on_the_hybrid_model_with_and_without_mtp(tmp_path):
    params = {
        "speculative_algorithm": {"choices": [None, "NEXTN"]},
        "enable_hierarchical_cache": {"choices": [True]},
        "hicache_ratio": {"choices": [1.0, 2.0]},
        "mem_fraction_static": {"choices": [0.93]},
        "mamba_radix_cache_strategy": {"choices": ["extra_buffer"]},
    }
    space = small_space(tmp_path, "old", engine={"name": "sglang", "version": "0.5.10"})
    data = yaml.safe_load(space.read_text())
    data["params"] = params  # replaces the seed space's parameters
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    run_study(
        resolve_run(
            StudyOptions(
                space_path=space,
                studies_dir=tmp_path / "studies",
                seed=0,
                trials=8,
                sampler="random",
            )
        )
    )
    storage = open_storage(None, "old", tmp_path / "studies")
    trials = optuna.load_study(study_name="old", storage=storage).get_trials()
    hicache = [t for t in trials if t.params.get("enable_hierarchical_cache")]
    sampled = {(t.params["speculative_algorithm"], t.params["hicache_ratio"]) for t in hicache}
    assert {("NEXTN", 1.0), (None, 1.0)} <= sampled
    for t in hicache:
        argv = t.user_attrs[record.SERVER_ARGS]
        assert "--mamba-scheduler-strategy" in argv  # 0.5.10's flag name
        assert t.user_attrs[record.OUTCOME] in (record.OUTCOME_OK, record.OUTCOME_PRUNED), (
            t.params,
            t.user_attrs.get(record.FAILURE_MSG),
        )
