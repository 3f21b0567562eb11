"""The search launches what it launched: seeded studies re-run trial by trial.

Each case (tests/support/golden.py) is a seeded study of the quality harness measured by the
oracle (no server); its trace (every launched trial's params, outcome and the rule that proposed
it) must equal the one stored in tests/data/golden/. A change meant to move the search
re-records them on purpose: `python -m tests.support.golden --write`. About 55 s of CPU for the
six.
"""

from __future__ import annotations

import pytest

from tests.support.golden import CASES, Case, as_stored, path_of, stored, trace


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_study_launches_what_its_golden_trace_holds(case: Case) -> None:
    assert path_of(case).is_file(), (
        f"no golden trace: python -m tests.support.golden --write {case.name}"
    )
    expected = stored(case)
    got = as_stored(trace(case))
    for before, now in zip(expected, got, strict=False):
        assert now == before, f"{case.name}: trial {before['number']} differs"
    assert len(got) == len(expected)


def test_a_trace_records_the_rule_behind_every_trial() -> None:
    from tuner.study.policy import RULES

    names = {rule.name for rule in RULES}
    for case in CASES:
        rows = stored(case)
        assert rows[0]["number"] == 0 and rows[0]["guided_by"] == "defaults"
        assert all(r["guided_by"] in names for r in rows), case.name
    rules = {r["guided_by"] for r in stored(CASES[0])}
    assert {"estimate", "corrected-estimate"} <= rules
    assert any(rule.startswith("polish:") for rule in rules)
