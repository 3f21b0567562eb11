"""What a study will cost before its first launch: launches, launch and benchmark time, GPU hours.

    cost = study_cost(space, options, model_memory, gpu_name, done=0)
    print("\\n".join(cost.lines()))

The model, stated in what it prints:

- launches: `--trials` less the launched configurations a resumed study already holds (skipped
  proposals and repeats are recorded but launch nothing, so they cost no GPU time);
- a launch: 20 s to start the process, the weights (config.json) read at 1 GB/s, and 30 s of
  CUDA-graph capture (60 s with speculation on): the launch model of the quality benchmark
  (benchmarks/oracle_measurer.py), since only a launch can measure this host's disk and GPU.
  On a CPU (`device: cpu`) no graph is captured: sglang 0.5.23 captures CPU graphs only with
  `--enable-torch-compile` (srt/model_executor/model_runner_components/cuda_graph_setup.py,
  capture_decode_graph), which it refuses on a CPU; the 20 s start matches the 17-26 s real
  sglang took to answer /health with the tiny Llama on a 2-core CPU (docs/real-sglang-cpu.md);
- a benchmark: the workload's output tokens at the throughput the performance estimate predicts
  for sglang's defaults (tuner/predict/estimate.py: config.json, the GPU's spec sheet, sglang's
  memory rules) when the GPU is in the table; otherwise a rough rule, 30 ms per output token per
  client (about 33 tok/s each), stated as such;
- GPU hours: launches x (launch + benchmark) x GPUs per server, an upper bound since the stage
  pruner stops clearly dominated trials early; on a CPU, hours of the host (tensor-parallel
  ranks share its cores) and no estimate (tuner/predict/ models GPUs): the rough rule;
- the simulator: each trial's benchmark runs at most `time_scale` times faster than the
  modelled GPU, plus about 2 s to start a simulator process (a lower bound on the wall time).

Once a study on real sglang has launched servers, its own figures replace the model: a launch
costs the median launch this study measured (on a loaded 2-core host real launches of the tiny
model took 53-94 s where the model said ~20 s), a benchmark the median of its whole benchmarks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import optuna

from tuner.bench import WorkloadSpec
from tuner.engines.model_config import ModelMemory
from tuner.errors import UserError
from tuner.predict.estimate import Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.results import record
from tuner.results.goals import is_capacity
from tuner.results.storage import open_storage
from tuner.space.model import SearchSpace
from tuner.study.run import Run

PROCESS_START_S = 20.0
LOAD_RATE_GB_S = 1.0
GRAPH_CAPTURE_S = 30.0
SPECULATIVE_GRAPH_FACTOR = 2.0
ROUGH_S_PER_TOKEN = 0.030  # per client, when no estimate: about 33 output tok/s each
SIM_START_S = 2.0


@dataclass(frozen=True)
class StudyCost:
    launches: int
    done: int  # launched configurations the study already holds
    weights_gb: float | None
    launch_s: float
    bench_s: float
    bench_rule: str
    gpus_per_server: int
    time_scale: float | None  # the simulator's; None on sglang
    speculative: bool = False  # the space can turn speculation on
    on_cpu: bool = False  # the space fixes `device: cpu`: no GPU, no graph capture
    measured_launches: int = 0  # launch_s is the median of this many measured launches
    measured_benches: int = 0  # bench_s is the median of this many measured benchmarks

    @property
    def gpu_hours(self) -> float:
        """GPU hours; on a CPU, hours of the host."""
        per_server = 1 if self.on_cpu else self.gpus_per_server
        return self.launches * (self.launch_s + self.bench_s) * per_server / 3600

    @property
    def hours_unit(self) -> str:
        return "hours of the CPU host" if self.on_cpu else "GPU hours"

    @property
    def sim_wall_s(self) -> float | None:
        if self.time_scale is None:
            return None
        return self.launches * (SIM_START_S + self.bench_s / self.time_scale)

    def lines(self) -> list[str]:
        if self.weights_gb is None:
            weights = "weights unknown (no config.json here): none counted"
        elif self.gpus_per_server > 1:
            where = "process" if self.on_cpu else "GPU"
            weights = (
                f"{self.weights_gb / self.gpus_per_server:.1f} GB a {where} ({self.weights_gb:.1f}"
                f" GB over {self.gpus_per_server}) of weights at {LOAD_RATE_GB_S:g} GB/s"
            )
        else:
            weights = f"{self.weights_gb:.1f} GB of weights at {LOAD_RATE_GB_S:g} GB/s"
        resumed = f" ({self.done} already in the study)" if self.done else ""
        if self.on_cpu:
            graphs = "; no graph capture on a CPU"
        else:
            graphs = f" + {GRAPH_CAPTURE_S:g} s CUDA graphs" + (
                f" (x{SPECULATIVE_GRAPH_FACTOR:g} with speculation, counted for half the trials)"
                if self.speculative
                else ""
            )
        gpus = self.gpus_per_server > 1 and not self.on_cpu
        launch_rule = f"{PROCESS_START_S:g} s start + {weights}" + graphs
        if self.measured_launches:
            launch_rule = _measured(self.measured_launches, "launch", "launches")
        bench_rule = self.bench_rule
        if self.measured_benches:
            bench_rule = _measured(self.measured_benches, "whole benchmark", "whole benchmarks")
        out = [
            f"cost: {self.launches} launches{resumed}; skipped proposals launch nothing",
            f"  launch   ~{_duration(self.launch_s)} each: {launch_rule}",
            f"  bench    ~{_duration(self.bench_s)} per trial: {bench_rule}",
            f"  total    ~{self.gpu_hours:.2f} {self.hours_unit}"
            + (f" ({self.gpus_per_server} GPUs per server)" if gpus else "")
            + "; less when the stage pruner stops a trial early",
        ]
        if self.sim_wall_s is not None:
            out.append(
                f"  simulator: ~{_duration(self.sim_wall_s)} of wall time or more at time scale "
                f"{self.time_scale:g} (at most that much faster than the modelled GPU; "
                f"~{SIM_START_S:g} s to start each server)"
            )
        return out


@dataclass(frozen=True)
class MeasuredTimes:
    """What a study's launched trials took on this host (their TIMINGS), in seconds."""

    launch_s: tuple[float, ...] = ()  # every launch, the failed ones too: they cost as much
    bench_s: tuple[float, ...] = ()  # the whole benchmarks (trials that completed)

    @classmethod
    def of(cls, trials: Sequence[optuna.trial.FrozenTrial]) -> MeasuredTimes:
        launches, benches = [], []
        for t in trials:
            timings = t.user_attrs.get(record.TIMINGS) or {}
            launch, bench = timings.get("launch_s"), timings.get("bench_s")
            if isinstance(launch, int | float) and launch > 0:
                launches.append(float(launch))
            complete = t.state == optuna.trial.TrialState.COMPLETE
            if complete and isinstance(bench, int | float) and bench > 0:
                benches.append(float(bench))
        return cls(tuple(launches), tuple(benches))


