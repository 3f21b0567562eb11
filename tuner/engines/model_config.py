"""A model's memory needs, read from its Hugging Face ``config.json`` without downloading anything.

The same path serves both engines: a local checkpoint directory, a hub id found in the local
Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``), or the
directory a simulated model ships its ``config.json`` in.

    config_dir = find_config_dir("Qwen/Qwen3.6-27B")   # None when not on this host
    memory = ModelMemory.from_hf_config(read_config(config_dir)) if config_dir else None

Weights are counted from the shape (bf16 unless ``torch_dtype`` says otherwise): embeddings and
an untied lm_head, per-layer attention (gated query when ``attn_output_gate``, the Qwen3.5 /
Qwen3-Next default for hybrid models), gated-delta-net projections for linear-attention layers,
the MLP or MoE experts, and a vision tower when ``vision_config`` is present. The MTP layers
(``mtp_num_hidden_layers`` / ``num_nextn_predict_layers``) are the draft model's weights and are
counted apart: sglang's target model skips them and its draft worker loads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner.engines.memory_plan import kv_element_bytes

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}
# Model types whose transformers config class ties the output embedding to the input one when
# config.json does not say (transformers 5.19, models/<type>/configuration_<type>.py:
# `tie_word_embeddings: bool = True`); Llama, Qwen, Mistral, Phi-3 and DeepSeek default to
# untied. Gemma-2-9B's config.json leaves it out, and counting its 0.9B-parameter embedding
# twice put 1.8 GB of weights too many on the GPU.
TIED_BY_DEFAULT = frozenset(
    {
        "gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n_text", "vaultgemma", "cohere",
        "cohere2", "falcon", "gpt2", "gpt_bigcode", "gpt_neo", "bloom", "mpt", "opt",
        "starcoder2", "smollm3", "minicpm3", "ernie4_5", "ernie4_5_moe", "lfm2", "jetmoe",
    }
)  # fmt: skip

MISSING_CONFIG_HINT = (
    "the pre-launch memory check is off: configurations that cannot fit are launched and fail "
    "instead of being skipped, and no running-request cap is predicted"
)


class ModelConfigError(ValueError):
    """A config.json that exists but cannot be read as a model shape."""


@dataclass(frozen=True)
class ModelMemory:
    """What a model needs on the GPU, in bytes."""

    weight_bytes: float
    kv_bytes_per_token: float  # full-attention layers only
    state_bytes_per_request: float = 0.0  # Mamba / linear-attention recurrent state; 0 if none
    draft_bytes: float = 0.0  # MTP head weights (the draft model of NEXTN)
    draft_kv_bytes_per_token: float = 0.0  # KV of the MTP layers, kept beside the target's
    # Every layer full attention with a plain per-token KV: no linear-attention state, no
    # sliding window, no compressed (MLA) KV. sglang sizes the pools of those other kinds partly
    # by --max-running-requests; False when unsure (tuner/trial/same_run.py relies on it).
    full_attention_only: bool = False
    # A mixture of experts: routed experts per layer, how many each token uses, and the bytes of
    # one routed expert summed over the layers (weight_bytes holds all of them); 0 when dense.
    experts: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0
    # The shape tensor parallelism splits: attention and KV heads (0: unknown, not split), and
    # what each layer's all-reduces carry (hidden size x dtype bytes per token; 0: unknown).
    attention_heads: int = 0
    kv_heads: int = 0
    layers: int = 0
    hidden_bytes: float = 0.0
    # The bytes of a K or V element the KV figures above count (the model's dtype); a
    # --kv-cache-dtype rescales them (`with_kv_cache_dtype`).
    kv_element_bytes: float = 2.0

    @property
    def hybrid(self) -> bool:
        return self.state_bytes_per_request > 0

    def sharded(self, tp: int) -> ModelMemory:
        """One of `tp` tensor-parallel GPUs' share: weights, experts and recurrent state split
        `tp` ways, the KV heads too but at least one a GPU (sglang keeps a copy of each on
        several GPUs when there are fewer KV heads than GPUs: 0.5.23 `models/llama.py`
        183-194, `configs/model_config.py` `get_num_kv_heads`)."""
        if tp <= 1:
            return self
        kv_share = max(1, self.kv_heads // tp) / self.kv_heads if self.kv_heads else 1 / tp
        return replace(
            self,
            weight_bytes=self.weight_bytes / tp,
            kv_bytes_per_token=self.kv_bytes_per_token * kv_share,
            state_bytes_per_request=self.state_bytes_per_request / tp,
            draft_bytes=self.draft_bytes / tp,
            draft_kv_bytes_per_token=self.draft_kv_bytes_per_token * kv_share,
            expert_bytes=self.expert_bytes / tp,
        )

    def with_kv_cache_dtype(self, kv_cache_dtype: str | None) -> ModelMemory:
        """The model with its KV (and the MTP layers' KV beside it, which sglang keeps in the
        same pool) stored as `--kv-cache-dtype` says (tuner/engines/memory_plan.py
        `kv_element_bytes`)."""
        width = kv_element_bytes(kv_cache_dtype, self.kv_element_bytes)
        if width == self.kv_element_bytes:
            return self
        scale = width / self.kv_element_bytes
        return replace(
            self,
            kv_bytes_per_token=self.kv_bytes_per_token * scale,
            draft_kv_bytes_per_token=self.draft_kv_bytes_per_token * scale,
            kv_element_bytes=width,
        )

    def tensor_parallel_problem(self, tp: int) -> str | None:
        """Why sglang would refuse to split this model's heads over `tp` GPUs (its asserts in
        0.5.23 `models/llama.py` 183-193); None when it can, or when the heads are unknown."""
        heads, kv = self.attention_heads, self.kv_heads
        if tp <= 1 or not heads:
            return None
        if heads % tp:
            return f"its {heads} attention heads do not divide over --tp-size {tp}"
        if kv and ((kv >= tp and kv % tp) or (kv < tp and tp % kv)):
            return f"its {kv} KV heads and --tp-size {tp} do not divide one another"
        return None

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], dtype_bytes: int | None = None, ssm_dtype_bytes: int = 4
    ) -> ModelMemory:
        """Derive the shape from a Hugging Face ``config.json`` (text config of VL models too)."""
        return _memory_from_config(config, dtype_bytes, ssm_dtype_bytes)

    @classmethod
    def from_model_path(cls, model_path: str | Path) -> ModelMemory | None:
        """From a local directory or a hub id in the local cache; None when neither has it."""
        directory = find_config_dir(model_path)
        return None if directory is None else cls.from_hf_config(read_config(directory))


def hf_cache_dirs() -> list[Path]:
    """Where the Hugging Face hub keeps its downloads on this host, in the order it looks."""
    dirs: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def find_config_dir(model_path: str | Path | None) -> Path | None:
    """The directory holding ``config.json`` for a local path or a cached hub id, else None."""
    if not model_path:
        return None
    local = Path(model_path).expanduser()
    if (local / "config.json").is_file():
        return local
    text = str(model_path)
    if text.count("/") != 1 or text.startswith((".", "/")):
        return None
    repo = "models--" + text.replace("/", "--")
    for cache in hf_cache_dirs():
        snapshots = cache / repo / "snapshots"
        ref = cache / repo / "refs" / "main"
        if ref.is_file():
            pinned = snapshots / ref.read_text().strip()
            if (pinned / "config.json").is_file():
                return pinned
        found = sorted(
            (p.parent for p in snapshots.glob("*/config.json")),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if found:
            return found[0]
    return None


def read_config(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{path}: cannot read a Hugging Face config ({exc})") from exc
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: a Hugging Face config must be a JSON object")
    return data


def missing_config_message(model_path: str | None) -> str:
    """One line for a user whose model's config.json is not on this host."""
    where = ", ".join(str(d) for d in hf_cache_dirs())
    return (
        f"no config.json for {model_path!r} (not a local directory, not in the Hugging Face "
        f"cache: {where}); {MISSING_CONFIG_HINT}. Download it (huggingface-cli download "
        f"{model_path} config.json) or point model_path at a local checkpoint."
    )


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config")
    return dict(inner) if isinstance(inner, Mapping) else dict(config)


