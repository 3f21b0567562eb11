"""Flag combinations that sglang accepts at parse time but refuses at start-up.

Checked before a launch so that an invalid configuration is recorded as such instead of costing a
model load. Each rule was read from the release's source (`server_args.py` in 0.5.10/0.5.11,
`arg_groups/*_hook.py` in 0.5.23); messages are sglang's own where it has one, so the record
matches what the server would have printed. Rules that depend on the model apply to hybrid
(Mamba-style, linear-attention) models only; see `check_startup_rules` for how that is decided.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import SupportsFloat, SupportsIndex, SupportsInt

from tuner.engines._sglang_versions import (
    canonical_name,
    load_snapshot,
    nearest_known_version,
    version_key,
)
from tuner.engines.snapshot import ParserSnapshot

# sglang's speculative algorithm names (0.5.23 `SpeculativeAlgorithm` plus the NEXTN alias);
# 0.5.23 has no argparse choices for the flag, so an unknown name only fails at start-up.
SPECULATIVE_ALGORITHMS = frozenset(
    {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"}
    | {"NONE", "NEXTN"}
)
_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
FLA_CHUNK_SIZE = 64  # sglang.srt.layers.attention.fla.chunk_delta_h.CHUNK_SIZE in 0.5.1x

# Model families whose checkpoints have Mamba-style layers (sglang's hybrid-SSM architectures).
_HYBRID_MODEL = re.compile(
    r"qwen3[._-]?[56]|qwen3[._-]?next|nemotron[._-]?h\b|nemotron-h|falcon[._-]?h1|"
    r"granite-4\.0-h|granite-4-h|kimi[._-]?linear|jamba|mamba",
    re.IGNORECASE,
)
_MAMBA_FLAGS = ("mamba_radix_cache_strategy", "mamba_track_interval", "max_mamba_cache_size")


@dataclass(frozen=True)
class _Config:
    """The flags of one launch as sglang would see them after parsing."""

    given: dict[str, object]
    snapshot: ParserSnapshot
    hybrid: bool

    def __getitem__(self, name: str) -> object:
        if self.given.get(name) is not None:
            return self.given[name]
        option = self.snapshot.option(name)
        return option.default if option is not None else None

    def is_set(self, name: str) -> bool:
        return self.given.get(name) is not None

    @property
    def version(self) -> tuple[int, ...]:
        return version_key(self.snapshot.version)

    @property
    def legacy_mamba(self) -> bool:
        # Releases before the radix-cache rename (0.5.14) resolve strategies in ServerArgs itself
        # and follow the 0.5.10 / 0.5.11 rules read here.
        return self.snapshot.option("mamba_radix_cache_strategy") is None

    @property
    def mamba_strategies(self) -> bool:
        """False before 0.5.7, whose releases have no Mamba strategy flag at all."""
        return any(
            self.snapshot.option(name) is not None
            for name in ("mamba_radix_cache_strategy", "mamba_scheduler_strategy")
        )

    @property
    def model(self) -> str:
        return str(self.given.get("model_path") or "this model")

    @property
    def speculative(self) -> str | None:
        algorithm = self.given.get("speculative_algorithm")
        if algorithm is None or str(algorithm).upper() == "NONE":
            return None
        return str(algorithm).upper()


def check_startup_rules(
    flags: Mapping[str, object], version: str, *, hybrid: bool | None = None
) -> list[str]:
    """Messages for every start-up rule of `version` that `flags` break; [] = sglang would start.

    `flags` uses flag names with underscores (any release's spelling of a renamed flag). A
    release without a committed snapshot is held to the rules of the nearest known one.
    `hybrid` says whether the model has Mamba-style layers; None infers it from `model_path`
    in `flags` (Qwen3.5/3.6, Qwen3-Next, Nemotron-H, Falcon-H1, Granite-4.0-H, Kimi-Linear,
    Jamba, Mamba) or, without a recognisable model path, from a Mamba flag being set.
    """
    given = {canonical_name(k): v for k, v in flags.items()}
    snapshot = load_snapshot(nearest_known_version(version))
    if hybrid is None:
        hybrid = _looks_hybrid(given)
    config = _Config(given=given, snapshot=snapshot, hybrid=hybrid)
    problems: list[str] = []
    for rule in _RULES:
        problems.extend(rule(config))
    return problems


def _looks_hybrid(given: Mapping[str, object]) -> bool:
    model = given.get("model_path")
    if model is not None and _HYBRID_MODEL.search(str(model)):
        return True
    # Whoever sets a Mamba flag has a model with Mamba state, whatever its path is called.
    return any(given.get(name) is not None for name in _MAMBA_FLAGS)


def _int(value: object) -> int:
    """int() of a parsed flag value (a number, or a string argparse left unconverted)."""
    if isinstance(value, str | SupportsInt | SupportsIndex):
        return int(value)
    raise TypeError(f"expected a number for an integer flag, got {type(value).__name__}")


def _float(value: object) -> float:
    """float() of a parsed flag value (a number, or a string argparse left unconverted)."""
    if isinstance(value, str | SupportsFloat | SupportsIndex):
        return float(value)
    raise TypeError(f"expected a number for a float flag, got {type(value).__name__}")


# --------------------------------------------------------------------------- rules

Rule = Callable[[_Config], list[str]]


def _hicache_needs_radix_cache(c: _Config) -> list[str]:
    if c["enable_hierarchical_cache"] and c["disable_radix_cache"]:
        return [
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
            "exclusive and cannot be used at the same time. Please use only one of them."
        ]
    return []


def _hicache_host_pool_size(c: _Config) -> list[str]:
    if not c["enable_hierarchical_cache"] or _float(c["hicache_size"] or 0) > 0:
        return []
    ratio = c["hicache_ratio"]
    if c.legacy_mamba and ratio is not None and _float(ratio) < 1.0:
        # 0.5.1x asserts the host pool is larger than the device pool (0.5.23 only warns).
        return [
            "The host memory should be larger than the device memory with the current protocol "
            f"(hicache_ratio={ratio} < 1)"
        ]
    fraction = c.given.get("hicache_host_memory_fraction")
    if fraction is not None and not 0 < _float(fraction) <= 1:
        return ["--hicache-host-memory-fraction must be in (0, 1]."]
    return []


def _speculative_algorithm_name(c: _Config) -> list[str]:
    algorithm = c.given.get("speculative_algorithm")
    option = c.snapshot.option("speculative_algorithm")
    if algorithm is None or option is None or option.choices is not None:
        return []  # releases with argparse choices reject an unknown name at parse time
    if str(algorithm).upper() not in SPECULATIVE_ALGORITHMS:
        return [f"Unknown speculative algorithm name: {algorithm}"]
    return []


def _speculative_steps_needed(c: _Config) -> list[str]:
    if c.speculative not in _EAGLE_FAMILY or c.is_set("speculative_num_steps"):
        return []
    partial = [n for n in ("speculative_eagle_topk", "speculative_num_draft_tokens") if c.is_set(n)]
    if partial:
        # sglang asserts this without a message.
        return [
            f"{' and '.join(partial)} set without speculative_num_steps: sglang requires "
            "speculative_num_steps whenever speculative_eagle_topk or "
            "speculative_num_draft_tokens is given (AssertionError)"
        ]
    return []


def _speculative_topk_backends(c: _Config) -> list[str]:
    if c.speculative not in _EAGLE_FAMILY:
        return []
    topk = c["speculative_eagle_topk"]
    if topk is None or _int(topk) <= 1:
        return []
    problems = []
    backend = c["attention_backend"]
    if backend == "trtllm_mha":
        problems.append("trtllm_mha backend only supports topk = 1 for speculative decoding.")
    page_size = c["page_size"]
    if page_size is not None and _int(page_size) > 1 and backend is not None:
        if c.legacy_mamba and backend not in ("flashinfer", "fa3"):
            problems.append(
                "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces "
                "incorrect results for paged attention backends. This combination is only "
                "supported for the 'flashinfer' backend."
            )
        elif not c.legacy_mamba and backend not in ("flashinfer", "fa3", "triton"):
            problems.append(
                "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                f"('flashinfer', 'fa3', 'triton'); got attention_backend={backend!r}. "
                "Use page_size == 1 or one of those backends."
            )
    return problems


def _mamba_strategy(c: _Config) -> list[str]:
    if not c.mamba_strategies:
        return []
    strategy = str(c["mamba_radix_cache_strategy"] or "auto")
    if not c.hybrid:
        if not c.legacy_mamba and strategy.startswith("extra_buffer"):
            return [f"--mamba-radix-cache-strategy {strategy} needs mamba state, got {c.model}."]
        return []
    if c.legacy_mamba:
        return _legacy_mamba(c, "no_buffer" if strategy == "auto" else strategy)
    return _current_mamba(c, strategy)


def _legacy_mamba(c: _Config, strategy: str) -> list[str]:
    """0.5.10 / 0.5.11 `ServerArgs._handle_mamba_radix_cache` ("auto" means no_buffer)."""
    problems = []
    if strategy == "extra_buffer":
        if c["disable_radix_cache"]:
            problems.append(
                "mamba extra_buffer is not compatible with --disable-radix-cache "
                "Overlap scheduling is already supported with no_buffer + disable_radix_cache. "
                "Please use --mamba-scheduler-strategy no_buffer instead."
            )
        problems += _track_interval(c)
        page_size = c["page_size"]
        if page_size is not None and _int(page_size) > 0:
            big, small = max(FLA_CHUNK_SIZE, _int(page_size)), min(FLA_CHUNK_SIZE, _int(page_size))
            if big % small != 0:
                problems.append(
                    "For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be "
                    f"divisible by the other, got FLA_CHUNK_SIZE={FLA_CHUNK_SIZE}, "
                    f"self.page_size={page_size}"
                )
    elif not c["disable_radix_cache"]:  # no_buffer with the radix cache on
        if c.version < (0, 5, 11) and c["linear_attn_decode_backend"] == "flashinfer":
            problems.append(
                "FlashInfer GDN decode (--linear-attn-decode-backend flashinfer) is not "
                "compatible with --mamba-scheduler-strategy no_buffer. Please use "
                "--mamba-scheduler-strategy extra_buffer instead. "
                "See https://github.com/sgl-project/sglang/issues/20791"
            )
        if c.speculative is not None:
            problems.append(
                f"Speculative decoding for {c.model} is not compatible with radix cache when "
                "using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative "
                "decoding, please use --mamba-scheduler-strategy extra_buffer and set "
                "SGLANG_ENABLE_SPEC_V2=1."
            )
    return problems


def _current_mamba(c: _Config, strategy: str) -> list[str]:
    """0.5.23 `_mamba_radix_cache_resolution` + `handle_mamba_radix_cache` validation."""
    if c["disable_radix_cache"]:
        # Without the radix cache the model does not use the Mamba radix cache at all, and an
        # explicit extra_buffer is refused.
        if strategy.startswith("extra_buffer"):
            return [f"--mamba-radix-cache-strategy {strategy} needs mamba state, got {c.model}."]
        return []
    page_size = c["page_size"]
    paged = page_size is not None and _int(page_size) > 1
    if strategy == "auto":
        # sglang picks extra_buffer when overlap scheduling is on or pages are larger than 1
        # (for models that support it, as the Qwen3.5 family does), else no_buffer with
        # overlap scheduling switched off for you.
        if not c["disable_overlap_schedule"] or paged:
            strategy = "extra_buffer"
        else:
            return []
    problems = []
    if strategy.startswith("extra_buffer"):
        linear_backend = c["linear_attn_backend"]
        if linear_backend is not None and linear_backend != "triton":
            problems.append(f"extra_buffer is not supported for {c.model}; use no_buffer.")
        problems += _track_interval(c)
    else:  # no_buffer, given explicitly
        if paged:
            problems.append("no_buffer only supports page_size=1.")
        if not c["disable_overlap_schedule"]:
            problems.append(
                "no_buffer do not support overlap schedule. Try to set "
                "disable_overlap_schedule=True."
            )
        if c["attention_backend"] == "trtllm_mha":
            problems.append("no_buffer do not support trtllm_mha attention backend.")
    return problems


def _track_interval(c: _Config) -> list[str]:
    interval = _int(c["mamba_track_interval"] or 256)
    problems = []
    draft = c["speculative_num_draft_tokens"]
    if c.speculative is not None and draft is not None and interval < _int(draft):
        problems.append(
            f"mamba_track_interval {interval} must be greater than or equal to "
            f"speculative_num_draft_tokens {draft}"
        )
    page_size = c["page_size"]
    if page_size is not None and _int(page_size) > 0 and interval % _int(page_size) != 0:
        problems.append(
            f"mamba_track_interval {interval} must be divisible by page_size {page_size}"
        )
    return problems


# sglang 0.5.23's default adaptive configuration (`srt/speculative/adaptive_spec_params.py`):
# every batch-size tier's candidate step counts together.
ADAPTIVE_CANDIDATE_STEPS = (0, 1, 3, 5, 7)


def _speculative_adaptive_steps(c: _Config) -> list[str]:
    """0.5.23 `arg_groups/speculative_hook.py` `_init_adaptive_speculative_params` (lines
    1392-1427): with adaptive speculation kept on (EAGLE family, topk 1; otherwise sglang turns
    it off with a warning) and the default tiers, the steps must be one of the candidates."""
    if not c.is_set("speculative_adaptive") or not c["speculative_adaptive"]:
        return []
    if c.speculative not in ("EAGLE", "EAGLE3", "NEXTN") or c.is_set("speculative_adaptive_config"):
        return []
    if c.is_set("speculative_eagle_topk") and _int(c["speculative_eagle_topk"]) != 1:
        return []
    steps = c.given.get("speculative_num_steps")
    if steps is None or _int(steps) in ADAPTIVE_CANDIDATE_STEPS:
        return []
    candidates = list(ADAPTIVE_CANDIDATE_STEPS)
    return [
        f"--speculative-num-steps={_int(steps)} is not in the adaptive config candidate_steps "
        f"{candidates}. Pass one of those values."
    ]


_RULES: tuple[Rule, ...] = (
    _hicache_needs_radix_cache,
    _hicache_host_pool_size,
    _speculative_algorithm_name,
    _speculative_steps_needed,
    _speculative_adaptive_steps,
    _speculative_topk_backends,
    _mamba_strategy,
)
