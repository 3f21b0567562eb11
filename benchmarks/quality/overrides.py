"""Explicit settings for the benchmark's studies: `section.field=value`, set by
`dataclasses.replace` on the settings objects a study runs with, never on a module global.

    roots = default_settings()
    change = parse_override("stop.max_checks=2", roots)
    method = replace(method_named("default"), settings=(change,))    # run_study applies it

A section is one of the settings objects `study_settings` returns, by its name (`guide`, `stop`,
`pruner`).
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.study import StopRule
from tuner.study.guide import GuideSettings
from tuner.trial import StagePrunerConfig

Override = tuple[str, str, Any]  # section, field, value


class UnknownSetting(ValueError):
    """A `section.field=value` that names no setting, or a value the field cannot take."""


def study_settings(guide_config: Any | None, min_gain: float) -> dict[str, Any]:
    """The settings objects one study runs with, by section: the stage pruner's, the stop
    rule's (used when the method stops by itself) and, when the method has a guide, its own."""
    roots: dict[str, Any] = {"pruner": StagePrunerConfig(), "stop": StopRule(min_gain=min_gain)}
    if guide_config is not None:
        roots["guide"] = guide_config
    return roots


def default_settings() -> dict[str, Any]:
    """Every section a study with a guide has, at its defaults: what overrides are checked
    against before any study runs."""
    return study_settings(GuideSettings(), StopRule().min_gain)


def parse_override(text: str, roots: Mapping[str, Any]) -> Override:
    """`stop.max_checks=2` -> ("stop", "max_checks", 2), checked against the
    sections of `roots`; UnknownSetting says in one line what exists."""
    target, eq, raw = text.partition("=")
    section, dot, name = target.partition(".")
    if not dot or not eq or not name:
        raise UnknownSetting(f"{text!r}: expected SECTION.FIELD=VALUE, e.g. pruner.margin=0.2")
    if section not in roots:
        raise UnknownSetting(f"unknown section {section!r}: one of {', '.join(sorted(roots))}")
    obj = roots[section]
    names = [f.name for f in dataclasses.fields(obj) if f.init]
    if name not in names:
        raise UnknownSetting(f"{section} has no field {name!r}: its fields are {', '.join(names)}")
    return section, name, _value(raw.strip(), obj, name, f"{section}.{name}")


def _value(raw: str, obj: Any, name: str, where: str) -> Any:
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: a Literal's choice such as `front`
    allowed = _allowed_types(type(obj), name)
    if allowed is None:
        return value
    if float in allowed and type(value) is int:
        return float(value)
    if not any(_is(value, t) for t in allowed):
        kinds = " or ".join(sorted({getattr(t, "__name__", str(t)) for t in allowed}))
        raise UnknownSetting(f"{where} takes {kinds} (now {getattr(obj, name)!r}), not {raw!r}")
    return value


def _allowed_types(cls: type, name: str) -> tuple[Any, ...] | None:
    """The types a field's annotation admits, or None when it does not say simply."""
    try:
        hint = typing.get_type_hints(cls)[name]
    except Exception:  # an annotation that does not resolve here: take the value as given
        return None
    if typing.get_origin(hint) is typing.Literal:
        return tuple({type(a) for a in typing.get_args(hint)})
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(hint):
            inner = _flat(arg)
            if inner is None:
                return None
            out.extend(inner)
        return tuple(out)
    return _flat(hint)


def _flat(hint: Any) -> tuple[Any, ...] | None:
    if hint is type(None) or hint in (bool, int, float, str):
        return (hint,)
    if typing.get_origin(hint) is typing.Literal:
        return tuple({type(a) for a in typing.get_args(hint)})
    return None


def _is(value: Any, kind: Any) -> bool:
    if kind is int:  # True is an int to Python, not to a setting
        return type(value) is int
    return isinstance(value, kind)


def apply_overrides(roots: Mapping[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """`roots` with each override set in turn, by `dataclasses.replace` (a copy)."""
    out = dict(roots)
    for section, name, value in overrides:
        if section not in out:
            raise UnknownSetting(
                f"this study has no section {section!r}: one of {', '.join(sorted(out))}"
            )
        try:
            out[section] = dataclasses.replace(out[section], **{name: value})
        except (TypeError, ValueError) as exc:
            raise UnknownSetting(f"{section}.{name}={value!r}: {exc}") from None
    return out


def describe(overrides: Sequence[Override]) -> str:
    """`stop.max_checks=2 pruner.margin=0.2`, or `as shipped` for none."""
    return " ".join(f"{s}.{n}={v!r}" for s, n, v in overrides) or "as shipped"
