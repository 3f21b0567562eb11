"""A committed snapshot of an engine's argparse parser, and the parser rebuilt from it.

`tools/dump_sglang_flags.py` writes the JSON from sglang's real `ServerArgs.add_cli_args`; this
module reads it back and rebuilds an `argparse` parser that accepts and rejects what the real one
does (names, aliases, prefixes, nargs, choices, numeric types), without importing sglang.

    snapshot = ParserSnapshot.from_json(text)
    snapshot.option("mem_fraction_static").flags   # ('--mem-fraction-static',)
    snapshot.parse(["--model-path", "m", "--mem-fraction-static", "0.8"])   # or SnapshotParseError

Types that sglang checks with its own functions are rebuilt for the ones whose rules matter to a
launch (`human_readable_int`, the JSON types, `nullable_str`); any other converter is recorded
by name and accepts every string, so the rebuilt parser never rejects what sglang accepts.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

SNAPSHOT_FORMAT = 2
# An entry of a release's file: an option as data, or (a string) the key of an option that the
# base release has unchanged.
Entry = dict[str, Any] | str


class SnapshotParseError(ValueError):
    """The rebuilt parser rejected the arguments; the message is argparse's."""


@dataclass(frozen=True)
class OptionSpec:
    """One option of the real parser, as dumped."""

    dest: str
    flags: tuple[str, ...]
    kind: str  # store, store_true, store_false, store_const, append, ..., custom
    type: str | None = None
    nargs: int | str | None = None
    const: Any = None
    default: Any = None
    choices: tuple[Any, ...] | None = None
    required: bool = False
    help: str | None = None
    action_class: str | None = None
    error_message: str | None = None  # a retired flag that stops the server with this message
    new_flag: str | None = None

    @property
    def takes_value(self) -> bool:
        """False for switches (store_true and the like), whose presence is the value."""
        return self.nargs != 0 and self.kind not in _SWITCH_KINDS

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OptionSpec:
        choices = data.get("choices")
        return cls(
            dest=data["dest"],
            flags=tuple(data.get("flags") or ()),
            kind=data["kind"],
            type=data.get("type"),
            nargs=data.get("nargs"),
            const=data.get("const"),
            default=data.get("default"),
            choices=None if choices is None else tuple(choices),
            required=bool(data.get("required", False)),
            help=data.get("help"),
            action_class=data.get("action_class"),
            error_message=data.get("error_message"),
            new_flag=data.get("new_flag"),
        )


_SWITCH_KINDS = frozenset({"store_true", "store_false", "store_const", "append_const", "count"})


@dataclass(frozen=True)
class ParserSnapshot:
    """Every option of one engine version's launch parser."""

    engine: str
    version: str
    options: tuple[OptionSpec, ...]
    source: str = ""
    _by_flag: dict[str, OptionSpec] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for option in self.options:
            for flag in option.flags:
                self._by_flag[flag] = option

    @classmethod
    def from_json(cls, text: str, engine: str = "sglang") -> ParserSnapshot:
        """A snapshot from a whole document (one without a `base`)."""
        data = json.loads(text)
        if data.get("base") is not None:
            raise ValueError(f"snapshot of {data.get('sglang_version')} needs its base release")
        return cls.from_document(data, [], engine)

    @classmethod
    def from_document(
        cls, data: dict[str, Any], base_options: list[dict[str, Any]], engine: str = "sglang"
    ) -> ParserSnapshot:
        """A snapshot from a document whose unchanged entries refer to `base_options`."""
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown snapshot format {data.get('format')!r}")
        options = expand_entries(data["options"], base_options)
        return cls(
            engine=engine,
            version=str(data["sglang_version"]),
            options=tuple(OptionSpec.from_dict(o) for o in options),
            source=str(data.get("source", "")),
        )

    def option(self, name: str) -> OptionSpec | None:
        """Look an option up by flag name with underscores (`mem_fraction_static`), by its
        spelling on the command line (`--mem-fraction-static`), or by its argparse dest."""
        flag = name if name.startswith("-") else "--" + name.replace("_", "-")
        found = self._by_flag.get(flag)
        if found is not None or name.startswith("-"):
            return found
        return next((o for o in self.options if o.dest == name), None)

    def flag_names(self) -> list[str]:
        """Every long flag as an underscored name, for suggestions in error messages."""
        return sorted(
            {f[2:].replace("-", "_") for o in self.options for f in o.flags if f.startswith("--")}
        )

    def parse(self, args: Sequence[str], *, check_required: bool = True) -> argparse.Namespace:
        """Parse like the real parser would; SnapshotParseError carries argparse's message.
        `check_required=False` accepts a fragment of a command line (no --model-path)."""
        parser = self._parser if check_required else self._fragment_parser
        return parser.parse_args(list(args))

    @cached_property
    def _parser(self) -> argparse.ArgumentParser:
        return self._build(check_required=True)

    @cached_property
    def _fragment_parser(self) -> argparse.ArgumentParser:
        return self._build(check_required=False)

    def _build(self, check_required: bool) -> argparse.ArgumentParser:
        parser = _RaisingParser(prog=f"{self.engine} {self.version}", add_help=False)
        for option in self.options:
            _add_option(parser, option, check_required)
        return parser


