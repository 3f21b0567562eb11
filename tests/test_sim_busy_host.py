"""A busy host, or another time scale, changes how long a simulated run takes, not its figures.

The seed space's configuration, workload and bench settings, served at the space's default time
scale (200) with and without two busy-loop processes (one per core on the 2-core machines this
project runs on), and a smaller run at time scale 50 vs 5. The busy loops are started and
stopped by the test. Nothing here reads the wall clock.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from support.harness import SimProcess

from tuner.bench import BenchConfig, WorkloadSpec, run_bench
from tuner.engines import sglang as engine
from tuner.space.load import default_space_path, load_space
from tuner.study.options import StudyOptions
from tuner.study.run import launch_target

SPACE = load_space(default_space_path())


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def serve_seed(
    busy: int, time_scale: float | None = None, workload: WorkloadSpec | None = None
) -> tuple[dict, dict]:
    """The seed space's defaults under its workload, served with `busy` busy cores."""
    extra = list(launch_target(SPACE, StudyOptions(engine="sim")).extra_args)
    if time_scale is not None:
        i = extra.index("--sim-time-scale")
        extra[i + 1] = str(time_scale)
    args = engine.build_server_args(
        {"model_path": SPACE.model_path, **SPACE.fixed_flags}, SPACE.engine_version
    )
    bench = SPACE.bench
    config = BenchConfig(
        url="",
        workload=workload or WorkloadSpec.from_dict(SPACE.workload),
        concurrency=bench.concurrency,
        warmup_requests=bench.warmup_requests,
        stages=int(bench.stages),
    )
    with busy_cores(busy), SimProcess.start([*args, *extra], timeout=60) as sim:
        config.url = sim.url
        result = run_bench(config)
        info = httpx.get(sim.url + "/server_info").json()
    return result.summary, info


def agree(a: dict, b: dict) -> None:
    assert a["completed"] == b["completed"] > 0
    assert a["output_throughput"] == pytest.approx(b["output_throughput"], rel=0.02)
    assert a["median_tpot_ms"] == pytest.approx(b["median_tpot_ms"], rel=0.02)
    assert a["p99_ttft_ms"] == pytest.approx(b["p99_ttft_ms"], rel=0.05)


def test_two_busy_cores_do_not_change_the_seed_figures():
    idle, idle_info = serve_seed(busy=0)
    loaded, loaded_info = serve_seed(busy=2)
    agree(loaded, idle)
    for info in (idle_info, loaded_info):
        assert info["sim_late_requests"] == 0 and info["sim_hold_timeouts"] == 0
    # the lag is reported (modelled time slowed down), never turned into modelled time
    assert loaded_info["sim_behind_s"] >= 0.0


def test_time_scale_50_and_5_give_the_same_figures():
    small = WorkloadSpec.from_dict({**SPACE.workload, "conversations": 8, "turns": 2})
    fast, _ = serve_seed(busy=0, time_scale=50, workload=small)
    slow, _ = serve_seed(busy=0, time_scale=5, workload=small)
    agree(fast, slow)
