"""The engine's interpreter and environment as settings: space file, CLI, launch, export.

Real sglang on a CPU runs from another virtual environment with SGLANG_USE_CPU_ENGINE=1; these
tests check the plumbing with the simulator and small fixtures (the `real_sglang` tests drive
the real server).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuner.engines.sglang import READY_LINE, classify_failure
from tuner.errors import UserError
from tuner.launcher import LaunchSpec, start, stop
from tuner.space.load import load_space
from tuner.study.options import parse_engine_env

REPO = Path(__file__).resolve().parents[1]
CPU_SPACE = REPO / "search_spaces" / "tiny-llama-cpu.yaml"


def tuner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_the_shipped_cpu_space_fixes_device_kv_cap_and_idle_sleep():
    space = load_space(CPU_SPACE)
    assert space.engine.env == {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0"}
    assert space.engine.python == "~/.cache/sglang-tuner/real-sglang/bin/python"
    assert space.fixed_flags == {"device": "cpu", "sleep_on_idle": True, "max_total_tokens": 8192}
    assert not space.model_path.startswith("~")  # expanded: sglang takes "~/..." for a hub id
    assert {"max_running_requests", "chunked_prefill_size", "schedule_policy"} <= set(space.params)


def test_engine_env_numbers_become_text_and_bad_names_are_refused(tmp_path):
    text = CPU_SPACE.read_text().replace('SGLANG_CPU_OMP_THREADS_BIND: "0"', "OMP_X: 0")
    path = tmp_path / "space.yaml"
    path.write_text(text)
    assert load_space(path).engine.env["OMP_X"] == "0"
    path.write_text(text.replace("OMP_X: 0", "'BAD NAME': 1"))
    with pytest.raises(UserError, match="not an environment variable name"):
        load_space(path)


def test_engine_env_options_parse_or_name_the_bad_one():
    assert parse_engine_env(["A=1", "B_2=x=y", "C="]) == {"A": "1", "B_2": "x=y", "C": ""}
    with pytest.raises(UserError, match="--engine-env 'NOVALUE'"):
        parse_engine_env(["NOVALUE"])
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_engine_env(["1A=2"])


def test_engine_options_on_the_simulator_are_one_clear_line(tmp_path):
    line = error_line(tuner(tmp_path, "optimize", "--engine-python", sys.executable, "--dry-run"))
    assert "--engine-python applies to --engine sglang only" in line
    line = error_line(tuner(tmp_path, "optimize", "--engine-env", "A=1", "--dry-run"))
    assert "--engine-env applies to --engine sglang only" in line
    line = error_line(
        tuner(tmp_path, "optimize", "--engine", "sglang", "--engine-env", "oops", "--dry-run")
    )
    assert "--engine-env 'oops'" in line


def test_a_missing_engine_python_is_named(tmp_path):
    result = tuner(
        tmp_path,
        "optimize",
        "--engine",
        "sglang",
        "--space",
        str(CPU_SPACE),
        "--engine-python",
        str(tmp_path / "nowhere" / "python"),
        "--dry-run",
        "--studies-dir",
        str(tmp_path / "studies"),
    )
    line = error_line(result)
    assert "engine python" in line and "nowhere" in line
    assert "tools/install_real_sglang.sh" in line
    assert not (tmp_path / "studies").exists()


def test_an_engine_without_sglang_says_how_to_install_it(tmp_path):
    # This interpreter has no sglang: the check asks the engine's Python, not the tuner's.
    python = tmp_path / "python"
    python.symlink_to(sys.executable)
    result = tuner(
        tmp_path,
        "optimize",
        "--engine",
        "sglang",
        "--space",
        str(CPU_SPACE),
        "--engine-python",
        str(python),
        "--trials",
        "1",
        "--studies-dir",
        str(tmp_path / "studies"),
    )
    line = error_line(result)
    assert f"sglang is not installed for {python}" in line


def test_the_server_gets_the_engine_environment(tmp_path):
    spec = LaunchSpec(
        module="tuner.sim",
        server_args=[],
        extra_args=["--sim-time-scale", "100", "--sim-load-time", "0.1"],
        log_path=tmp_path / "server.log",
        ready_timeout_s=30.0,
        env={"TUNER_ENGINE_SETTING": "cpu-1"},
    )
    server = start(spec, classify_failure, READY_LINE)
    try:
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes().split(b"\0")
    finally:
        stop(server)
    assert b"TUNER_ENGINE_SETTING=cpu-1" in environ
    assert "# env: TUNER_ENGINE_SETTING=cpu-1" in (tmp_path / "server.log").read_text()


def test_the_export_script_starts_sglang_as_the_study_did(tmp_path):
    from tuner.results.export import render_launch_script
    from tuner.results.goals import DEFAULT_OBJECTIVES
    from tuner.results.study_records import Category, StudyMeta, TrialRecord

    meta = StudyMeta(
        name="cpu",
        objectives=DEFAULT_OBJECTIVES,
        slos=(),
        engine="sglang",
        sglang_version="0.5.23",
        engine_python="/opt/real sglang/bin/python",
        engine_env=(("SGLANG_USE_CPU_ENGINE", "1"), ("ODD", 'a"$b')),
    )
    trial = TrialRecord(
        number=0,
        state="COMPLETE",
        outcome="ok",
        category=next(iter(Category)),
        is_default=True,
        params={},
        server_args=("--device", "cpu"),
        flags={},
        metrics={},
        capacity={},
        constraints={},
    )
    script = tmp_path / "launch.sh"
    script.write_text(render_launch_script(["--device", "cpu"], trial, meta, "by hand"))
    text = script.read_text()
    assert "python=\"${SGLANG_PYTHON:-'/opt/real sglang/bin/python'}\"" in text
    assert 'export SGLANG_USE_CPU_ENGINE="${SGLANG_USE_CPU_ENGINE:-1}"' in text
    # The script runs: the variables reach the server (a stand-in module prints them).
    probe = tmp_path / "probe.py"
    probe.write_text("import os; print(os.environ['ODD'], os.environ['SGLANG_USE_CPU_ENGINE'])")
    out = subprocess.run(
        ["bash", str(script)],
        env={
            "PATH": "/usr/bin:/bin",
            "SGLANG_PYTHON": sys.executable,
            "PYTHONPATH": str(tmp_path),
            "SGLANG_LAUNCH_MODULE": "probe",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'a"$b 1'
