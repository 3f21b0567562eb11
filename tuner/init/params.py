"""Which sglang flags apply to a model, GPU and workload, their bounds, and a comment saying why.

The rules (each param's comment in the written file repeats its own):

- `mem_fraction_static` always: from just above the weights' share of the GPU (plus 5 points, at
  least 0.60) to 0.95; the model must leave room for a KV cache at 0.95 or init refuses.
- `max_running_requests` always, `{low: 1, high: concurrency, log: true}`: the relative bound of
  the search issue (tuner/space/relative.py); a closed loop of C clients never runs more than C.
  An open-loop trace has no client count: `high: capacity`, what the KV pool holds of its
  requests (a higher cap behaves the same).
- `chunked_prefill_size` always: 2048-16384, the prefill chunk against the decode stall.
- speculation only with MTP heads in config.json (NEXTN) or a draft model given (STANDALONE).
- `mamba_radix_cache_strategy` (+ overlap off for no_buffer) only for hybrid models.
- `schedule_policy` and HiCache only for workloads that reuse prefixes (chat, RAG, a JSONL file,
  a trace with REUSE_FOR_SCHEDULING of its prompt tokens reused; HiCache for a trace only from
  REUSE_FOR_HICACHE);
  HiCache only when the workload's working set is larger than the smallest KV pool of the space
  (otherwise nothing is ever evicted to host RAM) and host RAM holds at least a ratio of 1;
  `hicache_ratio` up to what host RAM holds (free RAM less sglang's 10 GB, over the largest KV
  pool), and no further than the ratio that holds the whole working set.

Flags are written with their 0.5.23 names (the format's); a flag or choice the chosen sglang
release's parser lacks is left out, and renamed flags say what they are passed as.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tuner.engines.memory_plan import kv_element_bytes
from tuner.engines.sglang import RENAMED_FLAGS, build_server_args, load_snapshot
from tuner.errors import UserError
from tuner.init.facts import GB, HOST_RAM_RESERVE_GB, GpuFacts, HostFacts, ModelFacts
from tuner.predict.estimate import WorkloadShape
from tuner.predict.memory import MemoryEstimate, estimate_memory

MEM_FRACTION_HIGH = 0.95
CHUNKS = [2048, 4096, 8192, 16384]
MAX_HICACHE_RATIO = 16.0
# A trace's prefix reuse (the share of prompt tokens an earlier request sent) from which the
# prefix-cache params are offered. Below 5% an order by prefix match has almost nothing to
# match. HiCache brings back only reusable prefixes while it copies every prefilled block to
# host memory: below 20% reuse it can save at most a fifth of the prefill, too little to be
# worth a dimension (and its ratio's and policy's) of the search. Rules of thumb, not measured.
REUSE_FOR_SCHEDULING = 0.05
REUSE_FOR_HICACHE = 0.20


@dataclass(frozen=True)
class Param:
    name: str
    spec: dict[str, Any]
    why: list[str]  # comment lines written above it


@dataclass(frozen=True)
class Plan:
    params: list[Param]
    notes: list[str]  # header lines: what was left out and why


def plan_params(
    model: ModelFacts,
    gpu: GpuFacts,
    host: HostFacts,
    workload: dict[str, Any],
    concurrency: int | None,
    version: str,
    draft_model: str | None = None,
    kv_cache_dtypes: Sequence[str] = (),
) -> Plan:
    params: list[Param] = []
    notes: list[str] = []
    if kv_cache_dtypes:
        # the bounds below hold for every choice: planned with the widest KV (smallest pool)
        own = model.memory.kv_element_bytes
        widest = max(kv_cache_dtypes, key=lambda name: kv_element_bytes(name, own))
        model = replace(model, memory=model.memory.with_kv_cache_dtype(widest))
    problem = model.memory.tensor_parallel_problem(gpu.count)
    if problem:
        raise UserError(f"{model.model_path}: {problem}; choose another --tp-size")
    # one GPU's share of the weights (each of a tensor-parallel server's GPUs holds its part)
    weights = (model.memory.weight_bytes + model.memory.draft_bytes) / gpu.count
    share = weights / (gpu.memory_gb * GB)
    # Capped at the range's top: weights above 90% of the GPU leave only 0.95 to try.
    low = min(max(0.60, math.ceil((share + 0.05) * 100) / 100), MEM_FRACTION_HIGH)
    while low < MEM_FRACTION_HIGH and not _fits(model, gpu, {"mem_fraction_static": low}):
        low = round(low + 0.01, 2)  # the lowest fraction at which sglang's plan leaves a pool
    if not _fits(model, gpu, {"mem_fraction_static": low}):
        fits = _fitting_tp(model, gpu)
        hint = f"--tp-size {fits} fits" if fits else "no --tp-size up to 8 fits"
        raise UserError(
            f"{model.model_path}: {model.weight_gb:.1f} GB of weights leave no room for a KV "
            f"cache on {gpu.label} ({gpu.memory_gb:.0f} GB each) at any "
            f"--mem-fraction-static up to {MEM_FRACTION_HIGH}; use a larger GPU or tensor "
            f"parallelism ({hint})"
        )
    high = MEM_FRACTION_HIGH
    while high > low and not _fits(model, gpu, {"mem_fraction_static": high}):
        high = round(high - 0.01, 2)  # on a small GPU the activations' reserve binds first
    params.append(
        Param(
            "mem_fraction_static",
            {"low": low, "high": high, "step": 0.01},
            [
                f"Weights take {weights / GB:.1f} of the {gpu.memory_gb:.0f} GB ({share:.0%})"
                + (f" on each of {gpu.count} GPUs; " if gpu.count > 1 else "; ")
                + "low: that share + 0.05 (at least 0.60, and where sglang's memory plan still "
                "leaves a KV pool);",
                f"high {high}: above it activations and CUDA graphs starve"
                + (" (sglang's memory plan on this GPU)." if high < MEM_FRACTION_HIGH else "."),
            ],
        )
    )
    params += _speculation(model, draft_model)
    if model.hybrid:
        params += _mamba(model)
    elif model.experts:
        notes.append(
            f"Mixture of experts ({model.experts} experts, {model.experts_per_token} per token): "
            + (
                "on one GPU there is no expert-parallel flag to tune."
                if gpu.count == 1
                else "its experts are split over the GPUs with the rest (sglang's default)."
            )
        )
    kind = workload.get("kind")
    reuses_prefixes = kind in ("multi-turn", "shared-prefix", "jsonl")
    offers_hicache = reuses_prefixes
    if kind == "trace":
        shape = WorkloadShape.of(workload, concurrency or 1)
        reuse = shape.shareable / max(shape.prompt, 1.0)
        reuses_prefixes = reuse >= REUSE_FOR_SCHEDULING
        offers_hicache = reuse >= REUSE_FOR_HICACHE
        if offers_hicache:
            notes.append(
                f"The trace reuses {reuse:.0%} of its prompt tokens: HiCache is considered "
                f"(from {REUSE_FOR_HICACHE:.0%}: it brings back only reused prefixes while it "
                "copies every prefilled block to host memory)."
            )
        elif reuses_prefixes:
            notes.append(
                f"No HiCache: the trace reuses {reuse:.0%} of its prompt tokens, under "
                f"{REUSE_FOR_HICACHE:.0%}; HiCache brings back only reused prefixes while it "
                "copies every prefilled block to host memory."
            )
        elif reuse == 0:
            notes.append(
                "The trace's replayed prompts share no prefix: no schedule policy, no HiCache."
            )
        else:
            notes.append(
                f"The trace reuses {reuse:.0%} of its prompt tokens, under "
                f"{REUSE_FOR_SCHEDULING:.0%}: no schedule policy, no HiCache."
            )
    if reuses_prefixes:
        params.append(
            Param(
                "schedule_policy",
                {"choices": ["fcfs", "lpm"]},
                [
                    "lpm (longest prefix match) orders the queue to reuse cached prefixes; fcfs is",
                    "sglang's default. Only for workloads that share prefixes.",
                ],
            )
        )
        if offers_hicache:
            params += _hicache(model, gpu, host, workload, concurrency, low, high, notes)
    elif kind != "trace":
        notes.append("No prefix reuse in a random workload: no schedule policy, no HiCache.")
    if concurrency is None:
        running = Param(
            "max_running_requests",
            {"low": 1, "high": "capacity", "log": True},
            [
                "Relative bound (tuner/space/relative.py): an open loop has no client count, so",
                "the cap goes up to what the KV pool holds of the trace's requests at the",
                "largest fraction (capacity, worked out by tuner optimize); higher behaves the",
                "same.",
            ],
        )
    else:
        running = Param(
            "max_running_requests",
            {"low": 1, "high": "concurrency", "log": True},
            [
                "Relative bound (tuner/space/relative.py): a closed loop of bench.concurrency",
                "clients never runs more requests at once; a higher cap behaves the same.",
            ],
        )
    params.append(running)
    params.append(
        Param(
            "chunked_prefill_size",
            {"choices": CHUNKS},
            ["Prefill chunk: larger chunks prefill faster but stall running decodes longer."],
        )
    )
    if len(kv_cache_dtypes) > 1:
        params.append(_kv_cache_dtype(kv_cache_dtypes))
    return _for_version(Plan(params, notes), version)


def _kv_cache_dtype(dtypes: Sequence[str]) -> Param:
    return Param(
        "kv_cache_dtype",
        {"choices": list(dtypes)},
        [
            "How the KV cache is stored (--kv-cache-dtype, as given to init): auto is the",
            "model's dtype; an 8-bit cache (fp8_e4m3, fp8_e5m2) takes half the bytes a token,",
            "so the pool holds twice the tokens and a decode step reads half the KV. It can",
            "cost accuracy, which no throughput figure shows: check the pick on your evals.",
        ],
    )


def kv_cache_dtypes_problem(dtypes: Sequence[str], version: str) -> str | None:
    """Why sglang `version` would refuse one of `dtypes` (None when it takes them all)."""
    refused = [name for name in dtypes if not _accepted("kv_cache_dtype", name, version)]
    if not refused:
        return None
    option = load_snapshot(version).option("kv_cache_dtype")
    known = ", ".join(option.choices or ()) if option is not None else "none"
    return f"{', '.join(refused)}: sglang {version} takes {known}"


def _speculation(model: ModelFacts, draft_model: str | None) -> list[Param]:
    algorithms: list[Any] = [None]
    why = []
    if model.mtp_layers:
        algorithms.append("NEXTN")
        why.append(
            f"Speculation: config.json has {model.mtp_layers} MTP layer(s) "
            "(num_nextn_predict_layers / mtp_num_hidden_layers): NEXTN drafts with them."
        )
    if draft_model:
        algorithms.append("STANDALONE")
        why.append(f"Speculation: STANDALONE drafts with the given draft model {draft_model}.")
    if len(algorithms) == 1:
        return []
    on = {"speculative_algorithm": algorithms[1:] if len(algorithms) > 2 else algorithms[1]}
    out = [
        Param("speculative_algorithm", {"choices": algorithms}, [*why, "null = no speculation."]),
        Param(
            "speculative_num_steps",
            {"low": 1, "high": 5, "when": on},
            ["Draft steps 1-5: more steps win when drafts are accepted, cost when not."],
        ),
        Param(
            "speculative_eagle_topk",
            {"choices": [1], "when": on},
            ["topk 1 keeps the draft a chain (draft tokens = steps + 1, sglang's own pick)."],
        ),
        Param(
            "speculative_num_draft_tokens",
            {"derive": "speculative_num_steps + 1", "when": on},
            ["Derived: a chain of steps + 1 tokens."],
        ),
    ]
    if model.mtp_layers:
        out.append(
            Param(
                "speculative_adaptive",
                # Only with a step count sglang accepts as the start (its default candidates).
                {"choices": [None, True], "when": {"speculative_num_steps": [1, 3, 5]}},
                [
                    "sglang 0.5.23 can choose the steps at run time from the accept lengths it "
                    "sees (fewer as the batch grows); the sampled steps are its start and must "
                    "be one of its candidates (1, 3, 5). EAGLE-family drafts only: not STANDALONE."
                ],
            )
        )
    if draft_model:
        out.append(
            Param(
                "speculative_draft_model_path",
                {"choices": [draft_model], "when": {"speculative_algorithm": "STANDALONE"}},
                ["The draft model, passed only when STANDALONE speculation is on."],
            )
        )
    return out


def _mamba(model: ModelFacts) -> list[Param]:
    state_mb = model.memory.state_bytes_per_request / 1e6
    return [
        Param(
            "mamba_radix_cache_strategy",
            {"choices": ["no_buffer", "extra_buffer"]},
            [
                f"Hybrid model ({state_mb:.0f} MB of recurrent state per request): extra_buffer",
                "keeps extra state slots (fewer running requests) and lets prefix caching and",
                "speculation work with the linear-attention layers.",
            ],
        ),
        Param(
            "disable_overlap_schedule",
            {"choices": [True], "when": {"mamba_radix_cache_strategy": "no_buffer"}},
            [
                "sglang refuses an explicit no_buffer with overlap scheduling on; its own `auto`",
                "switches overlap off for no_buffer, so the space does the same.",
            ],
        ),
    ]


def _hicache(
    model: ModelFacts,
    gpu: GpuFacts,
    host: HostFacts,
    workload: dict[str, Any],
    concurrency: int | None,
    low_fraction: float,
    high_fraction: float,
    notes: list[str],
) -> list[Param]:
    working_set = WorkloadShape.of(workload, concurrency or 1).working_set
    # The smallest pool of the space: the lowest fraction, with the longest MTP draft's reserve.
    worst: dict[str, Any] = {"mem_fraction_static": low_fraction}
    if model.mtp_layers:
        worst.update(
            speculative_algorithm="NEXTN",
            speculative_num_steps=5,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=6,
        )
        if concurrency is not None:  # an open loop: sglang's own running cap
            worst["max_running_requests"] = concurrency
    smallest = _memory(model, gpu, worst)
    if not smallest.fits:  # the longest draft does not fit there: the smallest pool that does
        smallest = _memory(model, gpu, {"mem_fraction_static": low_fraction})
    largest = _memory(model, gpu, {"mem_fraction_static": high_fraction})
    if smallest.fits and smallest.kv_tokens >= working_set:
        notes.append(
            f"No HiCache: the smallest KV pool of this space ({smallest.kv_tokens:,} tokens) "
            f"already holds the workload's working set (~{working_set:,.0f} tokens)."
        )
        return []
    # the KV pool of all the server's GPUs: host RAM holds each one's copy of its part
    pool_gb = (
        largest.kv_tokens * model.memory.sharded(gpu.count).kv_bytes_per_token * gpu.count / GB
    )
    if host.ram_gb is None:
        notes.append("No HiCache: host RAM unknown (no /proc/meminfo); give --host-ram-gb.")
        return []
    by_ram = (host.ram_gb - HOST_RAM_RESERVE_GB) / max(pool_gb, 1e-9)
    by_need = working_set / max(smallest.kv_tokens, 1)
    high = math.floor(min(by_ram, max(by_need, 2.0), MAX_HICACHE_RATIO) * 2) / 2
    if high < 1.0:
        notes.append(
            f"No HiCache: {host.ram_gb:.0f} GB of host RAM ({host.source}) less sglang's "
            f"{HOST_RAM_RESERVE_GB:.0f} GB cannot hold one KV pool ({pool_gb:.1f} GB)."
        )
        return []
    on = {"enable_hierarchical_cache": True}
    return [
        Param(
            "enable_hierarchical_cache",
            {"choices": [False, True]},
            [
                f"HiCache: the working set (~{working_set:,.0f} tokens) outgrows the smallest KV "
                f"pool ({smallest.kv_tokens:,}),",
                "so evicted prefixes can be kept in host RAM.",
            ],
        ),
        Param(
            "hicache_ratio",
            {"low": 1.0, "high": max(high, 1.0), "step": 0.5, "when": on},
            [
                f"Host pool = ratio x device KV pool (largest {pool_gb:.1f} GB). high: host RAM "
                f"{host.ram_gb:.0f} GB ({host.source})",
                f"less {HOST_RAM_RESERVE_GB:.0f} GB allows {by_ram:.1f}; the working set needs "
                f"{by_need:.1f} (at least 2); at most {MAX_HICACHE_RATIO:g}.",
            ],
        ),
        Param(
            "hicache_write_policy",
            {"choices": ["write_through", "write_back"], "when": on},
            ["When evicted KV is copied to host RAM: at once, or only on eviction."],
        ),
    ]


def _memory(model: ModelFacts, gpu: GpuFacts, flags: dict[str, Any]) -> MemoryEstimate:
    """sglang's memory plan for `flags` on each of the server's GPUs."""
    return estimate_memory({**flags, **gpu.flags}, model.memory, gpu.memory_gb)


def _fits(model: ModelFacts, gpu: GpuFacts, flags: dict[str, Any]) -> bool:
    return _memory(model, gpu, flags).fits


def _fitting_tp(model: ModelFacts, gpu: GpuFacts) -> int | None:
    """The fewest GPUs (2, 4 or 8) over which the model fits at some fraction up to 0.95."""
    fractions = [round(MEM_FRACTION_HIGH - 0.01 * i, 2) for i in range(36)]  # 0.95 .. 0.60
    for tp in (2, 4, 8):
        wider = replace(gpu, count=tp)
        if tp <= gpu.count or model.memory.tensor_parallel_problem(tp):
            continue
        if any(_fits(model, wider, {"mem_fraction_static": f}) for f in fractions):
            return tp
    return None


def _for_version(plan: Plan, version: str) -> Plan:
    """Keep what `version`'s parser accepts; say what a renamed flag is passed as."""
    snapshot = load_snapshot(version)
    renamed = {new: old for new, old in RENAMED_FLAGS}
    kept: list[Param] = []
    notes = list(plan.notes)
    for param in plan.params:
        why = list(param.why)
        if snapshot.option(param.name) is None:
            old = renamed.get(param.name)
            if old is None or snapshot.option(old) is None:
                notes.append(f"sglang {version} has no --{param.name.replace('_', '-')}: left out.")
                continue
            why.append(f"Passed as --{old.replace('_', '-')} to sglang {version}.")
        spec = dict(param.spec)
        if "choices" in spec:
            accepted = [c for c in spec["choices"] if _accepted(param.name, c, version)]
            if not accepted:
                notes.append(f"sglang {version} accepts none of {param.name}'s choices: left out.")
                continue
            spec["choices"] = accepted
        kept.append(Param(param.name, spec, why))
    names = {p.name for p in kept}
    # A conditional param whose condition's param was dropped would never load.
    kept = [p for p in kept if all(k in names for k in p.spec.get("when", {}))]
    return Plan(kept, notes)


def _accepted(name: str, value: Any, version: str) -> bool:
    try:
        build_server_args({name: value}, version)
    except UserError:
        return False
    return True
