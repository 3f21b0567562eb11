"""The cross-checks of a search-space file: names, ranges, conditions, engine flags and SLOs."""

from __future__ import annotations

import math
import os
import re
from typing import Any

from tuner.bench import WORKLOAD_KINDS, WorkloadSpec
from tuner.engines import sglang
from tuner.errors import UserError
from tuner.results.goals import SLO_PATTERN, SUSTAINED_RATE, Slo, is_capacity
from tuner.space.derive import DeriveError, expression_names
from tuner.space.flag_ranges import out_of_bounds
from tuner.space.model import (
    LATENCY_METRICS,
    THROUGHPUT_METRICS,
    BenchSettings,
    EngineSpec,
    Objectives,
    ParamSpec,
    SearchSpace,
    as_tuple,
    same_value,
)
from tuner.space.relative import BoundError, resolve_bound
from tuner.space.schema import ParamFile, SloFile, SpaceError, SpaceFile

SLO_OPS = ("<=", ">=")


_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


_FLAG_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


def check_space(raw: SpaceFile, default_name: str) -> SearchSpace:
    name = raw.name if raw.name is not None else default_name
    if not _NAME_PATTERN.match(name):
        raise SpaceError(
            "name", f"{name!r} is not a usable study name; use letters, digits, '.', '_', '-'"
        )
    if not raw.model_path.strip():
        raise SpaceError("model_path", "must not be empty")
    for flag in raw.fixed_flags:
        _check_flag_name(f"fixed_flags.{flag}", flag)
    if not raw.params:
        raise SpaceError("params", "at least one tuned param is needed")

    for flag in raw.params:
        path = f"params.{flag}"
        _check_flag_name(path, flag)
        if flag in raw.fixed_flags:
            raise SpaceError(path, "is also in fixed_flags; a flag is either fixed or tuned")
    params: dict[str, ParamSpec] = {}
    for flag in _sampling_order(raw.params):
        param = _resolve_relative_bounds(
            f"params.{flag}", raw.params[flag], raw.bench, raw.capacity
        )
        spec = _param_spec(f"params.{flag}", flag, param, params)
        relative = {
            k: v for k in ("low", "high") if isinstance(v := getattr(raw.params[flag], k), str)
        }
        params[flag] = spec.model_copy(update={"relative": relative}) if relative else spec

    _check_against_engine(raw.engine, raw.fixed_flags, params)
    _check_workload(raw.workload)
    _check_objectives(raw.objectives)
    slos = [_slo(f"slos.{i}", item) for i, item in enumerate(raw.slos)]
    if is_capacity(raw.objectives.throughput):
        _check_capacity(raw.bench, slos)
    return SearchSpace(
        name=name,
        engine=raw.engine,
        # `~/...` names a local directory (sglang would take the text for a hub id).
        model_path=os.path.expanduser(raw.model_path),
        fixed_flags=dict(raw.fixed_flags),
        sim=dict(raw.sim),
        params=params,
        workload=dict(raw.workload),
        bench=raw.bench,
        objectives=raw.objectives,
        slos=slos,
        capacity=raw.capacity,
    )


def _sampling_order(params: dict[str, ParamFile]) -> list[str]:
    """File order, except that a param comes after every param its `when` or `derive` names.

    Sampling in this order lets one pass decide every value; keeping file order otherwise keeps
    the study's param order what the user wrote (and independent of how a dict was re-sorted).
    """
    needs: dict[str, list[tuple[str, str]]] = {}
    for flag, param in params.items():
        refs = [(f"params.{flag}.when.{key}", key) for key in param.when]
        if param.derive is not None:
            path = f"params.{flag}.derive"
            refs += [(path, name) for name in _expression_names(path, param.derive)]
        for path, ref in refs:
            if ref not in params:
                what = "condition names" if ".when." in path else "names"
                raise SpaceError(
                    path,
                    f"{what} {ref!r}, which is not a param of this space "
                    f"(params: {', '.join(params)})",
                )
            if ref == flag:
                raise SpaceError(path, f"{flag!r} cannot depend on itself")
        needs[flag] = refs

    order: list[str] = []
    visiting: list[str] = []

    def visit(flag: str) -> None:
        if flag in order:
            return
        if flag in visiting:
            cycle = " -> ".join([*visiting[visiting.index(flag) :], flag])
            raise SpaceError(f"params.{flag}", f"conditions or derivations form a cycle: {cycle}")
        visiting.append(flag)
        for _, ref in needs[flag]:
            visit(ref)
        visiting.pop()
        order.append(flag)

    for flag in params:
        visit(flag)
    return order


