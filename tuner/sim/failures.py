"""Start-up failures, worded as sglang words them (the tuner's launcher classifies by the text)."""

from __future__ import annotations

import math

# The failure classes match the tuner's record.FAILURE_CLASSES (the sim must not import the tuner).
STARTUP_RULE = "startup_rule"
NOT_ENOUGH_MEMORY = "not_enough_memory"
OUT_OF_MEMORY = "out_of_memory"
CUDA_GRAPH = "cuda_graph"

NOT_ENOUGH_MEMORY_MESSAGE = "Not enough memory. Please try to increase --mem-fraction-static."


class StartupFailure(Exception):
    """sglang would die during start-up with ``exc_type: message`` as the last traceback line."""

    def __init__(self, kind: str, exc_type: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.exc_type = exc_type
        self.message = message

    @property
    def line(self) -> str:
        """The line the launcher greps for, e.g. ``RuntimeError: Not enough memory. ...``."""
        return f"{self.exc_type}: {self.message}"


def rule(message: str, exc_type: str = "ValueError") -> StartupFailure:
    return StartupFailure(STARTUP_RULE, exc_type, message)


def not_enough_memory() -> StartupFailure:
    return StartupFailure(NOT_ENOUGH_MEMORY, "RuntimeError", NOT_ENOUGH_MEMORY_MESSAGE)


def cuda_oom(tried_gib: float, total_gib: float, free_gib: float) -> StartupFailure:
    free_mib = max(free_gib, 0.0) * 1024
    return StartupFailure(
        OUT_OF_MEMORY,
        "torch.OutOfMemoryError",
        f"CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB. GPU 0 has a total capacity "
        f"of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch "
        "memory, this process has memory in use. Of the allocated memory most is reserved by "
        "PyTorch for the static pool. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
    )


def cuda_graph_failed(tried_gib: float, total_gib: float, free_gib: float) -> StartupFailure:
    oom = cuda_oom(tried_gib, total_gib, free_gib)
    return StartupFailure(
        CUDA_GRAPH,
        "Exception",
        f"Capture cuda graph failed: {oom.message}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    )


# The three below are sglang 0.5.23's (mem_cache/kv_cache_configurator.py).


def weights_leave_no_kv(fraction: float, available_share: float) -> StartupFailure:
    minimum = 1.0 - available_share
    return StartupFailure(
        NOT_ENOUGH_MEMORY,
        "ValueError",
        "Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={fraction}. Raise --mem-fraction-static above "
        f"{math.ceil(minimum * 1000) / 1000:.3f} (minimum viable = 1 - available/pre = "
        f"{minimum:.4f}). If using speculative decoding, draft weights are now counted.",
    )


def mamba_state_too_small(slots: int, rest_gib: float, per_req_bytes: int) -> StartupFailure:
    return StartupFailure(
        NOT_ENOUGH_MEMORY,
        "RuntimeError",
        "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        f"Computed max_mamba_cache_size={slots} (total_rest_memory={rest_gib:.2f} GB, "
        f"mamba_cache_per_req={per_req_bytes / 2**20:.2f} MB). Try: (1) reduce "
        "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
        "--speculative-num-draft-tokens, or (4) use GPUs with more memory.",
    )


def state_cache_too_small(slots: int, ratio: int, version: tuple[int, ...]) -> StartupFailure:
    if version < (0, 5, 23):
        return not_enough_memory()
    return StartupFailure(
        NOT_ENOUGH_MEMORY,
        "RuntimeError",
        "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        f"max_mamba_cache_size={slots}, mamba_ratio={ratio}, resulting max_num_reqs="
        f"{slots // ratio}. Try: (1) reduce --max-running-requests, (2) increase "
        "--mem-fraction-static, or (3) use GPUs with more memory.",
    )
