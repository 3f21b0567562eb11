"""A stand-in for sglang's CPU kernel package, enough for plain decoding of a dense model.

Only `assign_req_to_token_pool_cpu` is really implemented (in torch); it is what sglang's
allocator calls on every prefill and decode step in CPU mode. Every other name that sglang's
modules import at load time exists so that the import succeeds, and raises NotImplementedError
when called, so a code path that needs a real kernel fails loudly instead of silently.
"""

from __future__ import annotations

from typing import Any

import torch

__version__ = "0.0.0+sglang-tuner-standin"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token table.

    Request i owns row `req_pool_indices[i]`; its slots `start_offset[i]:end_offset[i]` get the
    next `end - start` entries of `out_cache_loc`, which holds the requests' new slots one after
    the other (the same contract as the triton kernel sglang uses on GPUs).
    """
    del pool_len  # the row length; torch indexing knows it from the tensor
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    offset = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        count = end - start
        if count <= 0:
            continue
        req_to_token[row, start:end] = out_cache_loc[offset : offset + count].to(req_to_token.dtype)
        offset += count


def _missing(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not part of sglang-tuner's CPU stand-in "
            "(only plain decoding of dense models is supported)"
        )

    kernel.__name__ = name
    return kernel


# Names imported at module level by modules that CPU mode loads (speculative decoding, the KV
# cache mover, the AMX attention backend's draft metadata); see docs/real-sglang-cpu.md.
_STUBBED = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
)
for _name in _STUBBED:
    globals()[_name] = _missing(_name)