def _check_against_engine(
    engine: EngineSpec, fixed_flags: dict[str, Any], params: dict[str, ParamSpec]
) -> None:
    """Every flag must exist in the engine version's real parser and every value the space can
    produce must be one it accepts, so a typo fails here and not after a model load."""

    version = engine.version
    try:
        sglang.load_snapshot(version)  # a post release may use its base's snapshot
    except UserError as exc:
        if sglang.older_than_all_known(version):
            raise SpaceError("engine.version", str(exc)) from None
        # A release the tuner does not know (newer, a git build): checked here against the
        # nearest known one, and against its own parser once it is installed and read live
        # (tuner/optimize/version_check.py).
        version = sglang.nearest_known_version(version)
    names = [(f"fixed_flags.{flag}", flag) for flag in fixed_flags]
    names += [(f"params.{flag}", flag) for flag in params]
    for path, flag in names:
        try:
            sglang.resolve_flag(flag, version)
        except UserError as exc:
            raise SpaceError(path, str(exc)) from None
    values = [(f"fixed_flags.{flag}", flag, value) for flag, value in fixed_flags.items()]
    for flag, spec in params.items():
        path = f"params.{flag}"
        if spec.kind == "categorical":
            values += [(f"{path}.choices", flag, value) for value in spec.choices or ()]
        elif spec.kind in ("int", "float"):
            values += [(f"{path}.low", flag, spec.low), (f"{path}.high", flag, spec.high)]
    for path, flag, value in values:
        try:
            sglang.build_server_args({flag: value}, version)
        except UserError as exc:
            raise SpaceError(path, str(exc)) from None
        problem = out_of_bounds(flag, value)  # parsed, but a value the server cannot use
        if problem:
            raise SpaceError(path, problem)


def _check_flag_name(path: str, flag: str) -> None:
    if not _FLAG_PATTERN.match(flag):
        raise SpaceError(
            path,
            f"{flag!r} is not a flag name; write sglang flags with underscores, lower case, "
            "without dashes (e.g. mem_fraction_static for --mem-fraction-static)",
        )
    if flag in ("host", "port", "api_key"):
        raise SpaceError(
            path, "is set by the launcher (and the export) and cannot be tuned or fixed"
        )


def _resolve_relative_bounds(
    path: str, param: ParamFile, bench: BenchSettings, capacity: int | None
) -> ParamFile:
    """A range bound written as an expression of the workload, resolved to its number."""
    numbers = [v for v in (param.low, param.high, param.step) if isinstance(v, int | float)]
    integer = param.type == "int" or (
        param.type is None and all(isinstance(v, int) for v in numbers)
    )
    update: dict[str, int | float] = {}
    for key in ("low", "high"):
        value = getattr(param, key)
        if isinstance(value, str):
            try:
                update[key] = resolve_bound(value, bench, integer, capacity)
            except BoundError as exc:
                raise SpaceError(f"{path}.{key}", str(exc)) from None
    return param.model_copy(update=update) if update else param


