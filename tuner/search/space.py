"""Search-space YAML -> validated model -> launch flags for one Optuna trial.

Use::

    space = load_space("search_spaces/qwen3.6-27b-mtp-hicache.yaml")   # UserError if invalid
    flags = suggest_flags(trial, space)  # {"mem_fraction_static": 0.83, ...}

File format (every key but `model_path`, `params` and `workload` is optional)::

    name: qwen3.6-27b-mtp-hicache          # default study name; letters, digits, . _ -
    engine: {name: sglang, version: "0.5.23"}        # sglang version whose flag names are used
    model_path: Qwen/Qwen3.6-27B           # passed as --model-path
    fixed_flags: {enable_metrics: true}    # always passed; same value rules as build_server_args
    sim: {hardware: rtx-pro-6000-blackwell, model: qwen3.6-27b, time_scale: 50}
    params:                                # tuned; names are sglang flag names with underscores
      NAME: {choices: [v1, v2, ...]}       # categorical; null = flag not passed
      NAME: {low: L, high: H}              # int when L and H are ints, else float
      NAME: {low: L, high: H, step: S}     # stepped; `log: true` for a log scale (no step)
      NAME: {low: 1, high: 8, type: float} # force the number type
      NAME: {derive: "other + 1"}          # computed from other params: + - * / // %, min, max
      NAME: {..., when: {OTHER: value}}    # only sampled when param OTHER has that value, or one
                                           # of a list of values; all keys must hold
    workload: {kind: multi-turn, ...}      # kind: random | shared-prefix | multi-turn | jsonl;
                                           # keys as tuner.bench.workload.WorkloadSpec
    bench: {concurrency: 16, request_rate: null, arrival: poisson, warmup_requests: 2,
            stages: 4, api: generate, timeout_s: 600}
                                           # concurrency null = no cap; request_rate null =
                                           # closed loop; arrival: poisson | constant;
                                           # api: generate | completions | chat;
                                           # timeout_s: per request
    objectives: {throughput: output_throughput, latency: median_tpot_ms}
    slos: ["p99_ttft_ms <= 2000"]          # metric <= limit or metric >= limit

A param whose `when` is false, or names a param that is itself inactive, is neither sampled nor
passed. Params are sampled in file order, each moved after any param its `when` or `derive`
names (a cycle is an error), so one pass decides every value. Errors are UserErrors naming the
file, the key path, the value and what is allowed, because a user edits these files by hand.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import optuna
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from tuner.errors import UserError

Scalar = StrictBool | StrictInt | StrictFloat | StrictStr | None
Number = StrictInt | StrictFloat

DEFAULT_SPACE_NAME = "qwen3.6-27b-mtp-hicache"
WORKLOAD_KINDS = ("random", "shared-prefix", "multi-turn", "jsonl")
THROUGHPUT_METRICS = ("output_throughput", "total_throughput", "request_throughput")
LATENCY_METRICS = tuple(
    f"{stat}_{quantity}_ms"
    for quantity in ("ttft", "tpot", "itl", "e2e_latency")
    for stat in ("mean", "median", "p90", "p95", "p99")
)
SLO_OPS = ("<=", ">=")
BENCH_APIS = ("generate", "completions", "chat")
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FLAG_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


# --------------------------------------------------------------------------- the public model


class Slo(BaseModel):
    """One service-level objective, e.g. `p99_ttft_ms <= 2000`, used as an Optuna constraint."""

    model_config = ConfigDict(frozen=True)

    metric: str
    op: Literal["<=", ">="]
    limit: float

    def violation(self, value: float) -> float:
        """Graded violation for `trial.set_constraint`: > 0 violated, <= 0 met.

        Relative to the limit so that SLOs of different units weigh alike in the sampler.
        """
        scale = abs(self.limit) or 1.0
        excess = value - self.limit if self.op == "<=" else self.limit - value
        return excess / scale

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.limit:g}"


class Objective(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: str
    direction: Literal["maximize", "minimize"]


class Objectives(BaseModel):
    """The two study objectives: maximize a throughput, minimize a latency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    throughput: str = "output_throughput"
    latency: str = "median_tpot_ms"

    @property
    def metrics(self) -> list[str]:
        return [self.throughput, self.latency]

    @property
    def directions(self) -> list[str]:
        return ["maximize", "minimize"]

    def as_list(self) -> list[Objective]:
        pairs = zip(self.metrics, self.directions, strict=True)
        return [Objective(metric=metric, direction=direction) for metric, direction in pairs]


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
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["sglang"] = "sglang"
    version: StrictStr = "0.5.23"


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

    def is_active(self, values: Mapping[str, object]) -> bool:
        """True when every `when` key has been given one of its allowed values."""
        return all(
            key in values and any(_same(values[key], allowed) for allowed in allowed_values)
            for key, allowed_values in self.when.items()
        )

    def suggest(self, trial: optuna.Trial, values: Mapping[str, object]) -> object:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices or ()))
        if self.kind == "int":
            return trial.suggest_int(
                self.name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log
            )
        if self.kind == "float":
            value = trial.suggest_float(
                self.name, float(self.low), float(self.high), step=self.step, log=self.log
            )
            # A stepped float comes back as 0.8300000000000001; sglang logs and the export
            # should show the number the user would have typed.
            return round(value, _decimals(self.step)) if self.step else value
        return _evaluate(self.derive or "", values)

    def to_dict(self) -> dict[str, Any]:
        """The YAML form of this param."""
        out: dict[str, Any] = {}
        if self.kind == "categorical":
            out["choices"] = list(self.choices or ())
        elif self.kind == "derived":
            out["derive"] = self.derive
        else:
            out.update(low=self.low, high=self.high, type=self.kind)
            if self.step is not None:
                out["step"] = self.step
            if self.log:
                out["log"] = True
        if self.when:
            out["when"] = {k: list(v) if len(v) != 1 else v[0] for k, v in self.when.items()}
        return out


