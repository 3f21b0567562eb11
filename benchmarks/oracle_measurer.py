"""An oracle-backed `Measurer`: the tuner's own objective, served by the simulator's oracle.

`tuner.trial.objective.TrialObjective` serves a trial through a pluggable `Measurer`. This one
launches nothing: it asks `tuner.sim.oracle.predict` what
`python -m tuner.sim <argv> <--sim-* options>` would do under the search space's workload,
and plays that back to the objective as a launch failure (`LaunchError`) or as a ready server
whose benchmark reports cumulative per-stage summaries (sglang's metric names) until the stage
hook says stop. Everything else (sampling,
startup rules, feasibility checks, stage pruning, constraints, records) is the real code path,
so a study runs in milliseconds per trial instead of minutes.

    serve = OracleMeasurer(space, seed=0)
    objective = TrialObjective(ObjectiveConfig(space=space, study_dir=Path("."),
                                          target=LaunchTarget(), serve=serve))
    ...                       # run_trials(study, objective, 40)
    serve.costs[3].gpu_s      # modelled GPU seconds trial 3 used

What the oracle gives: the summary `tuner bench` would report on the served simulator (the
oracle is a headless run of the simulator's own scheduler; see tuner/sim/oracle.py), percentiles
included, and the request records in completion order, so each benchmark stage's cumulative
summary is the summary of the records completed by then. Measurement noise (a real GPU's
run-to-run spread; the simulator itself is deterministic): each stage's throughput, TPOT/ITL and
TTFT figures are scaled by independent log-normal factors (`NoiseModel`), seeded by (seed, trial
number), or with `BENCH_NOISE=config` in the environment by (seed, configuration, how often it
was measured before: `OracleMeasurer._noise_key`); a cumulative stage summary uses the mean
factor of the stages run so far, as a longer measurement averages its noise.

GPU time model (modelled seconds the GPU is held; `GpuTimeModel`, stated assumptions):

- a launch = process start (interpreter, sglang imports, tokenizer, distributed init: 20 s)
  + weight load (the profile's weight bytes, plus the MTP head with speculative decoding, read
  from local NVMe and copied over PCIe at an effective 1.0 GB/s, a cold-page-cache safetensors
  load; the seed 27B model's 55.5 GB take 55 s) + CUDA graph capture (30 s, twice that with
  speculative decoding, which captures draft and verify graphs too): 105 s without and 137 s
  with speculation for the seed model, i.e. about two minutes; a tensor-parallel server's GPUs
  each load their share at that rate, at once, and its GPU time counts every GPU it holds;
- a crashed launch costs what it ran before dying, by where sglang fails: an argument error
  5 s (argparse), a ServerArgs rule 20 s (before any weight is read), "Not enough memory" and
  pool-sizing rules (HiCache host pool) after the weights load (75 s), a CUDA graph capture
  failure halfway through capture, and an out-of-memory error at the first forward pass after
  capture (a whole launch);
- a benchmark costs its modelled duration: the warm-up requests (one median end-to-end latency:
  they run at once) plus the measured stages that ran; a pruned trial pays only the stages it
  ran;
- a trial the objective never serves (a startup-rule violation, a configuration the feasibility
  model skips, a duplicate whose result is reused) costs nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tuner.sim as sim_package
from tuner.bench.client import RequestRecord
from tuner.bench.metrics import summarize
from tuner.bench.workload import WorkloadSpec
from tuner.engines import sglang as engine
from tuner.launcher import LaunchError
from tuner.sim.config import served_model
from tuner.sim.oracle import OracleResult, build, predict
from tuner.sim.profiles import load_model
from tuner.space.model import SearchSpace
from tuner.study.options import StudyOptions
from tuner.study.run import launch_target
from tuner.trial.measure import Measurement, ReadyHook, StageHook


@dataclass(frozen=True)
class GpuTimeModel:
    """Modelled seconds of GPU time per launch phase (see the module docstring)."""

    process_start_s: float = 20.0
    weight_load_gb_s: float = 1.0
    graph_capture_s: float = 30.0
    speculative_graph_factor: float = 2.0
    argparse_s: float = 5.0

    def weights_s(self, weight_bytes: float) -> float:
        return weight_bytes / 1e9 / self.weight_load_gb_s

    def capture_s(self, speculative: bool) -> float:
        return self.graph_capture_s * (self.speculative_graph_factor if speculative else 1.0)

    def launch_s(self, weight_bytes: float, speculative: bool) -> float:
        return self.process_start_s + self.weights_s(weight_bytes) + self.capture_s(speculative)

    def crash_s(self, phase: str, weight_bytes: float, speculative: bool) -> float:
        """What a launch that dies in `phase` cost before it died."""
        loaded = self.process_start_s + self.weights_s(weight_bytes)
        return {
            "argparse": self.argparse_s,
            "server_args": self.process_start_s,
            "memory_pools": loaded,
            "graph_capture": loaded + self.capture_s(speculative) / 2,
            "first_forward": loaded + self.capture_s(speculative),
        }[phase]


@dataclass(frozen=True)
class NoiseModel:
    """Log-normal stage-to-stage measurement noise (sigma of the log), 0 = exact oracle."""

    throughput: float = 0.02
    tpot: float = 0.02
    ttft: float = 0.05

    @classmethod
    def none(cls) -> NoiseModel:
        return cls(0.0, 0.0, 0.0)


@dataclass
class TrialCost:
    """What serving one trial cost, in modelled GPU seconds."""

    launch_s: float = 0.0
    bench_s: float = 0.0
    crashed: bool = False
    failure_class: str | None = None
    stages_run: int = 0
    pruned: bool = False
    gpus: int = 1  # a tensor-parallel server holds --tp-size GPUs for all of it

    @property
    def gpu_s(self) -> float:
        return (self.launch_s + self.bench_s) * self.gpus


def sim_extra_args(space: SearchSpace) -> list[str]:
    """The --sim-* options `tuner optimize --engine sim` would pass the simulator."""
    return list(launch_target(space, StudyOptions(engine="sim")).extra_args)


def default_store() -> Path:
    """Where the benchmarks keep oracle results between runs (outside the repository)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglang-tuner" / "oracle"


