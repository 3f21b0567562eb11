"""Every maintained script of benchmarks/ runs on a tiny setting (seconds each), and the A/B
runner's settings are explicit, checked, and set where the study reads them.

What the figures are is each benchmark's business; here: it runs, it exits 0, it prints or
writes what its docstring says. Oracle results go to a per-test cache (XDG_CACHE_HOME).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

# The top-level scripts and the test that runs each one: this file's unless named.
COVERED_ELSEWHERE = {
    "tuner_quality": "tests/test_tuner_quality.py",
    "client_overhead": "tests/test_bench_overhead.py",
    "oracle_measurer": "tests/test_same_run.py",  # a module the quality harness imports
}
SMOKED_HERE = {
    "ab",
    "draw_check",
    "estimate_error",
    "parallel_speedup",
    "quickstart_under_load",
    "real_bench_vs_sglang",
    "reality_table",
    "sim_cpu_cost",
    "steady_quality",
}


def run_script(name: str, *args: str, tmp: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_benchmarks_keeps_twelve_scripts_at_most_each_run_by_a_test():
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__"}
    assert len(scripts) <= 12, sorted(scripts)
    assert scripts == SMOKED_HERE | set(COVERED_ELSEWHERE), sorted(scripts)
    for test in COVERED_ELSEWHERE.values():
        assert (ROOT / test).is_file(), test


def test_the_benchmarks_readme_names_every_script():
    readme = (BENCHMARKS / "README.md").read_text()
    for name in SMOKED_HERE | set(COVERED_ELSEWHERE):
        assert f"{name}.py" in readme, name


# --- the A/B runner -------------------------------------------------------------------------


def _a_numeric_setting(section: str) -> tuple[str, float]:
    """A number field of a section and its default (whichever the settings class has)."""
    from benchmarks.quality.overrides import default_settings

    obj = default_settings()[section]
    return next(
        (f.name, getattr(obj, f.name))
        for f in dataclasses.fields(obj)
        if f.init and type(getattr(obj, f.name)) in (int, float)
    )


def test_ab_compares_the_arms_cell_by_cell_and_seed_by_seed(tmp_path):
    out = tmp_path / "ab.md"
    field, value = _a_numeric_setting("pruner")
    setting = f"pruner.{field}={value!r}"
    run = run_script(
        "ab", "--set", setting, "--seeds", "1", "--budget", "3", "--no-stop",
        "--out", str(out), tmp=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"A: as shipped; B: {setting}" in run.stdout
    assert "| shipped | seed-3s | 1.000" in run.stdout or "| shipped | seed-3s | 0." in run.stdout
    assert "| shipped | seed-3s | 0 | " in run.stdout  # the per-seed table
    assert out.read_text() == run.stdout


def test_ab_runs_the_full_study_once_when_only_the_stop_rule_changes(tmp_path):
    run = run_script(
        "ab", "--set", "stop.min_gain=0.5", "--seeds", "1", "--budget", "3", tmp=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "the full study runs once" in run.stdout
    assert "stopped: front kept (worst), A -> B" in run.stdout


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("nowhere.x=1", "unknown section 'nowhere': one of "),
        ("pruner.nope=1", "pruner has no field 'nope': its fields are "),
        ("pruner", "expected SECTION.FIELD=VALUE"),
    ],
)
def test_ab_refuses_a_setting_that_does_not_exist_in_one_line(tmp_path, setting, says):
    run = run_script("ab", "--set", setting, tmp=tmp_path)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], run.stderr
    if "section" in says:
        assert "pruner" in lines[0] and "stop" in lines[0]


def test_ab_refuses_guide_settings_for_a_method_without_a_guide(tmp_path):
    run = run_script("ab", "--method", "random", "--set", "guide.polish=True", tmp=tmp_path)
    assert run.returncode == 2 and "runs no guide" in run.stderr, run.stderr


def test_an_override_is_set_by_replace_on_a_copy_of_its_section():
    from benchmarks.quality.overrides import (
        UnknownSetting,
        apply_overrides,
        default_settings,
        parse_override,
    )

    roots = default_settings()
    numeric, default = _a_numeric_setting("stop")
    new = default + 7
    change = parse_override(f"stop.{numeric}={new}", roots)
    assert change == ("stop", numeric, new)
    changed = apply_overrides(roots, [change])
    assert getattr(changed["stop"], numeric) == new
    assert getattr(roots["stop"], numeric) == default  # a copy
    assert changed["pruner"] is roots["pruner"]  # untouched sections stay as they were
    section, flag = next(
        (name, f.name)
        for name, settings in roots.items()
        for f in dataclasses.fields(settings)
        if f.init and f.type in (bool, "bool")
    )
    with pytest.raises(UnknownSetting, match=rf"{section}.{flag} takes bool .*not '3'"):
        parse_override(f"{section}.{flag}=3", roots)
    assert parse_override(f"{section}.{flag}=False", roots) == (section, flag, False)
    with pytest.raises(UnknownSetting, match="unknown section 'local_search'"):
        parse_override("local_search.carry_tie=0", roots)


# --- the performance and reality benchmarks ----------------------------------------------


def test_sim_cpu_cost_served_and_oracle(tmp_path):
    served = run_script(
        "sim_cpu_cost", "--streams", "4", "--requests-per-stream", "1", "--input-len", "16",
        "--output-len", "16", "--time-scale", "50", tmp=tmp_path,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-3000:]
    figures = json.loads(served.stdout)
    assert figures["requests"] == 4 and figures["errors"] == 0 and figures["tokens_streamed"] > 0
    oracle = run_script(
        "sim_cpu_cost", "--oracle", "--configs", "2", "--repeat", "1", "--out", str(tmp_path),
        tmp=tmp_path,
    )  # fmt: skip
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    result = json.loads((tmp_path / "oracle_cost.json").read_text())
    assert len(result["configurations"]) == 2 and result["median_cpu_s"] > 0


def test_parallel_speedup(tmp_path):
    run = run_script(
        "parallel_speedup", "--trials", "2", "--workers", "2", "--time-scale", "200", tmp=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "--workers 2:" in run.stdout and "speed-up: x" in run.stdout


def test_quickstart_under_load(tmp_path):
    run = run_script(
        "quickstart_under_load", "--trials", "1", "--busy", "1", "--out", str(tmp_path),
        tmp=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "quickstart_under_load.json").read_text())
    assert result["ok"] and result["exported"]


def test_reality_table(tmp_path):
    run = run_script("reality_table", "--json", tmp=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout)
    assert len(rows) >= 10
    assert all(r["published"] > 0 and r["simulated"] > 0 for r in rows)
    assert all(r["ratio"] == pytest.approx(r["simulated"] / r["published"]) for r in rows)


def test_estimate_error(tmp_path):
    run = run_script(
        "estimate_error", "--spaces", "qwen3.6-27b-mtp-hicache", "--configs", "3", "--fit", "0,1",
        "--out", str(tmp_path), tmp=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = json.loads((tmp_path / "estimate_error.json").read_text())
    assert result["configs"] == 3 and set(result["fits"]) == {"0", "1"}


def test_draw_check(tmp_path):
    run = run_script("draw_check", "shipped:seed-3s", "1", "1", "--budget", "3", tmp=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "shipped / seed-3s: draw-0 optimum" in run.stdout
    assert "fresh draws, mean worth: optimum" in run.stdout


def test_steady_quality(tmp_path):
    run = run_script("steady_quality", "shipped:seed-3s", "1", "--budget", "3", tmp=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "shipped / seed-3s:" in run.stdout


@pytest.mark.real_sglang
def test_real_bench_vs_sglang(tmp_path):
    from support.real_sglang import INSTALL_HINT, venv_python

    if venv_python() is None:
        pytest.fail(INSTALL_HINT)
    out = tmp_path / "real.json"
    run = run_script(
        "real_bench_vs_sglang", "--repeats", "1", "--requests", "4", "--input-len", "16",
        "--output-len", "8", "--concurrency", "2", "--output", str(out), tmp=tmp_path,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "output tok/s" in run.stdout and json.loads(out.read_text())
