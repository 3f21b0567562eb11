"""Rough edges a new user met on the real-sglang CPU tier, each fixed: a model path that cannot
load is refused before any launch; a stopped study says only how to resume; the cost is priced
from the study's own launches once it has some."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from support.ctrl_c import sigint_as_in_a_terminal
from support.sim_spaces import ROOT, small_space

from tuner.errors import UserError
from tuner.optimize.cost import study_cost
from tuner.results import record
from tuner.results.storage import open_storage
from tuner.space.model_path import model_path_problem
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run

LLAMA_8B = ROOT / "tests" / "data" / "models" / "llama-3.1-8b"


def _cpu_space(tmp_path: Path, model_path: str, name: str = "cpu") -> Path:
    """The CPU tier's space on this Python, with another model path (nothing is launched)."""
    data = yaml.safe_load((ROOT / "search_spaces" / "tiny-llama-cpu.yaml").read_text())
    data["name"] = name
    data["model_path"] = model_path
    data["engine"] = {**data["engine"], "python": sys.executable}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("model_path", "said"),
    [
        ("/nonexistent/models/tiny-llama", "no such directory on this machine"),
        ("./models/tiny-llama", "no such directory on this machine"),
        ("~/no/such/model", "no such directory on this machine"),
        ("models/tiny llama", "not a directory here and not a Hugging Face repo id (ORG/NAME)"),
    ],
)
def test_a_model_path_that_cannot_load_is_refused_before_any_launch(tmp_path, model_path, said):
    space = _cpu_space(tmp_path, model_path)
    studies = tmp_path / "studies"
    out = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--trials", "2",
         "--studies-dir", str(studies)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    shown = os.path.expanduser(model_path)  # the space loader expands `~`
    assert out.stderr == f"error: {space}: model_path {shown!r}: {said}; " + (
        "give the directory that holds the model's config.json and weights (a path that "
        "exists: check its spelling and the working directory), or a repo id such as "
        "Qwen/Qwen3-8B\n"
    )
    assert "huggingface-cli" not in out.stderr
    assert not studies.exists()  # no study, no trial, no launch


def test_what_real_sglang_can_load_passes_and_a_directory_without_config_does_not(tmp_path):
    assert model_path_problem(str(LLAMA_8B)) is None
    assert model_path_problem("Qwen/Qwen3-8B") is None  # sglang fetches a repo id
    assert model_path_problem("gpt2") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "the directory has no config.json" in (model_path_problem(str(empty)) or "")
    assert "org/a/b" in (model_path_problem("org/a/b") or "")
    with pytest.raises(UserError, match=r"has no config\.json"):
        resolve_run(StudyOptions(space_path=_cpu_space(tmp_path, str(empty))))
    # The simulator serves a model it was told of, whatever the path: it is not refused.
    sim = StudyOptions(space_path=_cpu_space(tmp_path, "/nonexistent/x", "s"), engine="sim")
    assert resolve_run(sim).options.engine == "sim"


def test_a_stopped_study_says_only_run_the_same_command_to_resume(tmp_path):
    """SIGTERM during the first trial: nothing was measured, yet the study did not end, so
    "run more trials (a larger --trials)" would be wrong advice."""
    space = small_space(tmp_path, name="stopped", sim={"time_scale": 5})
    studies = tmp_path / "studies"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--trials", "3",
         "--studies-dir", str(studies), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=sigint_as_in_a_terminal, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    log = studies / "stopped" / "trial-0" / "server.log"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (log.exists() and "ready to roll" in log.read_text()):
        time.sleep(0.05)
    assert log.exists(), proc.stdout.read().decode() if proc.poll() is not None else "no trial 0"
    os.killpg(proc.pid, signal.SIGTERM)  # what Slurm, Kubernetes and systemd send
    out, _ = proc.communicate(timeout=60)
    text = " ".join(out.decode().split())
    assert proc.returncode == 130, text
    assert "interrupted: run the same command again to resume" in text
    assert "run more trials" not in text and "--trials" not in text, text
    assert "Traceback" not in text


def test_launches_are_priced_from_the_studys_own_once_it_has_some(tmp_path):
    """Real launches of the tiny model took 53-94 s on a loaded 2-core host where the model
    said ~20 s: once a study has launched servers, their times price the rest."""
    space = _cpu_space(tmp_path, str(LLAMA_8B), name="priced")
    studies = tmp_path / "studies"
    run = resolve_run(StudyOptions(trials=6, space_path=space, studies_dir=studies))
    fresh = study_cost(run)
    assert fresh.measured_launches == 0 and fresh.launch_s < 53  # the model: no study yet
    storage = open_storage(None, "priced", studies, create=True)
    study = optuna.create_study(
        study_name="priced", storage=storage, directions=["maximize", "minimize"]
    )
    for launch_s, bench_s, state in [
        (53.0, 40.0, optuna.trial.TrialState.COMPLETE),
        (94.0, 0.0, optuna.trial.TrialState.PRUNED),  # a failed launch costs its time too
        (74.0, 60.0, optuna.trial.TrialState.COMPLETE),
    ]:
        study.add_trial(
            optuna.trial.create_trial(
                state=state,
                values=[1.0, 1.0] if state == optuna.trial.TrialState.COMPLETE else None,
                user_attrs={record.TIMINGS: {"launch_s": launch_s, "bench_s": bench_s}},
            )
        )
    cost = study_cost(run, done=3)
    assert cost.launches == 3
    assert cost.launch_s == 74.0 and cost.bench_s == 50.0
    lines = cost.lines()
    assert lines[1].startswith("  launch   ~74 s each: the median of the 3 launches this study")
    assert lines[2].startswith("  bench    ~50 s per trial: the median of the 2 whole benchmarks")
    # The simulator's launches say nothing of a GPU's: a simulated study keeps the model.
    sim = resolve_run(StudyOptions(trials=6, space_path=space, studies_dir=studies, engine="sim"))
    assert study_cost(sim, done=3).measured_launches == 0
