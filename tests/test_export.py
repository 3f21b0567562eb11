"""tuner export: pick rules, SLO filters, the script and the YAML it writes."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import optuna
import pytest
import yaml
from support.fixture_studies import SPECS, build_study, server_args, sqlite_study

from tuner.errors import UserError
from tuner.results import record
from tuner.results.export import export_trial
from tuner.results.pick import Pick
from tuner.results.server_config import (
    ConfigFile,
    argv_to_config,
    config_to_argv,
    sglang_server_args,
)
from tuner.results.storage import open_storage
from tuner.results.study_records import load_records

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    path = tmp_path_factory.mktemp("studies")
    sqlite_study(path, "qwen-mtp")
    return path


@pytest.fixture(scope="module")
def storage(studies):
    return open_storage(None, "qwen-mtp", studies)


@pytest.mark.parametrize(
    ("pick", "expected"),
    [(Pick.MAX_THROUGHPUT, 2), (Pick.MIN_LATENCY, 5), (Pick.KNEE, 12)],
)
def test_each_pick_rule(storage, tmp_path, pick, expected):
    result = export_trial(storage, "qwen-mtp", pick=pick, out_dir=tmp_path)
    assert result.trial_number == expected
    assert result.script.name == f"launch_qwen-mtp_trial{expected}.sh"
    assert result.config.name == f"launch_qwen-mtp_trial{expected}.yaml"
    assert result.warnings == ()


def test_knee_is_the_default_pick(storage, tmp_path):
    assert export_trial(storage, "qwen-mtp", out_dir=tmp_path).trial_number == 12


def test_slo_filter_narrows_the_candidates(storage, tmp_path):
    result = export_trial(
        storage, "qwen-mtp", pick="max-throughput", slos=["p99_ttft_ms<=1700"], out_dir=tmp_path
    )
    assert result.trial_number == 12  # 2 (1800 ms) and 5 (1900 ms) are filtered out
    assert "with --slo p99_ttft_ms <= 1700" in result.script.read_text()
    result = export_trial(
        storage, "qwen-mtp", pick="min-latency", slos=["output_throughput>=360"], out_dir=tmp_path
    )
    assert result.trial_number == 12


def test_impossible_slo_and_unknown_metric_are_clear_errors(storage, tmp_path):
    with pytest.raises(UserError, match="no trial of study 'qwen-mtp' served the whole"):
        export_trial(storage, "qwen-mtp", slos=["p99_ttft_ms<=10"], out_dir=tmp_path)
    with pytest.raises(UserError, match="no trial measured 'p99_ttft'"):
        export_trial(storage, "qwen-mtp", slos=["p99_ttft<=10"], out_dir=tmp_path)


def test_only_trials_that_served_the_benchmark_within_constraints_are_candidates(storage):
    meta, trials = load_records(storage, "qwen-mtp")
    from tuner.results.pick import candidates

    assert sorted(t.number for t in candidates(trials, meta)) == [0, 2, 3, 5, 12, 13, 14]


def test_explicit_trial_warns_when_not_recommended(storage, tmp_path):
    result = export_trial(storage, "qwen-mtp", trial=1, out_dir=tmp_path)
    assert result.trial_number == 1 and result.picked_by == "trial"
    assert any("violates slo:p99_ttft_ms" in w for w in result.warnings)
    with pytest.raises(UserError, match="give either --trial N or --pick"):
        export_trial(storage, "qwen-mtp", trial=1, pick="knee", out_dir=tmp_path)
    with pytest.raises(UserError, match="has no trial 99"):
        export_trial(storage, "qwen-mtp", trial=99, out_dir=tmp_path)
    with pytest.raises(UserError, match="trial 15 never ran a server"):
        export_trial(storage, "qwen-mtp", trial=15, out_dir=tmp_path)  # the FAIL trial


@pytest.mark.parametrize(("number", "outcome"), [(4, "launch"), (9, "invalid"), (10, "skipped")])
def test_a_trial_that_never_ran_a_server_is_not_exported(storage, tmp_path, number, outcome):
    with pytest.raises(UserError, match=f"trial {number} never ran a server \\({outcome}"):
        export_trial(storage, "qwen-mtp", trial=number, out_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_slo_replaces_the_study_slos(storage, tmp_path):
    # Trial 1 (3400 ms p99 TTFT, 14 ms TPOT) breaks the study's p99_ttft_ms <= 2000: relaxed,
    # it becomes the lowest-latency candidate.
    result = export_trial(
        storage, "qwen-mtp", pick="min-latency", slos=["p99_ttft_ms<=5000"], out_dir=tmp_path
    )
    assert result.trial_number == 1 and result.warnings == ()
    assert "p99_ttft_ms <= 5000 (instead of the study's SLOs)" in result.script.read_text()


def test_no_candidate_error_prints_a_command_that_works(storage, tmp_path):
    from tuner.results.pick import NoCandidate

    with pytest.raises(NoCandidate) as caught:
        export_trial(storage, "qwen-mtp", slos=["p99_ttft_ms<=1000"], out_dir=tmp_path)
    message = str(caught.value)
    # Trial 7 (900 ms) was stage-pruned; trial 3 (1200 ms) comes closest among served trials.
    assert "within p99_ttft_ms <= 1000" in message and "trial 3 comes closest" in message
    command = message.split(": tuner export ", 1)[1].split(" (--slo", 1)[0]
    assert command == "--study qwen-mtp --pick knee --slo 'p99_ttft_ms<=1200'"
    relaxed = export_trial(storage, "qwen-mtp", slos=["p99_ttft_ms<=1200"], out_dir=tmp_path)
    assert relaxed.trial_number == 3


def test_script_holds_no_secret_and_no_simulator_flag(storage, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_API_KEY", "sk-do-not-write-me")
    result = export_trial(storage, "qwen-mtp", pick="knee", out_dir=tmp_path)
    for path in (result.script, result.config):
        text = path.read_text()
        assert "sk-do-not-write-me" not in text
        assert "--sim-" not in text and "sim-time-scale" not in text
    assert "--sim-time-scale" in server_args(SPECS[12].params)  # recorded, then dropped
    assert result.script.stat().st_mode & stat.S_IXUSR
    script = result.script.read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert 'exec "$python" -m "$module" "${args[@]}" "$@"' in script


def _fake_server(tmp_path):
    # Stands in for sglang.launch_server: prints the argv it was given, as JSON.
    (tmp_path / "fake_launch.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    return {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "SGLANG_PYTHON": sys.executable,
        "SGLANG_LAUNCH_MODULE": "fake_launch",
    }


def test_script_passes_exactly_the_trial_flags_and_the_environment(storage, tmp_path):
    result = export_trial(storage, "qwen-mtp", pick="knee", out_dir=tmp_path / "out")
    env = _fake_server(tmp_path)
    for key in ("SGLANG_HOST", "SGLANG_PORT", "SGLANG_API_KEY"):
        env.pop(key, None)
    out = subprocess.run([str(result.script)], env=env, capture_output=True, text=True, check=True)
    argv = json.loads(out.stdout)
    assert argv == [*result.argv, "--host", "127.0.0.1", "--port", "30000"]

    env.update(SGLANG_HOST="0.0.0.0", SGLANG_PORT="31001", SGLANG_API_KEY="k'e y$x")
    out = subprocess.run(
        [str(result.script), "--log-level", "debug"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    argv = json.loads(out.stdout)
    assert argv == [
        *result.argv,
        "--host",
        "0.0.0.0",
        "--port",
        "31001",
        "--api-key",
        "k'e y$x",
        "--log-level",
        "debug",
    ]


def test_awkward_values_are_quoted_safely(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    study = build_study(url, "q", only=[0])
    odd = ["--model-path", "/models/it's $HOME; rm -rf x", "--served-model-name", "a b"]
    trial = optuna.trial.create_trial(
        values=[1.0, 1.0],
        params={},
        distributions={},
        user_attrs={**study.trials[0].user_attrs, "server_args": odd},
        constraints={"launch": 0.0},
    )
    study.add_trial(trial)
    result = export_trial(open_storage(url, "q", tmp_path), "q", trial=1, out_dir=tmp_path)
    out = subprocess.run(
        [str(result.script)], env=_fake_server(tmp_path), capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout)[:4] == odd


def test_config_yaml_types_values_like_sglang_expects(storage, tmp_path):
    result = export_trial(storage, "qwen-mtp", pick="knee", out_dir=tmp_path)
    config = yaml.safe_load(result.config.read_text())
    assert config["model-path"] == "Qwen/Qwen3.6-27B"
    assert config["mem-fraction-static"] == 0.86
    assert config["max-running-requests"] == 12
    assert config["speculative-algorithm"] == "NEXTN"
    assert config["enable-hierarchical-cache"] is True
    assert "host" not in config and "port" not in config and "api-key" not in config


def test_argv_to_config_without_a_snapshot_guesses_types():
    config = argv_to_config(
        ["--model-path", "m", "--chunked-prefill-size", "-1", "--x", "0.5", "--flag", "--l=a"]
    )
    assert config.values == {
        "model-path": "m",
        "chunked-prefill-size": -1,
        "x": 0.5,
        "flag": True,
        "l": "a",
    }
    assert config_to_argv(config)[:4] == ["--model-path", "m", "--chunked-prefill-size", "-1"]


def test_sim_flags_and_runtime_flags_are_dropped():
    argv = ["--model-path", "m", "--sim-profile", "p", "--sim-fast", "--port", "1", "--host=h"]
    argv += ["--api-key", "secret", "--sim-time-scale=0.1", "--max-running-requests", "4"]
    assert sglang_server_args(argv) == ["--model-path", "m", "--max-running-requests", "4"]


def test_config_keeps_switch_pairs_on_the_command_line():
    from tuner.engines.sglang import load_snapshot

    snapshot = load_snapshot("0.5.23")
    pair = next(o for o in snapshot.options if o.kind == "boolean_optional")
    negative = next(f for f in pair.flags if f.startswith("--no-"))
    argv = ["--model-path", "m", negative, "--enable-hicache", "--tp-size", "2"]
    config = argv_to_config(argv, snapshot)
    # The alias is written as sglang's own name, which its config loader maps to the switch.
    assert config.values == {"model-path": "m", "enable-hierarchical-cache": True, "tp-size": 2}
    assert config.cli_only == (negative,)
    assert isinstance(config, ConfigFile)


def test_every_exported_argv_is_valid_for_the_study_version(storage, tmp_path):
    """Every trial that ran a server, exported, parses with the committed 0.5.23 snapshot,
    both as the script's argv and as rebuilt from the YAML file."""
    from tuner.engines.sglang import validate_server_args

    meta, trials = load_records(storage, "qwen-mtp")
    exported = 0
    for trial in trials:
        if not trial.server_args or trial.outcome in ("launch_failed", "invalid", "skipped"):
            continue
        result = export_trial(storage, "qwen-mtp", trial=trial.number, out_dir=tmp_path)
        assert result.validated_for == meta.sglang_version == "0.5.23"
        validate_server_args(list(result.argv), meta.sglang_version)
        config = yaml.safe_load(result.config.read_text())
        validate_server_args(config_to_argv(ConfigFile(config)), meta.sglang_version)
        exported += 1
    assert exported == 12  # 15 with server args, less 4 (launch failed), 9 and 10


