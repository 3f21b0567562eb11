"""The export command a study ends with works as printed: with SLOs nothing met, the nearest
trial and looser limits; otherwise the study's own, with the options that find it."""

from __future__ import annotations

import re
import shlex

from support.sim_spaces import small_space, tuner_cli


def test_an_unmet_slo_names_the_nearest_trial_and_a_looser_limit_that_exports(tmp_path):
    space = small_space(
        tmp_path, name="strict", slos=["p99_ttft_ms <= 1", "median_tpot_ms <= 100000"]
    )
    run = tuner_cli(
        "optimize", "--space", str(space), "--trials", "3", "--studies-dir", "studies",
        "--no-report", "--seed", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())
    assert "no trial of study 'strict' served the whole benchmark within p99_ttft_ms <= 1," in out
    assert "export one with" not in out
    nearest = re.search(r"trial (\d+) comes closest, within p99_ttft_ms <= ([\d.]+),", out)
    assert nearest is not None, out
    command = re.search(r"(tuner export --study strict .*?) \(--slo replaces", out)
    assert command is not None, out
    args = shlex.split(command.group(1))[1:]
    # The limit the SLO met stays as it was; the missed one is loosened to the nearest trial.
    assert "median_tpot_ms<=100000" in args
    loosened = next(a for a in args if a.startswith("p99_ttft_ms<="))
    assert float(loosened.split("<=")[1]) == float(nearest.group(2)) > 1
    export = tuner_cli(*args, "--studies-dir", "studies", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    assert f"trial {nearest.group(1)} of strict" in export.stdout


def test_the_export_command_printed_after_a_study_finds_it_in_its_studies_dir(tmp_path):
    space = small_space(tmp_path, name="elsewhere")
    run = tuner_cli(
        "optimize", "--space", str(space), "--trials", "2", "--studies-dir", "runs",
        "--no-report", "--seed", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    command = re.search(r"export one with: (tuner export .*--pick knee)", run.stdout)
    assert command is not None, run.stdout
    args = shlex.split(command.group(1))[1:]
    assert args[args.index("--studies-dir") + 1] == "runs"
    export = tuner_cli(*args, cwd=tmp_path)
    assert export.returncode == 0, export.stderr