def _param_spec(path: str, flag: str, param: ParamFile, earlier: dict[str, ParamSpec]) -> ParamSpec:
    when = {key: as_tuple(value) for key, value in param.when.items()}
    for key, allowed in when.items():
        _check_condition(f"{path}.when.{key}", key, allowed, earlier)

    given = [k for k in ("choices", "derive") if getattr(param, k) is not None]
    if param.low is not None or param.high is not None:
        given.append("low/high")
    if len(given) != 1:
        raise SpaceError(
            path,
            f"give exactly one of choices, low/high or derive (got {', '.join(given) or 'none'})",
        )
    range_keys = [k for k in ("step", "type") if getattr(param, k) is not None]
    if param.log:
        range_keys.append("log")
    if given[0] != "low/high" and range_keys:
        raise SpaceError(
            f"{path}.{range_keys[0]}", "only applies to a low/high range, not to choices or derive"
        )

    if param.choices is not None:
        if not param.choices:
            raise SpaceError(f"{path}.choices", "must list at least one value")
        seen: list[object] = []
        for value in param.choices:
            if any(same_value(value, s) for s in seen):
                raise SpaceError(f"{path}.choices", f"lists {value!r} twice")
            seen.append(value)
        return ParamSpec(name=flag, kind="categorical", choices=tuple(param.choices), when=when)

    if param.derive is not None:
        for ref in _expression_names(f"{path}.derive", param.derive):
            _check_derive_reference(f"{path}.derive", ref, when, earlier)
        return ParamSpec(name=flag, kind="derived", derive=param.derive, when=when)

    return _range_spec(path, flag, param, when)


def _range_spec(
    path: str, flag: str, param: ParamFile, when: dict[str, tuple[Any, ...]]
) -> ParamSpec:
    if param.low is None or param.high is None:
        missing = "low" if param.low is None else "high"
        raise SpaceError(f"{path}.{missing}", "a range needs both low and high")
    low, high, step = param.low, param.high, param.step
    assert not isinstance(low, str) and not isinstance(high, str)  # _resolve_relative_bounds
    all_ints = all(isinstance(v, int) for v in (low, high, step) if v is not None)
    kind = param.type or ("int" if all_ints else "float")
    if kind == "int":
        for key, value in (("low", low), ("high", high), ("step", step)):
            if value is not None and not float(value).is_integer():
                raise SpaceError(f"{path}.{key}", f"{value!r} is not a whole number (type: int)")
    if low > high:
        raise SpaceError(f"{path}.low", f"{low!r} is above high ({high!r}); low must be <= high")
    if step is not None and step <= 0:
        raise SpaceError(f"{path}.step", f"{step!r} must be > 0")
    if param.log:
        if low <= 0:
            raise SpaceError(f"{path}.low", f"{low!r} must be > 0 on a log scale (log: true)")
        if step is not None and not (kind == "int" and step == 1):
            raise SpaceError(f"{path}.step", "a log-scale range cannot have a step")
    if step is not None and kind == "float":
        span = (high - low) / step
        if abs(span - round(span)) > 1e-9:
            raise SpaceError(
                f"{path}.step", f"{step!r} does not divide high - low ({high!r} - {low!r})"
            )
    if kind == "int":
        low, high = int(low), int(high)
        step = int(step) if step is not None else None
    return ParamSpec(name=flag, kind=kind, low=low, high=high, step=step, log=param.log, when=when)


def _check_condition(
    path: str, key: str, allowed: tuple[Any, ...], earlier: dict[str, ParamSpec]
) -> None:
    target = earlier[key]  # _sampling_order placed it first
    if not allowed:
        raise SpaceError(path, "must give at least one value")
    if target.kind == "categorical":
        for value in allowed:
            if not any(same_value(value, choice) for choice in target.choices or ()):
                raise SpaceError(
                    path,
                    f"{value!r} is not one of {key}'s choices {list(target.choices or ())}, "
                    "so the condition could never hold",
                )


def _check_derive_reference(
    path: str, ref: str, when: dict[str, tuple[Any, ...]], earlier: dict[str, ParamSpec]
) -> None:
    # The referenced param must be active whenever this one is: its conditions must be
    # implied by ours, or the expression would meet an unsampled name in some trial.
    for key, needed in earlier[ref].when.items():
        ours = when.get(key)
        if ours is None or not all(any(same_value(v, n) for n in needed) for v in ours):
            raise SpaceError(
                path,
                f"uses {ref!r}, which is only sampled when {key} is one of {list(needed)}; "
                f"add that condition to this param's `when`",
            )