def option_key(option: dict[str, Any]) -> str:
    """An option's name in a release's file: its first flag without dashes (the dest of a
    positional argument)."""
    flags = option.get("flags") or []
    return str(flags[0]).lstrip("-") if flags else str(option["dest"])


def delta_entries(options: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[Entry]:
    """`options` in order, each one the `base` release has identically replaced by its key."""
    unchanged = {option_key(o): o for o in base}
    return [option_key(o) if unchanged.get(option_key(o)) == o else o for o in options]


def expand_entries(entries: list[Entry], base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The options of a release from its file's entries and its base release's options."""
    by_key = {option_key(o): o for o in base}
    try:
        return [by_key[e] if isinstance(e, str) else e for e in entries]
    except KeyError as missing:
        raise ValueError(f"an entry names {missing} that the base release lacks") from None


def snapshot_text(document: dict[str, Any]) -> str:
    """A document as JSON with one option a line: small, and a release's change is a line's."""
    head = {k: v for k, v in document.items() if k != "options"}
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in document["options"]]
    body = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    return body + ',\n "options": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise SnapshotParseError(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise SnapshotParseError(message or f"exit {status}")


def _add_option(parser: argparse.ArgumentParser, option: OptionSpec, check_required: bool) -> None:
    kwargs: dict[str, Any] = {
        "dest": option.dest,
        "required": option.required and check_required,
        "default": option.default,
    }
    flags = list(option.flags)
    kind = option.kind
    if kind == "custom":
        # sglang's own Action classes: what matters for parsing is how many values they take
        # and whether they stop the server (retired flags with an error message).
        if option.error_message is not None:
            kwargs.update(action=_rejecting_action(option.error_message), nargs=option.nargs or 0)
        elif option.nargs == 0:
            kind = "store_true"
        else:
            kind = "store"
    if kind in ("store", "append"):
        kwargs.update(action=kind, nargs=option.nargs, type=_converter(option.type))
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
    elif kind in ("store_const", "append_const"):
        kwargs.update(action=kind, const=option.const)
    elif kind in ("store_true", "store_false", "count"):
        kwargs["action"] = kind
    elif kind == "boolean_optional":
        kwargs["action"] = argparse.BooleanOptionalAction
        flags = [f for f in flags if not f.startswith("--no-")]  # the action adds them back
    if not flags:  # a positional argument
        kwargs.pop("required")
        kwargs.pop("dest")
        flags = [option.dest]
    parser.add_argument(*flags, **kwargs)


def _rejecting_action(message: str) -> type[argparse.Action]:
    class Rejecting(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None):
            parser.error(message)

    return Rejecting


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(text: str) -> int:
    """sglang's size syntax: an int, or a number with an SI (k M G T) or IEC (Ki Mi Gi Ti)
    suffix; decimals only with SI suffixes."""
    text = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise argparse.ArgumentTypeError(f"decimals are not allowed with {suffix}")
            return int(number) * _IEC[suffix]
        value = float(number) * _SI[suffix]
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"{text} is not a whole number")
        return int(value)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON {text!r}: {exc}") from None


def _nullable_str(text: str) -> str | None:
    return None if not text or text == "None" else text


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "human_readable_int": human_readable_int,
    "loads": _json_value,
    "json_list_type": _json_value,
    "parse_cuda_graph_config_arg": _json_value,
    "nullable_str": _nullable_str,
}


def _converter(name: str | None) -> Callable[[str], Any] | None:
    if name is None:
        return None
    return _CONVERTERS.get(name, str)
