"""Tuner quality as a regression test: `tuner optimize`'s defaults, with and without the estimate.

A seeded, oracle-backed run of the quality benchmark's harness (benchmarks/quality/: the real
objective and study loop, no server launched; the headless oracle judges the seed space as
shipped): the default must reach 0.95 of the best SLO-feasible throughput known at 40 launched
trials and 0.9 at 20 (median over 3 seeds), and beat random search at 40 by MARGIN; without
any estimate (no warm start, the local search alone) the tuner must reach MODEL_FREE at 40.
229 s on the 2-core box beside two benchmark jobs (the corrected estimate's picks fit GPs).

The figures come from the measured spread (benchmarks/results/tuner_quality.md, 10 seeds at 20
and 40 trials on the headless oracle): random search reaches 0.770 of the optimum in 8 seeds (0
in 2); the default 1.000 in every seed at 40 trials and 0.992-1.000 at 20 (95% within 2-9
trials), because the estimate's warm start predicts the SLO (p99 TTFT of a closed loop: a
client without a slot waits a whole turn of the running batch) and is searched by hill climbs,
not by ranking random draws alone. Seeds 0-2 give the default 1.000 and random search 0.770, so
MARGIN 0.15 fails whenever the default is no better than random search; with `tuner optimize`'s
defaults set to random search (StudyOptions sampler "random", warm_start and polish False) it
fails.

The model-free row (no estimate, as for a host without a GPU name or config.json: TPE + the local
search of tuner/study/local_search.py) must reach MODEL_FREE of the optimum at 40 trials (median
over the same seeds). Measured (benchmarks/tuner_quality.py, 5 seeds): 1.000 in seeds 0-2 and 4,
0.778 in seed 3, where it stays near sglang's defaults; TPE alone 0.770 or 0 in every seed.
With the former polish instead (random neighbours of the best from trial 24) it fails.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

BUDGET = 40
EARLY = 20  # the smaller budget: the default must be close by then too
SEEDS = (0, 1, 2)
MARGIN = 0.15
MODEL_FREE = 0.9
# The best SLO-feasible configuration of the seed space that the quality benchmark found.
BEST_KNOWN = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_adaptive": None,
    "mem_fraction_static": 0.95,
    "enable_hierarchical_cache": False,
    "mamba_radix_cache_strategy": "extra_buffer",
    "max_running_requests": 16,
    "chunked_prefill_size": 4096,
}


@pytest.mark.timeout(900)  # nine studies, CPU-bound: 229 s beside two other benchmark jobs
def test_the_default_beats_random_search_at_40_trials():
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality.methods import METHODS
    from benchmarks.quality.scoring import best_so_far
    from benchmarks.quality.study import run_study
    from benchmarks.quality.truth import Oracle, summarize_optimum
    from tuner.space import default_space_path, load_space
    from tuner.study import quiet_optuna

    quiet_optuna()
    space = load_space(default_space_path())  # judged as shipped (headless oracle)
    oracle = Oracle(space, OracleCache(space))
    noise = NoiseModel()
    # The optimum: the best configuration the full benchmark found (README), united below
    # with everything the studies launched; a dense grid would take minutes of oracle runs.
    oracle.of_params(BEST_KNOWN)
    methods = {m.name: m for m in METHODS}
    runs = {
        name: [run_study(methods[name], s, BUDGET, space, oracle, noise) for s in SEEDS]
        for name in ("default", "random", "model-free")
    }
    optimum = summarize_optimum(oracle, 0.0)
    best, early = (
        {  # best-so-far after `budget` launched trials, over the optimum
            name: statistics.median(best_so_far(r, optimum)[:budget][-1] for r in rs)
            for name, rs in runs.items()
        }
        for budget in (BUDGET, EARLY)
    )
    assert best["default"] >= 0.95, best
    assert early["default"] >= 0.9, early
    assert best["default"] >= best["random"] + MARGIN, best
    assert best["model-free"] >= MODEL_FREE, best


# Two worlds the tuner has not seen (benchmarks/worlds/), one seed each to keep the file short:
# world -> (space of benchmarks.quality.worlds, least fraction at 40 trials, at 20 trials).
# Measured (seed 0, the local search from trial 8, the simulator sizing adaptive speculation's
# state for its widest draft): decay at 10 s 1.000 at 20 and 40 (0.847 at 20 when the local
# search began at trial 24). The unknown GPU at 10 s: with the provisional spec row (the table's
# means, fitted from trial 0) 0.986 at 20 and 1.000 at 40 (5-seed medians); without an
# estimate, as an unknown GPU ran until then, it stayed at 0.73 in seed 0 (the defaults are 0.71
# there) and this test fails.
# The optimum is the best of BEST_KNOWN's speculative-step variants and of what the study
# launched (benchmarks/results/tuner_quality_worlds.md has the dense-grid optimum per cell).
WORLDS = {
    # Acceptance decays x0.85 per draft position: an error of structure the refit cannot absorb.
    "decay": ("seed-10s", 0.95, 0.90),
    # A GPU the spec table does not know: the estimate starts at the table's means.
    "unknown-gpu": ("seed-10s", 0.95, 0.90),
}


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_the_default_in_a_world_it_has_not_seen(world):
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality.methods import METHODS
    from benchmarks.quality.scoring import best_so_far
    from benchmarks.quality.study import run_study
    from benchmarks.quality.truth import Oracle, summarize_optimum
    from benchmarks.quality.worlds import world_space
    from tuner.study import quiet_optuna

    quiet_optuna()
    space_name, at_40, at_20 = WORLDS[world]
    space = world_space(space_name, world)
    oracle = Oracle(space, OracleCache(space))
    # Adaptive steps need room for the widest draft's states: they launch at 0.85, not 0.95.
    for steps, adaptive, mem in ((1, None, 0.95), (2, None, 0.95), (3, None, 0.95),
                                 (1, True, 0.85), (3, True, 0.85)):  # fmt: skip
        oracle.of_params(
            {**BEST_KNOWN, "speculative_num_steps": steps, "speculative_adaptive": adaptive,
             "mem_fraction_static": mem}
        )  # fmt: skip
    default = next(m for m in METHODS if m.name == "default")
    run = run_study(default, 0, BUDGET, space, oracle, NoiseModel())
    curve = best_so_far(run, summarize_optimum(oracle, 0.0))
    assert curve[:BUDGET][-1] >= at_40, (world, curve)
    assert curve[:EARLY][-1] >= at_20, (world, curve)


# The held-out KV-dtype cell (benchmarks/heldout/llama70b-h100x2-fp8kv.yaml), spent for the
# search without an estimate: 48 clients outgrow a bf16 pool, fewer running slots than clients
# queue the TTFT tail past 15 s, and more slow every token past 45 ms, so both limits hold only
# in an 8-bit pool at about 40-45 running. Its optimum (855.2 tok/s) is this configuration.
FP8_CELL = "benchmarks/heldout/llama70b-h100x2-fp8kv.yaml"
FP8_BEST = {
    "mem_fraction_static": 0.94,
    "schedule_policy": "fcfs",
    "enable_hierarchical_cache": False,
    "max_running_requests": 42,
    "chunked_prefill_size": 4096,
    "kv_cache_dtype": "fp8_e4m3",
}


# The held-out Qwen3-30B cell over two H100s (benchmarks/heldout/qwen30b-h100x2-chat.yaml),
# spent for the search without an estimate: 64 clients, p99 TTFT <= 6 s and TPOT <= 19 ms. With
# lpm, every running cap below 64 queues the TTFT tail past 6 s; with fcfs, caps of 44-48 meet
# both limits. Its optimum (2,348.7 tok/s) is this configuration.
TP2_CELL = "benchmarks/heldout/qwen30b-h100x2-chat.yaml"
TP2_BEST = {
    "mem_fraction_static": 0.6,
    "schedule_policy": "fcfs",
    "max_running_requests": 48,
    "chunked_prefill_size": 16384,
}


def _model_free_best(monkeypatch: pytest.MonkeyPatch, cell: str, optimum: dict, seed: int) -> float:
    """The best share of `cell`'s optimum that the search without an estimate reached in 40
    trials at `seed`."""
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality.methods import METHODS
    from benchmarks.quality.scoring import best_so_far
    from benchmarks.quality.study import run_study
    from benchmarks.quality.truth import Oracle, summarize_optimum
    from benchmarks.quality.worlds import load_cell
    from tuner.study import quiet_optuna

    quiet_optuna()
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # the cell names its world so
    space = load_cell(cell)
    oracle = Oracle(space, OracleCache(space))
    oracle.of_params(optimum)
    model_free = next(m for m in METHODS if m.name == "model-free")
    run = run_study(model_free, seed, BUDGET, space, oracle, NoiseModel(0.02, 0.02, 0.05))
    return best_so_far(run, summarize_optimum(oracle, 0.0))[:BUDGET][-1]


@pytest.mark.timeout(600)
def test_without_an_estimate_the_search_finds_a_window_between_two_slos(monkeypatch):
    """Seed 2 found nothing within both limits in 40 trials while a window needed a trial one number
    from the best (docs/decisions.md#wide-windows-a-window-across-more-than-one-number): the best
    trials (an 8-bit pool at 48 running, p99 TPOT a few % past its limit) and those that broke only
    the TTFT limit (fewer slots) differed in the memory fraction or the chunk size too. A trial that
    breaks only the other SLO now marks a window wherever it differs (tuner/study/bisection.py
    `window_moves`)."""
    assert _model_free_best(monkeypatch, FP8_CELL, FP8_BEST, 2) >= 0.95


@pytest.mark.timeout(600)
def test_without_an_estimate_the_search_tries_the_window_partner_with_another_choice(
    monkeypatch,
):
    """Seed 2 found nothing within both limits in 40 trials (docs/decisions.md#partner-flips): every
    trial below 64 running kept lpm, which a TPOT-limited cap queues past the TTFT limit, and the
    window between 64 and 49 running broke both limits throughout. The window's partner (lpm at 49,
    past TTFT alone) is now tried with fcfs (the partner flip, tuner/study/bisection.py
    `window_partner`)."""
    assert _model_free_best(monkeypatch, TP2_CELL, TP2_BEST, 2) >= 0.95
