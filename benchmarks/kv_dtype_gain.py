"""What an 8-bit KV pool buys, by the estimate and by the simulator, configuration by configuration.

    python benchmarks/kv_dtype_gain.py SPACE [SPACE ...] [--configs 20] [--dtype fp8_e4m3]

For random configurations of each space (its params as a study samples them, the fixed flags
too), the same configuration with `--kv-cache-dtype auto` and with DTYPE: the simulator's
oracle (benchmarks/estimate_error.py's truth) and the unfitted estimate each give the ratio
DTYPE / auto of output throughput and of median TPOT. The table: the median and the range of
each, and the median of estimate over simulator. The estimate counts an 8-bit pool's bytes
(twice the tokens, half the KV read) and nothing of its dequantization; the simulator's
`kv_quantized` effect charges that (docs/sim-effects.md). A space's world (its `sim:
profile_overrides`) is the simulator's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

from tuner.study.guide import complete_flags, random_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimate_error import _truth, simulated


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def measure(name: str, configs: int, dtype: str, seed: int) -> str:
    space, estimator, oracle = simulated(name)
    est = estimator()
    rng = random.Random(seed)
    rows: dict[str, list[float]] = {"sim_tput": [], "est_tput": [], "sim_tpot": [], "est_tpot": []}
    tries = 0
    while len(rows["sim_tput"]) < configs and tries < 20 * configs:
        tries += 1
        flags = {**space.fixed_flags, **complete_flags(space, random_params(space, rng))}
        pair = [{**flags, "kv_cache_dtype": d} for d in ("auto", dtype)]
        truths = [_truth(oracle, space, f) for f in pair]
        predictions = [est.predict(f) for f in pair]
        if any(t is None for t in truths) or not all(p.fits for p in predictions):
            continue
        low, high = truths
        assert low is not None and high is not None
        rows["sim_tput"].append(high["throughput"] / low["throughput"])
        rows["est_tput"].append(predictions[1].throughput / predictions[0].throughput)
        rows["sim_tpot"].append(high["tpot_ms"] / low["tpot_ms"])
        rows["est_tpot"].append(predictions[1].tpot_ms / predictions[0].tpot_ms)
    n = len(rows["sim_tput"])
    over = [e / s for e, s in zip(rows["est_tput"], rows["sim_tput"], strict=True)]
    return (
        f"| {Path(name).stem} | {n} | {_spread(rows['sim_tput'])} | {_spread(rows['est_tput'])} "
        f"| {statistics.median(over):.2f} | {_spread(rows['sim_tpot'])} "
        f"| {_spread(rows['est_tpot'])} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+")
    parser.add_argument("--configs", type=int, default=20)
    parser.add_argument("--dtype", default="fp8_e4m3")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"| space | pairs | throughput {args.dtype} / auto, simulator | estimate | estimate "
        "/ simulator | median TPOT ratio, simulator | estimate |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.spaces:
        print(measure(name, args.configs, args.dtype, args.seed), flush=True)


if __name__ == "__main__":
    main()