def test_an_argv_the_version_rejects_is_not_written(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    study = build_study(url, "old", only=[0])
    study.set_user_attr("sglang_version", "0.5.23")
    bad = ["--model-path", "m", "--cuda-graph-max-bs", "8"]  # renamed in 0.5.23
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 1.0],
            params={},
            distributions={},
            user_attrs={**study.trials[0].user_attrs, "server_args": bad},
            constraints={"launch": 0.0},
        )
    )
    with pytest.raises(UserError, match="reject"):
        export_trial(open_storage(url, "old", tmp_path), "old", trial=1, out_dir=tmp_path / "o")
    assert not (tmp_path / "o" / "launch_old_trial1.sh").exists()


def test_header_says_when_the_server_capped_max_running_requests(storage):
    from dataclasses import replace

    from tuner.results.export import render_launch_script

    meta, trials = load_records(storage, "qwen-mtp")
    trial = next(t for t in trials if t.number == 2)  # --max-running-requests 16
    capped = replace(trial, capacity={**trial.capacity, "max_running_requests": 11})
    header = render_launch_script(list(trial.server_args), capped, meta, "chosen with --trial")
    assert "max_running_requests 11 (the server capped --max-running-requests 16)" in header
    plain = render_launch_script(list(trial.server_args), trial, meta, "chosen with --trial")
    assert "max_running_requests 16," in plain and "capped" not in plain


