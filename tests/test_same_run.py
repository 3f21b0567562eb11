"""Flags that cannot change the run launch once (tuner/trial/same_run.py): the rule itself, the
model facts it needs, and a study on the simulator's oracle where a repeat is free and recorded."""

from __future__ import annotations

import importlib
from pathlib import Path

import optuna
import yaml

from tuner.engines.model_config import ModelMemory, read_config
from tuner.results import record
from tuner.study.budget import counts
from tuner.trial.same_run import SameRunRules, decode_graph_sizes_from

ROOT = Path(__file__).resolve().parents[1]
PLAIN = SameRunRules(clients=16, full_attention_only=True)
BASE = {"model_path": "Qwen/Qwen3-8B", "mem_fraction_static": 0.85}


def flags(cap: int | None, **more: object) -> dict[str, object]:
    out: dict[str, object] = {**BASE, **more}
    if cap is not None:
        out["max_running_requests"] = cap
    return out


def test_a_cap_above_the_clients_repeats_a_measured_larger_cap():
    assert PLAIN.repeats(flags(64), flags(128)) is not None
    assert PLAIN.repeats(flags(16), flags(128)) is not None  # 16 is a captured graph size
    # The other way round it is not the same launch: the larger cap needs more graph memory.
    assert PLAIN.repeats(flags(128), flags(64)) is None


def test_what_keeps_two_caps_apart():
    assert PLAIN.repeats(flags(8), flags(128)) is None  # below the clients: it queues them
    assert PLAIN.repeats(flags(64, chunked_prefill_size=4096), flags(128)) is None
    assert PLAIN.repeats(flags(None), flags(128)) is None  # unset: sglang derives it
    hybrid = SameRunRules(clients=16, full_attention_only=False)
    assert hybrid.repeats(flags(64), flags(128)) is None  # state pools sized by the cap
    spec = flags(64, speculative_algorithm="EAGLE")
    assert PLAIN.repeats(spec, {**spec, "max_running_requests": 128}) is None
    open_loop = SameRunRules(clients=None, full_attention_only=True)
    assert open_loop.repeats(flags(64), flags(128)) is None
    # 20 clients: batches of 17-20 pad to the cap 20 itself, to 24 under a cap of 128.
    twenty = SameRunRules(clients=20, full_attention_only=True)
    assert decode_graph_sizes_from(20) == 24
    assert twenty.repeats(flags(20), flags(128)) is None
    assert twenty.repeats(flags(24), flags(128)) is not None
    assert twenty.repeats(flags(20, disable_cuda_graph=True), flags(128, disable_cuda_graph=True))


def test_which_models_have_full_attention_only():
    profiles = ROOT / "tuner" / "sim" / "profiles" / "model"
    assert ModelMemory.from_hf_config(read_config(profiles / "qwen3-8b")).full_attention_only
    hybrid = ModelMemory.from_hf_config(read_config(profiles / "qwen3.6-27b"))
    assert hybrid.hybrid and not hybrid.full_attention_only
    base = read_config(profiles / "qwen3-8b")
    windowed = {**base, "sliding_window": 4096, "use_sliding_window": True}
    assert not ModelMemory.from_hf_config(windowed).full_attention_only
    switched_off = {**base, "sliding_window": 4096, "use_sliding_window": False}
    assert ModelMemory.from_hf_config(switched_off).full_attention_only
    mla = {**base, "kv_lora_rank": 512}
    assert not ModelMemory.from_hf_config(mla).full_attention_only


def _space(tmp_path: Path, source: str) -> Path:
    """A shipped space with the running cap as its only param, 16 clients, a short load."""
    data = yaml.safe_load((ROOT / "search_spaces" / f"{source}.yaml").read_text())
    data["name"] = f"cap-{source}"
    data["params"] = {"max_running_requests": {"low": 4, "high": 128, "log": True}}
    data["workload"] = {
        "kind": "random",
        "num_requests": 48,
        "input_len": 512,
        "output_len": 64,
        "seed": 0,
    }
    data["bench"] = {**data["bench"], "concurrency": 16, "warmup_requests": 0, "stages": 2}
    path = tmp_path / f"{source}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _study(space_path: Path, caps: list[int]):
    """The real objective and study loop, served by the simulator's oracle; the caps queued."""
    from tuner.launcher import LaunchTarget
    from tuner.space.load import load_space
    from tuner.study import run_trials
    from tuner.study.loop import quiet_optuna
    from tuner.trial import ObjectiveConfig, StagePruner, TrialObjective

    quiet_optuna()
    oracle_measurer = importlib.import_module("benchmarks.oracle_measurer")
    host = importlib.import_module("benchmarks.quality.study").host_facts
    space = load_space(space_path)
    facts = host(space)
    serve = oracle_measurer.OracleMeasurer(space, seed=0)
    objective = TrialObjective(
        ObjectiveConfig(
            space=space,
            study_dir=space_path.parent,
            target=LaunchTarget(),
            pruner=StagePruner(enabled=False),
            crash_model=None,
            model_memory=facts.model,
            gpu_memory_gb=facts.gpu_memory_gb,
            measurer=serve,
        )
    )
    study = optuna.create_study(directions=["maximize", "minimize"])
    for cap in caps:
        study.enqueue_trial({"max_running_requests": cap})
    run_trials(study, objective, len(caps) - 1)  # the repeat is free
    return study, serve


def test_a_repeat_on_a_full_attention_model_is_free_and_says_which_trial(tmp_path):
    study, serve = _study(_space(tmp_path, "qwen3-8b-h200"), [128, 64, 8])
    first, repeat, below = study.get_trials(deepcopy=False)[:3]
    assert repeat.user_attrs[record.DUPLICATE_OF] == first.number
    assert "running cap 64 vs 128" in repeat.user_attrs[record.SAME_RUN]
    assert not counts(repeat) and counts(first) and counts(below)  # free, as a repeat is
    assert repeat.number not in serve.costs and below.number in serve.costs  # nothing launched
    assert repeat.values == first.values
    assert repeat.user_attrs[record.CAPACITY]["max_running_requests"] == 64
    own = list(repeat.user_attrs[record.SERVER_ARGS])  # its own argv, not the one measured
    assert own[own.index("--max-running-requests") + 1] == "64"
    # The simulator agrees: a launch of the repeated configuration measures the same; a cap
    # below the clients does not.
    args = {t.number: list(t.user_attrs[record.SERVER_ARGS]) for t in (first, repeat, below)}
    exact = {n: serve.exact_summary(a) for n, a in args.items()}
    keys = ("output_throughput", "median_tpot_ms", "p99_ttft_ms", "duration")
    assert all(exact[repeat.number][k] == exact[first.number][k] for k in keys)
    assert exact[below.number]["output_throughput"] < 0.9 * exact[first.number]["output_throughput"]


def test_the_same_caps_on_a_hybrid_model_launch_twice(tmp_path):
    study, serve = _study(_space(tmp_path, "qwen3.6-27b-mtp-hicache"), [128, 64, 8])
    first, second = study.get_trials(deepcopy=False)[:2]
    assert record.DUPLICATE_OF not in second.user_attrs and counts(second)
    assert first.number in serve.costs and second.number in serve.costs
