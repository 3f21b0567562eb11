"""A trial's capacity: the highest request rate at which every SLO holds, within one server.

The capacity objective (`--goal capacity`, tuner/results/goals.py) asks what operators ask:
how much load this configuration carries before a latency limit breaks. SGLang's own
auto-benchmark bisects the rate with a fresh server per probe; here the probes are steps of
one server's lifetime, so a trial pays one launch:

    plan = RatePlan(start=1.5)                       # the space's bench.request_rate
    result = search_capacity(config, slos, plan)     # BenchConfig of the trial's server
    result.rate, [s.rate for s in result.steps]      # 2.6, [1.5, 3.0, 2.12, 2.52, 2.75, 2.63]

1. The first step runs the workload at `start` req/s; each step after one that met every SLO
   runs at `growth` x the rate, each after one that broke at the rate / `growth`, until one of
   each is known; then the rate between the highest met and the lowest broken (their geometric
   mean) is tried, until the two are within `tolerance`. The sustained rate is the highest met.
2. A step stops as soon as an SLO is clearly broken (`clearly_broken`): the requests already
   over the limit are more than the percentile allows of the whole step, whatever the rest
   measure. An overloaded step ends in a tenth of its requests instead of queueing them all.
3. Every step sends the same requests on the same arrival draws scaled to its rate (common
   random numbers: steps differ in their rate alone, so met / broken is monotone in the rate
   as far as the server is), and the prefix cache is flushed between steps (`/flush_cache`,
   which sglang and the simulator both answer), so no step reads prompts an earlier one cached.

Steps run through the benchmark's own dispatch (tuner/bench/dispatch.py), so the search works
the same against real sglang (wall clock) and the simulator (modelled time).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tuner.bench import BenchClient, BenchConfig, BenchResult, Summary, run_bench
from tuner.results.goals import SUSTAINED_RATE, Slo, as_float
from tuner.signals import run_async

# Checks per step for a broken SLO (stages of the run, by requests completed).
STEP_CHECKS = 10
# Wall seconds to wait for a stopped step's requests to leave the server before the next step.
DRAIN_TIMEOUT_S = 60.0

_PERCENT = {"median": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
_LATENCY_SLO = re.compile(r"^(mean|median|p90|p95|p99)_(ttft|tpot|e2e_latency)_ms$")


@dataclass(frozen=True)
class RatePlan:
    """How the rate steps are chosen (module docstring, 1)."""

    start: float  # req/s of the first step
    growth: float = 2.0
    tolerance: float = 0.04  # the search ends when lowest broken <= highest met x (1 + this)
    max_steps: int = 12
    lowest: float | None = None  # below this rate nothing is tried (default: start / 64)


class RateSearch:
    """The pure state of the search: which rate to try next, from the steps' verdicts."""

    def __init__(self, plan: RatePlan) -> None:
        self.plan = plan
        self.met: float | None = None  # highest rate that met every SLO
        self.broken: float | None = None  # lowest rate that broke one
        self.steps = 0

    def next_rate(self) -> float | None:
        """The next rate to try, None when the search is over."""
        plan = self.plan
        if self.steps >= plan.max_steps:
            return None
        if self.met is None and self.broken is None:
            return plan.start
        if self.broken is None:
            assert self.met is not None
            return self.met * plan.growth
        if self.met is None:
            lower = self.broken / plan.growth
            lowest = plan.lowest if plan.lowest is not None else plan.start / 64
            return lower if lower >= lowest else None
        if self.broken <= self.met * (1 + plan.tolerance):
            return None
        return math.sqrt(self.met * self.broken)

    def record(self, rate: float, met: bool) -> None:
        self.steps += 1
        if met:
            self.met = rate if self.met is None else max(self.met, rate)
        else:
            self.broken = rate if self.broken is None else min(self.broken, rate)

    @property
    def bracketed(self) -> bool:
        """A broken rate above the met one is known: the sustained rate is not just a floor."""
        return self.broken is not None and (self.met is None or self.broken > self.met)


def clearly_broken(slos: Sequence[Slo], summary: Summary, total: int) -> Slo | None:
    """The first SLO a step has lost already, whatever its requests still to finish measure.

    For a percentile limit (p99_ttft_ms <= 3000): each percentile in the partial summary that
    is over the limit proves that many completed requests are over it (np.percentile
    interpolates, so the value at rank ceil((n-1) q) is at least the percentile); once they are
    more than the whole step's percentile allows, the step's figure will be over the limit. For
    a mean: the completed requests' sum alone, spread over the whole step, is over the limit
    (latencies are >= 0). Other SLOs are judged when the step ends.
    """
    done = int(summary.get("completed", 0) or 0)
    if done == 0 or total <= 0:
        return None
    for slo in slos:
        match = _LATENCY_SLO.match(slo.metric)
        if slo.op not in ("<=", "<") or match is None:
            continue
        stat, quantity = match.groups()
        if stat == "mean":
            mean = as_float(summary.get(slo.metric))
            if mean is not None and mean * done / total > slo.limit:
                return slo
            continue
        over = 0
        for level, percent in _PERCENT.items():
            value = as_float(summary.get(f"{level}_{quantity}_ms"))
            if value is not None and value > slo.limit:
                over = max(over, done - math.ceil((done - 1) * percent / 100))
        if over >= total - math.floor((total - 1) * _PERCENT[stat] / 100):
            return slo
    return None