class SearchSpace(BaseModel):
    """A validated search space. Build it with `load_space` or `SearchSpace.from_dict`."""

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

    @property
    def engine_version(self) -> str:
        return self.engine.version

    def to_dict(self) -> dict[str, Any]:
        """A plain, YAML/JSON-ready dict that `SearchSpace.from_dict` reads back."""
        return {
            "name": self.name,
            "engine": self.engine.model_dump(),
            "model_path": self.model_path,
            "fixed_flags": dict(self.fixed_flags),
            "sim": dict(self.sim),
            "params": {name: spec.to_dict() for name, spec in self.params.items()},
            "workload": dict(self.workload),
            "bench": self.bench.model_dump(),
            "objectives": self.objectives.model_dump(),
            "slos": [str(slo) for slo in self.slos],
        }

    @classmethod
    def from_dict(
        cls, data: object, source: str = "<search space>", default_name: str | None = None
    ) -> SearchSpace:
        """Validate an already-parsed mapping; `source` names it in error messages."""
        return _build(data, source, default_name or "study")


# --------------------------------------------------------------------------- loading


def default_space_path() -> Path:
    """The seed scenario's space, found beside the package (repository checkout or editable
    install) or, failing that, under the current directory."""
    return _spaces_dir() / f"{DEFAULT_SPACE_NAME}.yaml"


def shipped_spaces() -> list[str]:
    """Names of the spaces shipped in search_spaces/, for help texts and errors."""
    return sorted(p.stem for p in _spaces_dir().glob("*.yaml"))


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file. A bare shipped name such as
    `qwen3.6-27b-mtp-hicache` is accepted too."""
    file = _resolve(Path(path))
    source = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read search space {source}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(_yaml_message(source, exc)) from None
    return _build(data, source, file.stem)


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


def _spaces_dir() -> Path:
    beside_package = Path(__file__).resolve().parent.parent / "search_spaces"
    if beside_package.is_dir():
        return beside_package
    return Path.cwd() / "search_spaces"


def _resolve(path: Path) -> Path:
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    shipped = _spaces_dir() / f"{path.name}.yaml"
    if shipped.exists():
        return shipped
    known = ", ".join(shipped_spaces()) or "none"
    raise UserError(f"search space {path} not found: give a YAML file or one of: {known}")


def _yaml_message(source: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return (
            f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}"
            " (fix the syntax at that line and column)"
        )
    return f"{source}: invalid YAML: {problem}"


# --------------------------------------------------------------------------- validation


class _SpaceError(Exception):
    """A validation failure at a key path; turned into a UserError naming the file."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")


