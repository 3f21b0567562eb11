"""Flags that cannot change the run launch once (tuner/trial/same_run.py): the rule itself, the
model facts it needs, and a study on the simulator's oracle where a repeat is free and recorded."""

from __future__ import annotations

import importlib
from pathlib import Path

import optuna
import yaml

from tuner.bench.workload import WorkloadSpec
from tuner.engines.model_config import ModelMemory, read_config
from tuner.results import record
from tuner.study.budget import counts
from tuner.trial.same_run import SameRunRules, decode_graph_sizes_from, resident_token_bound

ROOT = Path(__file__).resolve().parents[1]
PLAIN = SameRunRules(clients=16, full_attention_only=True, gpu_memory_gb=141.0)
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
    twenty = SameRunRules(clients=20, full_attention_only=True, gpu_memory_gb=141.0)
    assert decode_graph_sizes_from(20) == 24
    assert twenty.repeats(flags(20), flags(128)) is None
    assert twenty.repeats(flags(24), flags(128)) is not None
    assert twenty.repeats(flags(20, disable_cuda_graph=True), flags(128, disable_cuda_graph=True))


# 64 clients on Qwen3-8B (147,456 KV bytes a token) on a 141 GB GPU, a workload that can hold
# at most 200,000 tokens: a pool of 560,000 at a fraction of 0.80 holds it.
H200 = SameRunRules(
    clients=64,
    full_attention_only=True,
    gpu_memory_gb=141.0,
    kv_bytes_per_token=147456.0,
    resident_tokens=200_000,
)
POOL = {"max_total_num_tokens": 560_000, "max_running_requests": 64}
_QWEN3_8B = ModelMemory.from_hf_config(read_config(ROOT / "tuner/sim/profiles/model/qwen3-8b"))


def h200(fraction: float, limit: int | None = None, cap: int = 64) -> dict[str, object]:
    return flags(cap, mem_fraction_static=fraction, cuda_graph_max_bs_decode=limit)


def test_a_smaller_memory_fraction_repeats_when_both_pools_hold_the_whole_workload():
    reason = H200.repeats(h200(0.80), h200(0.90), POOL)
    assert reason is not None and "memory fraction 0.8 vs 0.9" in reason
    assert "200,000 tokens" in reason
    # 0.10 of the GPU is 13.1 GiB, 95,600 tokens less: 464,000 still hold 1.1 x 200,000.
    assert H200.capacity(POOL, h200(0.80), h200(0.90))["max_total_num_tokens"] < 465_000
    # A larger fraction needs memory the measured launch never had.
    assert H200.repeats(h200(0.90), h200(0.80), POOL) is None
    # A pool that may no longer hold the workload can evict and make requests wait.
    assert H200.repeats(h200(0.50), h200(0.90), POOL) is None
    tight = SameRunRules(**{**H200.__dict__, "resident_tokens": 450_000})
    assert tight.repeats(h200(0.80), h200(0.90), POOL) is None
    # Without what the measured server reported, or an exact token count, nothing is known.
    assert H200.repeats(h200(0.80), h200(0.90), None) is None
    unknown = SameRunRules(**{**H200.__dict__, "resident_tokens": None})
    assert unknown.repeats(h200(0.80), h200(0.90), POOL) is None


def test_a_larger_fraction_repeats_only_where_another_launch_shows_it_starts():
    slots = {"max_running_requests": 64}
    larger = H200.repeats(h200(0.9), h200(0.8), POOL, [(7, h200(0.95, cap=128), slots)])
    assert larger is not None and "trial 7 started with at least as much memory" in larger
    # The queue order sizes nothing; a smaller chunk (less activation memory) proves nothing.
    lpm = {**h200(0.95), "schedule_policy": "lpm"}
    assert H200.repeats(h200(0.9), h200(0.8), POOL, [(7, lpm, slots)]) is not None
    chunk = {**h200(0.95), "chunked_prefill_size": 4096}
    proposal = {**h200(0.9), "chunked_prefill_size": 8192}
    measured = {**h200(0.8), "chunked_prefill_size": 8192}
    assert H200.repeats(proposal, measured, POOL, [(7, chunk, slots)]) is None
    assert H200.repeats(h200(0.9), h200(0.8), POOL, [(7, h200(0.85), slots)]) is None


