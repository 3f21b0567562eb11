"""Write a chosen trial out as a launch script, a `--config` YAML file and deploy files.

The deploy files, a `docker run` script and a Kubernetes manifest, come from
tuner/results/deploy.py.

The script runs `python3 -m sglang.launch_server` with exactly the trial's recorded flags for the
study's sglang version. Host, port and API key come from the environment when the script runs,
so the file holds no secret and can be copied to the GPU box as is; it stops, in one line, when
the port is taken. Simulator options (`--sim-*`) never reach it: a study measured on the
simulator exports a script for real sglang.

Example:
    >>> result = export_trial(storage, "qwen-mtp", pick=Pick.KNEE)  # doctest: +SKIP
    >>> result.script  # doctest: +SKIP
    PosixPath('launch_qwen-mtp_trial12.sh')
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from optuna.storages import BaseStorage

from tuner.engines.sglang import LAUNCH_MODULE
from tuner.results.deploy import (
    DeploySpec,
    flag_groups,
    is_secret,
    render_docker_run,
    render_kubernetes,
)
from tuner.results.goals import MAXIMIZE, SLO_NOISE, Slo, close_call, slo_margins, steadiest
from tuner.results.pick import Pick, candidates, choose_trial, default_pick
from tuner.results.server_config import (
    ConfigFile,
    argv_to_config,
    config_to_argv,
    parser_snapshot,
    sglang_server_args,
    validate_argv,
)
from tuner.results.storage import safe_file_stem
from tuner.results.study_records import (
    StudyMeta,
    TrialRecord,
    load_records,
    with_slos,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000


@dataclass(frozen=True)
class ExportResult:
    study_name: str
    trial_number: int
    picked_by: str  # "trial" or a Pick value
    script: Path
    config: Path
    docker: Path  # `docker run` with sglang's image for the study's release
    kubernetes: Path  # Deployment + Service
    argv: tuple[str, ...]  # the flags after `-m sglang.launch_server`, without host/port/key
    validated_for: str | None  # the sglang version the argv was checked against, or None
    warnings: tuple[str, ...]


def _comment(text: str) -> str:
    # Study names and messages come from the storage: keep each on its comment line.
    return re.sub(r"[\r\n\x00-\x1f]+", " ", text)


def how_chosen(picked_by: str, slos: Sequence[Slo] = ()) -> str:
    """'picked by --pick knee with --slo p99_ttft_ms <= 1700', for the files' headers."""
    how = f"picked by --pick {picked_by}" if picked_by != "trial" else "chosen with --trial"
    if slos:
        how += " with --slo " + ", ".join(str(s) for s in slos) + " (instead of the study's SLOs)"
    return how


def _margins(trial: TrialRecord, slos: Sequence[Slo]) -> list[tuple[Slo, float]]:
    """`goals.slo_margins` of the trial, from its measured metrics: the SLOs in force may be
    `--slo`'s, and a study written by an older tuner may hold its constraints as 0 / 1 only."""
    measured = [(slo, trial.metric(slo.metric)) for slo in slos]
    graded = {f"slo:{slo.metric}": slo.violation(v) for slo, v in measured if v is not None}
    return slo_margins(graded, slos)


def _steadier(
    chosen: TrialRecord, trials: Sequence[TrialRecord], meta: StudyMeta, slos: Sequence[Slo]
) -> str:
    """What to export instead of a close call: the candidate with the most throughput that
    meets every SLO by `SLO_NOISE` or more. On other draws of tpot-8b's workload, close calls
    held in 5 of 16 cases and such trials in 46 of 52 (benchmarks/results/draw_check.md)."""
    if slos:
        meta, trials = with_slos(meta, trials, slos)
    in_force = slos or meta.slos
    sign = 1.0 if meta.throughput.direction == MAXIMIZE else -1.0
    best = steadiest(
        (t for t in candidates(trials, meta) if t.number != chosen.number),
        lambda t: margins[0][1] if (margins := _margins(t, in_force)) else -math.inf,
        lambda t: sign * (t.metric(meta.throughput.metric) or 0.0),
    )
    if best is None:
        return f"no trial meets every SLO by {SLO_NOISE:.0%} or more of its limit"
    value = best.metric(meta.throughput.metric) or 0.0
    mine = chosen.metric(meta.throughput.metric)
    change = f" ({value / mine - 1:+.1%})" if mine else ""
    return (
        f"trial {best.number} meets every SLO by {SLO_NOISE:.0%} or more, with "
        f"{meta.throughput.metric} {value:.1f}{change}: tuner export --study "
        f"{shlex.quote(meta.name)} --trial {best.number}"
    )


