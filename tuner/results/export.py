"""Pick a trial and write it out as a launch script and an sglang `--config` YAML file.

The script runs `python3 -m sglang.launch_server` with exactly the trial's recorded flags for the
study's sglang version. Host, port and API key come from the environment when the script runs,
so the file holds no secret and can be copied to the GPU box as is. Simulator options
(`--sim-*`) never reach it: a study measured on the simulator exports a script for real sglang.

Example:
    >>> result = export_trial(storage, "qwen-mtp", pick=Pick.KNEE)  # doctest: +SKIP
    >>> result.script  # doctest: +SKIP
    PosixPath('launch_qwen-mtp_trial12.sh')
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from optuna.storages import BaseStorage

from tuner.errors import UserError
from tuner.results.goals import MAXIMIZE, Slo
from tuner.results.pareto import Point, knee_point, pareto_front
from tuner.results.study_records import (
    StudyMeta,
    TrialRecord,
    counts_by_category,
    is_candidate,
    load_records,
)

if TYPE_CHECKING:
    from tuner.engines.snapshot import ParserSnapshot

LAUNCH_MODULE = "sglang.launch_server"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000
# Set by the script from the environment at run time; never taken from the recorded argv.
_RUNTIME_FLAGS = ("--host", "--port", "--api-key")
_SIM_PREFIX = "--sim-"
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


class Pick(StrEnum):
    MAX_THROUGHPUT = "max-throughput"
    MIN_LATENCY = "min-latency"
    KNEE = "knee"


@dataclass(frozen=True)
class ExportResult:
    study_name: str
    trial_number: int
    picked_by: str  # "trial" or a Pick value
    script: Path
    config: Path
    argv: tuple[str, ...]  # the flags after `-m sglang.launch_server`, without host/port/key
    validated_for: str | None  # the sglang version the argv was checked against, or None
    warnings: tuple[str, ...]


# -- choosing a trial (pure) ---------------------------------------------------------------


def candidates(
    trials: Sequence[TrialRecord], meta: StudyMeta, slos: Sequence[Slo] = ()
) -> list[TrialRecord]:
    """Trials that served the whole benchmark within every constraint and every extra SLO."""
    return [t for t in trials if is_candidate(t, meta, slos) and t.server_args]


def pick_trial(
    trials: Sequence[TrialRecord], meta: StudyMeta, pick: Pick, slos: Sequence[Slo] = ()
) -> TrialRecord:
    """Apply a pick rule to the candidates; UserError when there is none."""
    pool = candidates(trials, meta, slos)
    if not pool:
        raise UserError(_no_candidate_message(trials, meta, slos))
    sign = 1.0 if meta.throughput.direction == MAXIMIZE else -1.0
    lat_sign = 1.0 if meta.latency.direction == MAXIMIZE else -1.0

    def goodness(t: TrialRecord) -> tuple[float, float]:
        values = t.objective_values(meta)
        assert values is not None  # candidates are measured
        return sign * values[0], lat_sign * values[1]

    if pick is Pick.MAX_THROUGHPUT:
        return max(pool, key=lambda t: (*goodness(t), -t.number))
    if pick is Pick.MIN_LATENCY:
        return max(pool, key=lambda t: (goodness(t)[1], goodness(t)[0], -t.number))
    by_number = {t.number: t for t in pool}
    points = [Point(t.number, t.objective_values(meta)) for t in pool]  # type: ignore[arg-type]
    knee = knee_point(pareto_front(points, meta.directions), meta.directions)
    assert knee is not None  # a non-empty pool has a non-empty front
    return by_number[knee.key]


def choose_trial(
    trials: Sequence[TrialRecord],
    meta: StudyMeta,
    *,
    trial_number: int | None = None,
    pick: Pick | None = None,
    slos: Sequence[Slo] = (),
) -> tuple[TrialRecord, list[str]]:
    """The trial to export and the warnings to show. `--trial` wins; `knee` is the default."""
    _check_slo_metrics(trials, slos)
    if trial_number is None:
        return pick_trial(trials, meta, pick or Pick.KNEE, slos), []
    if pick is not None:
        raise UserError("give either --trial N or --pick RULE, not both")
    by_number = {t.number: t for t in trials}
    chosen = by_number.get(trial_number)
    if chosen is None:
        numbers = sorted(by_number)
        span = f"trials 0..{numbers[-1]}" if numbers else "no trials"
        raise UserError(f"study {meta.name!r} has no trial {trial_number} ({span})")
    if not chosen.server_args:
        raise UserError(
            f"trial {trial_number} recorded no server args ({chosen.why()}); nothing to export"
        )
    warnings = []
    if not is_candidate(chosen, meta):
        warnings.append(f"trial {trial_number} is not a recommended configuration: {chosen.why()}")
    unmet = [str(s) for s in slos if not s.satisfied_by(chosen.metrics)]
    if unmet:
        warnings.append(f"trial {trial_number} does not meet --slo {', '.join(unmet)}")
    return chosen, warnings


def _check_slo_metrics(trials: Sequence[TrialRecord], slos: Sequence[Slo]) -> None:
    # A misspelt metric would silently filter out every trial; name it instead.
    known = sorted({k for t in trials for k in t.metrics})
    for slo in slos:
        if slo.metric not in known:
            raise UserError(
                f"--slo {slo}: no trial measured {slo.metric!r}; metrics recorded: "
                + (", ".join(known) or "none")
            )


def _no_candidate_message(trials: Sequence[TrialRecord], meta: StudyMeta, slos: Sequence[Slo]):
    counts = ", ".join(f"{n} {c.value}" for c, n in counts_by_category(trials).items() if n)
    limits = [str(s) for s in (*meta.slos, *slos)]
    within = f" within {', '.join(limits)}" if limits else ""
    return (
        f"no trial of study {meta.name!r} served the whole benchmark{within} "
        f"({counts or 'no trials'}); relax --slo or run more trials"
    )


# -- argv and config (pure) ----------------------------------------------------------------


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


def _comment(text: str) -> str:
    # Study names and messages come from the storage: keep each on its comment line.
    return re.sub(r"[\r\n\x00-\x1f]+", " ", text)


def how_chosen(picked_by: str, slos: Sequence[Slo] = ()) -> str:
    """'picked by --pick knee with --slo p99_ttft_ms <= 1700', for the files' headers."""
    how = f"picked by --pick {picked_by}" if picked_by != "trial" else "chosen with --trial"
    if slos:
        how += " with --slo " + ", ".join(str(s) for s in slos)
    return how


