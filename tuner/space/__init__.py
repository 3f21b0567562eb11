"""The search-space language: what a space file says, how it is checked and loaded.

    from tuner.space import load_space, suggest_flags
    space = load_space("search_spaces/qwen3.6-27b-mtp-hicache.yaml")

Modules: `model` (the validated space and the flags it suggests for a trial), `schema` (the
YAML shape), `checks` (cross-checks: names, ranges, conditions, engine flags, SLOs), `load`
(reading a file or a shipped name), `derive` (the `derive:` expressions), `relative` (bounds
written relative to the workload: `concurrency`, `capacity`), `flag_ranges` (the valid values
of well-known sglang flags).
"""

from tuner.space.load import (
    DEFAULT_SPACE_NAME,
    SpaceSource,
    default_space_path,
    load_space,
    read_space_file,
    shipped_spaces,
    space_from_dict,
)
from tuner.space.model import (
    BenchSettings,
    Objectives,
    ParamSpec,
    SearchSpace,
    Slo,
    same_value,
    suggest_flags,
    suggest_queued,
)

__all__ = [
    "DEFAULT_SPACE_NAME",
    "BenchSettings",
    "Objectives",
    "ParamSpec",
    "SearchSpace",
    "Slo",
    "SpaceSource",
    "default_space_path",
    "load_space",
    "read_space_file",
    "same_value",
    "shipped_spaces",
    "space_from_dict",
    "suggest_flags",
    "suggest_queued",
]
