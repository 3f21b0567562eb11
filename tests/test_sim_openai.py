"""The openai package, as a real client, against the simulator; API key and /metrics."""

from __future__ import annotations

import httpx
import openai
import pytest
from support.harness import SimProcess

KEY = "sk-sim-test"


@pytest.fixture(scope="module")
def sim():
    with SimProcess.start(
        [
            "--sim-time-scale",
            "100",
            "--api-key",
            KEY,
            "--enable-metrics",
            "--served-model-name",
            "qwen-sim",
        ]
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(sim):
    return openai.OpenAI(base_url=sim.url + "/v1", api_key=KEY)


def test_models(client):
    assert [m.id for m in client.models.list()] == ["qwen-sim"]


def test_completion(client):
    out = client.completions.create(
        model="qwen-sim",
        prompt="one two three four",
        max_tokens=12,
        extra_body={"ignore_eos": True},
    )
    assert out.usage.prompt_tokens == 4 and out.usage.completion_tokens == 12
    assert len(out.choices[0].text.split()) == 12
    assert out.choices[0].finish_reason == "length"


def test_completion_stream_with_usage(client):
    stream = client.completions.create(
        model="qwen-sim",
        prompt="a b c d e f",
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert len(text.split()) == 20
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens == 6
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"


def test_chat(client):
    out = client.chat.completions.create(
        model="qwen-sim",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
        max_tokens=8,
        extra_body={"ignore_eos": True},
    )
    assert out.choices[0].message.role == "assistant"
    assert len(out.choices[0].message.content.split()) == 8
    # ChatML template: 5 tokens per message + 3 for the assistant turn
    assert out.usage.prompt_tokens == (5 + 2) + (5 + 2) + 3


def test_chat_stream_with_usage_and_prefix_hit(client):
    messages = [{"role": "user", "content": " ".join(f"w{i}" for i in range(300))}]
    first = client.chat.completions.create(
        model="qwen-sim", messages=messages, max_tokens=16, extra_body={"ignore_eos": True}
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "and then?"},
    ]
    stream = client.chat.completions.create(
        model="qwen-sim",
        messages=messages,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 16
    usage = chunks[-1].usage
    assert usage.completion_tokens == 16
    # the second turn re-sends the first: its prefix comes from the cache (Mamba track points)
    assert usage.prompt_tokens_details.cached_tokens >= 256


def test_natural_stop_without_ignore_eos(client):
    out = client.completions.create(model="qwen-sim", prompt="x y", max_tokens=2000)
    assert 1 <= out.usage.completion_tokens <= 2000


def test_api_key_is_enforced(sim):
    assert httpx.get(sim.url + "/v1/models").status_code == 401
    bad = openai.OpenAI(base_url=sim.url + "/v1", api_key="wrong")
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # sglang leaves /health and /metrics open
    assert httpx.get(sim.url + "/health").status_code == 200
    assert httpx.get(sim.url + "/metrics").status_code == 200
    ok = httpx.get(sim.url + "/server_info", headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["api_key"] is None


def test_metrics_have_sglang_names(sim, client):
    client.completions.create(
        model="qwen-sim", prompt="p q r", max_tokens=5, extra_body={"ignore_eos": True}
    )
    text = httpx.get(sim.url + "/metrics").text
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:spec_accept_length",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_count",
        "sglang:e2e_request_latency_seconds_sum",
        "sglang:mamba_usage",
        "sglang:hicache_host_used_tokens",
        "sglang:generation_tokens_total",
    ):
        assert name in text, name
    assert 'model_name="qwen-sim"' in text


def test_native_endpoints(sim):
    h = {"Authorization": f"Bearer {KEY}"}
    for path in ("/get_server_info", "/model_info", "/get_model_info"):
        assert httpx.get(sim.url + path, headers=h).status_code == 200, path
    assert httpx.get(sim.url + "/health_generate").status_code == 200
    out = httpx.post(
        sim.url + "/generate",
        headers=h,
        json={
            "text": ["a b", "c d e"],
            "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
        },
    )
    assert [r["meta_info"]["prompt_tokens"] for r in out.json()] == [2, 3]
    assert httpx.post(sim.url + "/flush_cache", headers=h).status_code == 200
    too_long = httpx.post(
        sim.url + "/generate",
        headers=h,
        json={"input_ids": list(range(300_000)), "sampling_params": {"max_new_tokens": 1}},
    )
    assert too_long.status_code == 400
    records = httpx.get(sim.url + "/sim/requests", headers=h).json()["requests"]
    assert records and all(r["error"] is None for r in records)
    assert httpx.post(sim.url + "/sim/requests/clear", headers=h).status_code == 200
    assert httpx.get(sim.url + "/sim/requests", headers=h).json()["requests"] == []


def test_metrics_off_without_flag():
    with SimProcess.start(["--sim-time-scale", "100"]) as proc:
        assert httpx.get(proc.url + "/metrics").status_code == 404
