"""`tuner bench` against the simulator: agreement with the simulator's own record, and the cache
hit rates the workloads produce."""

import contextlib
import json
import statistics
import subprocess
import sys
import time

import httpx
import pytest
from support.bench_fake_server import free_port, stop_group

from tuner.bench import BenchConfig, WorkloadSpec, run_bench


@contextlib.contextmanager
def simulator(*flags: str):
    port = free_port()
    argv = [sys.executable, "-m", "tuner.sim", "--port", str(port), *flags]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"simulator exited ({proc.returncode}): {proc.stderr.read()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("simulator not ready after 60 s")
            time.sleep(0.1)
        yield url
    finally:
        stop_group(proc)
        if proc.stderr:
            proc.stderr.close()


def sim_record(url: str) -> list[dict]:
    response = httpx.get(f"{url}/sim/requests", timeout=10)
    response.raise_for_status()
    return response.json()["requests"]


def sim_metrics(served: list[dict]) -> dict[str, float]:
    """The same three figures from what the simulator says it served (modelled seconds)."""
    ok = [r for r in served if not r.get("error")]
    duration = max(r["finish_s"] for r in ok) - min(r["arrival_s"] for r in ok)
    return {
        "output_throughput": sum(r["completion_tokens"] for r in ok) / duration,
        "median_ttft_ms": 1000 * statistics.median(r["first_token_s"] - r["arrival_s"] for r in ok),
        "median_tpot_ms": 1000
        * statistics.median(
            (r["finish_s"] - r["first_token_s"]) / (r["completion_tokens"] - 1)
            for r in ok
            if r["completion_tokens"] > 1
        ),
    }


def test_bench_agrees_with_the_simulators_own_record():
    spec = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 16, "input_len": 2048, "output_len": 32, "seed": 1}
    )
    # What the client adds (HTTP, the server's handling of a burst of arrivals) is scaled up by K
    # in modelled time like everything else (measured on the shared 2-core machine: TTFT +0.6%
    # at K=2, +1.1% at K=4, +7% at K=20, and +2.1% at K=2 with the CPUs busy): real time keeps
    # it well under the 2% allowed, whatever else the machine runs.
    with simulator("--sim-time-scale", "1") as url:
        result = run_bench(BenchConfig(url=url, workload=spec, concurrency=8, warmup_requests=0))
        served = sim_record(url)
    assert result.summary["completed"] == 16 and result.time_scale == 1.0
    ours = {r.rid for r in result.records}
    matched = [r for r in served if r.get("rid") in ours]
    assert len(matched) == 16
    theirs = sim_metrics(matched)
    report = {k: (result.summary[k], v) for k, v in theirs.items()}
    for measured, recorded in report.values():
        assert measured == pytest.approx(recorded, rel=0.02), json.dumps(report)


@pytest.mark.parametrize("api", ["generate", "chat"])
def test_prefix_reusing_workloads_hit_the_cache_more_than_random(api):
    workloads = {
        "random": {"kind": "random", "requests": 16, "input_len": 512, "output_len": 16},
        "shared-prefix": {"kind": "shared-prefix", "groups": 2, "prompts_per_group": 8,
                          "system_prompt_len": 512, "question_len": 64, "output_len": 16},
        "multi-turn": {"kind": "multi-turn", "conversations": 4, "turns": 4,
                       "system_prompt_len": 256, "user_len": 64, "answer_len": 16},
    }  # fmt: skip
    rates = {}
    with simulator("--sim-time-scale", "50") as url:
        for name, workload in workloads.items():
            cfg = BenchConfig(url=url, workload=WorkloadSpec.from_dict(workload), concurrency=4,
                              api=api)  # fmt: skip
            result = run_bench(cfg)
            assert result.summary["completed"] == 16
            rates[name] = result.summary["cache_hit_rate"]
    assert rates["random"] < 0.05, rates
    assert rates["shared-prefix"] > rates["random"] + 0.3, rates
    assert rates["multi-turn"] > rates["random"] + 0.3, rates
