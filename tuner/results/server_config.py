"""A trial's recorded argv as sglang flags and as an sglang `--config` YAML mapping, both ways."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.engines.sglang import LAUNCH_MODULE, load_snapshot, validate_server_args
from tuner.engines.snapshot import ParserSnapshot
from tuner.errors import UserError

# Set by the script from the environment at run time; never taken from the recorded argv.
_RUNTIME_FLAGS = ("--host", "--port", "--api-key")


_SIM_PREFIX = "--sim-"


_INT = re.compile(r"^[+-]?\d+$")


_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def sglang_server_args(server_args: Sequence[str]) -> list[str]:
    """The recorded argv without simulator options and without host/port/API key."""
    out: list[str] = []
    i = 0
    while i < len(server_args):
        token = server_args[i]
        name = token.split("=", 1)[0]
        drop = name.startswith(_SIM_PREFIX) or name in _RUNTIME_FLAGS
        takes_value = (
            "=" not in token and i + 1 < len(server_args) and _is_value(server_args[i + 1])
        )
        if drop:
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    return out


def _is_value(token: str) -> bool:
    # sglang's server flags are all long options, so anything not starting with "--" (including
    # negative numbers such as `--chunked-prefill-size -1`) is a value.
    return not token.startswith("--")


@dataclass(frozen=True)
class ConfigFile:
    """What goes into sglang's `--config` YAML, and what cannot."""

    values: dict[str, Any]  # flag name (its long spelling without dashes) -> typed value
    cli_only: tuple[
        str, ...
    ] = ()  # flags a config file cannot carry: pass them on the command line


def argv_to_config(argv: Sequence[str], snapshot: ParserSnapshot | None = None) -> ConfigFile:
    """Flags -> the mapping sglang's `--config` YAML holds.

    sglang turns each key back into `--key` and its value into text; a YAML boolean becomes a
    bare flag only for store_true options, and options of other kinds (`--x/--no-x` pairs,
    custom actions) are refused in a config file. With the version's parser `snapshot` the keys
    are sglang's own spellings, values get the option's type and refused kinds go to `cli_only`;
    without it a bare flag becomes `true` and numbers-looking values become numbers.
    """
    values: dict[str, Any] = {}
    cli_only: list[str] = []
    for flag, texts in _flag_values(argv):
        option = snapshot.option(flag) if snapshot is not None else None
        if option is None:
            key = flag[2:]
            values[key] = True if not texts else _guess(texts)
            continue
        key = _spelling(option)[2:]
        if option.kind == "store_true" and not texts:
            values[key] = True
        elif option.kind == "store" and texts:
            typed = [_as_type(t, option.type) for t in texts]
            many = option.nargs in ("*", "+") or (
                isinstance(option.nargs, int) and option.nargs > 1
            )
            values[key] = typed if many else typed[0]
        else:
            cli_only += [flag, *texts]
    return ConfigFile(values, tuple(cli_only))


def config_to_argv(config: ConfigFile) -> list[str]:
    """What sglang rebuilds from the config file, followed by the command-line-only flags."""
    argv: list[str] = []
    for name, value in config.values.items():
        if value is True:
            argv.append(f"--{name}")
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [f"--{name}", *(str(v) for v in value)]
        else:
            argv += [f"--{name}", str(value)]
    return argv + list(config.cli_only)


def _flag_values(argv: Sequence[str]) -> list[tuple[str, list[str]]]:
    pairs: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            pairs.append((flag, [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(token)
        else:
            raise UserError(f"server args: {token!r} is not a flag (in {shlex.join(argv)})")
    # argparse keeps the last of a repeated store flag; so does the config (dict order: first).
    return pairs


def _spelling(option: Any) -> str:
    # sglang's own name for an option is its first long flag; aliases come after it.
    return next((f for f in option.flags if f.startswith("--")), option.flags[0])


def _as_type(text: str, type_name: str | None) -> int | float | str:
    if type_name == "int" and _INT.match(text):
        return int(text)
    if type_name == "float" and _FLOAT.match(text):
        return float(text)
    return text  # str, and converters sglang applies itself (JSON, "200k" sizes, ...)


def _guess(texts: list[str]) -> Any:
    typed = [_typed(t) for t in texts]
    return typed[0] if len(typed) == 1 else typed


def _typed(value: str) -> int | float | str:
    if _INT.match(value):
        return int(value)
    if _FLOAT.match(value):
        return float(value)
    return value


def parser_snapshot(version: str | None) -> tuple[ParserSnapshot | None, str | None]:
    """sglang's parser snapshot for `version`, or None and why there is none."""
    if not version:
        return None, "not validated: the study does not record its sglang version"
    return load_snapshot(version), None  # UserError, naming the known versions, when absent


def validate_argv(argv: Sequence[str], version: str) -> None:
    """UserError when sglang `version` would reject `argv` (a complete launch command line):
    a script that sglang would refuse must not be written."""
    validate_server_args(list(argv), version)


def launch_command(server_args: Sequence[str]) -> str:
    """The one-line command a trial's configuration runs, for tables and logs."""
    return shlex.join(["python3", "-m", LAUNCH_MODULE, *sglang_server_args(server_args)])
