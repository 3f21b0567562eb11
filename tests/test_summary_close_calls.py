"""A front trial that meets an SLO by less than a rerun's noise (2% of the limit) is named as
such at the end of a study, with the trial that meets every SLO by more, and `tuner export`
warns when it writes such a trial's script, naming that trial too."""

from __future__ import annotations

import optuna
import pytest
from support.sim_spaces import small_space, tuner_cli

from tuner.optimize.summary import close_calls
from tuner.results import record
from tuner.results.goals import Slo, margin_words, slo_margins
from tuner.space import load_space
from tuner.study.options import StudySummary


def test_a_study_whose_best_meets_its_slo_by_under_two_percent_says_so(tmp_path):
    # First the defaults' p99 TTFT under a loose limit, then the same run under a limit 1%
    # above what it measured: the simulator's figures are the modelled GPU's, not the host's.
    common = ("--trials", "1", "--studies-dir", "studies", "--no-report", "--seed", "1")
    loose = small_space(tmp_path, name="loose")
    first = tuner_cli("optimize", "--space", str(loose), *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "less than a rerun's noise" not in first.stdout
    assert "(p99 TTFT " in first.stdout and "% within its limit)" in first.stdout
    storage = f"sqlite:///{tmp_path / 'studies' / 'loose.db'}"
    (trial,) = optuna.load_study(study_name="loose", storage=storage).get_trials()
    ttft = float(trial.user_attrs[record.METRICS]["p99_ttft_ms"])
    limit = round(ttft * 1.01, 3)
    tight = small_space(tmp_path, name="tight", slos=[f"p99_ttft_ms <= {limit}"])
    second = tuner_cli("optimize", "--space", str(tight), *common, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    out = " ".join(second.stdout.split())
    margin = (limit - ttft) / limit
    said = margin_words(Slo("p99_ttft_ms", "<=", limit), margin)
    assert f"trial 0 meets {said}, less than a rerun's noise (~2%)" in out, out
    assert "no trial meets every SLO by 2% or more of its limit" in out
    # The export of that trial says it too; the loose study's does not.
    for study, warned in (("tight", True), ("loose", False)):
        export = tuner_cli("export", "--study", study, "--pick", "max-throughput", cwd=tmp_path)
        assert export.returncode == 0, export.stderr
        assert (f"warning: trial 0 meets {said}, less than" in export.stderr) is warned
        # With no other trial, none meets the SLO by more.
        steadier = "warning: no trial meets every SLO by 2% or more of its limit"
        assert (steadier in export.stderr) is warned


def _trial(number: int, throughput: float, ttft_margin: float, tpot_margin: float):
    trial = optuna.trial.create_trial(
        values=[throughput, 10.0],
        params={},
        distributions={},
        user_attrs={
            record.CONSTRAINTS: {
                "launch": 0.0,
                "slo:p99_ttft_ms": -ttft_margin,
                "slo:p99_tpot_ms": -tpot_margin,
            },
        },
    )
    trial.number = number
    return trial


@pytest.mark.parametrize(
    ("steady", "expected"),
    [
        (None, "no trial meets every SLO by 2% or more of its limit"),
        (
            _trial(3, 3596.0, 0.5, 0.021),
            "the most output_throughput with every SLO met by 2% or more: trial 3, 3596.0 (-6.7%)",
        ),
        (_trial(5, 4000.0, 0.5, 0.05), None),  # more throughput than the close call: not named
    ],
)
def test_close_calls_name_the_tight_slo_and_the_steadiest_trial(tmp_path, steady, expected):
    space_path = small_space(tmp_path, slos=["p99_ttft_ms <= 7000", "p99_tpot_ms <= 11"])
    space = load_space(space_path)
    close = _trial(7, 3856.1, 0.49, 0.009)
    roomy = _trial(2, 3000.0, 0.3, 0.2)
    summary = StudySummary(
        study_name="s",
        storage_description="memory",
        storage=None,
        study_dir=tmp_path,
        counts={},
        pareto=[close, roomy],
        default_trial=None,
        steady=steady,
    )
    lines = close_calls(summary, space)
    assert lines[0] == (
        "trial 7 meets p99 TPOT <= 11 ms by 0.9%, less than a rerun's noise (~2%): "
        "measured again, or on other requests like these, it may break it"
    )
    assert lines[1:] == ([expected] if expected else [])
    # The closest SLO comes first whichever order the space names them in.
    closest = slo_margins(close.user_attrs[record.CONSTRAINTS], space.slos)[0]
    assert closest[1] == pytest.approx(0.009)
    # No close call, no lines.
    summary.pareto = [roomy]
    assert close_calls(summary, space) == []