def layer_counts(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """(full-attention layers, linear-attention layers) of a text config."""
    layers = int(cfg["num_hidden_layers"])
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        full = sum(1 for t in layer_types if "full" in str(t))
        return full, len(layer_types) - full
    if cfg.get("full_attention_interval"):
        full = layers // int(cfg["full_attention_interval"])
        return full, layers - full
    return layers, 0


def parameter_counts(config: Mapping[str, Any]) -> dict[str, int]:
    """Parameters of the target model (text + vision) and of its MTP layers, from the shape."""
    cfg = text_config(config)
    try:
        layers = int(cfg["num_hidden_layers"])
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise ModelConfigError(f"config.json: missing key {exc.args[0]!r}") from exc
    ffn = int(cfg.get("intermediate_size") or 4 * hidden)
    vocab = int(cfg.get("vocab_size", 32000))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    full, linear = layer_counts(cfg)
    gated = bool(cfg.get("attn_output_gate", linear > 0))
    attention = hidden * heads * head_dim * (2 if gated else 1)  # q (and its gate)
    attention += 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden  # k, v, o
    attention += 2 * head_dim if cfg.get("qk_norm", True) else 0
    gdn = 0
    if linear:
        k_heads = int(cfg.get("linear_num_key_heads", 16))
        v_heads = int(cfg.get("linear_num_value_heads", 32))
        key_dim = k_heads * int(cfg.get("linear_key_head_dim", 128))
        value_dim = v_heads * int(cfg.get("linear_value_head_dim", 128))
        kernel = int(cfg.get("linear_conv_kernel_dim", 4))
        gdn = hidden * (2 * key_dim + 2 * value_dim)  # q, k, v, z projections
        gdn += hidden * 2 * v_heads  # b, a
        gdn += (2 * key_dim + value_dim) * kernel  # depthwise conv
        gdn += 2 * v_heads + int(cfg.get("linear_value_head_dim", 128))  # A_log, dt_bias, norm
        gdn += value_dim * hidden  # out projection
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)  # Qwen / Mixtral
    if experts:
        moe_ffn = int(cfg.get("moe_intermediate_size") or ffn)
        mlp = 3 * hidden * moe_ffn * experts + hidden * experts
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        mlp += 3 * hidden * shared + (hidden if shared else 0)
    else:
        mlp = 3 * hidden * ffn
    norms = 2 * hidden
    embed = vocab * hidden
    tied = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if tied is None:
        tied = str(cfg.get("model_type") or config.get("model_type") or "") in TIED_BY_DEFAULT
    text = full * attention + linear * gdn + layers * (mlp + norms) + hidden
    text += embed * (1 if tied else 2)
    mtp_layers = int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0)
    # one decoder layer each, plus the fc that joins embedding and hidden state and three norms
    mtp = mtp_layers * (attention + mlp + norms + 2 * hidden * hidden + 3 * hidden)
    return {"text": text, "vision": _vision_parameters(config), "mtp": mtp}


