"""SGLang as the engine: flags -> argv for a given sglang version, startup rules, log reading.

    args = build_server_args({"mem_fraction_static": 0.85, "enable_hierarchical_cache": True},
                             "0.5.23")          # ['--mem-fraction-static', '0.85', '--enable-...']
    validate_server_args(["--model-path", "m", *args], "0.5.23")    # UserError if sglang would not
    problems = check_startup_rules(flags, "0.5.23")                   # [] when sglang would start
    capacity = parse_capacity(log_text)          # {"max_running_requests": 19, ...}
    failure_class, message = classify_failure(log_text, exit_code)

Flags use the canonical (0.5.23) names with underscores; values follow one rule for every
version: None = not passed, a bool switches a store_true flag on or off, anything else is passed
as text. Flag names, aliases and choices come from the committed snapshot of each version's real
parser (tuner/engines/snapshots/, made by tools/dump_sglang_flags.py), or for a release without
one from its parser read live (`release_flags`), never from this file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tuner.engines._sglang_live import ReleaseFlags, release_flags
from tuner.engines._sglang_log import READY_LINE, classify_failure, crash_cause, parse_capacity
from tuner.engines._sglang_rules import check_startup_rules
from tuner.engines._sglang_versions import (
    CANONICAL_VERSION,
    RENAMED_FLAGS,
    RENAMED_IN,
    load_snapshot,
    nearest_known_version,
    older_than_all_known,
    resolve_flag,
    supported_versions,
)
from tuner.engines.snapshot import OptionSpec, ParserSnapshot, SnapshotParseError
from tuner.errors import UserError

__all__ = [
    "CANONICAL_VERSION",
    "LAUNCH_MODULE",
    "READY_LINE",
    "RENAMED_FLAGS",
    "RENAMED_IN",
    "ParserSnapshot",
    "ReleaseFlags",
    "build_server_args",
    "check_startup_rules",
    "classify_failure",
    "crash_cause",
    "load_snapshot",
    "nearest_known_version",
    "older_than_all_known",
    "parse_capacity",
    "release_flags",
    "resolve_flag",
    "supported_versions",
    "validate_server_args",
]

LAUNCH_MODULE = "sglang.launch_server"


def build_server_args(flags: Mapping[str, object], version: str) -> list[str]:
    """argv (after `python -m sglang.launch_server`) for `flags` in `version`'s flag names.

    None omits a flag; True / False turn a switch on / leave it off (a `--x/--no-x` pair gets
    the explicit form); lists give several values to a multi-value flag; dicts are passed as
    JSON. Raises UserError for a flag the version lacks or a value it would refuse.
    """
    args: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        option = resolve_flag(name, version)
        args.extend(_render(name, option, value, version))
    validate_server_args(args, version, require_all=False)
    return args


def validate_server_args(args: list[str], version: str, *, require_all: bool = True) -> None:
    """Parse `args` with the parser rebuilt from `version`'s snapshot; UserError on anything the
    real parser would reject. With `require_all` (the default) required flags such as
    --model-path must be present, as for a real launch."""
    snapshot = load_snapshot(version)
    try:
        snapshot.parse(args, check_required=require_all)
    except SnapshotParseError as exc:
        shown = " ".join(args) if len(" ".join(args)) <= 200 else " ".join(args)[:200] + " ..."
        raise UserError(
            f"sglang {snapshot.version} would reject its arguments: {exc} ({shown})"
        ) from None


def _render(name: str, option: OptionSpec, value: object, version: str) -> list[str]:
    flag = _spelling(option)
    if option.error_message is not None:
        raise UserError(f"sglang {version} rejects {flag}: {option.error_message}")
    if not option.takes_value:
        if not isinstance(value, bool):
            raise UserError(
                f"{name}={value!r}: {flag} is a switch in sglang {version}; give true or false"
            )
        if option.kind == "boolean_optional":
            return [flag if value else _negative(option, flag)]
        return [flag] if value else []
    if option.kind == "boolean_optional":
        if not isinstance(value, bool):
            raise UserError(f"{name}={value!r}: {flag} takes true or false in sglang {version}")
        return [flag if value else _negative(option, flag)]
    if isinstance(value, bool):
        raise UserError(
            f"{name}={value!r}: {flag} takes a value in sglang {version}, not a switch"
            + _choices_hint(option)
        )
    many = option.nargs in ("*", "+") or (isinstance(option.nargs, int) and option.nargs > 1)
    items = list(value) if isinstance(value, list | tuple) else [value]
    if len(items) != 1 and not many:
        raise UserError(f"{name}={value!r}: {flag} takes one value in sglang {version}")
    texts = [_text(item) for item in items]
    if option.choices is not None:
        allowed = [str(c) for c in option.choices]
        for text in texts:
            if text not in allowed:
                raise UserError(
                    f"{name}={text!r} is not accepted by sglang {version} {flag}; "
                    f"choose one of: {', '.join(allowed)}"
                )
    return [flag, *texts]


def _spelling(option: OptionSpec) -> str:
    # The first long spelling is sglang's own name for the flag (aliases come after it).
    return next((f for f in option.flags if f.startswith("--")), option.flags[0])


def _negative(option: OptionSpec, flag: str) -> str:
    return next((f for f in option.flags if f.startswith("--no-")), "--no-" + flag[2:])


def _text(value: object) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same float
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _choices_hint(option: OptionSpec) -> str:
    if option.choices is None:
        return ""
    return f"; choose one of: {', '.join(str(c) for c in option.choices)}"