class OracleCache:
    """Memoised `predict` for one space: the oracle is pure, and sweeps revisit configurations.

    With `store` (a folder), the results also persist across runs in one pickle per space,
    keyed by everything the oracle's answer depends on: the simulator's source and profiles,
    the --sim-* options (the contents of a profile-overrides file included), the workload and
    the bench settings. A change to any of them starts a new file; `save()` writes atomically.
    """

    def __init__(self, space: SearchSpace, store: Path | None = None) -> None:
        self.space = space
        self.workload = WorkloadSpec.from_dict(space.workload)
        self.extra = sim_extra_args(space)
        self._results: dict[tuple[str, ...], OracleResult] = {}
        self._file = store / f"{self._digest()}.pkl" if store is not None else None
        self._loaded = 0
        if self._file is not None and self._file.is_file():
            try:
                self._results = pickle.loads(self._file.read_bytes())
            except Exception:  # a file cut short by a killed run: start again
                self._results = {}
            self._loaded = len(self._results)

    def _digest(self) -> str:
        h = hashlib.sha256()
        sim_root = Path(sim_package.__file__).parent
        for path in sorted(sim_root.rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml", ".json") and path.is_file():
                h.update(str(path.relative_to(sim_root)).encode() + path.read_bytes())
        for arg in self.extra:
            h.update(arg.encode())
            if Path(arg).is_file():
                h.update(Path(arg).read_bytes())
        bench = self.space.bench
        h.update(json.dumps(self.space.workload, sort_keys=True, default=str).encode())
        h.update(repr((bench.concurrency, bench.request_rate, bench.arrival)).encode())
        h.update(repr(bench.warmup_requests).encode())
        return h.hexdigest()[:20]

    def configurations(self) -> list[tuple[str, ...]]:
        """The server argvs this cache holds a result for (loaded from the store or run)."""
        return list(self._results)

    def save(self) -> None:
        """Write the results to the store (merged with what another run saved meanwhile)."""
        if self._file is None or len(self._results) == self._loaded:
            return
        self._file.parent.mkdir(parents=True, exist_ok=True)
        merged = dict(self._results)
        if self._file.is_file():
            with contextlib.suppress(Exception):  # unreadable: this run's results alone
                merged = {**pickle.loads(self._file.read_bytes()), **merged}
        tmp = self._file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(merged, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(self._file)
        self._loaded = len(self._results)

    def __call__(self, server_args: list[str]) -> OracleResult:
        key = tuple(server_args)
        result = self._results.get(key)
        if result is None:
            bench = self.space.bench
            result = predict(
                [*server_args, *self.extra],
                self.workload,
                concurrency=bench.concurrency,
                request_rate=bench.request_rate,
                arrival=bench.arrival,
                warmup_requests=bench.warmup_requests,
                keep_records=True,
            )
            self._results[key] = result
        return result

    def __len__(self) -> int:
        return len(self._results)


def failure_phase(server_args: list[str], extra: list[str], failure_class: str) -> str:
    """Where in sglang's start-up a launch of this class dies (for its GPU cost)."""
    if failure_class == "bad_argument":
        return "argparse"
    if failure_class == "startup_rule":
        # Rules in ServerArgs fail before the weights load; the oracle raises the rest (the
        # HiCache host pool) while sizing the memory pools, after the load.
        try:
            build([*server_args, *extra])
        except BaseException:
            return "server_args"
        return "memory_pools"
    if failure_class == "cuda_graph":
        return "graph_capture"
    if failure_class == "out_of_memory":
        return "first_forward"
    return "memory_pools"  # not_enough_memory and anything unforeseen


def stage_boundaries(total: int, stages: int) -> list[int]:
    """Requests completed at the end of each stage, as tuner.bench.runner splits a run."""
    stages = min(stages, total)
    return [math.ceil((i + 1) * total / stages) for i in range(stages)]


THROUGHPUTS = ("throughput", "goodput")
PER_TOKEN = ("tpot", "itl")


def noisy(summary: dict[str, float | int], factor: tuple[float, float, float]) -> dict[str, Any]:
    """`summary` with its throughput, per-token and TTFT figures scaled by `factor`."""
    out: dict[str, Any] = dict(summary)
    f_thr, f_tok, f_ttft = factor
    for key, value in summary.items():
        if not isinstance(value, int | float) or key in ("completed", "failed"):
            continue
        if any(key.endswith(t) for t in THROUGHPUTS):
            out[key] = value * f_thr
        elif any(f"_{t}_" in key for t in PER_TOKEN):
            out[key] = value * f_tok
        elif "_ttft_" in key:
            out[key] = value * f_ttft
    if f_thr > 0 and summary.get("duration"):
        out["duration"] = float(summary["duration"]) / f_thr
    return out


def stage_summary(
    records: list[RequestRecord], completed: int, slos: dict[str, float] | None
) -> dict[str, float | int]:
    """The runner's cumulative summary once `completed` requests have finished."""
    done = records[:completed]
    return summarize(done, max((r.end_s for r in done), default=0.0), slos)


@dataclass
class OracleMeasurer:
    """A `tuner.trial.Measurer` backed by the simulator's oracle; tallies modelled GPU time."""

    space: SearchSpace
    seed: int = 0
    noise: NoiseModel = field(default_factory=NoiseModel)
    gpu: GpuTimeModel = field(default_factory=GpuTimeModel)
    oracle: OracleCache | None = None
    costs: dict[int, TrialCost] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.oracle is None:
            self.oracle = OracleCache(self.space)
        # the model the simulator serves: the space's sim: model, else model_path's config.json
        model = load_model(served_model((self.space.sim or {}).get("model"), self.space.model_path))
        # a tensor-parallel server's GPUs load their shares of the weights at once
        self._tp = max(1, int(self.space.fixed_flags.get("tp_size") or 1))
        self._weight_bytes = model.weight_bytes / self._tp
        self._measured: dict[int, int] = {}  # configuration -> measurements (`_noise_key`)
        self._draft_bytes = (model.mtp.head_bytes if model.mtp else 0.0) / self._tp

    def _noise_key(self, number: int, server_args: list[str]) -> list[int]:
        """The noise draw's seed: (seed, trial number); with `BENCH_NOISE=config`, (seed, the
        configuration, how often it was measured before), so two studies that measure the same
        configuration draw the same noise for it, wherever in the study it falls (common random
        numbers: a side-by-side comparison then differs by what the change did, not by noise
        moved to other trials)."""
        if os.environ.get("BENCH_NOISE") != "config":
            return [self.seed, number]
        digest = hashlib.sha256("\0".join(server_args).encode()).digest()
        config = int.from_bytes(digest[:8], "little")
        repeat = self._measured.get(config, 0)
        self._measured[config] = repeat + 1
        return [self.seed, config, repeat]

    def _weights(self, speculative: bool) -> float:
        return self._weight_bytes + (self._draft_bytes if speculative else 0.0)

    def measure(
        self, number: int, server_args: list[str], on_ready: ReadyHook, on_stage: StageHook
    ) -> Measurement:
        assert self.oracle is not None
        r = self.oracle(server_args)
        speculative = "--speculative-algorithm" in server_args
        weights = self._weights(speculative)
        cost = TrialCost(gpus=self._tp)
        self.costs[number] = cost
        if not r.launch_ok:
            failure_class, message = engine.classify_failure(r.failure or "", 1)
            phase = failure_phase(server_args, self.oracle.extra, failure_class)
            cost.launch_s = self.gpu.crash_s(phase, weights, speculative)
            cost.crashed = True
            cost.failure_class = failure_class
            raise LaunchError(failure_class, message, r.failure or "", elapsed_s=cost.launch_s)
        cost.launch_s = self.gpu.launch_s(weights, speculative)
        on_ready(
            {
                "max_running_requests": r.max_running_requests,
                "max_total_num_tokens": r.max_total_num_tokens,
            },
            None,
        )
        warmup_s = r.warmup_s
        rng = np.random.default_rng(self._noise_key(number, server_args))
        total = len(r.records) or 1
        boundaries = stage_boundaries(total, int(self.space.bench.stages))
        factors: list[tuple[float, float, float]] = []
        summary: dict[str, float | int] = {}
        stopped: int | None = None
        for stage, completed in enumerate(boundaries):
            factors.append(
                (
                    float(np.exp(rng.normal(0.0, self.noise.throughput))),
                    float(np.exp(rng.normal(0.0, self.noise.tpot))),
                    float(np.exp(rng.normal(0.0, self.noise.ttft))),
                )
            )
            mean = tuple(float(np.mean([f[i] for f in factors])) for i in range(3))
            summary = noisy(stage_summary(r.records, completed, None), mean)  # type: ignore[arg-type]
            cost.stages_run = stage + 1
            if not on_stage(stage, dict(summary)):
                stopped = stage
                cost.pruned = stage < len(boundaries) - 1
                break
        duration = float(summary.get("duration", 0.0))
        cost.bench_s = warmup_s + duration
        return Measurement(
            capacity={
                "max_running_requests": r.max_running_requests,
                "max_total_num_tokens": r.max_total_num_tokens,
            },
            summary=dict(summary),
            duration_s=duration,
            stopped_at_stage=stopped,
            died=False,
            launch_s=cost.launch_s,
        )

    def exact_summary(self, server_args: list[str]) -> dict[str, float | int] | None:
        """The noise-free full-run summary of a configuration (None: the launch fails)."""
        assert self.oracle is not None
        r = self.oracle(server_args)
        if not r.launch_ok:
            return None
        return dict(r.summary)
