"""A Mooncake-format trace replayed against real sglang 0.5.23 on this CPU (marker
`real_sglang`): the server does not know it is a trace, the client keeps its times, and sglang's
radix cache reuses the prefixes the trace's hash ids share (the tiny Llama's vocabulary narrows
the token ids, read from the model's config.json)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.real_sglang import INSTALL_HINT, RealServer, build_tiny_model, venv_dir, venv_python

from tuner.bench import BenchConfig, WorkloadSpec, run_bench

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]

BLOCK = 64  # small blocks: the CPU tier's KV pool holds 8192 tokens
REQUESTS = 40


def small_trace(path: Path) -> Path:
    """4 system prompts of 2 blocks; each request one of them and a part-block of its own,
    arriving over about 16 s (replayed at its own pace)."""
    rng = random.Random(3)
    t = 0.0
    with path.open("w") as out:
        for i in range(REQUESTS):
            t += rng.expovariate(1 / 400)
            group = rng.randrange(4)
            item = {
                "timestamp": int(t),
                "input_length": 2 * BLOCK + rng.randint(8, BLOCK),
                "output_length": 4,
                "hash_ids": [2 * group, 2 * group + 1, 100 + i],
            }
            out.write(json.dumps(item) + "\n")
    return path


def test_a_trace_replays_against_real_sglang(tmp_path: Path) -> None:
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    # the tiny Llama the install script builds beside the environment (built here if missing)
    model = build_tiny_model(python, venv_dir().parent / "tiny-llama")
    workload = WorkloadSpec.from_dict(
        {
            "kind": "trace",
            "path": str(small_trace(tmp_path / "trace.jsonl")),
            "block_size": BLOCK,
            "speedup": 1.0,  # the CPU server and a parallel test share two cores with the client
        }
    )
    with RealServer.start(python, model, [], tmp_path / "sglang.log") as server:
        result = run_bench(BenchConfig(url=server.url, workload=workload, warmup_requests=1))
    summary = result.summary
    assert summary["completed"] == REQUESTS and not summary.get("failed"), summary
    # the client kept the times (a replay that did not ends in BenchLagError)
    assert summary["p50_send_lag_ms"] < 20.0 and summary["late_sends"] <= 1
    reuse = summary["trace_block_reuse"]
    assert reuse > 0.5
    # sglang matches token by token (page size 1); the trace's reuse counts whole blocks, so
    # the server may reuse a little more, never much less with the pool this trace fits in
    assert 0.9 * reuse <= summary["cache_hit_rate"] <= reuse + 0.05, summary
