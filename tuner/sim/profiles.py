"""Hardware and model profiles: the YAML files shipped in tuner/sim/profiles/ and their loaders.

A profile is named by its file stem (``rtx-pro-6000-blackwell``) or given as a path to a YAML
file. A model profile can also be derived from a Hugging Face ``config.json`` (``--model-path``
pointing at a local directory), so the simulator can stand in for a checkpoint it has no file for.
Both kinds carry an ``effects:`` mapping (``tuner.sim.effects``); ``load_overrides`` reads a YAML
file of values that replace a loaded profile's (``--sim-profile-overrides``), which is how a
world with other effect strengths or constants is derived (docs/sim-effects.md).

    >>> hw = load_hardware("h200"); hw.gpu_memory_gib
    139.81
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from tuner.sim.effects import EffectError, HardwareEffects, ModelEffects, build_effects

# Model types whose transformers config ties the embeddings unless config.json says otherwise
# (transformers 5.19: Gemma 1-3, Cohere, Falcon, GPT-2 and BigCode, StarCoder2, SmolLM3, ...).
_TIED_BY_DEFAULT = ("gemma", "vaultgemma", "cohere", "falcon", "gpt", "bloom", "mpt", "opt",
                    "starcoder2", "smollm3", "minicpm3", "ernie4_5", "lfm2", "jetmoe")  # fmt: skip

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_HARDWARE = "rtx-pro-6000-blackwell"
DEFAULT_MODEL = "qwen3.6-27b"
GIB = 1024**3


class ProfileError(ValueError):
    """A profile name or file that cannot be used; the message names it and what is allowed."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpu_memory_gib: float
    runtime_overhead_gib: float
    hbm_bandwidth_gb_s: float
    hbm_efficiency: float
    bf16_tflops: float
    compute_efficiency: float
    pcie_gb_s: float
    host_ram_gib: float
    step_overhead_ms: float
    eager_overhead_ms: float
    per_request_overhead_ms: float
    spec_per_request_overhead_ms: float
    no_overlap_overhead_ms: float
    effects: HardwareEffects = field(default_factory=HardwareEffects)

    @property
    def effective_bandwidth(self) -> float:
        """Bytes per second a memory-bound step streams from device memory."""
        return self.hbm_bandwidth_gb_s * 1e9 * self.hbm_efficiency

    @property
    def effective_flops(self) -> float:
        return self.bf16_tflops * 1e12 * self.compute_efficiency

    @property
    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gb_s * 1e9


@dataclass(frozen=True)
class MtpProfile:
    layers: int
    head_bytes: float
    step_read_bytes: float
    acceptance: float