def test_a_close_call_names_the_trial_that_meets_every_slo_by_more(storage, tmp_path):
    # Trial 2 (410 tok/s, p99 TTFT 1800 ms) meets 1830 ms by 1.6%: the export warns, and names
    # the candidate with the most throughput that meets it by 2% or more, with its command.
    result = export_trial(
        storage, "qwen-mtp", pick="max-throughput", slos=["p99_ttft_ms<=1830"], out_dir=tmp_path
    )
    assert result.trial_number == 2
    close, steadier = result.warnings
    assert close.startswith("trial 2 meets p99 TTFT <= 1.83 s by 1.6%, less than a rerun's")
    _meta, trials = load_records(storage, "qwen-mtp")
    steady = [
        t
        for t in trials
        if t.outcome == "ok" and t.metric("p99_ttft_ms") <= 1830 * 0.98 and t.number != 2
    ]
    best = max(steady, key=lambda t: t.metric("output_throughput"))
    value = best.metric("output_throughput")
    assert steadier == (
        f"trial {best.number} meets every SLO by 2% or more, with output_throughput "
        f"{value:.1f} ({value / 410.0 - 1:+.1%}): tuner export --study qwen-mtp "
        f"--trial {best.number}"
    )
    # Under a limit that no other candidate meets by 2%, it says so.
    result = export_trial(
        storage, "qwen-mtp", pick="max-throughput", slos=["p99_ttft_ms<=1210"], out_dir=tmp_path
    )
    assert result.warnings[-1] == "no trial meets every SLO by 2% or more of its limit"


