"""The search space as validated data, and the flags it suggests for one Optuna trial.

Use::

    space = load_space("search_spaces/qwen3.6-27b-mtp-hicache.yaml")   # tuner.space.load
    flags = suggest_flags(trial, space)  # {"mem_fraction_static": 0.83, ...}

The YAML file format is described in tuner/space/load.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import optuna
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
)

from tuner.results.goals import DEFAULT_OBJECTIVES, MAXIMIZE, MINIMIZE, Slo
from tuner.space.derive import evaluate, expression_names

REAL_SERVER: Literal["real"] = "real"  # engine.server
SIMULATED_SERVER: Literal["simulated"] = "simulated"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Scalar = StrictBool | StrictInt | StrictFloat | StrictStr | None
Number = StrictInt | StrictFloat

THROUGHPUT_METRICS = ("output_throughput", "total_throughput", "request_throughput")
LATENCY_METRICS = tuple(
    f"{stat}_{quantity}_ms"
    for quantity in ("ttft", "tpot", "itl", "e2e_latency")
    for stat in ("mean", "median", "p90", "p95", "p99")
)


class Objectives(BaseModel):
    """The two study objectives: maximize a throughput, minimize a latency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    throughput: str = DEFAULT_OBJECTIVES[0].metric
    latency: str = DEFAULT_OBJECTIVES[1].metric

    @property
    def metrics(self) -> list[str]:
        return [self.throughput, self.latency]

    @property
    def directions(self) -> list[str]:
        return [MAXIMIZE, MINIMIZE]


