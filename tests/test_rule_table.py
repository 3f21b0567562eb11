"""docs/concepts/search.md shows the search's rules as tuner/study/policy.py defines them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tuner.study.policy import RULES

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rule_table", ROOT / "tools" / "rule_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_rule_table_of_the_search_page_matches_the_rules() -> None:
    generator = _generator()
    page = generator.SEARCH_DOC.read_text()
    assert generator.is_current(page), (
        f"docs/concepts/search.md differs from tuner/study/policy.py: run {generator.WRITE_COMMAND}"
    )


def test_every_rule_has_a_row_and_a_changed_rule_is_caught() -> None:
    generator = _generator()
    table = generator.render_table()
    for rule in RULES:
        assert f"| `{rule.name}` |" in table, rule.name
    page = generator.SEARCH_DOC.read_text()
    stale = page.replace(f"| `{RULES[0].name}` |", "| `renamed` |", 1)
    assert stale != page
    assert not generator.is_current(stale)
    assert generator.main(["--check"]) == 0


def test_a_page_without_markers_is_refused_with_the_markers_named() -> None:
    generator = _generator()
    try:
        generator.with_table("no table here", generator.render_table())
    except SystemExit as refusal:
        assert generator.TABLE_START in str(refusal)
    else:
        raise AssertionError("a page without markers was rewritten")
