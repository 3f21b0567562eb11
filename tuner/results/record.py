"""What one trial and one study leave in the Optuna storage.

The objective writes these keys; the report, the export and `tuner studies` read them. They are
the only contract between the writers and the readers of a study, so every key is named here once.

Study user attrs (set once when the study is created or resumed):
    STUDY_SPACE          the search space as a plain dict (the validated YAML)
    STUDY_SPACE_FILE     path of the search-space file, as given
    STUDY_ENGINE         "sim" or "sglang"
    STUDY_SGLANG_VERSION sglang version whose flag names the argv uses, e.g. "0.5.23"
    STUDY_ENGINE_PYTHON  the interpreter that ran sglang, STUDY_ENGINE_ENV the environment
                         variables its server got (--engine sglang; the export script uses both)
    STUDY_OBJECTIVES     [{"metric": "output_throughput", "direction": "maximize"},
                          {"metric": "median_tpot_ms", "direction": "minimize"}]
    STUDY_SLOS           [{"metric": "p99_ttft_ms", "op": "<=", "limit": 2000.0}, ...]
    STUDY_GOAL           "throughput" | "latency" | "balanced" | "capacity": `--goal`, what
                         export picks by
    STUDY_STOPPED        {"launched": int, "reason": str}: the stop rule ended the study before
                         --trials when it held that many launched trials
                         (tuner/study/stopping.py); stale once the study holds more
    STUDY_PROVENANCE     where the numbers came from, recorded once: releases, GPU, driver,
                         model config hash, server environment (tuner/results/provenance.py)

Trial user attrs:
    SERVER_ARGS   list[str], the flags after `python -m sglang.launch_server`, without
                  --host/--port/--api-key (the export adds those from the environment)
    FLAGS         {flag name without dashes, e.g. "mem_fraction_static": value}, tuned + fixed
    IS_DEFAULT    True for the baseline trial that runs sglang's defaults
    GUIDED_BY     the name of the rule that proposed the trial ("defaults", "estimate",
                  "polish:window", "sampler", ...: tuner/study/policy.py RULES)
    GUIDED_FROM   the number of the trial that rule moved from, when it moved from one
    OUTCOME       one of OUTCOMES
    FAILURE_CLASS one of FAILURE_CLASSES or None
    FAILURE_MSG   one line, the error the server or the checks gave
    CAPACITY      {"max_running_requests": int, "max_total_num_tokens": int, ...} from the log
                  and /server_info
    METRICS       the benchmark summary, sglang's field names (output_throughput,
                  total_throughput, median_tpot_ms, p99_ttft_ms, ...), of everything measured
    STAGES        list of per-stage summaries (same keys as METRICS, cumulative up to the stage)
    PRUNED        {"stage": int, "reason": str, "time_saved_s": float, "rule": CUT_DOMINATED,
                  CUT_FRONT or CUT_SLO} when the stage pruner stopped the trial
                  (tuner/trial/pruning.py)
    RATE_STEPS    a capacity study's rate steps, in the order run (tuner/trial/capacity.py
                  RateStep): {"rate": req/s, "met": bool, "broke": "p99_ttft_ms <= 3000" | None,
                  "stopped_early": bool, "completed": int, "requests": int, "duration_s": float,
                  "metrics": {"p99_ttft_ms": .., "p99_tpot_ms": .., ...}, "cache_flushed": ..};
                  METRICS is then the step at the sustained rate, plus `sustained_request_rate`
    PREDICTION    {"reason": str, ...} when skipped before launch by the feasibility checks
    TIMINGS       {"launch_s": float, "bench_s": float, "total_s": float}, modelled seconds
    CONSTRAINTS   {"slo:p99_ttft_ms": float, "launch": float}: > 0 means violated; also set with
                  trial.set_constraint so samplers see them, and as the list-style system attr
                  "constraints" that optuna-dashboard 0.21 reads (`set_constraints`)
    WORKER        "<host>:<pid>" of the worker process that ran the trial
    SERVER_PGID   process group id of the trial's server while it runs
    DUPLICATE_OF  the sampler proposed flags an earlier finished trial already measured: its
                  result is copied, nothing is launched
    SAME_RUN      set with DUPLICATE_OF when the flags differ but the run cannot (a flag that
                  cannot matter for the workload, tuner/trial/same_run.py): why
    SAME_FLAGS    "wait" when the trial found an earlier running trial with its flags and waits
                  for that result, "launch" when it found none; read by earlier identical trials
    LOG_TAIL      the last 2000 characters of the server log when the launch failed
    ERROR         "<exception type>: <message>" when the tuner itself failed (state FAIL)
    INTERRUPTED   True when Ctrl-C stopped the trial (state FAIL); the next run retries it
    RETRY_OF      number of the interrupted trial that this queued trial repeats
    SURPLUS       True for a trial a concurrent worker asked for beyond the budget (state FAIL)
    OWNER         {"host": str, "pid": int, "start": int, "boot": str}: the process running the
                  trial, with its start time (clock ticks after boot, /proc/<pid>/stat) and the
                  kernel's boot id, so that a reused pid is not taken for the owner
    HEARTBEAT     Unix time the owner last said it is alive (storages without Optuna's heartbeat)
    ABANDONED     why a RUNNING trial was found abandoned (its process gone, or no heartbeat):
                  it was failed and its configuration queued again (state FAIL)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

STUDY_SPACE = "space"
STUDY_SPACE_FILE = "space_file"
STUDY_ENGINE = "engine"
STUDY_SGLANG_VERSION = "sglang_version"
STUDY_ENGINE_PYTHON = "engine_python"  # the interpreter that ran sglang (--engine sglang)
STUDY_ENGINE_ENV = "engine_env"  # {KEY: VALUE} the server's environment had on top
STUDY_OBJECTIVES = "objectives"
STUDY_SLOS = "slos"
STUDY_STOPPED = "stopped"
STUDY_GOAL = "goal"
STUDY_PROVENANCE = "provenance"

SERVER_ARGS = "server_args"
FLAGS = "flags"
IS_DEFAULT = "is_default"
OUTCOME = "outcome"
FAILURE_CLASS = "failure_class"
FAILURE_MSG = "failure_message"
CAPACITY = "capacity"
METRICS = "metrics"
STAGES = "stages"
PRUNED = "pruned"
# The stage pruner's rules, PRUNED["rule"] (tuner/trial/pruning.py). Records written before
# the rule was kept lack it, or hold None for the first two.
CUT_DOMINATED = "dominated"  # below most completed trials at this stage, and dominated
CUT_FRONT = "front"  # even its best case cannot reach the front of feasible full runs
CUT_SLO = "slo"  # even its best case breaks an SLO
RATE_STEPS = "rate_steps"
PREDICTION = "prediction"
TIMINGS = "timings"
CONSTRAINTS = "constraints"
WORKER = "worker"  # "<host>:<pid>" of the worker process running the trial
SERVER_PGID = "server_pgid"  # process group of the trial's server, to clean up after a dead worker
DUPLICATE_OF = "duplicate_of"  # number of the finished trial whose identical flags it reuses
SAME_RUN = "same_run"  # why differing flags are the run DUPLICATE_OF measured
SAME_FLAGS = "same_flags"  # "launch" or "wait": what a trial decided about identical running ones
LOG_TAIL = "log_tail"  # the end of the server log of a launch that failed
ERROR = "error"  # the exception of a trial that ended FAIL because the tuner itself failed
INTERRUPTED = "interrupted"  # a trial stopped by Ctrl-C (FAIL); the next run queues it again
RETRY_OF = "retry_of"  # number of the interrupted trial this queued trial repeats
SURPLUS = "surplus"  # a trial asked for beyond the budget by a concurrent worker (FAIL)
OWNER = "owner"  # {"host", "pid", "start", "boot"} of the process running the trial
HEARTBEAT = "heartbeat"  # Unix time of the owner's last sign of life
ABANDONED = "abandoned"  # why a RUNNING trial was found without a live owner (FAIL, retried)
# The name of the rule that proposed the trial: one of the search's rules, the table
# `RULES` of tuner/study/policy.py ("defaults", "estimate", "polish:window", "sampler", ...;
# studies written before it hold "polish" and "model" too).
GUIDED_BY = "guided_by"
GUIDED_FROM = "guided_from"  # the number of the trial the rule moved from, when it moved
# `guided_by` of a trial that measures a configuration again on purpose: the stop rule's
# re-measurement of a trial that missed an SLO by less than a rerun's noise. It is launched
# even though a trial with the same flags finished (tuner/trial/objective.py).
REMEASURE_CHECK = "remeasure-check"
# The numbers of the earlier launches of the same flags a re-measurement was pooled with: its
# constraints and values are the means of all of them (tuner/trial/objective.py).
POOLED_WITH = "pooled_with"

# How a trial ended, beyond Optuna's state.
OUTCOME_OK = "ok"  # served the whole benchmark (COMPLETE)
OUTCOME_PRUNED = "pruned"  # stopped at a stage by the stage pruner (PRUNED)
OUTCOME_LAUNCH_FAILED = "launch_failed"  # server did not come up (PRUNED, constraint violated)
OUTCOME_BENCH_FAILED = "bench_failed"  # server died or failed during the benchmark (PRUNED)
OUTCOME_INVALID = "invalid"  # an sglang startup rule rejects the flags; never launched (PRUNED)
OUTCOME_SKIPPED = "skipped"  # predicted not to fit / to crash; never launched (PRUNED)
OUTCOMES = (
    OUTCOME_OK,
    OUTCOME_PRUNED,
    OUTCOME_LAUNCH_FAILED,
    OUTCOME_BENCH_FAILED,
    OUTCOME_INVALID,
    OUTCOME_SKIPPED,
)

FAILURE_CLASSES = (
    "bad_argument",  # argparse error, exit code 2
    "startup_rule",  # sglang rejected the combination at startup (ValueError / assertion)
    "not_enough_memory",  # "Not enough memory. Please try to increase --mem-fraction-static."
    "out_of_memory",  # torch CUDA OOM during start-up
    "cuda_graph",  # "Capture cuda graph failed"
    "exited_before_ready",  # any other exit before the ready line
    "never_ready",  # still not ready at the timeout
    "died_during_benchmark",
    "benchmark_failed",  # the server stayed up but no request completed (errors, timeouts)
    "port_in_use",
)


def feasible(constraints: dict[str, float]) -> bool:
    """Optuna's rule, in one place: a trial is feasible when every constraint is <= 0."""
    return all(v <= 0 for v in constraints.values())


