"""The truth: every configuration's noise-free figures from the oracle, and the optimum.

The optimum is the best SLO-feasible configuration of a dense grid of the space, refined by
coordinate sweeps, with its Pareto front and hypervolume (`tuner.results.pareto`).
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.oracle_measurer import NoiseModel, OracleCache, OracleMeasurer, default_store
from benchmarks.quality.grid import full_flags, nested_loops, param_values
from tuner.engines import sglang as engine
from tuner.results.goals import MAXIMIZE, MINIMIZE
from tuner.results.pareto import Point, hypervolume, pareto_front
from tuner.space import ParamSpec, SearchSpace

DIRECTIONS = (MAXIMIZE, MINIMIZE)  # (throughput, latency)


@dataclass(frozen=True)
class Truth:
    """A configuration's noise-free figures."""

    launch_ok: bool
    feasible: bool  # launched and met every SLO
    throughput: float
    latency: float
    failure: str | None = None
    slo_values: tuple[float, ...] = ()  # the space's SLO metrics, in its order


def slos_met(space: SearchSpace, summary: dict[str, Any]) -> bool:
    """What the objective's constraints say: a missing metric is a violated SLO."""
    return all(
        slo.metric in summary and slo.violation(float(summary[slo.metric])) <= 0
        for slo in space.slos
    )


class Oracle:
    """Noise-free figures of configurations, as the objective would judge them."""

    def __init__(self, space: SearchSpace, cache: OracleCache) -> None:
        self.space = space
        self.serve = OracleMeasurer(space, noise=NoiseModel.none(), oracle=cache)
        self._by_args: dict[tuple[str, ...], Truth] = {}
        self.visited: dict[tuple[str, ...], dict[str, Any]] = {}  # argv -> sampled params

    def save(self) -> None:
        """Keep the oracle's results for the next run (when its cache has a store)."""
        assert self.serve.oracle is not None
        self.serve.oracle.save()

    def of_args(self, server_args: list[str]) -> Truth:
        key = tuple(server_args)
        truth = self._by_args.get(key)
        if truth is None:
            truth = self._judge(server_args)
            self._by_args[key] = truth
        return truth

    def _judge(self, server_args: list[str]) -> Truth:
        summary = self.serve.exact_summary(server_args)
        if summary is None:
            assert self.serve.oracle is not None
            return Truth(False, False, 0.0, math.inf, self.serve.oracle(server_args).failure_kind)
        objectives = self.space.objectives
        throughput = float(summary[objectives.throughput])
        latency = float(summary.get(objectives.latency, math.inf))
        met = slos_met(self.space, summary)
        values = tuple(float(summary.get(slo.metric, math.nan)) for slo in self.space.slos)
        return Truth(True, met and math.isfinite(latency), throughput, latency, None, values)

    def of_params(self, params: dict[str, Any]) -> tuple[list[str] | None, Truth]:
        """Sampled params -> (argv, truth); argv None when the objective would not launch."""
        flags = full_flags(self.space, params)
        version = self.space.engine_version
        try:
            args = engine.build_server_args(flags, version)
        except Exception:
            return None, Truth(False, False, 0.0, math.inf, "bad_argument")
        if engine.check_startup_rules(flags, version):
            return None, Truth(False, False, 0.0, math.inf, "startup_rule")
        self.visited.setdefault(tuple(args), params)
        return args, self.of_args(args)


@dataclass
class OptimumReport:
    best_throughput: float
    best_params: dict[str, Any]
    front: list[tuple[float, float]]  # (throughput, latency), feasible, non-dominated
    reference_latency: float  # hypervolume reference: the worst feasible latency
    hypervolume: float
    configurations: int  # distinct launchable argv judged
    feasible: int
    seconds: float
    searched_configurations: int = 0  # by the dense grid and its refinement alone
    studies_beat_search: bool = False  # a study launched a better one than the search found


