"""Does `tuner init`'s reach note (tuner/init/reach.py) fire only where the SLOs are out of reach?

For each model / GPU / workload below, `tuner init` writes the space (sglang 0.5.23, 1000 GB of
host RAM); the estimate's closest configuration (the worst SLO ratio, value / limit, minimized
over the same samples the note draws) is set beside the simulator's oracle over 40 sampled
configurations of the same space (shipped profiles). A ratio above 1 misses a limit.

    python benchmarks/init_reach.py [--out benchmarks/results/init_reach.md]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.quality.truth import world_oracle  # noqa: E402
from tuner.init.command import write_space  # noqa: E402
from tuner.init.facts import read_gpu, read_model  # noqa: E402
from tuner.init.reach import MARGIN, SAMPLES  # noqa: E402
from tuner.init.write import InitRequest  # noqa: E402
from tuner.predict.estimate import Estimator  # noqa: E402
from tuner.space.load import load_space  # noqa: E402
from tuner.study.guide import complete_flags, random_params  # noqa: E402

SIM = "tuner/sim/profiles/model/"
TEST = "tests/data/models/"
CASES = (  # model folder, GPU, workload, GPUs per server
    (SIM + "qwen3.6-27b", "rtx-pro-6000-blackwell", "chat", 1),
    (SIM + "qwen3-8b", "h200", "rag", 1),
    (SIM + "qwen3-8b", "h100", "chat", 1),
    (TEST + "llama-3.1-8b", "h200", "random", 1),
    (TEST + "llama-3.1-8b", "rtx-pro-6000-blackwell", "rag", 1),
    (TEST + "mixtral-8x7b", "h200", "rag", 1),
    (SIM + "qwen3-30b-a3b", "h100", "chat", 1),
    (TEST + "llama-3.3-70b", "h200", "rag", 2),
    (TEST + "llama-3.3-70b", "h100", "chat", 4),
    (TEST + "llama-3.3-70b", "h100", "rag", 8),
)


def closest(path: Path, model_dir: str, gpu_name: str, tp: int) -> tuple[float, float]:
    """(the estimate's closest worst SLO ratio, the oracle's over 40 samples)."""
    space = load_space(path)
    gpu = read_gpu(gpu_name, None, tp)
    estimator = Estimator(space, read_model(model_dir).memory, gpu.spec, gpu.memory_gb)
    rng = random.Random(0)
    estimated = float("inf")
    for _ in range(SAMPLES):
        flags = {"model_path": space.model_path, **space.fixed_flags}
        flags |= complete_flags(space, random_params(space, rng, ends=0.3))
        prediction = estimator.predict(flags)
        if prediction.fits:
            values = estimator.slo_values(prediction)
            estimated = min(estimated, max(values[s.metric] / s.limit for s in space.slos))
    _, oracle = world_oracle(str(path), None)
    rng = random.Random(1)
    true = float("inf")
    for _ in range(40):
        _, truth = oracle.of_params(random_params(space, rng, ends=0.3))
        if truth.launch_ok:
            ratios = [v / s.limit for v, s in zip(truth.slo_values, space.slos, strict=True)]
            true = min(true, max(ratios))
    return estimated, true


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = [
        "| model | GPU | workload | GPUs | estimate's closest | oracle's closest | note |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for model_dir, gpu, workload, tp in CASES:
            path = Path(tmp) / f"{Path(model_dir).name}-{gpu}-{workload}-{tp}.yaml"
            request = InitRequest(
                model_path=str(ROOT / model_dir), gpu=gpu, workload=workload, tp_size=tp,
                sglang_version="0.5.23", host_ram_gb=1000.0,
            )  # fmt: skip
            write_space(request, path)
            estimated, true = closest(path, str(ROOT / model_dir), gpu, tp)
            note = "written" if estimated > MARGIN else "-"
            row = (
                f"| {Path(model_dir).name} | {gpu} | {workload} | {tp} | {estimated:.2f} "
                f"| {true:.2f} | {note} |"
            )
            rows.append(row)
            print(row, flush=True)
    if args.out:
        args.out.write_text(
            "# `tuner init`'s reach note against the simulator\n\n"
            "`python benchmarks/init_reach.py`: the worst SLO ratio (value / limit) of the "
            "closest configuration, by the estimate (what the note reads; "
            f"a note when above {MARGIN}) and by the simulator's oracle over 40 samples "
            "(shipped profiles).\n\n" + "\n".join(rows) + "\n"
        )


if __name__ == "__main__":
    main()