@dataclass(frozen=True)
class ModelProfile:
    name: str
    description: str
    architecture: str
    model_type: str  # the Hugging Face config's model_type, as /model_info reports it
    image_understanding: bool  # a vision tower (vision_config in config.json)
    hybrid: bool
    num_layers: int
    full_attention_layers: int
    linear_attention_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    dtype_bytes: int
    weight_bytes: float
    decode_weight_bytes: float
    active_params: float
    mamba_conv_elements_per_layer: int
    mamba_conv_dtype_bytes: int
    mamba_ssm_elements_per_layer: int
    supports_extra_buffer: bool
    activation_bytes_per_token: float
    cuda_graph_bytes_per_bs: float
    mtp: MtpProfile | None
    effects: ModelEffects = field(default_factory=ModelEffects)
    # per-token acceptance (flat-chain equivalent, see effects.AcceptanceShape) of draft models
    # by algorithm; others fall back to perf.DRAFT_MODEL_ACCEPTANCE
    draft_acceptance: dict[str, float] = field(default_factory=dict)
    # mixture of experts: routed experts, how many each token uses, and the bf16 bytes of one
    # expert summed over the layers (decode_weight_bytes counts experts_per_token of them)
    experts: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0

    def kv_bytes_per_token(self, kv_dtype_bytes: float | None = None) -> int:
        """Full-attention K and V bytes one token occupies in the KV pool (whole bytes, as
        sglang's per-token cell size)."""
        width = self.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        return int(self.full_attention_layers * 2 * self.num_kv_heads * self.head_dim * width)

    def conv_state_bytes(self) -> int:
        """Conv window bytes of one request's recurrent state, all linear layers."""
        return (
            self.linear_attention_layers
            * self.mamba_conv_elements_per_layer
            * self.mamba_conv_dtype_bytes
        )

    def ssm_state_bytes(self, ssm_dtype_bytes: int = 4) -> int:
        return self.linear_attention_layers * self.mamba_ssm_elements_per_layer * ssm_dtype_bytes

    def state_bytes_per_request(self, ssm_dtype_bytes: int = 4) -> int:
        return self.conv_state_bytes() + self.ssm_state_bytes(ssm_dtype_bytes)

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.active_params

    def sharded(self, tp: int) -> ModelProfile:
        """What one of ``tp`` tensor-parallel GPUs holds and computes: the weights, experts,
        attention heads and recurrent state split ``tp`` ways; the KV heads too, but each GPU
        keeps at least one (sglang replicates them when there are fewer heads than GPUs:
        ``models/llama.py`` 183-194 and ``configs/model_config.py`` ``get_num_kv_heads`` in
        0.5.23). The hidden size stays: it is what every all-reduce carries."""
        if tp <= 1:
            return self
        mtp = self.mtp
        if mtp is not None:
            mtp = replace(
                mtp, head_bytes=mtp.head_bytes / tp, step_read_bytes=mtp.step_read_bytes / tp
            )
        return replace(
            self,
            weight_bytes=self.weight_bytes / tp,
            decode_weight_bytes=self.decode_weight_bytes / tp,
            active_params=self.active_params / tp,
            num_attention_heads=self.num_attention_heads // tp,
            num_kv_heads=max(1, self.num_kv_heads // tp),
            mamba_conv_elements_per_layer=self.mamba_conv_elements_per_layer // tp,
            mamba_ssm_elements_per_layer=self.mamba_ssm_elements_per_layer // tp,
            expert_bytes=self.expert_bytes / tp,
            mtp=mtp,
        )

    def attention_flops_per_token(self, context: float) -> float:
        """QK^T and PV FLOPs of the full-attention layers for one token at this context."""
        return 4.0 * self.full_attention_layers * self.num_attention_heads * self.head_dim * context


def available(kind: str) -> list[str]:
    """Names of the shipped profiles of one kind ("hardware" or "model")."""
    return sorted(p.stem for p in (PROFILE_DIR / kind).glob("*.yaml"))


_PARSED: dict[tuple[str, int], Any] = {}


def _read_yaml(kind: str, name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise ProfileError(f"{kind} profile file not found: {name_or_path}")
    else:
        path = PROFILE_DIR / kind / f"{name_or_path}.yaml"
        if not path.is_file():
            names = ", ".join(available(kind))
            raise ProfileError(f"unknown {kind} profile {name_or_path!r}; shipped: {names}")
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    data = _PARSED.get(key)
    if data is None:
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ProfileError(f"{path}: not valid YAML ({exc})") from exc
        # the oracle resolves a configuration thousands of times: parse each file once
        _PARSED[key] = data
    data = copy.deepcopy(data)
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a {kind} profile must be a mapping")
    return data


def _build(cls: type, data: dict[str, Any], source: str) -> Any:
    names = {f.name for f in fields(cls)}
    required = {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    }
    unknown = sorted(set(data) - names)
    missing = sorted(required - set(data))
    if unknown:
        raise ProfileError(f"{source}: unknown keys {unknown}; allowed: {sorted(names)}")
    if missing:
        raise ProfileError(f"{source}: missing keys {missing}")
    return cls(**data)


def load_hardware(
    name_or_path: str | None = None,
    overrides: dict[str, Any] | None = None,
    overrides_from: str | None = None,
) -> HardwareProfile:
    """A shipped hardware profile by name or a YAML file; ``overrides``: its values to replace
    (``overrides_from``: where they come from, for messages)."""
    source = name_or_path or DEFAULT_HARDWARE
    data = _read_yaml("hardware", source)
    try:
        effects = build_effects(HardwareEffects, data.pop("effects", None), source)
    except EffectError as exc:
        raise ProfileError(str(exc)) from exc
    numeric = {
        k: float(v) if isinstance(v, int | float | str) and k not in ("name", "description") else v
        for k, v in data.items()
    }
    numeric["effects"] = effects
    profile = _build(HardwareProfile, numeric, source)
    if not overrides:
        return profile
    return apply_overrides(profile, overrides, overrides_from or f"{source} (overrides)")


def _model_from_dict(data: dict[str, Any], source: str) -> ModelProfile:
    data = dict(data)
    try:
        data["effects"] = build_effects(ModelEffects, data.pop("effects", None), source)
    except EffectError as exc:
        raise ProfileError(str(exc)) from exc
    draft = data.get("draft_acceptance") or {}
    if not isinstance(draft, dict):
        raise ProfileError(f"{source}: draft_acceptance must map algorithm names to numbers")
    data["draft_acceptance"] = {str(k).upper(): float(v) for k, v in draft.items()}
    mtp = data.get("mtp")
    if mtp is not None:
        data["mtp"] = _build(
            MtpProfile,
            {k: float(v) if k != "layers" else int(v) for k, v in mtp.items()},
            f"{source}: mtp",
        )
    for key in (
        "weight_bytes",
        "decode_weight_bytes",
        "active_params",
        "activation_bytes_per_token",
        "cuda_graph_bytes_per_bs",
        "expert_bytes",
    ):
        if key in data:
            data[key] = float(data[key])
    return _build(ModelProfile, data, source)


def load_model(
    name_or_path: str | None = None,
    overrides: dict[str, Any] | None = None,
    overrides_from: str | None = None,
) -> ModelProfile:
    """A shipped profile by name, a profile YAML file, or a directory holding a config.json;
    ``overrides``: its values to replace (``overrides_from``: where they come from)."""
    source = name_or_path or DEFAULT_MODEL
    if (Path(source) / "config.json").is_file():
        profile = model_from_hf_config(source)
    else:
        profile = _model_from_dict(_read_yaml("model", source), source)
    if not overrides:
        return profile
    return apply_overrides(profile, overrides, overrides_from or f"{source} (overrides)")


def load_overrides(path: str | None) -> dict[str, dict[str, Any]]:
    """The ``--sim-profile-overrides`` file: ``{hardware: {...}, model: {...}}``, each a mapping
    of profile keys (``effects`` and ``mtp`` may be given in part)."""
    if not path:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ProfileError(f"profile overrides file not found: {path}")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict) or not set(data) <= {"hardware", "model"}:
        raise ProfileError(f"{path}: a mapping with the keys hardware and/or model is expected")
    for kind, values in data.items():
        if not isinstance(values, dict):
            raise ProfileError(f"{path}: {kind} must be a mapping of profile keys")
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def apply_overrides(profile: Any, overrides: dict[str, Any], source: str) -> Any:
    """``profile`` with the values in ``overrides`` replaced (nested mappings merged)."""
    allowed = {f.name: f for f in fields(profile)}
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ProfileError(f"{source}: unknown keys {unknown}; allowed: {sorted(allowed)}")
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        current = getattr(profile, key)
        if key == "effects":
            merged = _merge(dataclasses.asdict(current), value or {})
            try:
                changes[key] = build_effects(type(current), merged, source)
            except EffectError as exc:
                raise ProfileError(str(exc)) from exc
        elif key == "mtp" and isinstance(value, dict) and current is not None:
            names = {f.name for f in fields(current)}
            if not set(value) <= names:
                bad = sorted(set(value) - names)
                raise ProfileError(f"{source}: mtp: unknown keys {bad}; allowed: {sorted(names)}")
            changes[key] = dataclasses.replace(
                current, **{k: type(getattr(current, k))(v) for k, v in value.items()}
            )
        elif key == "draft_acceptance" and isinstance(value, dict):
            changes[key] = {**current, **{str(k).upper(): float(v) for k, v in value.items()}}
        elif isinstance(current, bool) or not isinstance(current, int | float):
            changes[key] = value
        else:
            changes[key] = type(current)(value)
    return dataclasses.replace(profile, **changes)


def model_config_dir(name_or_path: str | None = None) -> Path | None:
    """The directory of the Hugging Face ``config.json`` a model profile ships, if any: beside
    ``<name>.yaml`` as ``<name>/config.json``."""
    source = name_or_path or DEFAULT_MODEL
    if (Path(source) / "config.json").is_file():
        return Path(source)
    if source.endswith((".yaml", ".yml")):
        directory = Path(source).with_suffix("")
    else:
        directory = PROFILE_DIR / "model" / source
    return directory if (directory / "config.json").is_file() else None


def describe(
    hardware: str | None,
    model: str | None,
    model_path: str | None = None,
    overrides: str | None = None,
) -> dict[str, Any]:
    """The simulated GPU and where its model's config.json is (``--sim-describe``)."""
    hw = load_hardware(
        hardware, load_overrides(overrides).get("hardware"), f"{overrides}: hardware"
    )
    if model:
        config_dir = model_config_dir(model)
        load_model(model)  # a bad name fails here, with the names that exist
    elif model_path and (Path(model_path) / "config.json").is_file():
        config_dir = Path(model_path).resolve()
    else:
        config_dir = model_config_dir(None)
    return {
        # The device name, as NVML reports a real GPU's (the tuner looks up public specs by it).
        "gpu_name": hw.description.split(",")[0].strip(),
        "gpu_memory_gb": hw.gpu_memory_gib * GIB / 1e9,
        "runtime_overhead_gb": hw.runtime_overhead_gib * GIB / 1e9,
        "host_ram_gb": hw.host_ram_gib * GIB / 1e9,
        "model_config_dir": str(config_dir.resolve()) if config_dir else None,
    }


def _vision_tower_params(vision: Any) -> int:
    """Parameters of a Qwen-VL style vision tower (patch embedding, position table, blocks,
    patch merger), which a ConditionalGeneration checkpoint loads with the language model."""
    if not isinstance(vision, dict) or "hidden_size" not in vision:
        return 0
    width = int(vision["hidden_size"])
    mlp = int(vision.get("intermediate_size") or 4 * width)
    blocks = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
    merge = int(vision.get("spatial_merge_size", 1))
    merged = width * merge * merge
    out = int(vision.get("out_hidden_size") or width)
    # qkv + proj with biases, the MLP up / down with biases, two layer norms
    per_block = 4 * width * width + 4 * width + 2 * width * mlp + width + mlp + 4 * width
    merger = merged * merged + merged + merged * out + out + 2 * width
    patch = int(vision.get("patch_size", 14))
    patch_embed = (
        int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 1)) * patch**2 + 1
    ) * width
    positions = int(vision.get("num_position_embeddings") or 0) * width
    mergers = 1 + len(vision.get("deepstack_visual_indexes") or [])
    return patch_embed + positions + blocks * per_block + mergers * merger