def learned_from(trial: FrozenTrial) -> bool:
    """A trial the estimate and its residual model learn from: a completed one, or one the
    SLO cut stopped (tuner/trial/pruning.py): it broke an SLO, and its stages' figures say by
    how much and at what throughput, which the estimate's fit would otherwise never see."""
    if trial.state.name == "COMPLETE":
        return True
    cut = trial.user_attrs.get(PRUNED)
    return (
        trial.state.name == "PRUNED"
        and isinstance(cut, dict)
        and cut.get("rule") == CUT_SLO
        and bool(trial.user_attrs.get(METRICS))
    )


# optuna-dashboard 0.21 reads only this list-style system attr (floats, <= 0 feasible); Optuna 5
# reads it too, as constraints "0", "1", ... beside the per-key ones (readers drop those).
LIST_CONSTRAINTS = "constraints"


def set_constraints(trial: optuna.Trial, constraints: dict[str, float]) -> None:
    """Record a trial's constraints in every form its readers use: the user attr, Optuna 5's
    per-key constraints (samplers) and the list optuna-dashboard 0.21 draws feasibility from.

    The list repeats the per-key values in key order, so a sampler that sums violations ranks
    trials exactly as before (every sum doubles).
    """
    trial.set_user_attr(CONSTRAINTS, constraints)
    for key, value in constraints.items():
        trial.set_constraint(key, value)
    # Optuna 5 has no public setter for a trial's system attrs; the storage call is what
    # Trial.set_constraint itself makes, the trial's id found by the storage's public lookups.
    storage = trial.storage
    study_id = storage.get_study_id_from_name(trial.study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
    storage.set_trial_system_attr(trial_id, LIST_CONSTRAINTS, list_constraints(constraints))


def list_constraints(constraints: dict[str, float]) -> list[float]:
    """The list-style form of per-key constraints: their values in key order."""
    return [float(constraints[key]) for key in sorted(constraints)]


def trial_constraints(trial: FrozenTrial) -> dict[str, float]:
    """A trial's named constraints (launch and SLOs), from Optuna's or the trial's record (a
    trial whose Optuna constraints hold only the list form is named by its record)."""
    named = named_constraints(trial.constraints or {})
    if named and not all(k.isdigit() for k in named):
        return named
    return named_constraints(trial.user_attrs.get(CONSTRAINTS) or named)


def least_slo_margin(trial: FrozenTrial) -> float:
    """The share of its limit by which a trial meets its closest SLO, as the study graded it
    (`slo:*` constraints; below 0: missed by that share; inf without SLOs)."""
    slos = [v for k, v in trial_constraints(trial).items() if k.startswith("slo:")]
    return -max(slos) if slos else math.inf


def named_constraints(constraints: Mapping[str, float]) -> dict[str, float]:
    """Optuna 5's `trial.constraints` without the "0", "1", ... it reads from the list form
    (unless the trial has nothing else: a study written by another tool)."""
    named = {k: v for k, v in constraints.items() if not k.isdigit()}
    return named or dict(constraints)