def _summary_lines(trial: TrialRecord, meta: StudyMeta, how: str) -> list[str]:
    lines = [f"study {meta.name}, trial {trial.number} ({how})"]
    shown = [
        ("output_throughput", "output tok/s", "{:.1f}"),
        ("total_throughput", "total tok/s", "{:.1f}"),
        ("median_tpot_ms", "median TPOT ms", "{:.1f}"),
        ("p99_ttft_ms", "p99 TTFT ms", "{:.0f}"),
    ]
    measured = [
        f"{label} {fmt.format(trial.metric(key))}"
        for key, label, fmt in shown
        if trial.metric(key) is not None
    ]
    if measured:
        where = (
            " on the simulator (modelled, not measured on a GPU)" if meta.engine == "sim" else ""
        )
        lines.append(f"measured{where}: " + ", ".join(measured))
    capacity = [f"{k} {v}" for k, v in trial.capacity.items() if k in _CAPACITY_KEYS]
    if capacity:
        lines.append("capacity: " + ", ".join(capacity))
    version = meta.sglang_version or "unknown"
    lines.append(f"flags for sglang {version} (flag names differ between sglang versions)")
    return [_comment(line) for line in lines]


_CAPACITY_KEYS = ("max_running_requests", "max_total_num_tokens")


def render_launch_script(argv: Sequence[str], trial: TrialRecord, meta: StudyMeta, how: str) -> str:
    """A bash script that execs the server with `argv`; host, port and key from the environment."""
    header = "\n".join(f"#   {line}" for line in _summary_lines(trial, meta, how))
    flags = "\n".join(f"    {_shell_args(group)}" for group in _flag_groups(argv))
    version_check = ""
    if meta.sglang_version:
        version_check = f"""
# Flag names change between sglang releases: say so when the installed one differs.
expected_version={shlex.quote(meta.sglang_version)}
if [[ "$module" == {LAUNCH_MODULE} ]]; then
    installed=$("$python" -c 'from importlib.metadata import version; print(version("sglang"))' \\
        2>/dev/null || true)
    if [[ -n "$installed" && "$installed" != "$expected_version" ]]; then
        echo "warning: tuned for sglang $expected_version, found $installed" >&2
    fi
fi
"""
    return f"""#!/usr/bin/env bash
# SGLang launch script exported by sglang-tuner.
{header}
#
# Settings from the environment (no secret is written into this file):
#   SGLANG_HOST           address to bind (default {DEFAULT_HOST})
#   SGLANG_PORT           port (default {DEFAULT_PORT})
#   SGLANG_API_KEY        API key clients must send (default: none)
#   SGLANG_PYTHON         Python interpreter (default python3)
#   SGLANG_LAUNCH_MODULE  module to run (default {LAUNCH_MODULE}; tuner.sim runs the simulator)
# Arguments given to this script are passed on to the server after the tuned flags.
set -euo pipefail

python="${{SGLANG_PYTHON:-python3}}"
module="${{SGLANG_LAUNCH_MODULE:-{LAUNCH_MODULE}}}"
{version_check}
args=(
{flags}
)
args+=(--host "${{SGLANG_HOST:-{DEFAULT_HOST}}}" --port "${{SGLANG_PORT:-{DEFAULT_PORT}}}")
if [[ -n "${{SGLANG_API_KEY:-}}" ]]; then
    args+=(--api-key "$SGLANG_API_KEY")
fi

exec "$python" -m "$module" "${{args[@]}}" "$@"
"""