def model_from_hf_config(model_dir: str | Path) -> ModelProfile:
    """Derive a model profile from a Hugging Face config.json (bf16 weights assumed).

    Understands Llama/Qwen-style dense configs and Qwen3-Next / Qwen3.5-style hybrid configs
    (``layer_types`` or ``full_attention_interval``, ``linear_*`` head fields), also when the
    language model sits under ``text_config``.
    """
    path = Path(model_dir) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read a Hugging Face config ({exc})") from exc
    cfg = raw.get("text_config", raw) if isinstance(raw.get("text_config"), dict) else raw
    try:
        layers = int(cfg["num_hidden_layers"])
        hidden = int(cfg["hidden_size"])
        ffn = int(cfg["intermediate_size"])
        heads = int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise ProfileError(f"{path}: missing key {exc.args[0]!r}") from exc
    kv_heads = int(cfg.get("num_key_value_heads", heads))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(cfg.get("vocab_size", 32000))
    context = int(cfg.get("max_position_embeddings", 32768))
    arch = (raw.get("architectures") or cfg.get("architectures") or ["Unknown"])[0]

    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        full = sum(1 for t in layer_types if "full" in str(t))
    elif "full_attention_interval" in cfg:
        full = layers // int(cfg["full_attention_interval"])
    else:
        full = layers
    linear = layers - full
    hybrid = linear > 0

    conv_elems = ssm_elems = 0
    linear_params = 0.0
    if hybrid:
        k_heads = int(cfg.get("linear_num_key_heads", 16))
        v_heads = int(cfg.get("linear_num_value_heads", 32))
        dk = int(cfg.get("linear_key_head_dim", 128))
        dv = int(cfg.get("linear_value_head_dim", 128))
        kernel = int(cfg.get("linear_conv_kernel_dim", 4))
        key_dim, value_dim = k_heads * dk, v_heads * dv
        conv_elems = (2 * key_dim + value_dim) * (kernel - 1)
        ssm_elems = v_heads * dk * dv
        linear_params = hidden * (2 * key_dim + 2 * value_dim) + value_dim * hidden
        # the b / a gate projections and the depthwise conv weights
        linear_params += hidden * 2 * v_heads + (2 * key_dim + value_dim) * kernel

    # Qwen-MoE names the routed experts num_experts, Mixtral num_local_experts.
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    moe_ffn = int(cfg.get("moe_intermediate_size", ffn) or ffn)
    active_experts = int(cfg.get("num_experts_per_tok", 0) or 0)
    attn_params = (
        hidden * heads * head_dim * (2 if hybrid else 1) + 2 * hidden * kv_heads * head_dim
    )
    attn_params += heads * head_dim * hidden
    if experts:
        mlp_total = 3 * hidden * moe_ffn * experts
        mlp_active = 3 * hidden * moe_ffn * max(active_experts, 1)
    else:
        mlp_total = mlp_active = 3 * hidden * ffn
    embed = vocab * hidden
    tied = cfg.get("tie_word_embeddings", raw.get("tie_word_embeddings"))
    if tied is None:  # transformers' default for the model type (models/*/configuration_*.py)
        kind = str(cfg.get("model_type") or raw.get("model_type") or "")
        tied = kind.startswith(_TIED_BY_DEFAULT)
    total = (
        full * attn_params
        + linear * linear_params
        + layers * (mlp_total + 2 * hidden)
        + embed * (1 if tied else 2)
        + _vision_tower_params(raw.get("vision_config"))
    )
    active = full * attn_params + linear * linear_params + layers * mlp_active + embed
    mtp_layers = int(cfg.get("num_nextn_predict_layers", cfg.get("mtp_num_hidden_layers", 0)) or 0)
    mtp = None
    if mtp_layers:
        head = (attn_params + mlp_total + 2 * hidden * hidden) * mtp_layers * 2
        mtp = MtpProfile(
            layers=mtp_layers,
            head_bytes=head,
            step_read_bytes=head / mtp_layers + embed * 2,
            acceptance=0.8,
        )
    return ModelProfile(
        name=Path(model_dir).name,
        description=f"derived from {path.name} ({arch})",
        architecture=arch,
        model_type=str(raw.get("model_type") or cfg.get("model_type") or "unknown"),
        image_understanding=isinstance(raw.get("vision_config"), dict),
        hybrid=hybrid,
        num_layers=layers,
        full_attention_layers=full,
        linear_attention_layers=linear,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        context_length=context,
        dtype_bytes=2,
        weight_bytes=total * 2.0,
        # active counts the lm_head once and leaves out the input embedding, as a decode step does
        decode_weight_bytes=active * 2.0,
        active_params=float(active),
        mamba_conv_elements_per_layer=conv_elems,
        mamba_conv_dtype_bytes=2,
        mamba_ssm_elements_per_layer=ssm_elems,
        supports_extra_buffer=hybrid,
        activation_bytes_per_token=float(hidden * 2 * 12 + ffn * 2 * 3),
        cuda_graph_bytes_per_bs=float(1e6 + layers * 4e4),
        mtp=mtp,
        experts=experts,
        experts_per_token=max(active_experts, 1) if experts else 0,
        expert_bytes=layers * mlp_total / experts * 2.0 if experts else 0.0,
    )
