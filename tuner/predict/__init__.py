"""What the tuner predicts from public facts before (and between) launches.

    from tuner.predict import Estimator, estimate_memory, gpu_spec

Modules: `memory` (sglang's sizing rules applied to a configuration: does it fit, how many KV
tokens and running requests), `estimate` (throughput and latency from the model's config.json
and the GPU's spec sheet, refitted to the study's own trials), `gpu_specs` (the spec table),
`workload_shape` (the workload as the estimate sees it), `capacity_bound` (what the `capacity`
bound of a space stands for on this host).
"""

from tuner.predict.capacity_bound import running_capacity
from tuner.predict.estimate import Calibration, Estimator, Observation, Prediction
from tuner.predict.gpu_specs import GpuSpec, gpu_spec, known_gpus
from tuner.predict.memory import MemoryEstimate, estimate_memory
from tuner.predict.workload_shape import WorkloadShape

__all__ = [
    "Calibration",
    "Estimator",
    "GpuSpec",
    "MemoryEstimate",
    "Observation",
    "Prediction",
    "WorkloadShape",
    "estimate_memory",
    "gpu_spec",
    "known_gpus",
    "running_capacity",
]