class BenchSettings(BaseModel):
    """How each trial is benchmarked (the fields of tuner.bench.runner.BenchConfig).

    concurrency: most requests in flight (None: no cap); request_rate: requests/s released with
    `arrival` spacing (None: as fast as the concurrency cap allows); stages: checkpoints for the
    stage pruner; timeout_s: a request running longer counts as a timeout.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: StrictInt | None = Field(16, ge=1)
    request_rate: Number | None = Field(None, gt=0)
    arrival: Literal["poisson", "constant"] = "poisson"
    warmup_requests: StrictInt = Field(2, ge=0)
    stages: StrictInt = Field(4, ge=1)
    api: Literal["generate", "completions", "chat"] = "generate"
    timeout_s: Number = Field(600, gt=0)


class EngineSpec(BaseModel):
    """Which sglang the space is written for, and which server runs its trials.

    name and version: the release whose flag names the space uses (the simulator speaks them
    too). server: `real` runs sglang itself; `simulated` the tuner's simulated server (`--engine`
    overrides it). A space that does not say runs real sglang: a study measures the simulator
    only when asked, so a space written for a GPU never tunes a model of one by mistake.
    python: the interpreter that runs `-m sglang.launch_server` (None: the tuner's own; `~` and
    $VARS are expanded), e.g. a CPU install made by tools/install_real_sglang.sh.
    env: environment variables the server gets on top of the tuner's (e.g. sglang's CPU mode,
    SGLANG_USE_CPU_ENGINE=1). Both are ignored by the simulator.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["sglang"] = "sglang"
    version: StrictStr = "0.5.23"
    server: Literal["real", "simulated"] = REAL_SERVER
    python: StrictStr | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: object) -> object:
        # YAML reads `SGLANG_CPU_OMP_THREADS_BIND: 0` as a number; the environment holds text.
        if not isinstance(value, Mapping):
            return value
        out: dict[object, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise ValueError(f"{key}: the value must be text or a number, got {item!r}")
            out[key] = str(item)
        return out


class ParamSpec(BaseModel):
    """One tuned flag: its distribution (or derivation) and the condition for sampling it."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["categorical", "int", "float", "derived"]
    choices: tuple[Any, ...] | None = None
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    derive: str | None = None
    when: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    # Bounds written relative to the workload ({"high": "concurrency"}), as in the file; low and
    # high hold what they resolved to (tuner/space/relative.py).
    relative: dict[str, str] = Field(default_factory=dict)

    def is_active(self, values: Mapping[str, object]) -> bool:
        """True when every `when` key has been given one of its allowed values."""
        return all(
            key in values and any(same_value(values[key], allowed) for allowed in allowed_values)
            for key, allowed_values in self.when.items()
        )

    def suggest(self, trial: optuna.Trial, values: Mapping[str, object]) -> object:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices or ()))
        if self.kind in ("int", "float"):
            low, high = self.low, self.high
            assert low is not None and high is not None  # the loader gives a range both ends
            if self.kind == "int":
                return trial.suggest_int(
                    self.name, int(low), int(high), step=int(self.step or 1), log=self.log
                )
            value = trial.suggest_float(
                self.name, float(low), float(high), step=self.step, log=self.log
            )
            # A stepped float comes back as 0.8300000000000001; sglang logs and the export
            # should show the number the user would have typed.
            return round(value, _decimals(self.step)) if self.step else value
        return evaluate(self.derive or "", values)

    def to_dict(self) -> dict[str, Any]:
        """The YAML form of this param."""
        out: dict[str, Any] = {}
        if self.kind == "categorical":
            out["choices"] = list(self.choices or ())
        elif self.kind == "derived":
            out["derive"] = self.derive
        else:
            out.update(low=self.low, high=self.high, type=self.kind)
            out.update(self.relative)
            if self.step is not None:
                out["step"] = self.step
            if self.log:
                out["log"] = True
        if self.when:
            out["when"] = {k: list(v) if len(v) != 1 else v[0] for k, v in self.when.items()}
        return out


class SearchSpace(BaseModel):
    """A validated search space. Build it with `load_space` or `space_from_dict`
    (tuner/space/load.py)."""

    model_config = ConfigDict(frozen=True)

    name: str
    engine: EngineSpec
    model_path: str
    fixed_flags: dict[str, Any]
    sim: dict[str, Any]
    params: dict[str, ParamSpec]
    workload: dict[str, Any]
    bench: BenchSettings
    objectives: Objectives
    slos: list[Slo]
    capacity: int | None = (
        None  # what the `capacity` bound stood for (tuner/predict/capacity_bound.py)
    )

    @property
    def engine_version(self) -> str:
        return self.engine.version

    @property
    def needs_capacity(self) -> bool:
        """A bound names `capacity` and it is not known yet: its range is provisional."""
        return self.capacity is None and any(
            "capacity" in expression_names(expression)
            for spec in self.params.values()
            for expression in spec.relative.values()
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain, YAML/JSON-ready dict that `SearchSpace.from_dict` reads back."""
        return {
            "name": self.name,
            "engine": _engine_dict(self.engine),
            "model_path": self.model_path,
            "fixed_flags": dict(self.fixed_flags),
            "sim": dict(self.sim),
            "params": {name: spec.to_dict() for name, spec in self.params.items()},
            "workload": dict(self.workload),
            "bench": self.bench.model_dump(),
            "objectives": self.objectives.model_dump(),
            "slos": [str(slo) for slo in self.slos],
        } | ({"capacity": self.capacity} if self.capacity is not None else {})


def _engine_dict(engine: EngineSpec) -> dict[str, Any]:
    # A study stores its space and refuses to resume with another: a space that runs real
    # sglang, the default, is stored as it was before `server` existed.
    data = engine.model_dump()
    if engine.server == REAL_SERVER:
        del data["server"]
    return data


def active_values(
    space: SearchSpace,
    params: Mapping[str, Any],
    missing: Callable[[ParamSpec], Any] | None = None,
) -> dict[str, Any]:
    """The active params in sampling order, derived ones computed: a value from `params`, else
    `missing(spec)`, else (no `missing`) the param is left out."""
    values: dict[str, Any] = {}
    for spec in space.params.values():
        if not spec.is_active(values):
            continue
        if spec.kind == "derived":
            values[spec.name] = evaluate(spec.derive or "", values)
        elif spec.name in params:
            values[spec.name] = params[spec.name]
        elif missing is not None:
            values[spec.name] = missing(spec)
    return values


def suggest_flags(trial: optuna.Trial, space: SearchSpace) -> dict[str, object]:
    """Sample the active params for one trial, in sampling order, and compute derived ones.

    Returns {flag_name: value}; a value of None means the flag is not passed. Inactive params are
    absent, so TPE sees each trial's own param set; use
    `TPESampler(multivariate=True, group=True)` so the sampler models each set apart.
    """
    values: dict[str, object] = {}
    for spec in space.params.values():
        if spec.is_active(values):
            values[spec.name] = spec.suggest(trial, values)
    return values


def suggest_queued(trial: optuna.Trial, space: SearchSpace) -> dict[str, object]:
    """Record the params a queued trial was given (`study.enqueue_trial`), in sampling order, and
    sample nothing else: the default trial's params (tuner/study/baseline.py)."""
    # Optuna keeps a queued trial's values in its system attrs (Trial has no public accessor).
    fixed = getattr(trial, "_fixed_params", None) or {}
    values: dict[str, object] = {}
    for spec in space.params.values():
        if spec.name in fixed and spec.kind != "derived" and spec.is_active(values):
            values[spec.name] = spec.suggest(trial, values)
    return values


def same_value(a: object, b: object) -> bool:
    # In Python True == 1; a condition `when: {x: true}` must not match x = 1.
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    return a == b


def as_tuple(value: object) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def _decimals(step: float) -> int:
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0