def test_a_smaller_graph_limit_repeats_when_every_batch_pads_alike():
    # 64 clients: every batch of 1-64 pads to the same captured size under 64, 128 or 512.
    assert H200.repeats(h200(0.9, 64), h200(0.9, 512), POOL) is not None
    assert H200.repeats(h200(0.9, 128, cap=128), h200(0.9, None, cap=128), POOL) is not None
    # Under a cap of 64 both capture graphs up to 64 only: sglang clamps its default (256 on
    # this GPU) to the cap, and cuts an explicit 128 at the request slots.
    assert H200.repeats(h200(0.9, 128), h200(0.9, None), POOL) is not None
    assert H200.repeats(h200(0.85, 64), h200(0.9, 128), POOL) is not None  # and a fraction
    # Batches of 49-64 have no graph under a limit of 48 and run eagerly.
    assert H200.repeats(h200(0.9, 48), h200(0.9, 128), POOL) is None
    # More graphs than the measured launch captured: more memory.
    assert H200.repeats(h200(0.9, 512, cap=512), h200(0.9, 128, cap=512), POOL) is None
    # The default limit depends on a GPU memory the rule must know.
    blind = SameRunRules(**{**H200.__dict__, "gpu_memory_gb": None})
    assert blind.repeats(h200(0.9, 128, cap=128), h200(0.9, None, cap=128), POOL) is None
    # The other flags still keep runs apart.
    assert H200.repeats(h200(0.9, 64), {**h200(0.9, 128), "schedule_policy": "lpm"}, POOL) is None


def test_a_smaller_hicache_ratio_repeats_when_the_device_pool_holds_everything():
    def ratio(r: float) -> dict[str, object]:
        return {**h200(0.9), "enable_hierarchical_cache": True, "hicache_ratio": r}

    assert H200.repeats(ratio(2.0), ratio(4.0), POOL)
    # A larger host pool than the measured launch allocated may not fit in host memory.
    assert H200.repeats(ratio(4.0), ratio(2.0), POOL) is None
    # When the device pool may evict, the host pool's size decides what comes back.
    tight = SameRunRules(**{**H200.__dict__, "resident_tokens": 520_000})
    assert tight.repeats(ratio(2.0), ratio(4.0), POOL) is None


def test_fewer_slots_than_clients_repeat_only_the_same_slots():
    # A cap of 34 under 64 clients: 30 queue in both runs, whatever the fraction.
    assert H200.repeats(h200(0.8, cap=34), h200(0.9, cap=34), POOL) is not None
    assert H200.repeats(h200(0.9, cap=34), h200(0.9, cap=40), POOL) is None


def test_the_bound_counts_each_distinct_token_once_and_each_client_a_full_copy():
    workload = WorkloadSpec.from_dict(
        {
            "kind": "shared-prefix",
            "groups": 4,
            "prompts_per_group": 8,
            "system_prompt_len": 1000,
            "question_len": 100,
            "output_len": 50,
        }
    )
    # 4 system prompts, 32 questions and answers, 2 warm-up requests (their own prompts), and
    # 16 clients each holding a whole request.
    expected = 4 * 1000 + 32 * 150 + 2 * (1000 + 150) + 16 * 1150
    assert resident_token_bound(workload, 2, 16) == expected
    turns = WorkloadSpec.from_dict(
        {
            "kind": "multi-turn",
            "conversations": 2,
            "turns": 2,
            "system_prompt_len": 100,
            "user_len": 10,
            "answer_len": 20,
        }
    )
    # One system prompt; each turn's question, its answer and the answer's stand-in; the last
    # turn's request holds 100 + 10 + 20 + 10 + 20 tokens.
    assert resident_token_bound(turns, 0, 4) == 100 + 2 * 2 * (10 + 20 + 20) + 4 * 160


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