def measured_times(run: Run) -> MeasuredTimes:
    """The launch and benchmark times the run's study holds; none when there is no study."""
    name, options = run.study_name, run.options
    try:
        storage = open_storage(options.storage, name, options.studies_dir)
        study = optuna.load_study(study_name=name, storage=storage)
    except (UserError, KeyError):
        return MeasuredTimes()
    return MeasuredTimes.of(study.get_trials(deepcopy=False))


def study_cost(run: Run, done: int = 0, measured: MeasuredTimes | None = None) -> StudyCost:
    """What the rest of the study will cost; `done`: launches a resumed study already holds.

    On real sglang a resumed study's own launch and benchmark times (`measured`, read from its
    storage when not given) replace the model; the simulator's say nothing of a GPU."""
    space, options, model = run.space, run.options, run.host.model
    launches = max(options.trials - done, 0)
    weights_gb = None if model is None else (model.weight_bytes + model.draft_bytes) / 1e9
    speculative = "speculative_algorithm" in space.params
    on_cpu = runs_on_cpu(space)
    capture = GRAPH_CAPTURE_S * ((1 + SPECULATIVE_GRAPH_FACTOR) / 2 if speculative else 1.0)
    # each of a tensor-parallel server's GPUs loads its share of the weights, at once
    per_gpu_gb = (weights_gb or 0.0) / options.tp_size
    launch_s = PROCESS_START_S + per_gpu_gb / LOAD_RATE_GB_S + (0.0 if on_cpu else capture)
    gpu_name = None if on_cpu else run.host.gpu_name  # a GPU beside does not serve the trials
    bench_s, rule = bench_seconds(space, model, gpu_name, run.host.gpu_memory_gb, on_cpu=on_cpu)
    if is_capacity(space.objectives.throughput):
        bench_s, rule = capacity_seconds(space, bench_s, rule)
    time_scale = None
    if options.engine == "sim":
        time_scale = float(options.time_scale or space.sim.get("time_scale") or 1.0)
        measured = MeasuredTimes()
    elif measured is None:
        measured = measured_times(run) if done else MeasuredTimes()
    if measured.launch_s:
        launch_s = statistics.median(measured.launch_s)
    if measured.bench_s:
        bench_s = statistics.median(measured.bench_s)
    return StudyCost(
        launches,
        done,
        weights_gb,
        launch_s,
        bench_s,
        rule,
        options.tp_size,
        time_scale,
        speculative,
        on_cpu,
        len(measured.launch_s),
        len(measured.bench_s),
    )