def _vision_parameters(config: Mapping[str, Any]) -> int:
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping) or "hidden_size" not in vision:
        return 0
    hidden = int(vision["hidden_size"])
    depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
    inter = int(vision.get("intermediate_size") or 4 * hidden)
    patch = int(vision.get("patch_size", 14))
    temporal = int(vision.get("temporal_patch_size", 1))
    channels = int(vision.get("in_channels", vision.get("in_chans", 3)))
    merge = int(vision.get("spatial_merge_size", 1))
    out = int(vision.get("out_hidden_size") or hidden)
    positions = int(vision.get("num_position_embeddings") or 0)
    block = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + hidden + inter + 4 * hidden
    merged = hidden * merge * merge
    merger = merged * merged + merged + merged * out + out + 2 * hidden
    mergers = 1 + len(vision.get("deepstack_visual_indexes") or [])
    patch_embed = channels * temporal * patch * patch * hidden + hidden
    return patch_embed + positions * hidden + depth * block + mergers * merger


def _memory_from_config(
    config: Mapping[str, Any], dtype_bytes: int | None, ssm_dtype_bytes: int
) -> ModelMemory:
    cfg = text_config(config)
    if dtype_bytes is None:
        dtype = str(config.get("torch_dtype") or cfg.get("torch_dtype") or "bfloat16")
        dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    params = parameter_counts(config)
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    full, linear = layer_counts(cfg)
    per_layer_kv = 2 * kv_heads * head_dim * dtype_bytes
    state = 0.0
    if linear:
        k_heads = int(cfg.get("linear_num_key_heads", 16))
        v_heads = int(cfg.get("linear_num_value_heads", 32))
        k_dim = int(cfg.get("linear_key_head_dim", 128))
        v_dim = int(cfg.get("linear_value_head_dim", 128))
        kernel = int(cfg.get("linear_conv_kernel_dim", 4))
        conv = (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1) * dtype_bytes
        ssm = v_heads * k_dim * v_dim * ssm_dtype_bytes  # float32 unless --mamba-ssm-dtype
        state = float(linear * (conv + ssm))
    mtp_layers = int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0)
    return ModelMemory(
        weight_bytes=float((params["text"] + params["vision"]) * dtype_bytes),
        kv_bytes_per_token=float(full * per_layer_kv),
        state_bytes_per_request=state,
        draft_bytes=float(params["mtp"] * dtype_bytes),
        draft_kv_bytes_per_token=float(mtp_layers * per_layer_kv),
        full_attention_only=not linear and not _windowed(cfg) and "kv_lora_rank" not in cfg,
        **_experts(cfg, dtype_bytes),
        attention_heads=heads,
        kv_heads=kv_heads,
        layers=int(cfg["num_hidden_layers"]),
        hidden_bytes=float(int(cfg["hidden_size"]) * dtype_bytes),
        kv_element_bytes=float(dtype_bytes),
    )


def _experts(cfg: Mapping[str, Any], dtype_bytes: int) -> dict[str, Any]:
    """The routed experts of a mixture of experts, as `parameter_counts` counts them (every
    layer's MLP routed, gate / up / down of moe_intermediate_size each); {} for a dense model."""
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    if not experts:
        return {}
    hidden = int(cfg["hidden_size"])
    moe_ffn = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 4 * hidden)
    per_token = int(cfg.get("num_experts_per_tok") or 1)
    layers = int(cfg["num_hidden_layers"])
    return {
        "experts": experts,
        "experts_per_token": min(per_token, experts),
        "expert_bytes": float(layers * 3 * hidden * moe_ffn * dtype_bytes),
    }


def _windowed(cfg: Mapping[str, Any]) -> bool:
    """Some layers attend over a sliding window (a window given and not switched off, or
    sliding layers named in `layer_types`)."""
    if any("sliding" in str(kind) for kind in cfg.get("layer_types") or ()):
        return True
    return bool(cfg.get("sliding_window")) and cfg.get("use_sliding_window") is not False
