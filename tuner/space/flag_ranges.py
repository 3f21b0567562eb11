"""Known value ranges of the sglang flags people tune, checked when a search space is loaded.

sglang's parser takes any float for `--mem-fraction-static` and any int for
`--max-running-requests`; the server then refuses or misbehaves. A range that reaches past
these bounds would spend trials on samples that can never run, so the space is refused at load
with the file, the key, the value and the allowed range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Bound:
    what: str  # what the flag is, for the message
    low: float
    low_inclusive: bool
    high: float | None = None  # inclusive
    also: tuple[float, ...] = ()  # special values allowed outside the range, e.g. -1 = off

    def allows(self, value: float) -> bool:
        if value in self.also:
            return True
        above_low = value >= self.low if self.low_inclusive else value > self.low
        return above_low and (self.high is None or value <= self.high)

    def describe(self) -> str:
        text = f"{self.low:g} {'<=' if self.low_inclusive else '<'} value"
        if self.high is not None:
            text += f" <= {self.high:g}"
        if self.also:
            text += ", or " + " or ".join(f"{v:g}" for v in self.also)
        return text


_FRACTION = Bound("a fraction", 0.0, False, 1.0)
_RATIO = Bound("a ratio", 0.0, False)
_COUNT = Bound("a count", 1.0, True)

BOUNDS: dict[str, Bound] = {
    "mem_fraction_static": Bound("a fraction of GPU memory", 0.0, False, 1.0),
    "hicache_host_memory_fraction": _FRACTION,
    "hicache_ratio": Bound("a ratio of host to GPU cache size", 0.0, False),
    "swa_full_tokens_ratio": _RATIO,
    "mamba_full_memory_ratio": _RATIO,
    "schedule_conservativeness": Bound("a factor", 0.0, False),
    "chunked_prefill_size": Bound("a token count", 1.0, True, also=(-1.0,)),  # -1: no chunking
    **dict.fromkeys(
        (
            "max_running_requests",
            "max_total_tokens",
            "max_prefill_tokens",
            "page_size",
            "tp_size",
            "dp_size",
            "pp_size",
            "ep_size",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "cuda_graph_max_bs",
            "cuda_graph_max_bs_decode",
            "cuda_graph_max_bs_prefill",
        ),
        _COUNT,
    ),
}


def out_of_bounds(flag: str, value: Any) -> str | None:
    """Why `value` cannot be given to --flag, or None (unknown flags and non-numbers pass)."""
    bound = BOUNDS.get(flag)
    if bound is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if bound.allows(float(value)):
        return None
    return f"{value!r} is out of range: {flag} is {bound.what}, allowed {bound.describe()}"