def render_config_yaml(
    config: ConfigFile, trial: TrialRecord, meta: StudyMeta, how: str, script_name: str
) -> str:
    header = "\n".join(f"# {line}" for line in _summary_lines(trial, meta, how))
    body = yaml.safe_dump(config.values, sort_keys=False, default_flow_style=False)
    extra = ""
    if config.cli_only:
        extra = " " + shlex.join(config.cli_only)
        header += (
            "\n# sglang refuses these flags in a config file; give them on the command line:"
            f"\n#   {shlex.join(config.cli_only)}"
        )
    return (
        f"# sglang --config file exported by sglang-tuner (same flags as {script_name}).\n"
        f"{header}\n"
        f"# Use: python3 -m {LAUNCH_MODULE} --config THIS_FILE --host {DEFAULT_HOST} "
        f"--port {DEFAULT_PORT}{extra}\n"
        f"{body}"
    )


def _flag_groups(argv: Sequence[str]) -> list[list[str]]:
    # One flag and its values per line keeps the script readable and diffs small.
    groups: list[list[str]] = []
    for token in argv:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def _shell_args(tokens: Sequence[str]) -> str:
    return " ".join(shlex.quote(t) for t in tokens)


# -- validation and writing (I/O) ----------------------------------------------------------


def parser_snapshot(version: str | None) -> tuple[ParserSnapshot | None, str | None]:
    """sglang's parser snapshot for `version`, or None and why there is none."""
    if not version:
        return None, "not validated: the study does not record its sglang version"
    try:
        from tuner.engines.sglang import load_snapshot
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("tuner.engines"):
            return None, "not validated: tuner.engines.sglang is not available"
        raise
    return load_snapshot(version), None  # UserError, naming the known versions, when absent


def validate_argv(argv: Sequence[str], version: str) -> None:
    """UserError when sglang `version` would reject `argv` (a complete launch command line):
    a script that sglang would refuse must not be written."""
    from tuner.engines.sglang import validate_server_args

    validate_server_args(list(argv), version)


def safe_file_stem(study_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", study_name).strip("._") or "study"


def export_trial(
    storage: BaseStorage,
    study_name: str,
    *,
    trial: int | None = None,
    pick: Pick | str | None = None,
    slos: Sequence[Slo | str] = (),
    out_dir: Path = Path("."),
) -> ExportResult:
    """Choose a trial (`trial` number, or a `pick` rule among candidates meeting `slos`) and
    write launch_<study>_trial<N>.sh and launch_<study>_trial<N>.yaml into `out_dir`."""
    meta, trials = load_records(storage, study_name)
    pick_rule = Pick(pick) if pick is not None else None
    parsed = [s if isinstance(s, Slo) else Slo.parse(s) for s in slos]
    chosen, warnings = choose_trial(trials, meta, trial_number=trial, pick=pick_rule, slos=parsed)
    picked_by = "trial" if trial is not None else (pick_rule or Pick.KNEE).value

    argv = sglang_server_args(chosen.server_args)
    snapshot, not_checked = parser_snapshot(meta.sglang_version)
    config_file = argv_to_config(argv, snapshot)
    if snapshot is not None:
        validate_argv(argv, snapshot.version)
        # What sglang rebuilds from the YAML file (plus the command-line-only flags) too.
        validate_argv(config_to_argv(config_file), snapshot.version)
    if not_checked:
        warnings.append(not_checked)

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"launch_{safe_file_stem(study_name)}_trial{chosen.number}"
    script = out_dir / f"{stem}.sh"
    config = out_dir / f"{stem}.yaml"
    how = how_chosen(picked_by, parsed)
    script.write_text(render_launch_script(argv, chosen, meta, how))
    script.chmod(0o755)
    config.write_text(render_config_yaml(config_file, chosen, meta, how, script.name))
    return ExportResult(
        study_name=study_name,
        trial_number=chosen.number,
        picked_by=picked_by,
        script=script,
        config=config,
        argv=tuple(argv),
        validated_for=snapshot.version if snapshot is not None else None,
        warnings=tuple(warnings),
    )


def launch_command(server_args: Sequence[str]) -> str:
    """The one-line command a trial's configuration runs, for tables and logs."""
    return shlex.join(["python3", "-m", LAUNCH_MODULE, *sglang_server_args(server_args)])