def _space(tmp_path: Path, source: str, params: dict[str, object] | None = None) -> Path:
    """A shipped space with the running cap as its only param (or `params`), 16 clients, a
    short load."""
    data = yaml.safe_load((ROOT / "search_spaces" / f"{source}.yaml").read_text())
    data["name"] = f"cap-{source}"
    data["params"] = params or {"max_running_requests": {"low": 4, "high": 128, "log": True}}
    # Unset, sglang would derive the fraction from a graph reserve that follows the cap.
    if "mem_fraction_static" not in data["params"]:
        data["fixed_flags"] = {**data["fixed_flags"], "mem_fraction_static": 0.85}
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


def _study(space_path: Path, queued: list[int] | list[dict[str, object]], pruner=None):
    """The real objective and study loop, served by the simulator's oracle; the caps (or
    params) queued."""
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
            pruner=pruner or StagePruner(enabled=False),
            crash_model=None,
            model_memory=facts.model,
            gpu_memory_gb=facts.gpu_memory_gb,
            measurer=serve,
        )
    )
    study = optuna.create_study(directions=["maximize", "minimize"])
    for item in queued:
        study.enqueue_trial(item if isinstance(item, dict) else {"max_running_requests": item})
    run_trials(study, objective, len(queued) - 1)  # the repeat is free
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


def test_a_smaller_fraction_and_graph_limit_repeat_and_the_simulator_agrees(tmp_path):
    params = {
        "max_running_requests": {"choices": [16]},
        "mem_fraction_static": {"low": 0.7, "high": 0.95, "step": 0.01},
        "cuda_graph_max_bs_decode": {"choices": [8, 64, 128]},
    }
    space = _space(tmp_path, "qwen3-8b-h200", params)
    queued = [
        {"max_running_requests": 16, "mem_fraction_static": f, "cuda_graph_max_bs_decode": g}
        for f, g in ((0.9, 128), (0.75, 64), (0.75, 8))
    ]
    study, serve = _study(space, queued)
    first, repeat, eager = study.get_trials(deepcopy=False)[:3]
    assert repeat.user_attrs[record.DUPLICATE_OF] == first.number
    reason = repeat.user_attrs[record.SAME_RUN]
    assert "memory fraction 0.75 vs 0.9" in reason and "limit 64 vs 128" in reason
    pools = [t.user_attrs[record.CAPACITY]["max_total_num_tokens"] for t in (first, repeat)]
    assert pools[1] < pools[0]  # the repeat's own, smaller pool
    # Batches of 9-16 requests have no graph under a limit of 8: that one is launched.
    assert record.DUPLICATE_OF not in eager.user_attrs and eager.number in serve.costs
    args = {t.number: list(t.user_attrs[record.SERVER_ARGS]) for t in (first, repeat, eager)}
    exact = {n: serve.exact_summary(a) for n, a in args.items()}
    keys = ("output_throughput", "median_tpot_ms", "p99_ttft_ms", "duration")
    assert all(exact[repeat.number][k] == exact[first.number][k] for k in keys)
    assert exact[eager.number]["output_throughput"] != exact[first.number]["output_throughput"]


def test_a_smaller_hicache_ratio_repeats_on_the_simulator_too(tmp_path):
    params = {
        "max_running_requests": {"choices": [16]},
        "enable_hierarchical_cache": {"choices": [True]},
        "hicache_ratio": {"low": 1.0, "high": 4.0, "step": 0.5},
    }
    space = _space(tmp_path, "qwen3-8b-h200", params)
    queued = [
        {"max_running_requests": 16, "enable_hierarchical_cache": True, "hicache_ratio": r}
        for r in (3.0, 1.5, 4.0)
    ]
    study, serve = _study(space, queued)
    first, repeat, larger = study.get_trials(deepcopy=False)[:3]
    assert repeat.user_attrs[record.DUPLICATE_OF] == first.number
    assert larger.number in serve.costs  # a larger host pool is launched
    assert "HiCache host ratio 1.5 vs 3.0" in repeat.user_attrs[record.SAME_RUN]
    exact = [serve.exact_summary(list(t.user_attrs[record.SERVER_ARGS])) for t in (first, repeat)]
    keys = ("output_throughput", "median_tpot_ms", "p99_ttft_ms", "duration")
    assert all(exact[0][k] == exact[1][k] for k in keys)


