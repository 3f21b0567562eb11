"""Flags -> the configuration sglang actually runs: auto values filled in, start-up rules checked.

sglang resolves several flags at start-up (the memory fraction, chunked prefill size, CUDA graph
batch sizes, the speculative defaults, the Mamba strategy) and rejects some combinations with a
ValueError or an assertion. ``resolve`` does the same, as a pure function, and raises
``StartupFailure`` with sglang's wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.sim.adaptive import AdaptiveConfig, AdaptiveConfigError, load_config
from tuner.sim.args import ServerArgs, version_tuple
from tuner.sim.failures import rule
from tuner.sim.profiles import (
    HardwareProfile,
    ModelProfile,
    load_hardware,
    load_model,
    load_overrides,
)

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# sglang's default when speculation is on and --max-running-requests is unset.
SPEC_DEFAULT_MAX_RUNNING = 48
MB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class SpecConfig:
    algorithm: str  # resolved name: NEXTN is reported as EAGLE, as sglang does
    requested: str  # the name on the command line
    num_steps: int
    topk: int
    num_draft_tokens: int
    uses_mtp_head: bool
    adaptive: AdaptiveConfig | None = None  # --speculative-adaptive, when sglang keeps it on


@dataclass(frozen=True)
class SimConfig:
    """Everything the memory plan, the performance model and the server need."""

    args: ServerArgs
    hardware: HardwareProfile
    model: ModelProfile
    served_model_name: str
    mem_fraction_static: float
    mem_fraction_auto: bool
    chunked_prefill_size: int  # -1 = chunking disabled
    max_prefill_tokens: int
    cuda_graph_max_bs_decode: int
    cuda_graph_max_bs_prefill: int
    page_size: int
    context_length: int
    overlap_schedule: bool
    mamba_strategy: str | None  # resolved; None for models without linear attention
    spec: SpecConfig | None
    kv_dtype_bytes: float  # per K or V element, block scales included (KV_ELEMENT_BYTES)
    ssm_dtype_bytes: int
    host_ram_gib: float
    warnings: tuple[str, ...]
    tp_size: int = 1  # tensor-parallel GPUs; `model` is one GPU's share (ModelProfile.sharded)

    @property
    def radix_cache(self) -> bool:
        return not self.args.disable_radix_cache

    @property
    def hicache(self) -> bool:
        return self.args.enable_hierarchical_cache

    @property
    def max_running_requests_flag(self) -> int | None:
        """--max-running-requests as sglang resolves it: 48 with speculation when unset."""
        if self.args.max_running_requests is None and self.spec is not None:
            return SPEC_DEFAULT_MAX_RUNNING
        return self.args.max_running_requests

    @property
    def sglang_version(self) -> str:
        return self.args.sglang_version


# Bytes one K or V element takes in the KV pool, as sglang 0.5.23 sizes the pool
# (srt/model_executor/pool_configurator.py `_compute_cell_size`): the dtype's element size, plus
# mxfp8's one scale byte per 32 elements; the fp4 recipes hold half a byte an element and one
# fp8 scale per 16 (srt/layers/quantization/fp4_kv_cache_quant_method.py `compute_cell_size`,
# its linear scales); the older releases' fp4_e2m1 (mxfp4) one scale byte per 32. "auto" (not
# here) is the model's dtype: a checkpoint that asks for an fp8 KV cache is not modelled.
KV_ELEMENT_BYTES = {
    "fp8_e5m2": 1.0,
    "fp8_e4m3": 1.0,
    "mxfp8": 1.0 + 1 / 32,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
    "fp4_e2m1": 0.5 + 1 / 32,
    "bf16": 2.0,
    "bfloat16": 2.0,
}


def gpu_defaults(gpu_memory_gib: float, tp: int = 1) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) sglang picks for a GPU of this size; with 4 or
    more tensor-parallel GPUs the larger decode graphs of 0.5.23 (``arg_groups/memory_hook.py``,
    ``_handle_gpu_memory_settings``: 160 below 60 GB, 512 up to 160 GB)."""
    chunk, graph_bs = _one_gpu_defaults(gpu_memory_gib)
    if tp >= 4 and 20 <= gpu_memory_gib < 160:
        graph_bs = 160 if gpu_memory_gib < 60 else 512
    return chunk, graph_bs