def _summary_lines(trial: TrialRecord, meta: StudyMeta, how: str) -> list[str]:
    lines = [f"study {meta.name}, trial {trial.number} ({how})", engine_line(meta)]
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
    capacity = [
        _capacity_item(trial, k, v) for k, v in trial.capacity.items() if k in _CAPACITY_KEYS
    ]
    if capacity:
        lines.append("capacity: " + ", ".join(capacity))
    quantized = quantized_kv(trial)
    if quantized:
        lines.append(quantized)
    version = meta.sglang_version or "unknown"
    lines.append(f"flags for sglang {version} (flag names differ between sglang versions)")
    if meta.provenance is not None:  # where the figures above were measured
        lines += [f"study ran on: {line}" for line in meta.provenance.lines()]
    return [_comment(line) for line in lines]


def engine_line(meta: StudyMeta) -> str:
    """Which server the study measured, for every exported file's header."""
    release = f"sglang {meta.sglang_version}" if meta.sglang_version else "sglang (release unknown)"
    if meta.engine == "sim":
        return f"engine: the simulator, speaking {release}'s flags; these files run real sglang"
    if meta.engine is None:
        return f"engine: not recorded; flags for {release}"
    return f"engine: {release} (real server)"


_CAPACITY_KEYS = ("max_running_requests", "max_total_num_tokens")
# --kv-cache-dtype values that keep the model's precision
_FULL_KV = (None, "auto", "bf16", "bfloat16")


def quantized_kv(trial: TrialRecord) -> str | None:
    """What to say of a trial whose KV cache is stored below the model's precision (None when
    it is not): the study measured its speed, not what it does to the answers."""
    dtype = trial.flags.get("kv_cache_dtype")
    if dtype in _FULL_KV:
        return None
    return (
        f"stores the KV cache as {dtype}: the study measured its speed, not its accuracy; "
        "check the answers on your own evals before serving it"
    )


def _capacity_item(trial: TrialRecord, key: str, value: object) -> str:
    # sglang lowers --max-running-requests to what its memory pools hold; say so, or the
    # header's 17 beside the script's --max-running-requests 20 reads as a mistake.
    asked = trial.flags.get(key)
    if (
        isinstance(asked, int | float)
        and isinstance(value, int | float)
        and not isinstance(asked, bool)
        and value < asked
    ):
        return f"{key} {value} (the server capped --{key.replace('_', '-')} {asked:g})"
    return f"{key} {value}"


def render_launch_script(argv: Sequence[str], trial: TrialRecord, meta: StudyMeta, how: str) -> str:
    """A bash script that execs the server with `argv`; host, port and key from the environment.
    It refuses to start when the port is taken: sglang would log "address already in use" and
    then warm up against whatever server holds the port, for minutes, before failing."""
    header = "\n".join(f"#   {line}" for line in _summary_lines(trial, meta, how))
    flags = "\n".join(f"    {_shell_args(group)}" for group in flag_groups(argv))
    # The study's server ran with this interpreter and these variables (a CPU install, say).
    default_python = meta.engine_python or "python3"
    engine_env = ""
    if meta.engine_env:
        lines = [
            f'export {key}="${{{key}:-{_double_quoted(value)}}}"'
            if not is_secret(key)
            else f'[[ -n "${{{key}:-}}" ]] || echo "warning: {key} is not set (the study\'s '
            'server had it; secrets are not written into this file)" >&2'
            for key, value in meta.engine_env
        ]
        engine_env = (
            "\n# The environment the study's server had (a value already set here wins).\n"
            + "\n".join(lines)
            + "\n"
        )
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
#   SGLANG_PORT           port (default {DEFAULT_PORT}; the script stops if it is taken)
#   SGLANG_API_KEY        API key clients must send (default: none)
#   SGLANG_PYTHON         Python interpreter (default {default_python})
#   SGLANG_LAUNCH_MODULE  module to run (default {LAUNCH_MODULE}; tuner.sim runs the simulator)
# Arguments given to this script are passed on to the server after the tuned flags.
set -euo pipefail

python="${{SGLANG_PYTHON:-{shlex.quote(default_python)}}}"
module="${{SGLANG_LAUNCH_MODULE:-{LAUNCH_MODULE}}}"
host="${{SGLANG_HOST:-{DEFAULT_HOST}}}"
port="${{SGLANG_PORT:-{DEFAULT_PORT}}}"
{engine_env}{version_check}
# A taken port is refused here: the server would start, fail to bind, and meanwhile warm up
# against the other server.
if ! "$python" -c {shlex.quote(_PORT_CHECK)} "$host" "$port"; then
    exit 2
fi

args=(
{flags}
)
args+=(--host "$host" --port "$port")
if [[ -n "${{SGLANG_API_KEY:-}}" ]]; then
    args+=(--api-key "$SGLANG_API_KEY")
fi

