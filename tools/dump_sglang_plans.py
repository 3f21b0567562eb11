"""Run sglang's own Mamba-pool planning on CPU and write what it decides to a fixture.

The planning step that splits the memory left after the weights between recurrent-state slots,
the speculative reserve and the KV pool is plain arithmetic in sglang, over values that a GPU run
measures first (free memory after loading) and a few resolved settings. This script imports the
release's planning code the way tuner/engines/_parser_dump.py imports its parser (third-party
modules replaced by inert stand-ins), gives it those measured values and settings through
minimal stand-in objects, calls it, and records the result:

- 0.5.23: ``KVCacheConfigurator._handle_max_mamba_cache`` then ``resolve_max_num_reqs``
  (srt/mem_cache/kv_cache_configurator.py)
- 0.5.10: ``ModelRunnerKVCacheMixin.handle_max_mamba_cache``
  (srt/model_executor/model_runner_kv_cache_mixin.py), and the cap slots // ratio

The memory left after the weights ("rest") is an input here; tests/test_memory_plan.py computes
it for the simulator's seed hardware and holds the tuner's estimate and the simulator to the
recorded slots, reserve and running cap.

    for v in 0.5.23 0.5.11 0.5.10; do pip download --no-deps sglang==$v -d /tmp/sglang-wheels; done
    pip install --target /tmp/sglang-deps msgspec      # 0.5.2x declares its args with msgspec
    PYTHONPATH=/tmp/sglang-deps .venv/bin/python tools/dump_sglang_plans.py \\
        /tmp/sglang-wheels/sglang-0.5.23-*.whl /tmp/sglang-wheels/sglang-0.5.1[01]-*.whl

Each wheel runs in its own child process (two sglang versions cannot share one interpreter).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "sglang_real_plans.json"
GIB = 1 << 30

# qwen3.6-27b (tuner/sim/profiles/model/qwen3.6-27b/config.json): 48 gated-delta-net layers, each
# with a bf16 conv window of 10240 x 3 and a float32 SSM state of 48 x 128 x 128.
LINEAR_LAYERS = 48
CONV_ELEMENTS, CONV_BYTES = 10240 * 3, 2
SSM_ELEMENTS, SSM_BYTES = 48 * 128 * 128, 4
PER_REQ = LINEAR_LAYERS * (CONV_ELEMENTS * CONV_BYTES + SSM_ELEMENTS * SSM_BYTES)
CONTEXT_LEN = 262144

# The seed hardware and model of the simulator (rtx-pro-6000-blackwell, qwen3.6-27b): what sglang
# would measure as free after loading, minus its slack, is "rest" = fraction x GPU - overhead -
# weights - draft weights (tests/test_memory_plan.py works it by hand).
GPU_GIB, OVERHEAD_GIB = 94.97, 1.72322
WEIGHT_BYTES, MTP_BYTES = 54_713_457_120, 849_398_784

# (name, --mem-fraction-static, settings, the same configuration as launch flags)
NEXTN = ["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1"]
CASES: list[tuple[str, float, dict[str, Any], list[str]]] = [
    ("seed NEXTN 3/1/4 extra_buffer, mfs 0.93", 0.93, {"draft_tokens": 4},
     [*NEXTN, "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"]),
    ("no speculation, mfs 0.85", 0.85, {}, []),
    ("NEXTN 2/1/3, max_running 16, mfs 0.90", 0.90, {"draft_tokens": 3, "max_running": 16},
     [*NEXTN, "--speculative-num-steps", "2", "--speculative-num-draft-tokens", "3",
      "--max-running-requests", "16"]),
    ("NEXTN 3/1/4, max_mamba_cache_size 40, mfs 0.93", 0.93,
     {"draft_tokens": 4, "mamba_slots": 40},
     [*NEXTN, "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4",
      "--max-mamba-cache-size", "40"]),
    ("NEXTN 5/1/6 extra_buffer, mfs 0.93", 0.93, {"draft_tokens": 6},
     [*NEXTN, "--speculative-num-steps", "5", "--speculative-num-draft-tokens", "6"]),
    ("NEXTN 3/1/4, max_running 8, mfs 0.88", 0.88, {"draft_tokens": 4, "max_running": 8},
     [*NEXTN, "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4",
      "--max-running-requests", "8"]),
    ("mamba_full_memory_ratio 0.3, mfs 0.85", 0.85, {"memory_ratio": 0.3},
     ["--mamba-full-memory-ratio", "0.3"]),
]  # fmt: skip


def rest_gib(fraction: float, spec: bool) -> float:
    rest = (fraction * GPU_GIB - OVERHEAD_GIB) * GIB - WEIGHT_BYTES - (MTP_BYTES if spec else 0)
    return rest / GIB


def _import_release(root: Path) -> None:
    from tuner.engines._parser_dump import _StandInFinder

    finder = _StandInFinder(root)
    sys.meta_path.insert(0, finder)
    package = types.ModuleType("sglang")
    package.__path__ = [str(root / "sglang")]
    sys.modules["sglang"] = package


def _settings(case: dict[str, Any]) -> dict[str, Any]:
    strategy = case.get("strategy", "extra_buffer")
    return {
        "spec": "draft_tokens" in case,
        "draft_tokens": case.get("draft_tokens"),
        # with speculation and no --max-running-requests, sglang sets 48 before planning memory
        "max_running": case.get("max_running", 48 if "draft_tokens" in case else None),
        "mamba_slots": case.get("mamba_slots"),
        "radix": case.get("radix", True),
        "extra_buffer": strategy == "extra_buffer",
        "overlap": strategy != "no_buffer",
        "memory_ratio": case.get("memory_ratio", 0.9),
    }


def _plan_0_5_23(rest_gib: float, s: dict[str, Any]) -> dict[str, Any]:
    module = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    cls = module.KVCacheConfigurator
    schedule = types.SimpleNamespace(
        mamba_full_memory_ratio=s["memory_ratio"],
        max_running_requests=s["max_running"],
        max_mamba_cache_size=s["mamba_slots"],
        disable_overlap_schedule=not s["overlap"],
        max_total_tokens=None,
    )

    class Context:
        def override(self, _key: str, **values: Any) -> None:
            for name, value in values.items():
                setattr(schedule, name, value)

    mamba = types.SimpleNamespace(
        enable_linear_replayssm_spec=False,
        enable_mamba_extra_buffer=s["extra_buffer"],
        enable_mamba_extra_buffer_lazy=False,
    )
    module.get_schedule = lambda: schedule
    module.get_spec = lambda: types.SimpleNamespace(speculative_num_draft_tokens=s["draft_tokens"])
    module.get_exec = lambda: types.SimpleNamespace(mamba=mamba)
    module.get_memory = lambda: types.SimpleNamespace(disable_radix_cache=not s["radix"])
    module.get_context = Context
    module._pd_prefill_skips_mamba_spec_state = lambda: False
    params = types.SimpleNamespace(layers=list(range(LINEAR_LAYERS)), mamba_cache_per_req=PER_REQ)
    this = types.SimpleNamespace(
        mambaish_config=types.SimpleNamespace(mamba2_cache_params=params),
        pp_size=1,
        attn_dp_size=1,
        fused_entry_bytes=lambda _name: None,
        spec_algorithm=types.SimpleNamespace(is_none=lambda: not s["spec"]),
        hybrid_gdn_config=object(),
        hybrid_kda_config=None,
        extra_mamba_cache_bytes_per_req=0,
        model_config=types.SimpleNamespace(context_len=CONTEXT_LEN),
    )
    this._calculate_mamba_ratio = lambda: cls._calculate_mamba_ratio(this)
    left = cls._handle_max_mamba_cache(this, rest_gib)
    slots = schedule.max_mamba_cache_size
    reserved = rest_gib - left - (slots + 1) * PER_REQ / GIB
    # a KV pool large enough that the Mamba pool is what caps the running requests
    running = cls.resolve_max_num_reqs(this, 10**7)
    return {
        "mamba_slots": slots,
        "slot_ratio": cls._calculate_mamba_ratio(this),
        "spec_reserve_bytes": round(reserved * GIB),
        "rest_after_state_gib": left,
        "max_running_requests": running,
    }


def _plan_0_5_10(rest_gib: float, s: dict[str, Any]) -> dict[str, Any]:
    module = importlib.import_module("sglang.srt.model_executor.model_runner_kv_cache_mixin")
    args = types.SimpleNamespace(
        speculative_num_draft_tokens=s["draft_tokens"],
        max_running_requests=s["max_running"],
        max_mamba_cache_size=s["mamba_slots"],
        mamba_full_memory_ratio=s["memory_ratio"],
        disable_radix_cache=not s["radix"],
        enable_dp_attention=False,
        dp_size=1,
    )
    params = types.SimpleNamespace(mamba_cache_per_req=PER_REQ)
    this = types.SimpleNamespace(
        mambaish_config=types.SimpleNamespace(mamba2_cache_params=params),
        server_args=args,
        spec_algorithm=types.SimpleNamespace(is_none=lambda: not s["spec"]),
        dp_size=1,
    )
    left = module.ModelRunnerKVCacheMixin.handle_max_mamba_cache(this, rest_gib)
    slots = args.max_mamba_cache_size
    reserved = rest_gib - left - slots * PER_REQ / GIB
    # 0.5.10's scheduler caps running requests at slots // ratio (3, +2 extra_buffer + overlap)
    ratio = 1 if not s["radix"] else 3 + (2 if s["extra_buffer"] and s["overlap"] else 0)
    running = slots // ratio
    if s["max_running"] is not None:
        running = min(running, s["max_running"])
    return {
        "mamba_slots": slots,
        "slot_ratio": ratio,
        "spec_reserve_bytes": round(reserved * GIB),
        "rest_after_state_gib": left,
        "max_running_requests": running,
    }


def run_release(root: Path, version: str) -> list[dict[str, Any]]:
    _import_release(root)
    plan = (
        _plan_0_5_23
        if tuple(int(p) for p in version.split(".")[:3]) >= (0, 5, 23)
        else (_plan_0_5_10)
    )
    results = []
    for name, fraction, case, flags in CASES:
        settings = _settings(case)
        rest = rest_gib(fraction, settings["spec"])
        try:
            outcome = plan(rest, settings)
        except Exception as exc:  # sglang refusing to start is a result too
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
        argv = [*flags, "--mem-fraction-static", str(fraction)]
        results.append(
            {"name": name, "argv": argv, "rest_gib": rest, "settings": settings, **outcome}
        )
    return results


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("wheels", nargs="*", type=Path, help="sglang wheels (0.5.23, 0.5.10, ...)")
    cli.add_argument("--out", type=Path, default=DEFAULT_OUT)
    cli.add_argument("--child", nargs=2, metavar=("ROOT", "VERSION"), help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.child:
        print(json.dumps(run_release(Path(args.child[0]), args.child[1])))
        return 0
    if not args.wheels:
        cli.error("give at least one sglang wheel")
    from tuner.engines._parser_dump import unpack_wheel

    releases: dict[str, Any] = {}
    for wheel in args.wheels:
        with tempfile.TemporaryDirectory(prefix="sglang-src-") as tmp:
            version = unpack_wheel(wheel, Path(tmp))
            out = subprocess.run(
                [sys.executable, __file__, "--child", tmp, version],
                capture_output=True,
                text=True,
                check=True,
            )
            releases[version] = json.loads(out.stdout.strip().splitlines()[-1])
    document = {
        "about": "What sglang's own Mamba-pool planning decides, run on CPU by "
        "tools/dump_sglang_plans.py from each release's wheel.",
        "state_bytes_per_request": PER_REQ,
        "hardware": "rtx-pro-6000-blackwell",
        "model": "qwen3.6-27b",
        "extra_buffer_argv": {
            "0.5.23": "--mamba-radix-cache-strategy",
            "older": "--mamba-scheduler-strategy",
        },
        "releases": releases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out} ({', '.join(releases)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