def front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The distinct non-dominated (throughput, latency) points, lowest latency first."""
    found = pareto_front([Point(i, p) for i, p in enumerate(points)], DIRECTIONS)
    return list(dict.fromkeys(p.values for p in found))  # type: ignore[misc]


def area(points: Sequence[tuple[float, float]], reference_latency: float) -> float:
    """Area dominated by the points above throughput 0 and below the reference latency."""
    reference = (0.0, reference_latency)
    return hypervolume([Point(i, p) for i, p in enumerate(points)], DIRECTIONS, reference)


def coordinate_sweep(oracle: Oracle, start: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every configuration one param away from `start`: each numeric param over all its values,
    each categorical over its choices; params a change switches on take each of their dense
    values, params it switches off are dropped."""
    specs = oracle.space.params
    for name, value in start.items():
        spec = specs[name]
        for v in param_values(spec, None):
            if v == value:
                continue
            moved = {**start, name: v}
            yield from nested_loops(oracle.space, functools.partial(_moved_or_three, moved))


def _moved_or_three(moved: dict[str, Any], param: ParamSpec) -> list[Any]:
    """The moved configuration's value of a param, or three values over its range."""
    return [moved[param.name]] if param.name in moved else param_values(param, 3)


def find_optimum(oracle: Oracle, dense_points: int, refine: bool) -> OptimumReport:
    started = time.perf_counter()
    for i, params in enumerate(nested_loops(oracle.space, lambda p: param_values(p, dense_points))):
        oracle.of_params(params)
        if i % 500 == 499:  # a long grid keeps what it measured if it is stopped
            oracle.save()
            print(f"  dense grid: {i + 1} configurations", flush=True)
    if refine:
        _refine(oracle)
    return summarize_optimum(oracle, time.perf_counter() - started)


def _feasible(oracle: Oracle) -> list[tuple[dict[str, Any], Truth]]:
    return [(p, t) for a, p in oracle.visited.items() if (t := oracle.of_args(list(a))).feasible]


def _refine(oracle: Oracle, starts: int = 10, passes: int = 4) -> None:
    # Hill-climb from the best points along every axis until nothing improves...
    swept: set[str] = set()
    for _ in range(passes):
        ranked = sorted(_feasible(oracle), key=lambda pt: -pt[1].throughput)
        before = ranked[0][1].throughput if ranked else 0.0
        for params, _truth in ranked[:starts]:
            _sweep_once(oracle, params, swept)
        after = max((t.throughput for _p, t in _feasible(oracle)), default=0.0)
        if after <= before:
            break
    # ...then sweep around every point of the front once, which fills the gaps between them.
    feasible = _feasible(oracle)
    on_front = set(front([(t.throughput, t.latency) for _p, t in feasible]))
    for params, truth in feasible:
        if (truth.throughput, truth.latency) in on_front:
            _sweep_once(oracle, params, swept)


def _sweep_once(oracle: Oracle, params: dict[str, Any], swept: set[str]) -> None:
    key = json.dumps(params, sort_keys=True)
    if key in swept:
        return
    swept.add(key)
    for neighbour in coordinate_sweep(oracle, params):
        oracle.of_params(neighbour)
    if len(swept) % 10 == 0:  # a long refinement keeps what it measured if it is stopped
        oracle.save()


def summarize_optimum(oracle: Oracle, seconds: float) -> OptimumReport:
    feasible = _feasible(oracle)
    if not feasible:
        raise SystemExit("the oracle finds no SLO-feasible configuration in this space")
    best_params, best = max(feasible, key=lambda pt: pt[1].throughput)
    points = [(t.throughput, t.latency) for _p, t in feasible]
    reference = max(lat for _t, lat in points)
    return OptimumReport(
        best_throughput=best.throughput,
        best_params=best_params,
        front=front(points),
        reference_latency=reference,
        hypervolume=area(points, reference),
        configurations=len(oracle.visited),
        feasible=len(feasible),
        seconds=seconds,
    )


def world_oracle(space_name: str, world: str | None) -> tuple[SearchSpace, Oracle]:
    """A quality cell's space in `world` (benchmarks/quality/worlds.py) and its oracle on the
    shared store of measured configurations. A space file (`*.yaml`, such as a cell of
    benchmarks/heldout/) is taken as it is, in the world it names: `world` is not read."""
    from benchmarks.quality.worlds import load_cell, world_space

    if space_name.endswith(".yaml"):
        space = load_cell(space_name)
    else:
        space = world_space(space_name, world)
    return space, Oracle(space, OracleCache(space, default_store()))
