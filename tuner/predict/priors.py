"""Where the estimate starts before a trial is measured: published figures, each with its source.

    PRIORS.bandwidth_fraction   # 0.72: decode reaches this share of peak bandwidth, overheads in
    accept_prior("NEXTN")       # (p, decay) fitted to published MTP accept lengths

Nothing here comes from the simulator (tests/test_estimate_provenance.py fails when a value of
a simulator profile appears as a literal in the estimate's modules). Each prior is worked out
below from a public measurement (docs/estimate.md lists them with their sources); the study's
own trials then refit every one of them (tuner/predict/estimate.py `Estimator.fit`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Published:
    """One published figure: what was measured, the value, and where it was published."""

    what: str
    value: float
    source: str


# ---- decode: the share of peak memory bandwidth a decode step reaches ----------------------
# Single-stream or small-batch decode reads the weights once per step, so weights / peak
# bandwidth / TPOT is the share reached, the step's fixed overheads included.
DECODE_FIGURES = (
    # Llama-3.1-8B bf16 (16.06 GB of weights) on one H100 SXM (3,350 GB/s), one stream.
    (
        Published("Llama-3.1-8B bf16, 1x H100, MT-bench, 1 stream: tok/s", 158.3, "sglang docs, "
                  "speculative decoding page (baseline row)"),
        16.06,
        3350.0,
    ),
    # Qwen3-8B bf16 (16.38 GB) on one H100 SXM, ShareGPT, 4 clients: mean TPOT 7.19 ms.
    (
        Published("Qwen3-8B bf16, 1x H100 SXM, ShareGPT, 4 clients: mean TPOT ms", 7.19,
                  "GPUStack performance lab, qwen3-8b/h100-latency.md (sglang 0.5.3.post3)"),
        16.38,
        3350.0,
    ),
)  # fmt: skip


def _decode_fraction() -> float:
    shares = []
    for figure, weights_gb, bandwidth_gb_s in DECODE_FIGURES:
        tpot_s = 1.0 / figure.value if "tok/s" in figure.what else figure.value / 1000.0
        shares.append(weights_gb / bandwidth_gb_s / tpot_s)
    return sum(shares) / len(shares)


# ---- prefill: the share of the bf16 peak a prefill reaches ----------------------------------
# Qwen3.6-27B bf16 on one H200 (989 dense bf16 TFLOPs), 1K prompt tokens, 1 client: TTFT
# 100.1 ms. A prefill costs 2 x parameters FLOPs per token.
PREFILL_FIGURE = Published(
    "Qwen3.6-27B bf16, 1x H200, 1K in / 1K out, 1 client: TTFT ms",
    100.1,
    "sglang issue #39042 (sglang 0.5.12.post1)",
)
_PREFILL_PARAMS = 27e9
_PREFILL_TOKENS = 1024
_PREFILL_PEAK_FLOPS = 989e12


def _prefill_fraction() -> float:
    flops = 2 * _PREFILL_PARAMS * _PREFILL_TOKENS
    return flops / _PREFILL_PEAK_FLOPS / (PREFILL_FIGURE.value / 1000.0)


# ---- speculative decoding: accept length by draft steps (topk 1) ----------------------------
# Accept length = tokens a verify step yields per request, the bonus token included.
ACCEPT_FIGURES: dict[str, tuple[tuple[int, Published], ...]] = {
    "mtp": (
        (1, Published("GLM-4.7-FP8 MTP, 1 step", 1.85, "sglang PR #23336")),
        (3, Published("GLM-4.7-FP8 MTP, 3 steps", 3.04, "sglang PR #23336")),
        (7, Published("GLM-4.7-FP8 MTP, 7 steps", 4.52, "sglang PR #23336")),
        (3, Published("DeepSeek-V3 MTP, 3 steps", 2.44, "LMSYS blog, 2025-07-17")),
    ),
    "eagle": (
        (1, Published("EAGLE topk 1, 1 step", 2.00, "sglang PR #21599")),
        (3, Published("EAGLE topk 1, 3 steps", 3.88, "sglang PR #21599")),
        (7, Published("EAGLE topk 1, 7 steps", 6.25, "sglang PR #21599")),
    ),
}


@functools.lru_cache(maxsize=1 << 16)  # the fit's grid asks the same points for every trial
def accept_length(p: float, decay: float, steps: int) -> float:
    """Tokens per verify step when draft position i is accepted with p x decay^(i-1), given
    every position before it was: 1 + p1 + p1 p2 + ... (acceptance falls with depth)."""
    total, chain = 1.0, 1.0
    for i in range(steps):
        chain *= min(max(p * decay**i, 0.0), 0.99)
        total += chain
    return total


def fit_acceptance(
    lengths: Sequence[tuple[int, float]], decay: float | None = None
) -> tuple[float, float]:
    """(p, decay) whose accept lengths best match (steps, accept length) pairs, least squares
    on a fine grid; `decay` fixed when given (one step count measured cannot tell it)."""
    decays = [decay] if decay is not None else [0.50 + i / 100 for i in range(51)]
    # Per step count: how many lengths, their sum and sum of squares; the squared error of
    # one (p, decay) is then a sum over step counts, not over every measured length.
    moments: dict[int, list[float]] = {}
    for s, length in lengths:
        m = moments.setdefault(s, [0.0, 0.0, 0.0])
        m[0] += 1
        m[1] += length
        m[2] += length * length
    best = (math.inf, 0.5, 1.0)
    for d in decays:
        for i in range(1, 100):
            p = i / 100
            err = 0.0
            for s, (n, total, squares) in moments.items():
                a = accept_length(p, d, s)
                err += n * a * a - 2 * a * total + squares
            if err < best[0] - 1e-12:
                best = (err, p, d)
    return best[1], best[2]


def accept_prior(algorithm: str | None) -> tuple[float, float]:
    """The starting (p, decay) of a speculative algorithm: MTP heads (NEXTN) or EAGLE drafts."""
    family = "mtp" if str(algorithm or "").upper() in ("NEXTN", "MTP", "") else "eagle"
    return _ACCEPT_PRIORS[family]


_ACCEPT_PRIORS = {
    family: fit_acceptance([(s, f.value) for s, f in figures])
    for family, figures in ACCEPT_FIGURES.items()
}


@dataclass(frozen=True)
class Priors:
    bandwidth_fraction: float
    prefill_fraction: float


PRIORS = Priors(bandwidth_fraction=_decode_fraction(), prefill_fraction=_prefill_fraction())
