"""Spec-sheet figures of common GPUs, looked up by the device name NVML reports.

Public vendor figures only: memory, peak memory bandwidth, dense bf16 tensor throughput (no
sparsity) and the host link. The performance estimate (tuner/predict/estimate.py) starts from
them and learns what fraction a server actually reaches from the study's own trials. A GPU not
in the table gets a provisional row (`provisional_spec`): its memory as NVML reports it, and
bandwidth, bf16 peak and host link at the table's geometric means, which the estimate then fits
over a grid wide enough for any GPU the table spans (from trial 0, sglang's defaults, on).

    spec = gpu_spec("NVIDIA H200")   # GpuSpec(name='H200', memory_gb=141, ...)
    provisional_spec("NVIDIA Quadro QX 9000", 96.0)   # GpuSpec(..., provisional=True)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    bandwidth_gb_s: float  # peak device memory bandwidth
    bf16_tflops: float  # dense bf16 tensor-core peak
    host_link_gb_s: float  # one direction of the host link (PCIe x16)
    # True for a GPU the table lacks: the figures above are the table's means, not its own.
    provisional: bool = False
    # One direction of the GPU-to-GPU NVLink (half the data sheet's total); 0: none, the
    # GPUs of a tensor-parallel server talk over PCIe.
    nvlink_gb_s: float = 0.0

    @property
    def link_gb_s(self) -> float:
        """What a tensor-parallel all-reduce moves its bytes over, one direction."""
        return self.nvlink_gb_s or self.host_link_gb_s


# Matched in this order against the words of the lower-cased name: specific names first.
_TABLE: tuple[tuple[str, GpuSpec], ...] = (
    ("rtx pro 6000 blackwell", GpuSpec("RTX PRO 6000 Blackwell", 96, 1792, 500, 64)),
    ("h200", GpuSpec("H200", 141, 4800, 989, 64, nvlink_gb_s=450)),
    ("gh200", GpuSpec("GH200", 96, 4000, 989, 450, nvlink_gb_s=450)),
    ("h100 nvl", GpuSpec("H100 NVL", 94, 3900, 835, 64, nvlink_gb_s=300)),
    ("h100 pcie", GpuSpec("H100 PCIe", 80, 2000, 756, 64)),
    ("h100", GpuSpec("H100 SXM", 80, 3350, 989, 64, nvlink_gb_s=450)),
    ("h20", GpuSpec("H20", 96, 4000, 148, 64)),
    ("b200", GpuSpec("B200", 180, 8000, 2250, 64, nvlink_gb_s=900)),
    ("a100 80gb pcie", GpuSpec("A100 80GB PCIe", 80, 1935, 312, 32)),
    ("a100 80gb", GpuSpec("A100 80GB SXM", 80, 2039, 312, 32, nvlink_gb_s=300)),
    ("a100", GpuSpec("A100 40GB", 40, 1555, 312, 32)),
    ("l40s", GpuSpec("L40S", 48, 864, 362, 32)),
    ("l40", GpuSpec("L40", 48, 864, 181, 32)),
    ("l4", GpuSpec("L4", 24, 300, 121, 32)),
    ("a10g", GpuSpec("A10G", 24, 600, 70, 32)),
    ("a10", GpuSpec("A10", 24, 600, 125, 32)),
    ("rtx 6000 ada", GpuSpec("RTX 6000 Ada", 48, 960, 364, 32)),
    ("rtx 5090", GpuSpec("RTX 5090", 32, 1792, 209, 64)),
    ("rtx 4090", GpuSpec("RTX 4090", 24, 1008, 165, 32)),
)


def gpu_spec(device_name: str | None) -> GpuSpec | None:
    """The table's row for an NVML device name, or None when the GPU is not in the table."""
    if not device_name:
        return None
    # NVML writes form factors between the words ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB
    # PCIe"): a row matches when each of its words is one of the name's.
    words = set(re.split(r"[\s_/-]+", device_name.lower().replace("nvidia", "")))
    for pattern, spec in _TABLE:
        if set(pattern.split()) <= words:
            return spec
    return None


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def provisional_spec(device_name: str, memory_gb: float) -> GpuSpec:
    """A row for a GPU the table lacks: NVML's memory, the table's geometric means for the rest."""
    rows = [spec for _, spec in _TABLE]
    return GpuSpec(
        device_name,
        memory_gb,
        _geometric_mean([r.bandwidth_gb_s for r in rows]),
        _geometric_mean([r.bf16_tflops for r in rows]),
        _geometric_mean([r.host_link_gb_s for r in rows]),
        provisional=True,
    )


def provisional_span() -> float:
    """How far any table row's bandwidth or bf16 peak lies from the means (a factor >= 1): the
    estimate widens its fit by this much for a provisional row."""
    rows = [spec for _, spec in _TABLE]
    span = 1.0
    for values in ([r.bandwidth_gb_s for r in rows], [r.bf16_tflops for r in rows]):
        mean = _geometric_mean(values)
        span = max(span, max(values) / mean, mean / min(values))
    return span


def known_gpus() -> list[str]:
    return [spec.name for _, spec in _TABLE]