def _one_gpu_defaults(gpu_memory_gib: float) -> tuple[int, int]:
    if gpu_memory_gib < 20:
        return 2048, 8
    if gpu_memory_gib < 35:
        return 2048, 24
    if gpu_memory_gib < 60:
        return 4096, 80
    if gpu_memory_gib < 90:
        return 8192, 160
    if gpu_memory_gib < 160:
        return 8192, 256
    return 16384, 512


def auto_mem_fraction(
    gpu_memory_gib: float,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    speculative: bool,
    tp: int = 1,
) -> float:
    """sglang's automatic --mem-fraction-static: (GPU memory - reserved) / GPU memory.

    With tensor parallelism 0.5.23 reserves tp / 8 GB more (``arg_groups/memory_hook.py``, in
    ``_handle_gpu_memory_settings``); its 128 MB at one GPU is not added, so that one GPU's
    figures stay those the seed calibrated."""
    reserved_mb = 512 + 1.5 * max(chunked_prefill_size, 2048) + 2 * cuda_graph_max_bs
    if tp > 1:
        reserved_mb += tp / 8 * 1024
    if gpu_memory_gib > 60:
        reserved_mb = max(reserved_mb, 10 * 1024)
    if speculative:
        reserved_mb += 4 * 1024
    total_mb = gpu_memory_gib * 1024
    return round((total_mb - reserved_mb) / total_mb, 3)


def check_tensor_parallel(tp: int, model: ModelProfile) -> None:
    """sglang's asserts when it splits the attention heads over ``tp`` GPUs (0.5.23
    ``models/llama.py`` 183-193): the heads divide evenly, and the KV heads divide evenly or
    divide ``tp`` (then each GPU keeps a copy)."""
    if tp < 1:
        raise rule(f"--tp-size must be >= 1, got {tp}")
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    if heads % tp:
        raise rule(f"total_num_heads ({heads}) % tp_size ({tp}) != 0", "AssertionError")
    if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
        raise rule(
            f"total_num_kv_heads ({kv_heads}) and tp_size ({tp}) do not divide", "AssertionError"
        )


