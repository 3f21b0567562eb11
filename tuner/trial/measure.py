"""How a trial is served: launch the server, benchmark it over HTTP by stages, stop it.

A capacity study (tuner/results/goals.py) benchmarks by rate steps instead
(tuner/trial/capacity.py); the stage hook then hears about each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tuner.bench import BenchConfig, BenchResult, WorkloadSpec, run_bench
from tuner.engines import sglang as engine
from tuner.launcher import LaunchSpec, LaunchTarget, RunningServer, launch
from tuner.results.goals import is_capacity
from tuner.space.model import SearchSpace
from tuner.trial.capacity import CapacityResult, RatePlan, search_capacity

StageHook = Callable[[int, dict[str, Any]], bool]  # (stage, summary so far) -> go on?


ReadyHook = Callable[[dict[str, Any], int | None], None]  # (capacity, server process group)


@dataclass(frozen=True)
class Measurement:
    """What serving one trial gave: capacity, the benchmark summary, and how it ended."""

    capacity: dict[str, Any]
    summary: dict[str, Any]
    duration_s: float  # modelled seconds of benchmark
    stopped_at_stage: int | None  # the stage hook said stop
    died: bool  # the server exited (or stopped answering) during the benchmark
    launch_s: float
    died_cause: str | None = None  # the exception its log ends with, when it died
    rate_steps: tuple[dict[str, Any], ...] = ()  # a capacity search's steps (RateStep.to_dict)


class Measurer(Protocol):
    """How a trial is served. Raises LaunchError when the server does not come up."""

    def measure(
        self, number: int, server_args: list[str], on_ready: ReadyHook, on_stage: StageHook
    ) -> Measurement: ...


class LaunchAndMeasure:
    """The real thing: launch the server, benchmark it over HTTP by stages, stop it."""

    def __init__(self, target: LaunchTarget, space: SearchSpace, study_dir: Path) -> None:
        self.target = target
        self.space = space
        self.study_dir = study_dir

    def measure(
        self, number: int, server_args: list[str], on_ready: ReadyHook, on_stage: StageHook
    ) -> Measurement:
        target = self.target
        spec = LaunchSpec(
            module=target.module,
            server_args=server_args,
            extra_args=list(target.extra_args),
            log_path=self.study_dir / f"trial-{number}" / "server.log",
            gpus=target.gpus,
            api_key=target.api_key,
            ready_timeout_s=target.ready_timeout_s,
            python=target.python,
            env=dict(target.env),
        )
        bench = self.space.bench
        with launch(spec, engine.classify_failure, engine.READY_LINE) as server:
            capacity = dict(engine.parse_capacity(server.log_text()))
            capacity.update(_capacity_from_server_info(server.server_info))
            on_ready(capacity, server.process.pid)

            def hook(stage: int, summary: dict[str, Any]) -> bool:
                return on_stage(stage, summary) and server.alive()

            config = BenchConfig(
                url=server.url,
                workload=WorkloadSpec.from_dict(self.space.workload),
                concurrency=bench.concurrency,
                request_rate=bench.request_rate,
                arrival=bench.arrival,
                warmup_requests=bench.warmup_requests,
                stages=int(bench.stages),
                api=bench.api,
                api_key=target.api_key,
                request_timeout_s=bench.timeout_s,
            )
            result: BenchResult | CapacityResult
            try:
                if is_capacity(self.space.objectives.throughput):
                    result = self._search(config, server, on_stage)
                else:
                    result = run_bench(config, on_stage=hook)
            except Exception as exc:  # unreachable, or the server broke the protocol / died
                died = not server.alive()
                return Measurement(
                    capacity=capacity,
                    summary={"completed": 0, "error": f"{type(exc).__name__}: {exc}"},
                    duration_s=0.0,
                    stopped_at_stage=None,
                    died=died,
                    launch_s=server.launch_s,
                    died_cause=_died_cause(server) if died else None,
                )
            # Real sglang takes seconds to tear its process tree down after a crash: a server
            # that stopped answering counts as dead even while its launcher still runs.
            died = not server.alive() or result.server_lost is not None
            return Measurement(
                capacity=capacity,
                summary=dict(result.summary),
                duration_s=float(result.duration_s),
                stopped_at_stage=result.stopped_at_stage,
                died=died,
                launch_s=server.launch_s,
                died_cause=_died_cause(server) if died else None,
                rate_steps=_rate_steps(result),
            )

    def _search(
        self, config: BenchConfig, server: RunningServer, on_stage: StageHook
    ) -> CapacityResult:
        """The capacity search on the running server; each step goes to the stage hook."""
        start = self.space.bench.request_rate
        assert start is not None  # the space checks: capacity needs an open loop
        return search_capacity(
            config,
            self.space.slos,
            RatePlan(start=float(start)),
            alive=server.alive,
            on_step=lambda index, step: on_stage(index, step.to_dict()),
        )


def _rate_steps(result: BenchResult | CapacityResult) -> tuple[dict[str, Any], ...]:
    steps = result.steps if isinstance(result, CapacityResult) else []
    return tuple(step.to_dict() for step in steps)


def _died_cause(server: RunningServer) -> str | None:
    # The crash is written while the process tree comes down: give it a moment to be logged.
    deadline = time.monotonic() + 10.0
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    return engine.crash_cause(server.log_text())


def _capacity_from_server_info(info: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "max_total_num_tokens" in info:
        out["max_total_num_tokens"] = info["max_total_num_tokens"]
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        effective = states[0].get("effective_max_running_requests_per_dp")
        if effective is not None:
            out["max_running_requests"] = effective
    if "sim_time_scale" in info:
        out["time_scale"] = info["sim_time_scale"]
    return out