def runs_on_cpu(space: SearchSpace) -> bool:
    """The space serves on the CPU: sglang's `--device cpu`, fixed in the space file."""
    return str(space.fixed_flags.get("device") or "").lower() == "cpu"


def bench_seconds(
    space: SearchSpace,
    model: ModelMemory | None,
    gpu_name: str | None,
    gpu_gb: float | None,
    on_cpu: bool = False,
) -> tuple[float, str]:
    """Modelled seconds of one trial's benchmark, and the rule that gave them."""
    spec = WorkloadSpec.from_dict(space.workload)
    conversations = spec.make_conversations()
    requests = sum(len(c.turns) for c in conversations) + space.bench.warmup_requests
    outputs = sum(t.output_len for c in conversations for t in c.turns)
    tokens = outputs * requests / max(requests - space.bench.warmup_requests, 1)
    clients = space.bench.concurrency or requests
    what = f"{requests} requests, {tokens:,.0f} output tokens, {clients} clients"
    # An open-loop trace takes at least its (sped-up) span, however fast the server.
    offsets = spec.arrival_offsets()
    span = offsets[-1] if offsets else 0.0
    if offsets:
        what = f"{requests} requests, {tokens:,.0f} output tokens, over the trace's {span:.0f} s"
    gpu = gpu_spec(gpu_name)
    if model is not None and gpu is not None:
        flags = {"model_path": space.model_path, **space.fixed_flags}
        prediction = Estimator(space, model, gpu, gpu_gb or gpu.memory_gb).predict(flags)
        if prediction.fits and prediction.throughput > 0:
            return max(tokens / prediction.throughput, span), (
                f"{what} at {prediction.throughput:,.0f} tok/s, the estimate for sglang's "
                f"defaults on {gpu.name} (tuner/predict/estimate.py)"
            )
    per_client = tokens / min(clients, requests)
    missing = "a CPU" if on_cpu else "this GPU and model"  # tuner/predict/ models GPUs
    return max(per_client * ROUGH_S_PER_TOKEN, span), (
        f"{what}; rough rule, no estimate for {missing}: "
        f"{ROUGH_S_PER_TOKEN * 1000:g} ms per output token per client"
    )


# Full-length steps a capacity search (tuner/trial/capacity.py) costs, in runs of its workload
# at the rate it finds: measured 7.7-8.4 on search_spaces/qwen3.6-27b-capacity.yaml (7 steps,
# the lower ones longer, the broken ones stopped early).
CAPACITY_STEP_RUNS = 8.0


def capacity_seconds(space: SearchSpace, closed_s: float, rule: str) -> tuple[float, str]:
    """A capacity trial's benchmark: its workload about CAPACITY_STEP_RUNS times, each at
    least as long as the requests take to arrive at the rate the search starts at."""
    spec = WorkloadSpec.from_dict(space.workload)
    start = float(space.bench.request_rate or 1.0)
    one = max(closed_s, spec.num_requests / start)
    return one * CAPACITY_STEP_RUNS, (
        f"a rate search of ~{CAPACITY_STEP_RUNS:g} runs of {spec.num_requests} requests, "
        f"each >= {one:.0f} s (arrivals at {start:g} req/s, or {rule})"
    )


def _measured(count: int, one: str, many: str) -> str:
    if count == 1:
        return f"the one {one} this study measured"
    return f"the median of the {count} {many} this study measured"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