def _resolve_spec(args: ServerArgs, model: ModelProfile) -> tuple[SpecConfig | None, list[str]]:
    warnings: list[str] = []
    if args.speculative_algorithm is None:
        return None, warnings
    name = args.speculative_algorithm.upper()
    if name not in SPEC_ALGORITHMS:
        raise rule(f"Unknown speculative algorithm name: {args.speculative_algorithm}")
    steps, topk, draft = (
        args.speculative_num_steps,
        args.speculative_eagle_topk,
        args.speculative_num_draft_tokens,
    )
    adaptive = _resolve_adaptive(args, name, warnings)
    if adaptive is not None:
        # arg_groups/speculative_hook.py (0.5.23) 1395-1427: topk 1, the middle candidate
        # when steps are unset, draft tokens = steps + 1
        topk = 1 if topk is None else topk
        candidates = adaptive.candidate_steps
        if steps is None:
            steps = candidates[len(candidates) // 2]
        if steps not in candidates:
            raise rule(
                f"--speculative-num-steps={steps} is not in the adaptive config "
                f"candidate_steps {candidates}. Pass one of those values."
            )
        draft = steps + 1
    if steps is None and topk is None and draft is None:
        steps, topk, draft = 3, 1, 4
    elif steps is None:
        raise rule(
            "--speculative-num-steps must be set when --speculative-eagle-topk or "
            "--speculative-num-draft-tokens is set"
        )
    topk = 1 if topk is None else topk
    if draft is None:
        draft = steps + 1 if topk == 1 else steps * topk + 1
    if steps < 1 or topk < 1 or draft < 1:
        raise rule(
            "speculative_num_steps, speculative_eagle_topk and "
            "speculative_num_draft_tokens must be positive"
        )
    if topk == 1 and draft != steps + 1:
        warnings.append(
            f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 = {steps + 1} "
            "when speculative_eagle_topk == 1"
        )
        draft = steps + 1
    uses_mtp = False
    if name in ("NEXTN", "EAGLE"):
        uses_mtp = model.mtp is not None and args.speculative_draft_model_path is None
        if not uses_mtp and args.speculative_draft_model_path is None:
            raise rule(
                f"{name} speculative decoding needs --speculative-draft-model-path: "
                f"{model.name} has no MTP (nextn) layers"
            )
    elif name in ("EAGLE3", "STANDALONE") and args.speculative_draft_model_path is None:
        raise rule(f"--speculative-draft-model-path is required for {name}")
    resolved = "EAGLE" if name == "NEXTN" else name
    if name == "NEXTN":
        warnings.append("NEXTN is resolved to EAGLE (the model's MTP layers are the draft model)")
    spec = SpecConfig(resolved, args.speculative_algorithm, steps, topk, draft, uses_mtp, adaptive)
    return spec, warnings


def _resolve_adaptive(args: ServerArgs, name: str, warnings: list[str]) -> AdaptiveConfig | None:
    """The adaptive tiers when --speculative-adaptive stays on (0.5.23
    ``speculative/adaptive_spec_params.py`` ``adaptive_unsupported_reason``), else None."""
    if not args.speculative_adaptive:
        return None
    reason = None
    if name not in ("EAGLE", "EAGLE3", "NEXTN"):  # NEXTN is EAGLE by then
        reason = f"speculative_algorithm={name} (only EAGLE/EAGLE3 are supported)"
    elif args.speculative_eagle_topk is not None and args.speculative_eagle_topk != 1:
        reason = f"speculative_eagle_topk={args.speculative_eagle_topk} (only topk=1 is supported)"
    if reason is not None:
        warnings.append(
            f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."
        )
        return None
    try:
        return load_config(args.speculative_adaptive_config)
    except AdaptiveConfigError as exc:
        raise rule(str(exc)) from exc


def resolve(args: ServerArgs) -> SimConfig:
    """Load the profiles named by the flags and resolve every auto value; raise on a bad combo."""
    path = args.sim_profile_overrides
    overrides = load_overrides(path)
    hardware = load_hardware(args.sim_hardware, overrides.get("hardware"), f"{path}: hardware")
    model_name = served_model(args.sim_model, args.model_path)
    model = load_model(model_name, overrides.get("model"), f"{path}: model")
    return resolve_with(args, hardware, model)


def served_model(sim_model: str | None, model_path: str | None) -> str | None:
    """The model profile the simulator serves: `--sim-model`, else a `--model-path` folder that
    holds a config.json, else None (the default profile)."""
    if sim_model:
        return sim_model
    if model_path and (Path(model_path) / "config.json").is_file():
        return model_path
    return None


def resolve_with(args: ServerArgs, hardware: HardwareProfile, model: ModelProfile) -> SimConfig:
    warnings: list[str] = []
    version = version_tuple(args.sglang_version)
    spec, spec_warnings = _resolve_spec(args, model)
    warnings += spec_warnings

    if args.dp_size != 1:
        raise rule("the simulator models one server: --dp-size must be 1")
    check_tensor_parallel(args.tp_size, model)
    model = model.sharded(args.tp_size)
    if args.page_size is not None and args.page_size < 1:
        raise rule("--page-size must be >= 1")
    page_size = args.page_size or 1

    default_chunk, default_graph_bs = gpu_defaults(hardware.gpu_memory_gib, args.tp_size)
    chunk = default_chunk if args.chunked_prefill_size is None else args.chunked_prefill_size
    if chunk == 0 or chunk < -1:
        raise rule("--chunked-prefill-size must be positive or -1 (disabled)")
    graph_bs = args.cuda_graph_max_bs_decode or default_graph_bs
    graph_bs_prefill = args.cuda_graph_max_bs_prefill or 0
    if args.disable_cuda_graph:
        graph_bs = 0

    overlap = not args.disable_overlap_schedule
    strategy: str | None = None
    if model.hybrid:
        strategy = args.mamba_radix_cache_strategy
        if strategy == "auto":
            strategy = "extra_buffer" if (overlap or page_size > 1) else "no_buffer"
        if strategy in ("extra_buffer", "extra_buffer_lazy"):
            if not model.supports_extra_buffer:
                raise rule(
                    f"mamba radix cache strategy {strategy} is not supported for "
                    f"{model.architecture}"
                )
            if spec is not None and args.mamba_track_interval < spec.num_draft_tokens:
                raise rule(
                    f"mamba_track_interval ({args.mamba_track_interval}) must be >= "
                    f"speculative_num_draft_tokens ({spec.num_draft_tokens})",
                    "AssertionError",
                )
            if args.mamba_track_interval % page_size != 0:
                raise rule(
                    f"mamba_track_interval ({args.mamba_track_interval}) must be divisible by "
                    f"page_size ({page_size})",
                    "AssertionError",
                )
            if args.disable_radix_cache and version < (0, 5, 23):
                raise rule(
                    f"{strategy} mamba scheduler strategy requires the radix cache; "
                    "remove --disable-radix-cache"
                )
        if strategy == "no_buffer":
            if page_size != 1:
                raise rule("no_buffer mamba scheduler strategy requires --page-size 1")
            if overlap and version >= (0, 5, 23) and args.mamba_radix_cache_strategy == "no_buffer":
                # 0.5.23 asserts instead of switching overlap off when no_buffer is explicit.
                raise rule(
                    "no_buffer do not support overlap schedule. Try to set "
                    "disable_overlap_schedule=True.",
                    "AssertionError",
                )
            if overlap:
                warnings.append(
                    "Overlap scheduler is disabled when using the no_buffer mamba "
                    "scheduler strategy."
                )
                overlap = False
            if spec is not None and not args.disable_radix_cache and version < (0, 5, 23):
                raise rule(
                    "Speculative decoding for hybrid linear-attention models with the no_buffer "
                    "strategy and the radix cache is not supported: use "
                    "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1, "
                    "or --disable-radix-cache"
                )
    # HiCache on hybrid models and with speculative decoding starts in 0.5.10 too (its scheduler
    # picks HiMambaRadixCache for hybrid models); memory.py checks the host pool's size.
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        raise rule(
            "The arguments enable-hierarchical-cache and disable-radix-cache are "
            "mutually exclusive and cannot be used at the same time. Please use only "
            "one of them."
        )

    context = args.context_length or model.context_length
    if args.context_length and args.context_length > model.context_length:
        warnings.append(
            f"context_length {args.context_length} is larger than the model's "
            f"max_position_embeddings {model.context_length}"
        )
    if args.mem_fraction_static is not None:
        if not 0.0 < args.mem_fraction_static < 1.0:
            raise rule("--mem-fraction-static must be in (0, 1)")
        fraction, auto = args.mem_fraction_static, False
    else:
        fraction = auto_mem_fraction(
            hardware.gpu_memory_gib,
            chunk,
            graph_bs or default_graph_bs,
            spec is not None,
            args.tp_size,
        )
        auto = True
    kv_bytes = KV_ELEMENT_BYTES.get(args.kv_cache_dtype, float(model.dtype_bytes))
    ssm_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}[args.mamba_ssm_dtype]
    if spec is not None and args.max_running_requests is None:
        warnings.append(
            f"max_running_requests is set to {SPEC_DEFAULT_MAX_RUNNING} for "
            "speculative decoding. You can override this by explicitly setting "
            "--max-running-requests."
        )
    host_ram = args.sim_host_ram_gb if args.sim_host_ram_gb is not None else hardware.host_ram_gib
    return SimConfig(
        args=args,
        hardware=hardware,
        model=model,
        served_model_name=args.served_model_name or args.model_path or model.name,
        mem_fraction_static=fraction,
        mem_fraction_auto=auto,
        chunked_prefill_size=chunk,
        max_prefill_tokens=args.max_prefill_tokens,
        cuda_graph_max_bs_decode=graph_bs,
        cuda_graph_max_bs_prefill=graph_bs_prefill,
        page_size=page_size,
        context_length=context,
        overlap_schedule=overlap,
        mamba_strategy=strategy,
        spec=spec,
        kv_dtype_bytes=kv_bytes,
        ssm_dtype_bytes=ssm_bytes,
        host_ram_gib=host_ram,
        warnings=tuple(warnings),
        tp_size=args.tp_size,
    )