class _ParamFile(BaseModel):
    """The YAML shape of one param, before the cross-checks in `_param_spec`."""

    model_config = ConfigDict(extra="forbid")

    choices: list[Scalar] | None = None
    low: Number | None = None
    high: Number | None = None
    step: Number | None = None
    log: StrictBool = False
    type: Literal["int", "float"] | None = None
    derive: StrictStr | None = None
    when: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)


class _SpaceFile(BaseModel):
    """The YAML shape of a whole space file."""

    model_config = ConfigDict(extra="forbid")

    name: StrictStr | None = None
    engine: EngineSpec = Field(default_factory=EngineSpec)
    model_path: StrictStr
    fixed_flags: dict[str, Scalar] = Field(default_factory=dict)
    sim: dict[str, Scalar] = Field(default_factory=dict)
    params: dict[str, _ParamFile]
    workload: dict[str, Any]
    bench: BenchSettings = Field(default_factory=BenchSettings)
    objectives: Objectives = Field(default_factory=Objectives)
    slos: list[StrictStr | _SloFile] = Field(default_factory=list)


class _SloFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: StrictStr
    op: StrictStr
    limit: Number


_SpaceFile.model_rebuild()

_ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "": tuple(_SpaceFile.model_fields),
    "params.*": tuple(_ParamFile.model_fields),
    "engine": tuple(EngineSpec.model_fields),
    "bench": tuple(BenchSettings.model_fields),
    "objectives": tuple(Objectives.model_fields),
    "slos.*": tuple(_SloFile.model_fields),
}


def _build(data: object, source: str, default_name: str) -> SearchSpace:
    if not isinstance(data, Mapping):
        raise UserError(
            f"{source}: the file must be a YAML mapping with at least model_path, params and "
            f"workload (got {type(data).__name__})"
        )
    try:
        raw = _SpaceFile.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{source}: {_pydantic_message(exc)}") from None
    try:
        return _check(raw, default_name)
    except _SpaceError as exc:
        raise UserError(f"{source}: {exc}") from None


