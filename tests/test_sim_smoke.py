"""The simulator starts quickly, reports its capacity and serves a streaming /generate."""

from __future__ import annotations

import json
import time

import httpx
from support.harness import SimProcess


def test_starts_under_3s_and_serves_streaming_generate():
    t0 = time.monotonic()
    with SimProcess.start(["--sim-time-scale", "50"]) as sim:
        startup = time.monotonic() - t0
        assert startup < 3.0, sim.log()
        log = sim.log()
        assert "max_total_num_tokens=" in log and "max_running_requests=19" in log
        assert "The server is fired up and ready to roll!" in log
        info = httpx.get(sim.url + "/server_info").json()
        assert info["sim_time_scale"] == 50.0
        assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 19
        body = {
            "input_ids": list(range(1, 65)),
            "sampling_params": {"max_new_tokens": 40, "ignore_eos": True},
            "stream": True,
        }
        chunks = []
        with httpx.stream("POST", sim.url + "/generate", json=body, timeout=30) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
        last = chunks[-1]
        assert last["meta_info"]["completion_tokens"] == 40
        assert len(last["text"].split()) == 40
        assert last["meta_info"]["finish_reason"]["type"] == "length"
        records = httpx.get(sim.url + "/sim/requests").json()
        assert records["time_scale"] == 50.0
        (rec,) = records["requests"]
        assert rec["completion_tokens"] == 40 and rec["prompt_tokens"] == 64
        assert rec["first_token_s"] < rec["finish_s"]