def _one_trial_study(tmp_path, name, args, *, engine_python=None, engine_env=None):
    """A study whose trial 1 ran `args`, recorded as `tuner optimize --engine sglang` does."""
    url = f"sqlite:///{tmp_path / f'{name}.db'}"
    study = build_study(url, name, only=[0], engine="sglang")
    if engine_python:
        study.set_user_attr(record.STUDY_ENGINE_PYTHON, engine_python)
    if engine_env:
        study.set_user_attr(record.STUDY_ENGINE_ENV, engine_env)
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 1.0],
            params={},
            distributions={},
            user_attrs={**study.trials[0].user_attrs, "server_args": args},
            constraints={"launch": 0.0},
        )
    )
    return open_storage(url, name, tmp_path)


def test_the_script_refuses_a_port_that_is_taken(storage, tmp_path):
    """With the port held, sglang logged "address already in use" and then warmed up against
    the other server for minutes: the script stops first, in one line, and launches nothing."""
    result = export_trial(storage, "qwen-mtp", pick="knee", out_dir=tmp_path / "out")
    env = _fake_server(tmp_path)  # the stand-in server prints its argv when launched
    env.pop("SGLANG_HOST", None)
    with socket.socket() as other_server:
        other_server.bind(("127.0.0.1", 0))
        other_server.listen()
        port = other_server.getsockname()[1]
        env["SGLANG_PORT"] = str(port)
        taken = subprocess.run(
            [str(result.script)], env=env, capture_output=True, text=True, timeout=60
        )
    assert taken.returncode == 2
    assert taken.stdout == ""  # no launch
    assert taken.stderr.strip().splitlines() == [
        f"port {port} on 127.0.0.1 is not free (Address already in use): stop the server "
        "holding it or set SGLANG_PORT to a free port"
    ]
    # Freed, the same port launches the server.
    free = subprocess.run([str(result.script)], env=env, capture_output=True, text=True, timeout=60)
    assert free.returncode == 0, free.stderr
    assert json.loads(free.stdout)[-2:] == ["--port", str(port)]


def test_the_config_files_usage_line_runs_as_written(tmp_path):
    """The .yaml's usage line names the study's interpreter and variables, as the .sh does:
    `python3 -m sglang.launch_server --config ...` failed as written on the CPU tier."""
    stand_in = tmp_path / "tier python"
    # Stands in for the tier's interpreter: prints what it was run with and one variable.
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([sys.argv[1:], os.environ.get('SGLANG_USE_CPU_ENGINE')]))\n"
    )
    stand_in.chmod(0o755)
    storage = _one_trial_study(
        tmp_path,
        "cpu",
        ["--model-path", "m", "--device", "cpu"],
        engine_python=str(stand_in),
        engine_env={"SGLANG_USE_CPU_ENGINE": "1", "HF_TOKEN": "hf_not_in_files"},
    )
    result = export_trial(storage, "cpu", trial=1, out_dir=tmp_path / "out")
    text = result.config.read_text()
    assert "hf_not_in_files" not in text
    usage = next(line for line in text.splitlines() if "-m sglang.launch_server --config" in line)
    usage = usage.removeprefix("#").removeprefix(" Use:").strip()
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    out = subprocess.run(
        ["bash", "-c", usage],
        cwd=result.config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    argv, cpu_engine = json.loads(out.stdout)
    assert argv == [
        "-m",
        "sglang.launch_server",
        "--config",
        result.config.name,
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
    ]
    assert cpu_engine == "1"
    assert (result.config.parent / argv[3]).is_file()


def test_secret_engine_variables_are_not_written_into_the_script(tmp_path):
    storage = _one_trial_study(
        tmp_path,
        "tok",
        ["--model-path", "m"],
        engine_env={"MY_API_KEY": "sk-never-on-disk", "SGLANG_X": "1"},
    )
    result = export_trial(storage, "tok", trial=1, out_dir=tmp_path / "out")
    for path in (result.script, result.config, result.docker, result.kubernetes):
        assert "sk-never-on-disk" not in path.read_text(), path.name
    env = {**_fake_server(tmp_path), "SGLANG_PORT": str(_free_port())}
    env.pop("MY_API_KEY", None)
    out = subprocess.run([str(result.script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "warning: MY_API_KEY is not set" in out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