exec "$python" -m "$module" "${{args[@]}}" "$@"
"""


# Binds as the server will (SO_REUSEADDR, as uvicorn sets it, so a closed server's TIME_WAIT
# sockets do not count) and prints one line when it cannot.
_PORT_CHECK = """import socket, sys
host, port = sys.argv[1], sys.argv[2]
try:
    family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, int(port)))
except (OSError, ValueError) as exc:
    reason = getattr(exc, "strerror", None) or exc
    sys.exit(f"port {port} on {host} is not free ({reason}): stop the server holding it "
             "or set SGLANG_PORT to a free port")
"""


def _double_quoted(value: str) -> str:
    """`value` safe inside a double-quoted bash word."""
    return "".join("\\" + c if c in '"$`\\' else c for c in value)


def render_config_yaml(
    config: ConfigFile,
    trial: TrialRecord,
    meta: StudyMeta,
    how: str,
    script_name: str,
    config_name: str = "THIS_FILE",
) -> str:
    header = "\n".join(f"# {line}" for line in _summary_lines(trial, meta, how))
    body = yaml.safe_dump(config.values, sort_keys=False, default_flow_style=False)
    if config.cli_only:
        header += (
            "\n# sglang refuses these flags in a config file; give them on the command line:"
            f"\n#   {shlex.join(config.cli_only)}"
        )
    return (
        f"# sglang --config file exported by sglang-tuner (same flags as {script_name}).\n"
        f"{header}\n"
        f"# Use, with the interpreter and environment of {script_name} (which also checks that\n"
        "# the port is free), in this file's folder:\n"
        f"#   {config_command(meta, config, config_name)}\n"
        f"{body}"
    )


def config_command(meta: StudyMeta, config: ConfigFile, config_name: str) -> str:
    """The shell command that serves the `--config` file: `python3 -m sglang.launch_server` alone
    fails where the study's server needed its own Python and variables (the CPU tier, say)."""
    assignments = [
        f"{key}={shlex.quote(value)}" for key, value in meta.engine_env if not is_secret(key)
    ]
    command = [meta.engine_python or "python3", "-m", LAUNCH_MODULE, "--config"]
    runtime = ["--host", DEFAULT_HOST, "--port", str(DEFAULT_PORT), *config.cli_only]
    return " ".join([*assignments, shlex.join([*command, config_name, *runtime])])


def _shell_args(tokens: Sequence[str]) -> str:
    return " ".join(shlex.quote(t) for t in tokens)


# -- validation and writing (I/O) ----------------------------------------------------------


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
    write launch_<study>_trial<N>.sh, .yaml, .docker.sh and .k8s.yaml into `out_dir`."""
    meta, trials = load_records(storage, study_name)
    pick_rule = Pick(pick) if pick is not None else None
    parsed = [s if isinstance(s, Slo) else Slo.parse(s) for s in slos]
    chosen, warnings = choose_trial(trials, meta, trial_number=trial, pick=pick_rule, slos=parsed)
    picked_by = "trial" if trial is not None else (pick_rule or default_pick(meta)).value

    argv = sglang_server_args(chosen.server_args)
    snapshot, not_checked = parser_snapshot(meta.sglang_version)
    config_file = argv_to_config(argv, snapshot)
    if snapshot is not None:
        validate_argv(argv, snapshot.version)
        # What sglang rebuilds from the YAML file (plus the command-line-only flags) too.
        validate_argv(config_to_argv(config_file), snapshot.version)
    if not_checked:
        warnings.append(not_checked)
    quantized = quantized_kv(chosen)
    if quantized:
        warnings.append(f"trial {chosen.number} {quantized}")
    close = close_call(_margins(chosen, parsed or meta.slos))
    if close:
        warnings.append(f"trial {chosen.number} {close}")
        warnings.append(_steadier(chosen, trials, meta, parsed))

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"launch_{safe_file_stem(study_name)}_trial{chosen.number}"
    script = out_dir / f"{stem}.sh"
    config = out_dir / f"{stem}.yaml"
    how = how_chosen(picked_by, parsed)
    script.write_text(render_launch_script(argv, chosen, meta, how))
    script.chmod(0o755)
    config.write_text(render_config_yaml(config_file, chosen, meta, how, script.name, config.name))
    deploy = DeploySpec.of(argv, meta, _summary_lines(chosen, meta, how), stem=stem)
    warnings += deploy.warnings()
    docker = out_dir / deploy.docker_name
    docker.write_text(render_docker_run(deploy))
    docker.chmod(0o755)
    kubernetes = out_dir / deploy.kubernetes_file_name
    kubernetes.write_text(render_kubernetes(deploy))
    return ExportResult(
        study_name=study_name,
        trial_number=chosen.number,
        picked_by=picked_by,
        script=script,
        config=config,
        docker=docker,
        kubernetes=kubernetes,
        argv=tuple(argv),
        validated_for=snapshot.version if snapshot is not None else None,
        warnings=tuple(warnings),
    )