def _check_workload(workload: dict[str, Any]) -> None:
    kind = workload.get("kind")
    if kind is None:
        raise SpaceError("workload.kind", f"is required; one of {', '.join(WORKLOAD_KINDS)}")
    if kind not in WORKLOAD_KINDS:
        raise SpaceError(
            "workload.kind", f"{kind!r} is not a workload kind; one of {', '.join(WORKLOAD_KINDS)}"
        )
    # The bench owns the rest of the workload's keys; asking it here puts the file name on
    # its message instead of failing at the first trial.

    try:
        WorkloadSpec.from_dict(workload)
    except UserError as exc:
        raise SpaceError("workload", str(exc)) from None


def _check_objectives(objectives: Objectives) -> None:
    if objectives.throughput not in (*THROUGHPUT_METRICS, SUSTAINED_RATE):
        raise SpaceError(
            "objectives.throughput",
            f"{objectives.throughput!r} is not a throughput metric; one of "
            f"{', '.join(THROUGHPUT_METRICS)}, or {SUSTAINED_RATE} (--goal capacity)",
        )
    if objectives.latency not in LATENCY_METRICS:
        raise SpaceError(
            "objectives.latency",
            f"{objectives.latency!r} is not a latency metric; use "
            "{mean,median,p90,p95,p99}_{ttft,tpot,itl,e2e_latency}_ms, e.g. median_tpot_ms",
        )


def _check_capacity(bench: BenchSettings, slos: list[Slo]) -> None:
    """The capacity objective (--goal capacity) asks at which request rate the SLOs still hold:
    only an open loop has a rate to raise, and only a latency limit can break."""
    what = f"the capacity objective ({SUSTAINED_RATE}, --goal capacity)"
    if bench.request_rate is None or bench.concurrency is not None:
        cap = f"concurrency {bench.concurrency}" if bench.concurrency is not None else "no cap"
        rate = f"request_rate {bench.request_rate:g}" if bench.request_rate else "no request_rate"
        now = f"{cap}, {rate}"
        raise SpaceError(
            "bench",
            f"{what} needs an open-loop benchmark: set bench.request_rate (the rate the search "
            "starts at, req/s) and bench.concurrency: null (a client-side cap would hide the "
            f"queueing an SLO must see); this space has {now}",
        )
    if not any(s.op in ("<=", "<") and s.metric in LATENCY_METRICS for s in slos):
        raise SpaceError(
            "slos",
            f"{what} needs a latency limit to find the rate it breaks at, e.g. "
            "'p99_ttft_ms <= 3000'; this space has " + (", ".join(str(s) for s in slos) or "none"),
        )


def _slo(path: str, item: str | SloFile) -> Slo:
    if isinstance(item, str):
        match = SLO_PATTERN.match(item)
        if not match:
            raise SpaceError(
                path, f"{item!r} is not an SLO; write 'METRIC <= LIMIT', e.g. 'p99_ttft_ms <= 2000'"
            )
        metric, op, limit_text = match.groups()
        try:
            limit = float(limit_text)
        except ValueError:
            raise SpaceError(path, f"{item!r}: the limit {limit_text!r} is not a number") from None
    else:
        metric, op, limit = item.metric, item.op, float(item.limit)
    if op not in SLO_OPS:
        raise SpaceError(path, f"operator {op!r} in {item!r} is not allowed; use <= or >=")
    if metric not in LATENCY_METRICS + THROUGHPUT_METRICS:
        raise SpaceError(
            path,
            f"{metric!r} is not a benchmark metric; use a latency "
            "({mean,median,p90,p95,p99}_{ttft,tpot,itl,e2e_latency}_ms) or "
            f"{', '.join(THROUGHPUT_METRICS)}",
        )
    if not math.isfinite(limit):
        raise SpaceError(path, f"limit {limit!r} must be a finite number")
    return Slo(metric=metric, op=op, limit=limit)


def _expression_names(path: str, expression: str) -> list[str]:
    try:
        return expression_names(expression)
    except DeriveError as exc:
        raise SpaceError(path, str(exc)) from None