_TYPE_WORDS = {
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "none_required": "null",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _pydantic_message(exc: ValidationError) -> str:
    # Group by the key path the user wrote; a union yields one error per member type, and the
    # deepest path is the branch the user meant (e.g. they wrote a mapping, one key is wrong).
    groups: dict[tuple[str, ...], list[Any]] = {}
    for error in exc.errors(include_url=False):
        loc = tuple(str(part) for part in error["loc"] if not _is_union_tag(part))
        groups.setdefault(loc, []).append(error)
    loc, errors = max(
        groups.items(),
        key=lambda item: (len(item[0]), item[1][0]["type"] == "extra_forbidden"),
    )
    path = ".".join(loc) or "(top level)"
    # Shorter paths above the chosen one are the union members the user did not mean.
    others = [other for other in groups if other != loc and loc[: len(other)] != other]
    more = f" (and {len(others)} more problems)" if others else ""
    first = errors[0]
    if first["type"] == "extra_forbidden":
        allowed = _ALLOWED_KEYS.get(_key_pattern(list(loc[:-1])), ())
        return f"{path}: unknown key; allowed keys here: {', '.join(allowed)}{more}"
    if first["type"] == "missing":
        return f"{path}: required key is missing{more}"
    kinds = [_TYPE_WORDS.get(e["type"]) for e in errors]
    if all(kinds):
        return f"{path} = {first.get('input')!r}: must be {_describe(set(kinds))}{more}"
    return f"{path} = {first.get('input')!r}: {first['msg']}{more}"


def _describe(kinds: set[str | None]) -> str:
    if {"a number", "a string", "true or false"} <= kinds:
        single = "a single value (string, number, true/false or null)"
        return f"{single} or a list of them" if "a list" in kinds else single
    if "a number" in kinds:
        kinds.discard("a whole number")
    return " or ".join(sorted(k for k in kinds if k))


def _is_union_tag(part: object) -> bool:
    # pydantic puts the union member it tried into the location (e.g. "str", "_SloFile",
    # "list[...]"); the user never wrote those, so they stay out of the key path.
    return isinstance(part, str) and (
        part[:1].isupper()
        or part.startswith("_")
        or "[" in part
        or part in ("str", "int", "float", "bool", "none")
    )


def _key_pattern(loc: list[str]) -> str:
    if not loc:
        return ""
    if loc[0] in ("params", "slos") and len(loc) == 2:
        return f"{loc[0]}.*"
    return ".".join(loc)


def _check(raw: _SpaceFile, default_name: str) -> SearchSpace:
    name = raw.name if raw.name is not None else default_name
    if not _NAME_PATTERN.match(name):
        raise _SpaceError(
            "name", f"{name!r} is not a usable study name; use letters, digits, '.', '_', '-'"
        )
    if not raw.model_path.strip():
        raise _SpaceError("model_path", "must not be empty")
    for flag in raw.fixed_flags:
        _check_flag_name(f"fixed_flags.{flag}", flag)
    if not raw.params:
        raise _SpaceError("params", "at least one tuned param is needed")

    for flag in raw.params:
        path = f"params.{flag}"
        _check_flag_name(path, flag)
        if flag in raw.fixed_flags:
            raise _SpaceError(path, "is also in fixed_flags; a flag is either fixed or tuned")
    params: dict[str, ParamSpec] = {}
    for flag in _sampling_order(raw.params):
        params[flag] = _param_spec(f"params.{flag}", flag, raw.params[flag], params)

    _check_against_engine(raw.engine, raw.fixed_flags, params)
    _check_workload(raw.workload)
    _check_objectives(raw.objectives)
    slos = [_slo(f"slos.{i}", item) for i, item in enumerate(raw.slos)]
    return SearchSpace(
        name=name,
        engine=raw.engine,
        model_path=raw.model_path,
        fixed_flags=dict(raw.fixed_flags),
        sim=dict(raw.sim),
        params=params,
        workload=dict(raw.workload),
        bench=raw.bench,
        objectives=raw.objectives,
        slos=slos,
    )


def _sampling_order(params: dict[str, _ParamFile]) -> list[str]:
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
                raise _SpaceError(
                    path,
                    f"{what} {ref!r}, which is not a param of this space "
                    f"(params: {', '.join(params)})",
                )
            if ref == flag:
                raise _SpaceError(path, f"{flag!r} cannot depend on itself")
        needs[flag] = refs

    order: list[str] = []
    visiting: list[str] = []

    def visit(flag: str) -> None:
        if flag in order:
            return
        if flag in visiting:
            cycle = " -> ".join([*visiting[visiting.index(flag) :], flag])
            raise _SpaceError(f"params.{flag}", f"conditions or derivations form a cycle: {cycle}")
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
    from tuner.engines import sglang  # the simulator takes the same flags

    if engine.version not in sglang.supported_versions():
        try:
            sglang.load_snapshot(engine.version)  # a post release may use its base's snapshot
        except UserError as exc:
            raise _SpaceError("engine.version", str(exc)) from None
    names = [(f"fixed_flags.{flag}", flag) for flag in fixed_flags]
    names += [(f"params.{flag}", flag) for flag in params]
    for path, flag in names:
        try:
            sglang.resolve_flag(flag, engine.version)
        except UserError as exc:
            raise _SpaceError(path, str(exc)) from None
    values = [(f"fixed_flags.{flag}", flag, value) for flag, value in fixed_flags.items()]
    for flag, spec in params.items():
        path = f"params.{flag}"
        if spec.kind == "categorical":
            values += [(f"{path}.choices", flag, value) for value in spec.choices or ()]
        elif spec.kind in ("int", "float"):
            values += [(f"{path}.low", flag, spec.low), (f"{path}.high", flag, spec.high)]
    for path, flag, value in values:
        try:
            sglang.build_server_args({flag: value}, engine.version)
        except UserError as exc:
            raise _SpaceError(path, str(exc)) from None


def _check_flag_name(path: str, flag: str) -> None:
    if not _FLAG_PATTERN.match(flag):
        raise _SpaceError(
            path,
            f"{flag!r} is not a flag name; write sglang flags with underscores, lower case, "
            "without dashes (e.g. mem_fraction_static for --mem-fraction-static)",
        )
    if flag in ("host", "port", "api_key"):
        raise _SpaceError(
            path, "is set by the launcher (and the export) and cannot be tuned or fixed"
        )


def _param_spec(
    path: str, flag: str, param: _ParamFile, earlier: dict[str, ParamSpec]
) -> ParamSpec:
    when = {key: _as_tuple(value) for key, value in param.when.items()}
    for key, allowed in when.items():
        _check_condition(f"{path}.when.{key}", key, allowed, earlier)

    given = [k for k in ("choices", "derive") if getattr(param, k) is not None]
    if param.low is not None or param.high is not None:
        given.append("low/high")
    if len(given) != 1:
        raise _SpaceError(
            path,
            f"give exactly one of choices, low/high or derive (got {', '.join(given) or 'none'})",
        )
    range_keys = [k for k in ("step", "type") if getattr(param, k) is not None]
    if param.log:
        range_keys.append("log")
    if given[0] != "low/high" and range_keys:
        raise _SpaceError(
            f"{path}.{range_keys[0]}", "only applies to a low/high range, not to choices or derive"
        )

    if param.choices is not None:
        if not param.choices:
            raise _SpaceError(f"{path}.choices", "must list at least one value")
        seen: list[object] = []
        for value in param.choices:
            if any(_same(value, s) for s in seen):
                raise _SpaceError(f"{path}.choices", f"lists {value!r} twice")
            seen.append(value)
        return ParamSpec(name=flag, kind="categorical", choices=tuple(param.choices), when=when)

    if param.derive is not None:
        for ref in _expression_names(f"{path}.derive", param.derive):
            _check_derive_reference(f"{path}.derive", ref, when, earlier)
        return ParamSpec(name=flag, kind="derived", derive=param.derive, when=when)

    return _range_spec(path, flag, param, when)


def _range_spec(
    path: str, flag: str, param: _ParamFile, when: dict[str, tuple[Any, ...]]
) -> ParamSpec:
    if param.low is None or param.high is None:
        missing = "low" if param.low is None else "high"
        raise _SpaceError(f"{path}.{missing}", "a range needs both low and high")
    low, high, step = param.low, param.high, param.step
    all_ints = all(isinstance(v, int) for v in (low, high, step) if v is not None)
    kind = param.type or ("int" if all_ints else "float")
    if kind == "int":
        for key, value in (("low", low), ("high", high), ("step", step)):
            if value is not None and not float(value).is_integer():
                raise _SpaceError(f"{path}.{key}", f"{value!r} is not a whole number (type: int)")
    if low > high:
        raise _SpaceError(f"{path}.low", f"{low!r} is above high ({high!r}); low must be <= high")
    if step is not None and step <= 0:
        raise _SpaceError(f"{path}.step", f"{step!r} must be > 0")
    if param.log:
        if low <= 0:
            raise _SpaceError(f"{path}.low", f"{low!r} must be > 0 on a log scale (log: true)")
        if step is not None and not (kind == "int" and step == 1):
            raise _SpaceError(f"{path}.step", "a log-scale range cannot have a step")
    if step is not None and kind == "float":
        span = (high - low) / step
        if abs(span - round(span)) > 1e-9:
            raise _SpaceError(
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
        raise _SpaceError(path, "must give at least one value")
    if target.kind == "categorical":
        for value in allowed:
            if not any(_same(value, choice) for choice in target.choices or ()):
                raise _SpaceError(
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
        if ours is None or not all(any(_same(v, n) for n in needed) for v in ours):
            raise _SpaceError(
                path,
                f"uses {ref!r}, which is only sampled when {key} is one of {list(needed)}; "
                f"add that condition to this param's `when`",
            )


def _check_workload(workload: dict[str, Any]) -> None:
    kind = workload.get("kind")
    if kind is None:
        raise _SpaceError("workload.kind", f"is required; one of {', '.join(WORKLOAD_KINDS)}")
    if kind not in WORKLOAD_KINDS:
        raise _SpaceError(
            "workload.kind", f"{kind!r} is not a workload kind; one of {', '.join(WORKLOAD_KINDS)}"
        )
    # The bench owns the rest of the workload's keys; asking it here puts the file name on
    # its message instead of failing at the first trial.
    from tuner.bench.workload import WorkloadSpec

    try:
        WorkloadSpec.from_dict(workload)
    except UserError as exc:
        raise _SpaceError("workload", str(exc)) from None


def _check_objectives(objectives: Objectives) -> None:
    if objectives.throughput not in THROUGHPUT_METRICS:
        raise _SpaceError(
            "objectives.throughput",
            f"{objectives.throughput!r} is not a throughput metric; one of "
            f"{', '.join(THROUGHPUT_METRICS)}",
        )
    if objectives.latency not in LATENCY_METRICS:
        raise _SpaceError(
            "objectives.latency",
            f"{objectives.latency!r} is not a latency metric; use "
            "{mean,median,p90,p95,p99}_{ttft,tpot,itl,e2e_latency}_ms, e.g. median_tpot_ms",
        )


_SLO_PATTERN = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>|==|=)\s*(\S+)\s*$")


def _slo(path: str, item: str | _SloFile) -> Slo:
    if isinstance(item, str):
        match = _SLO_PATTERN.match(item)
        if not match:
            raise _SpaceError(
                path, f"{item!r} is not an SLO; write 'METRIC <= LIMIT', e.g. 'p99_ttft_ms <= 2000'"
            )
        metric, op, limit_text = match.groups()
        try:
            limit = float(limit_text)
        except ValueError:
            raise _SpaceError(path, f"{item!r}: the limit {limit_text!r} is not a number") from None
    else:
        metric, op, limit = item.metric, item.op, float(item.limit)
    if op not in SLO_OPS:
        raise _SpaceError(path, f"operator {op!r} in {item!r} is not allowed; use <= or >=")
    if metric not in LATENCY_METRICS + THROUGHPUT_METRICS:
        raise _SpaceError(
            path,
            f"{metric!r} is not a benchmark metric; use a latency "
            "({mean,median,p90,p95,p99}_{ttft,tpot,itl,e2e_latency}_ms) or "
            f"{', '.join(THROUGHPUT_METRICS)}",
        )
    if not math.isfinite(limit):
        raise _SpaceError(path, f"limit {limit!r} must be a finite number")
    return Slo(metric=metric, op=op, limit=limit)


# --------------------------------------------------------------------------- helpers


def _same(a: object, b: object) -> bool:
    # In Python True == 1; a condition `when: {x: true}` must not match x = 1.
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    return a == b


def _as_tuple(value: object) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def _decimals(step: float) -> int:
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max}


def _expression_names(path: str, expression: str) -> list[str]:
    """Parse a derive expression and return the params it names; only arithmetic is allowed
    because the file is user input and must never run code."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise _SpaceError(path, f"{expression!r} is not an arithmetic expression") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in _FUNCTIONS:
                names.append(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS) or (
                node.keywords
            ):
                raise _SpaceError(path, f"{expression!r}: only min(...) and max(...) may be called")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise _SpaceError(path, f"{expression!r}: allowed operators are + - * / // %")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise _SpaceError(path, f"{expression!r}: only numbers may appear as constants")
        elif not isinstance(
            node, ast.Expression | ast.UnaryOp | ast.USub | ast.UAdd | ast.Load | ast.operator
        ):
            raise _SpaceError(
                path, f"{expression!r}: only numbers, param names, + - * / // %, min, max"
            )
    return names


def _evaluate(expression: str, values: Mapping[str, object]) -> object:
    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.UnaryOp):
            operand = walk(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(walk(arg) for arg in node.args))  # type: ignore[attr-defined]
        raise ValueError(f"unexpected node {node!r}")  # _expression_names rejected it already

    return walk(ast.parse(expression, mode="eval"))
