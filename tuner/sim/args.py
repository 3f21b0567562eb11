"""The simulator's command line: sglang's launch_server flags plus ``--sim-*`` options.

Both flag generations are accepted by default so one simulator can stand in for either release:
sglang 0.5.23 names (``--mamba-radix-cache-strategy``, ``--cuda-graph-max-bs-decode``) and the
older 0.5.x names (``--mamba-scheduler-strategy``, ``--cuda-graph-max-bs``). With
``--sim-sglang-version`` the simulator is strict like that release: the other generation's names
are argparse errors (exit code 2), as in real sglang.

    >>> args = parse_args(["--port", "31000", "--speculative-algorithm", "NEXTN"])
    >>> args.port, args.speculative_algorithm
    (31000, 'NEXTN')
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

NEW_VERSION = "0.5.23"
OLD_VERSION = "0.5.10"

SCHEDULE_POLICIES = ("fcfs", "lpm", "random", "dfs-weight", "lof", "priority", "routing-key")
MAMBA_STRATEGIES_NEW = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
MAMBA_STRATEGIES_OLD = ("auto", "no_buffer", "extra_buffer")
HICACHE_WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
HICACHE_IO_BACKENDS = ("direct", "kernel")
HICACHE_MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# --kv-cache-dtype's choices: 0.5.23 (server_args' choices; srt/mem_cache/kv_cache_dtype.py
# 49-90) and the older 0.5.x releases (one fp4 recipe, fp4_e2m1).
KV_CACHE_DTYPES_NEW = (
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
)  # fmt: skip
KV_CACHE_DTYPES_OLD = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
MAMBA_SSM_DTYPES = ("float32", "bfloat16", "float16")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass
class ServerArgs:
    """Parsed flags, named as sglang names them (``args.mem_fraction_static``); None = auto."""

    model_path: str | None = None
    served_model_name: str | None = None
    tokenizer_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    page_size: int | None = None
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    disable_radix_cache: bool = False
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_max_bs_prefill: int | None = None
    disable_cuda_graph: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    stream_interval: int = 1
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_adaptive: bool = False  # 0.5.23
    speculative_adaptive_config: str | None = None  # 0.5.23
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: int = 0
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "kernel"
    hicache_mem_layout: str = "layer_first"
    hicache_storage_backend: str | None = None
    mamba_radix_cache_strategy: str = "auto"
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str = "float32"
    mamba_full_memory_ratio: float = 0.9
    mamba_track_interval: int = 256
    enable_metrics: bool = False
    api_key: str | None = None
    log_level: str = "info"
    random_seed: int | None = None
    trust_remote_code: bool = False
    skip_server_warmup: bool = False
    attention_backend: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_torch_compile: bool = False
    watchdog_timeout: float = 300.0
    # simulator-only
    sim_hardware: str | None = None
    sim_model: str | None = None
    sim_describe: bool = False
    sim_time_scale: float = 1.0
    sim_load_time: float = 0.3
    sim_seed: int = 0
    sim_host_ram_gb: float | None = None
    sim_sglang_version: str | None = None
    sim_stream_flush_ms: float = 20.0
    sim_hold_timeout: float = 5.0
    sim_profile_overrides: str | None = None
    sim_fault_crash_after: int | None = None
    sim_fault_never_ready: bool = False
    sim_fault_error_rate: float = 0.0
    sim_fault_hold_port: float = 0.0
    # bookkeeping, not flags
    old_flag_names: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)

    @property
    def sglang_version(self) -> str:
        """The release the simulator presents itself as."""
        if self.sim_sglang_version:
            return self.sim_sglang_version
        return OLD_VERSION if self.old_flag_names else NEW_VERSION


def human_int(text: str) -> int:
    """An int that may end in k / m / g (x1000 each), as ``--max-total-tokens 200k``."""
    value = text.strip().lower().replace("_", "")
    scale = 1
    for suffix, factor in (("k", 10**3), ("m", 10**6), ("g", 10**9)):
        if value.endswith(suffix):
            value, scale = value[:-1], factor
            break
    try:
        return int(float(value) * scale) if scale > 1 else int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from exc


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split(".")[:3])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid sglang version: {version!r}") from exc


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def build_parser(generation: str = "both") -> argparse.ArgumentParser:
    """``generation``: "new" (0.5.23 names only), "old" (older 0.5.x names only) or "both"."""
    p = argparse.ArgumentParser(
        prog="python -m tuner.sim",
        description="Simulated SGLang server (drop-in for python -m sglang.launch_server).",
    )
    a = p.add_argument
    a("--config", type=str, default=None, help="YAML file of flags; the command line wins.")
    a("--model-path", "--model", dest="model_path", type=str)
    a("--tokenizer-path", type=str)
    a("--served-model-name", type=str)
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--dtype", type=str, default="auto")
    dtypes = {"new": KV_CACHE_DTYPES_NEW, "old": KV_CACHE_DTYPES_OLD}.get(
        generation, tuple(dict.fromkeys(KV_CACHE_DTYPES_NEW + KV_CACHE_DTYPES_OLD))
    )
    a("--kv-cache-dtype", type=str, default="auto", choices=dtypes)
    a("--context-length", type=int)
    a("--trust-remote-code", action="store_true")
    a("--mem-fraction-static", type=float)
    a("--max-running-requests", type=int)
    a("--max-queued-requests", type=int)
    a("--max-total-tokens", type=human_int)
    a("--chunked-prefill-size", type=int)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--page-size", type=int)
    a("--schedule-policy", type=str, default="fcfs", choices=SCHEDULE_POLICIES)
    a("--schedule-conservativeness", type=float, default=1.0)
    a("--disable-radix-cache", action="store_true")
    if generation in ("new", "both"):
        a("--cuda-graph-max-bs-decode", type=int)
        a("--cuda-graph-max-bs-prefill", type=int)
    if generation in ("old", "both"):
        a("--cuda-graph-max-bs", dest="old_cuda_graph_max_bs", type=int)
    a("--cuda-graph-bs", type=int, nargs="+")
    a("--disable-cuda-graph", action="store_true")
    a("--disable-overlap-schedule", action="store_true")
    a("--enable-mixed-chunk", action="store_true")
    a("--stream-interval", type=int, default=1)
    a("--speculative-algorithm", type=str)
    a(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        dest="speculative_draft_model_path",
        type=str,
    )
    a("--speculative-num-steps", type=int)
    a("--speculative-eagle-topk", type=int)
    a("--speculative-num-draft-tokens", type=int)
    if generation in ("new", "both"):
        a("--speculative-adaptive", action="store_true")
        a("--speculative-adaptive-config", type=str)
    a(
        "--enable-hierarchical-cache",
        "--enable-hicache",
        dest="enable_hierarchical_cache",
        action="store_true",
    )
    a("--hicache-ratio", type=float, default=2.0)
    a("--hicache-size", type=int, default=0)
    a("--hicache-write-policy", type=str, default="write_through", choices=HICACHE_WRITE_POLICIES)
    a("--hicache-io-backend", type=str, default="kernel", choices=HICACHE_IO_BACKENDS)
    a("--hicache-mem-layout", type=str, default="layer_first", choices=HICACHE_MEM_LAYOUTS)
    a("--hicache-storage-backend", type=str)
    if generation in ("new", "both"):
        a("--mamba-radix-cache-strategy", type=str, default=None, choices=MAMBA_STRATEGIES_NEW)
    if generation in ("old", "both"):
        a(
            "--mamba-scheduler-strategy",
            dest="old_mamba_scheduler_strategy",
            type=str,
            choices=MAMBA_STRATEGIES_OLD,
        )
    a("--max-mamba-cache-size", type=int)
    a("--mamba-ssm-dtype", type=str, default="float32", choices=MAMBA_SSM_DTYPES)
    a("--mamba-full-memory-ratio", type=float, default=0.9)
    a("--mamba-track-interval", type=int, default=256)
    a("--enable-metrics", action="store_true")
    a("--api-key", type=str)
    a("--log-level", type=str, default="info", choices=LOG_LEVELS)
    a("--log-level-http", type=str, choices=LOG_LEVELS)
    a("--random-seed", type=int)
    a("--skip-server-warmup", action="store_true")
    a("--attention-backend", type=str)
    a("--chat-template", type=str)
    a("--reasoning-parser", type=str)
    a("--tool-call-parser", type=str)
    a("--enable-torch-compile", action="store_true")
    a("--watchdog-timeout", type=float, default=300.0)

    sim = p.add_argument_group("simulator-only options")
    s = sim.add_argument
    s("--sim-hardware", type=str, help="hardware profile name or YAML path")
    s(
        "--sim-model",
        type=str,
        help="model profile name, YAML path or a directory with a config.json",
    )
    s(
        "--sim-describe",
        action="store_true",
        help="print the simulated GPU and the model's config.json directory as JSON, and exit",
    )
    s(
        "--sim-time-scale",
        type=_positive_float,
        default=1.0,
        help="run K times faster than the modelled hardware",
    )
    s("--sim-load-time", type=float, default=0.3, help="wall seconds of 'loading' before ready")
    s("--sim-seed", type=int, default=0)
    s("--sim-host-ram-gb", type=float, help="free host RAM for HiCache (default: profile)")
    s("--sim-sglang-version", type=str, help="be strict like this sglang release")
    s(
        "--sim-stream-flush-ms",
        type=float,
        default=20.0,
        help="wall ms between coalesced stream chunks (first and last are sent at once)",
    )
    s(
        "--sim-hold-timeout",
        type=_positive_float,
        default=5.0,
        help="wall seconds modelled time waits at a hold for a closed-loop client's next request",
    )
    s(
        "--sim-profile-overrides",
        type=str,
        help="YAML file of profile values to override ({hardware: {...}, model: {...}}), "
        "e.g. effect strengths (docs/sim-effects.md)",
    )
    s("--sim-fault-crash-after", type=int, help="exit abruptly once N requests were accepted")
    s("--sim-fault-never-ready", action="store_true", help="never report healthy")
    s(
        "--sim-fault-error-rate",
        type=float,
        default=0.0,
        help="answer this fraction of generate requests with HTTP 500",
    )
    s(
        "--sim-fault-hold-port",
        type=float,
        default=0.0,
        help="after SIGTERM keep the port bound for S seconds in an orphaned child",
    )
    return p


def _config_to_argv(path: str) -> list[str]:
    """Turn a ``--config`` YAML file into flags placed before the command line's own."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"error: --config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SystemExit(f"error: --config {path}: must be a mapping of flag names to values")
    argv: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def _generation(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--sim-sglang-version", type=str)
    known, _ = pre.parse_known_args(argv)
    if not known.sim_sglang_version:
        return "both"
    return "new" if version_tuple(known.sim_sglang_version) >= (0, 5, 23) else "old"


def parse_args(argv: list[str]) -> ServerArgs:
    """Parse like sglang: argparse errors exit with code 2."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=str)
    known, _ = pre.parse_known_args(argv)
    full_argv = (_config_to_argv(known.config) if known.config else []) + list(argv)
    parser = build_parser(_generation(full_argv))
    ns = vars(parser.parse_args(full_argv))
    ns.pop("config", None)
    ns.pop("log_level_http", None)
    ns.pop("cuda_graph_bs", None)
    old: list[str] = []
    old_bs = ns.pop("old_cuda_graph_max_bs", None)
    if old_bs is not None:
        old.append("--cuda-graph-max-bs")
        ns.setdefault("cuda_graph_max_bs_decode", None)
        if ns["cuda_graph_max_bs_decode"] is None:
            ns["cuda_graph_max_bs_decode"] = old_bs
    old_strategy = ns.pop("old_mamba_scheduler_strategy", None)
    if old_strategy is not None:
        old.append("--mamba-scheduler-strategy")
        if ns.get("mamba_radix_cache_strategy") is None:
            ns["mamba_radix_cache_strategy"] = old_strategy
    if ns.get("mamba_radix_cache_strategy") is None:
        ns["mamba_radix_cache_strategy"] = "auto"
    known_fields = {f.name for f in fields(ServerArgs)}
    kwargs: dict[str, Any] = {k: v for k, v in ns.items() if k in known_fields}
    if old and kwargs.get("speculative_adaptive"):
        # a release that knows the old flag names has no adaptive speculation (0.5.23 has)
        parser.error("unrecognized arguments: --speculative-adaptive")
    if not 0.0 <= kwargs.get("sim_fault_error_rate", 0.0) <= 1.0:
        parser.error("argument --sim-fault-error-rate: must be within [0, 1]")
    return ServerArgs(**kwargs, old_flag_names=old, argv=list(argv))