def test_a_larger_fraction_after_a_launch_with_more_memory_repeats_on_the_simulator(tmp_path):
    params = {
        "max_running_requests": {"choices": [16]},
        "mem_fraction_static": {"low": 0.7, "high": 0.95, "step": 0.01},
        "chunked_prefill_size": {"choices": [8192, 16384]},
    }
    space = _space(tmp_path, "qwen3-8b-h200", params)
    queued = [
        {"max_running_requests": 16, "mem_fraction_static": f, "chunked_prefill_size": c}
        for f, c in ((0.8, 8192), (0.95, 16384), (0.9, 8192))
    ]
    # The budget counts launches: one more queued so that the loop reaches the free repeat.
    study, serve = _study(space, [*queued, {**queued[1], "chunked_prefill_size": 8192}])
    first, more_memory, repeat = study.get_trials(deepcopy=False)[:3]
    assert repeat.user_attrs[record.DUPLICATE_OF] == first.number
    assert f"trial {more_memory.number} started" in repeat.user_attrs[record.SAME_RUN]
    exact = [serve.exact_summary(list(t.user_attrs[record.SERVER_ARGS])) for t in (first, repeat)]
    keys = ("output_throughput", "median_tpot_ms", "p99_ttft_ms", "duration")
    assert all(exact[0][k] == exact[1][k] for k in keys)


def test_the_guide_passes_over_picks_whose_run_a_trial_measured():
    from tuner.space.load import load_space
    from tuner.study.guide import Guide

    space = load_space("qwen3-8b-h200")  # 64 clients, shared prefixes: at most ~300,000 tokens
    guide = Guide(space, None)
    guide.same_run = SameRunRules.of(space, _QWEN3_8B, 141.0)
    params = {
        "mem_fraction_static": 0.9,
        "max_running_requests": 40,
        "chunked_prefill_size": 8192,
        "schedule_policy": "fcfs",
        "cuda_graph_max_bs_decode": None,
        "enable_hierarchical_cache": False,
    }
    measured = optuna.trial.create_trial(
        params={},
        distributions={},
        values=[3800.0, 10.0],
        user_attrs={
            record.OUTCOME: record.OUTCOME_OK,
            record.FLAGS: guide._flags(params),
            record.CAPACITY: {"max_total_num_tokens": 800_000, "max_running_requests": 40},
        },
    )
    known = guide._known_runs([measured])
    assert known is not None
    assert known({**params, "mem_fraction_static": 0.8, "cuda_graph_max_bs_decode": 64})
    assert not known({**params, "max_running_requests": 44})
    assert not known({**params, "schedule_policy": "lpm"})


def test_the_stage_pruner_knows_each_trials_categorical_choices(tmp_path):
    """The first rule compares stage figures only between trials that share their categorical
    choices (tuner/trial/pruning.py): the objective gives it them, for the trial and the
    completed ones."""
    from tuner.trial import StagePruner

    class Recording(StagePruner):
        def decide(self, stage, n_stages, current, history):
            seen.append((current.group, [p.group for p in history]))
            return super().decide(stage, n_stages, current, history)

    seen: list = []
    params = {
        "max_running_requests": {"low": 4, "high": 128, "log": True},
        "chunked_prefill_size": {"choices": [4096, 8192]},
    }
    queued = [
        {"max_running_requests": 16, "chunked_prefill_size": 8192},
        {"max_running_requests": 32, "chunked_prefill_size": 4096},
        {"max_running_requests": 64, "chunked_prefill_size": 4096},  # not run (len - 1)
    ]
    _study(_space(tmp_path, "qwen3-8b-h200", params), queued, Recording(enabled=False))
    own = (("chunked_prefill_size", "4096"),)
    assert seen[0][0] == (("chunked_prefill_size", "8192"),)
    second = [(group, history) for group, history in seen if history]
    assert second and all(group == own for group, _ in second)
    assert all(history == [(("chunked_prefill_size", "8192"),)] for _, history in second)