def step_met(slos: Sequence[Slo], summary: Summary, total: int) -> bool:
    """A finished step met its SLOs: every request served, every limit held."""
    served = int(summary.get("completed", 0) or 0) == total and not summary.get("failed")
    return served and all(slo.satisfied_by(summary) for slo in slos)


@dataclass(frozen=True)
class RateStep:
    """One step of the search, as the trial records it (user attr `rate_steps`)."""

    rate: float  # offered req/s
    met: bool
    requests: int  # in the step
    completed: int
    stopped_early: bool
    broke: str | None  # the SLO that broke, when one did
    duration_s: float  # modelled seconds
    metrics: dict[str, float] = field(default_factory=dict)  # p99 TTFT / TPOT, each SLO's metric
    cache_flushed: bool | None = None  # before the step (None: the first step, nothing to flush)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CapacityResult:
    """What the search found; `summary`, `duration_s`, `stopped_at_stage` and `server_lost`
    read as a BenchResult's do (tuner/trial/measure.py treats both alike)."""

    rate: float  # the highest rate that met every SLO, 0 when none did
    steps: list[RateStep]
    summary: Summary  # the full summary of the step at `rate` (of the lowest step when none met)
    bracketed: bool
    duration_s: float  # modelled seconds over every step
    server_lost: str | None = None
    stopped_at_stage: int | None = None  # the search is never pruned by the stage pruner


StepHook = Callable[[int, RateStep], bool]  # (step index, step) -> go on?


def search_capacity(
    config: BenchConfig,
    slos: Sequence[Slo],
    plan: RatePlan,
    *,
    alive: Callable[[], bool] = lambda: True,
    on_step: StepHook | None = None,
) -> CapacityResult:
    """Run the rate steps against `config.url` (one server) and return the sustained rate.

    `config` is the trial's benchmark; its request rate and stages are set per step. `alive`
    is asked at every check (a dead server ends the search); `on_step` after every step.
    """
    total = config.workload.num_requests
    search = RateSearch(plan)
    steps: list[RateStep] = []
    summaries: dict[float, Summary] = {}
    duration = 0.0
    server_lost: str | None = None
    while (rate := search.next_rate()) is not None:
        flushed = None if not steps else drain_and_flush(config)
        step_config = replace(
            config,
            request_rate=rate,
            stages=max(config.stages, STEP_CHECKS),
            # The server is warm after the first step; only the first one warms it up.
            warmup_requests=config.warmup_requests if not steps else 0,
        )
        result, broke = _run_step(step_config, slos, total, alive)
        summary = dict(result.summary)
        duration += float(result.duration_s)
        met = not broke and step_met(slos, summary, total)
        if not met and not broke:
            broke.extend(s for s in slos if not s.satisfied_by(summary))
        step = RateStep(
            rate=rate,
            met=met,
            requests=total,
            completed=int(summary.get("completed", 0) or 0),
            stopped_early=result.stopped_at_stage is not None,
            broke=str(broke[0]) if broke else (None if met else "requests failed"),
            duration_s=float(result.duration_s),
            metrics=_step_metrics(summary, slos),
            cache_flushed=flushed,
        )
        steps.append(step)
        summaries[rate] = summary
        search.record(rate, met)
        if result.server_lost is not None or not alive():
            server_lost = result.server_lost or "the server exited during the rate search"
            break
        if on_step is not None and not on_step(len(steps) - 1, step):
            break
    found = search.met or 0.0
    if search.met is not None:
        at = summaries[search.met]
    elif steps:
        at = summaries[min(summaries)]
    else:
        at = {"completed": 0}
    return CapacityResult(
        rate=found,
        steps=steps,
        summary={**at, SUSTAINED_RATE: found},
        bracketed=search.bracketed,
        duration_s=duration,
        server_lost=server_lost,
    )


def _run_step(
    config: BenchConfig, slos: Sequence[Slo], total: int, alive: Callable[[], bool]
) -> tuple[BenchResult, list[Slo]]:
    """One step at `config.request_rate`, stopped at the first check that finds an SLO lost
    (returned, empty when none was) or the server gone."""
    broke: list[Slo] = []

    def check(stage: int, summary: Summary) -> bool:
        if not alive():
            return False
        slo = clearly_broken(slos, summary, total)
        if slo is not None:
            broke.append(slo)
            return False
        return True

    return run_bench(config, on_stage=check), broke


def _step_metrics(summary: Summary, slos: Sequence[Slo]) -> dict[str, float]:
    names = ["request_throughput", "p99_ttft_ms", "p99_tpot_ms", *(s.metric for s in slos)]
    values = {n: as_float(summary.get(n)) for n in dict.fromkeys(names)}
    return {n: v for n, v in values.items() if v is not None}


def drain_and_flush(config: BenchConfig) -> bool:
    """Wait until the stopped step's requests have left the server, then empty its prefix cache.

    `/flush_cache` refuses (400) while requests run or wait, so one call does both. False when
    the server has no such route or it never emptied within DRAIN_TIMEOUT_S: the step then
    runs on a warm cache, and its record says so."""

    async def flush() -> bool:
        async with BenchClient(config.url, api_key=config.api_key) as client:
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while True:
                status = await client.flush_cache()
                if status == 200:
                    return True
                if status != 400 or time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.1)

    return run_async(flush())
