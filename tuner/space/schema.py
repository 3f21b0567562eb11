"""The YAML shape of a search-space file, and its validation errors as one readable line."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from tuner.space.model import BenchSettings, EngineSpec, Number, Objectives, Scalar


class SpaceError(Exception):
    """A validation failure at a key path; turned into a UserError naming the file."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")


class ParamFile(BaseModel):
    """The YAML shape of one param, before the cross-checks in `_param_spec`."""

    model_config = ConfigDict(extra="forbid")

    choices: list[Scalar] | None = None
    low: Number | StrictStr | None = None  # a string: a bound relative to the workload (bounds.py)
    high: Number | StrictStr | None = None
    step: Number | None = None
    log: StrictBool = False
    type: Literal["int", "float"] | None = None
    derive: StrictStr | None = None
    when: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)


class SpaceFile(BaseModel):
    """The YAML shape of a whole space file."""

    model_config = ConfigDict(extra="forbid")

    name: StrictStr | None = None
    engine: EngineSpec = Field(default_factory=EngineSpec)
    model_path: StrictStr
    fixed_flags: dict[str, Scalar] = Field(default_factory=dict)
    sim: dict[str, Scalar] = Field(default_factory=dict)
    params: dict[str, ParamFile]
    workload: dict[str, Any]
    bench: BenchSettings = Field(default_factory=BenchSettings)
    objectives: Objectives = Field(default_factory=Objectives)
    slos: list[StrictStr | SloFile] = Field(default_factory=list)
    # The most requests the server can run at once for this workload (bounds may name it);
    # `tuner optimize` measures it when a bound needs it, or the file may fix it.
    capacity: int | None = Field(default=None, ge=1)


class SloFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: StrictStr
    op: StrictStr
    limit: Number


SpaceFile.model_rebuild()


_ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "": tuple(SpaceFile.model_fields),
    "params.*": tuple(ParamFile.model_fields),
    "engine": tuple(EngineSpec.model_fields),
    "bench": tuple(BenchSettings.model_fields),
    "objectives": tuple(Objectives.model_fields),
    "slos.*": tuple(SloFile.model_fields),
}


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


def pydantic_message(exc: ValidationError) -> str:
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
    # pydantic puts the union member it tried into the location (e.g. "str", "SloFile",
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
