"""The simulator's HTTP fields are the ones real sglang returns (0.5.23, and 0.5.10 where it
differs): entrypoints/http_server.py, managers/tokenizer_manager.py,
managers/scheduler_components/memory_usage.py."""

from __future__ import annotations

import json

import httpx
import pytest
from support.harness import SimProcess
from support.sim_spaces import SEED_NEXTN

GRAPH_PHASES = {
    "prefill",
    "decode",
    "target_verify",
    "draft_prefill",
    "draft_decode",
    "draft_extend",
}


@pytest.fixture(scope="module")
def mtp():
    with SimProcess.start(
        [*SEED_NEXTN, "--mem-fraction-static", "0.93", "--sim-time-scale", "50"]
    ) as sim:
        yield sim


def stream(url: str) -> list[dict]:
    body = {"input_ids": list(range(64)), "stream": True,
            "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}  # fmt: skip
    chunks = []
    with httpx.stream("POST", url + "/generate", json=body, timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:])["meta_info"])
    return chunks


def test_model_info_has_the_hf_model_type_and_the_served_name(mtp):
    info = httpx.get(mtp.url + "/model_info").json()
    assert info["model_type"] == "qwen3_5"
    assert info["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert info["served_model_name"] and info["has_image_understanding"] is True
    assert {"weight_version", "load_format", "tool_call_parser", "reasoning_parser"} <= set(info)


def test_server_info_reports_the_resolved_flag_and_graph_memory_per_phase(mtp):
    info = httpx.get(mtp.url + "/server_info").json()
    assert info["max_running_requests"] == 48  # sglang sets 48 for speculation when unset
    state = info["internal_states"][0]
    assert state["effective_max_running_requests_per_dp"] == 12  # 0.5.23's joint solve
    usage = state["memory_usage"]
    assert set(usage["graph"]) == GRAPH_PHASES
    assert sum(usage["graph"].values()) > 0
    assert {"weight", "kvcache", "startup_available", "token_capacity"} <= set(usage)


def test_ready_endpoint(mtp):
    assert httpx.get(mtp.url + "/ready").status_code == 200


def test_spec_fields_only_on_the_finishing_chunk(mtp):
    chunks = stream(mtp.url)
    assert len(chunks) > 1
    assert all("spec_accept_length" not in c for c in chunks[:-1])
    last = chunks[-1]
    assert last["finish_reason"] is not None and last["spec_accept_length"] > 1
    assert last["weight_version"] == "default" and last["num_retractions"] == 0


def test_0_5_10_api():
    with SimProcess.start(["--sim-sglang-version", "0.5.10", "--sim-time-scale", "50"]) as sim:
        assert httpx.get(sim.url + "/ready").status_code == 404
        info = httpx.get(sim.url + "/model_info").json()
        assert info["model_type"] == "qwen3_5" and "served_model_name" not in info
        usage = httpx.get(sim.url + "/server_info").json()["internal_states"][0]["memory_usage"]
        assert isinstance(usage["graph"], float)
        assert "total_retractions" in stream(sim.url)[-1]
