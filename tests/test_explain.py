"""`tuner explain --trial N`: every trial of a real simulator study names the rule that proposed
it, and the command says why in one sentence (tuner/optimize/explain.py)."""

from __future__ import annotations

import optuna
from support.sim_spaces import small_space, tuner_cli

from tuner.results import record
from tuner.results.storage import open_storage
from tuner.study import StudyOptions
from tuner.study.loop import run_study
from tuner.study.policy import RULES, rule_named
from tuner.study.run import resolve_run


def test_every_trial_names_its_rule_and_explain_says_why(tmp_path):
    space = small_space(tmp_path, "explained")
    studies = tmp_path / "studies"
    # No warm start: the local search proposes from trial 1 on, moving from measured trials.
    options = StudyOptions(
        space_path=space, studies_dir=studies, seed=0, trials=5, warm_start=False
    )
    run_study(resolve_run(options))
    storage = open_storage(None, "explained", studies)
    trials = optuna.load_study(study_name="explained", storage=storage).get_trials()
    names = {rule.name for rule in RULES}
    rules = [t.user_attrs.get(record.GUIDED_BY) for t in trials]
    assert all(name in names for name in rules), rules
    assert rules[0] == "defaults" and rules[1].startswith("polish:")
    moved = trials[1].user_attrs[record.GUIDED_FROM]

    def explain(number: int) -> str:
        result = tuner_cli(
            "explain", "--trial", str(number), "--study", "explained",
            "--studies-dir", str(studies), cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    first = explain(0)
    assert first.startswith("Trial 0 was proposed by defaults: sglang's defaults")
    assert first.count("\n") == 0 and first.endswith(".")
    polish = explain(1)
    rule = rule_named(rules[1])
    assert f"proposed by {rule.name}, moving from trial {moved}: {rule.proposes}" in polish
    # A trial the study does not have: one line, exit code 2.
    missing = tuner_cli(
        "explain", "--trial", "99", "--study", "explained", "--studies-dir", str(studies),
        cwd=tmp_path,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: study 'explained' has no trial 99 (its trials are 0-4)"


def test_the_live_log_names_the_rule_of_every_finished_trial(tmp_path):
    space = small_space(tmp_path, "logged")
    result = tuner_cli(
        "optimize", "--space", str(space), "--trials", "3", "--seed", "0", "--no-report",
        "--studies-dir", "studies", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = {rule.name for rule in RULES}
    logged = [line for line in result.stdout.splitlines() if line.startswith("trial ")]
    assert logged and logged[0].startswith("trial 0 (defaults): ")
    for line in logged:
        rule = line.split("(", 1)[1].split(")", 1)[0]
        assert rule in names, line
