"""Feasibility before launch: an analytic memory estimate and a learned crash model.

A launch that cannot fit costs minutes of GPU time (weights load before sglang finds out), so two
checks run before any launch:

1. `estimate_memory`: sglang's own sizing rules (docs/design.md) applied to the model's shape
   and the GPU's memory. It rejects only what clearly cannot fit (no KV tokens left, or far too
   little room for activations); borderline cases are left to the launch and to the model below.
2. `CrashModel`: a scikit-learn classifier trained on this study's launch outcomes. It skips a
   configuration whose predicted crash probability exceeds a threshold that adapts to the model's
   own errors: a crash it failed to predict lowers the threshold, and a deliberate probe of a
   predicted crash that then launched fine raises it.

    memory = estimate_memory(flags, ModelMemory.from_hf_config(cfg), gpu_memory_gb=96)
    if not memory.fits: ...
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

GB = 1e9
MB = 1e6


@dataclass(frozen=True)
class ModelMemory:
    """What a model needs on the GPU, in bytes."""

    weight_bytes: float
    kv_bytes_per_token: float  # full-attention layers only
    state_bytes_per_request: float = 0.0  # Mamba / linear-attention recurrent state; 0 if none
    draft_bytes: float = 0.0  # MTP / draft head weights

    @property
    def hybrid(self) -> bool:
        return self.state_bytes_per_request > 0

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], dtype_bytes: int = 2) -> ModelMemory:
        """Derive the shape from a Hugging Face `config.json` (text config of VL models too)."""
        cfg: dict[str, Any] = dict(config.get("text_config", config))
        layers = int(cfg["num_hidden_layers"])
        hidden = int(cfg["hidden_size"])
        ffn = int(cfg.get("intermediate_size", 4 * hidden))
        vocab = int(cfg.get("vocab_size", 32000))
        heads = int(cfg.get("num_attention_heads", 1))
        kv_heads = int(cfg.get("num_key_value_heads", heads))
        head_dim = int(cfg.get("head_dim", hidden // max(heads, 1)))
        full_layers = layers
        linear_layers = 0
        layer_types = cfg.get("layer_types")
        if isinstance(layer_types, list) and layer_types:
            full_layers = sum(1 for t in layer_types if "full" in str(t))
            linear_layers = len(layer_types) - full_layers
        elif "full_attention_interval" in cfg:
            full_layers = layers // int(cfg["full_attention_interval"])
            linear_layers = layers - full_layers
        attn = hidden * head_dim * (heads * 2 + kv_heads * 2)
        per_layer = attn + 3 * hidden * ffn
        tied = bool(cfg.get("tie_word_embeddings", False))
        params = layers * per_layer + vocab * hidden * (1 if tied else 2)
        kv = full_layers * 2 * kv_heads * head_dim * dtype_bytes
        state = 0.0
        if linear_layers:
            k_heads = int(cfg.get("linear_num_key_heads", 16))
            v_heads = int(cfg.get("linear_num_value_heads", 32))
            k_dim = int(cfg.get("linear_key_head_dim", 128))
            v_dim = int(cfg.get("linear_value_head_dim", 128))
            kernel = int(cfg.get("linear_conv_kernel_dim", 4))
            conv = (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1) * dtype_bytes
            ssm = v_heads * k_dim * v_dim * 4  # float32 SSM state by default
            state = float(linear_layers * (conv + ssm))
        mtp_layers = int(cfg.get("num_nextn_predict_layers", cfg.get("mtp_num_hidden_layers", 0)))
        draft = float(mtp_layers * per_layer * dtype_bytes)
        return cls(float(params * dtype_bytes), float(kv), state, draft)

    @classmethod
    def from_model_path(cls, model_path: str | Path) -> ModelMemory | None:
        path = Path(model_path) / "config.json"
        if not path.is_file():
            return None
        return cls.from_hf_config(json.loads(path.read_text()))


@dataclass(frozen=True)
class MemoryEstimate:
    fits: bool
    failure_class: str | None  # "not_enough_memory" | "out_of_memory" | None
    reason: str
    mem_fraction_static: float
    kv_tokens: int
    state_slots: int
    activation_room_gb: float
    activation_need_gb: float


def _derived_mem_fraction(
    gpu_bytes: float, chunked_prefill: int, graph_bs: int, spec: bool
) -> float:
    # sglang's rule when --mem-fraction-static is unset (docs/design.md).
    reserved = 512 * MB + 1.5 * MB * max(chunked_prefill, 2048) + 2 * MB * graph_bs
    if gpu_bytes > 60 * GB:
        reserved = max(reserved, 10 * GB)
    if spec:
        reserved += 4 * GB
    return (gpu_bytes - reserved) / gpu_bytes


def estimate_memory(
    flags: Mapping[str, Any],
    model: ModelMemory,
    gpu_memory_gb: float,
    *,
    activation_safety: float = 0.25,
) -> MemoryEstimate:
    """Pure estimate of whether `flags` can start; rejects only clear failures.

    `activation_safety` scales the activation need before comparing it with the room left: 0.25
    means "reject only when less than a quarter of sglang's own reserve is left", because the exact
    need depends on kernels and CUDA graphs that only a launch can measure.
    """
    gpu = gpu_memory_gb * GB
    spec = bool(flags.get("speculative_algorithm"))
    chunked = int(flags.get("chunked_prefill_size") or 8192)
    if chunked < 0:
        chunked = 8192
    graph_bs = int(flags.get("cuda_graph_max_bs_decode") or flags.get("cuda_graph_max_bs") or 256)
    mfs_flag = flags.get("mem_fraction_static")
    mfs = (
        float(mfs_flag)
        if mfs_flag is not None
        else _derived_mem_fraction(gpu, chunked, graph_bs, spec)
    )
    need = (512 * MB + 1.5 * MB * max(chunked, 2048) + 2 * MB * graph_bs) * activation_safety
    room = gpu * (1.0 - mfs)
    pools = gpu * mfs - model.weight_bytes - (model.draft_bytes if spec else 0.0)
    slots = 0
    kv_bytes = pools
    spec_reserve = 0.0
    if model.hybrid and pools > 0:
        draft_tokens = int(flags.get("speculative_num_draft_tokens") or (4 if spec else 1))
        # Unset, sglang picks the running cap itself; assume the smallest reserve so that only
        # configurations that cannot fit even then are rejected.
        running = flags.get("max_running_requests") or 1
        if spec:
            spec_reserve = model.state_bytes_per_request * float(running) * draft_tokens
            pools -= spec_reserve
        ratio = float(flags.get("mamba_full_memory_ratio") or 0.9)
        max_slots = flags.get("max_mamba_cache_size")
        if max_slots:
            slots = int(max_slots)
            kv_bytes = pools - slots * model.state_bytes_per_request
        else:
            state_bytes = pools * ratio / (1.0 + ratio)
            slots = max(0, int(state_bytes // model.state_bytes_per_request))
            kv_bytes = pools - state_bytes
    kv_tokens = max(0, int(kv_bytes // model.kv_bytes_per_token)) if kv_bytes > 0 else 0

    def result(fits: bool, failure: str | None, reason: str) -> MemoryEstimate:
        return MemoryEstimate(fits, failure, reason, mfs, kv_tokens, slots, room / GB, need / GB)

    if kv_tokens <= 0 or (model.hybrid and slots <= 0):
        return result(
            False,
            "not_enough_memory",
            f"mem_fraction_static {mfs:.2f} leaves {max(pools, 0) / GB:.1f} GB after "
            f"{model.weight_bytes / GB:.1f} GB of weights"
            + (
                f" and {spec_reserve / GB:.1f} GB of speculative state "
                f"({flags.get('max_running_requests')} requests x "
                f"{flags.get('speculative_num_draft_tokens') or 4} draft tokens)"
                if spec_reserve
                else ""
            )
            + ": no KV cache would fit",
        )
    if room < need:
        return result(
            False,
            "out_of_memory",
            f"mem_fraction_static {mfs:.2f} leaves {room / GB:.1f} GB for activations and CUDA "
            f"graphs, below {need / GB:.1f} GB",
        )
    return result(
        True, None, f"{kv_tokens} KV tokens, {slots} state slots, {room / GB:.1f} GB free"
    )


# ---- learned crash model -------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchObservation:
    """One launched trial: its flags, whether it crashed, and what was predicted before."""

    flags: Mapping[str, Any]
    crashed: bool
    p_crash: float | None = None  # prediction made before the launch, if any
    threshold: float | None = None
    probe: bool = False  # launched although predicted to crash, to test the model


@dataclass(frozen=True)
class CrashPrediction:
    p_crash: float
    threshold: float
    skip: bool
    probe: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CrashModel:
    """Random-forest classifier of launch crashes over this study's flags."""

    def __init__(
        self,
        base_threshold: float = 0.8,
        step: float = 0.05,
        min_launches: int = 8,
        probe_rate: float = 0.1,
        seed: int | None = None,
    ) -> None:
        self.base_threshold = base_threshold
        self.step = step
        self.min_launches = min_launches
        self.probe_rate = probe_rate
        self._rng = random.Random(seed)

    def threshold(self, history: Sequence[LaunchObservation]) -> float:
        """Lower after missed crashes, higher after probes that launched fine."""
        missed = sum(
            1
            for h in history
            if h.crashed
            and h.p_crash is not None
            and h.threshold is not None
            and h.p_crash < h.threshold
        )
        wrong_skips = sum(1 for h in history if h.probe and not h.crashed)
        value = self.base_threshold - self.step * missed + self.step * 2 * wrong_skips
        return min(0.97, max(0.5, value))

    def predict(
        self, flags: Mapping[str, Any], history: Sequence[LaunchObservation]
    ) -> CrashPrediction | None:
        """None until there is enough history with both outcomes to learn from."""
        crashes = sum(1 for h in history if h.crashed)
        if len(history) < self.min_launches or crashes == 0 or crashes == len(history):
            return None
        from sklearn.ensemble import RandomForestClassifier

        keys = sorted({k for h in history for k in h.flags} | set(flags))
        x = np.array([_encode(h.flags, keys) for h in history])
        y = np.array([1 if h.crashed else 0 for h in history])
        forest = RandomForestClassifier(n_estimators=60, min_samples_leaf=1, random_state=0)
        forest.fit(x, y)
        p = float(forest.predict_proba(np.array([_encode(flags, keys)]))[0][1])
        threshold = self.threshold(history)
        if p < threshold:
            return CrashPrediction(
                p, threshold, False, False, f"p(crash) {p:.2f} < {threshold:.2f}"
            )
        if self._rng.random() < self.probe_rate:
            return CrashPrediction(
                p, threshold, False, True, f"p(crash) {p:.2f} >= {threshold:.2f}, probing anyway"
            )
        return CrashPrediction(
            p,
            threshold,
            True,
            False,
            f"predicted to crash: p(crash) {p:.2f} >= threshold {threshold:.2f} "
            f"(learned from {len(history)} launches, {crashes} crashed)",
        )


def _encode(flags: Mapping[str, Any], keys: Sequence[str]) -> list[float]:
    """Numbers as themselves (log for wide ranges), booleans as 0/1, strings hashed stably."""
    row: list[float] = []
    for key in keys:
        value = flags.get(key)
        if value is None:
            row.append(-1.0)
        elif isinstance(value, bool):
            row.append(1.0 if value else 0.0)
        elif isinstance(value, int | float):
            row.append(math.log1p(float(value)) if float(value) > 64 else float(value))
        else:
            row.append(float(sum(ord(c) for c in str(value)) % 997) / 997.0 + 2.0)
    return row
