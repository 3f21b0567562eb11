"""The search's table of rules (tuner/study/policy.py) names every rule a trial can record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.results import record
from tuner.study import local_search, stopping
from tuner.study.policy import RULES, is_guided, level, rule_named

ROOT = Path(__file__).resolve().parent.parent


def test_each_rule_has_one_name_and_says_when_and_what():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.when and rule.proposes and rule.stage
        assert (rule.level is not None) <= (rule.stage == "polish")


def test_every_guided_by_the_code_writes_is_a_rule():
    checks = [stopping.STOP_CHECK, stopping.BLIND_CHECK, stopping.EDGE_CHECK, stopping.EDGE_PROBE,
              stopping.VALLEY_CHECK, stopping.NEIGHBOUR_CHECK, record.REMEASURE_CHECK]  # fmt: skip
    for name in checks:
        assert rule_named(name).stage == "stop-check"
    # Every polish rule the local search names in its source is in the table.
    source = (ROOT / "tuner" / "study" / "local_search.py").read_text()
    for name in set(re.findall(r'"(polish:[a-z-]+)"', source)):
        assert rule_named(name).stage == "polish"


def test_the_local_search_ranks_by_the_tables_levels():
    assert local_search._WINDOW_LEVEL == level("polish:window") == -20.0
    assert level("polish:partner-flip") == local_search._PARTNER_LEVEL
    assert local_search._EXTENSION == level("polish:extension") > local_search._REPAIR_AHEAD
    with pytest.raises(KeyError):
        level("polish:nothing")


def test_former_names_still_read_and_the_sampler_is_no_guide():
    assert rule_named("model").name == "corrected-estimate"
    assert rule_named("polish").name == "polish:move"
    assert is_guided("polish:window") and is_guided("model") and is_guided("edge-check")
    assert not is_guided("sampler") and not is_guided("defaults") and not is_guided(None)
