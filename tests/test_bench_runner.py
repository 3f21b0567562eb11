"""The client and the runner against a small fake sglang server (support/bench_fake_server.py)."""

import asyncio
import itertools
import statistics

import httpx
import pytest
from support.bench_fake_server import fake_server, free_port

from tuner.bench import BenchClient, BenchConfig, WorkloadSpec, run_bench, run_bench_async
from tuner.bench.client import spread
from tuner.bench.metrics import itls_ms
from tuner.errors import UserError

# Modelled timing of the fake: 0.5 s to the first chunk, 0.1 s between chunks, 20x faster.
FAKE = ("--time-scale", "20", "--ttft", "0.5", "--itl", "0.1")


def random_spec(n=12, input_len=32, output_len=5, **extra):
    return WorkloadSpec.from_dict(
        {"kind": "random", "requests": n, "input_len": input_len, "output_len": output_len, **extra}
    )


def served(url):
    return httpx.get(f"{url}/fake/requests").json()


@pytest.fixture(scope="module")
def server():
    with fake_server(*FAKE) as s:
        yield s


def test_generate_run_records_every_request(server):
    result = run_bench(BenchConfig(url=server.url, workload=random_spec(), concurrency=4))
    s = result.summary
    assert s["completed"] == 12 and s["failed"] == 0
    assert s["total_output_tokens"] == 12 * 5
    assert s["total_input_tokens"] == 12 * 32
    assert len(result.records) == 12 and result.stopped_at_stage is None
    assert sorted(r.index for r in result.records) == list(range(12))
    r = result.records[0]
    assert r.chunk_tokens == [1] * 5 and r.output_tokens == r.expected_output_tokens == 5
    assert r.rid and r.rid.startswith("req-") and r.http_status == 200
    assert result.duration_s == s["duration"] == max(x.end_s for x in result.records)


def test_times_are_converted_to_modelled_seconds(server):
    result = run_bench(BenchConfig(url=server.url, workload=random_spec(8), concurrency=2))
    assert result.time_scale == 20.0
    s = result.summary
    # The fake sleeps 0.5/20 s to the first token: we must report ~500 ms, not ~25 ms.
    # Loose bounds: client overhead is scaled up 20x too and the machine is shared. A client
    # that reads late gets tokens in bursts, so a loaded machine can measure the TPOT under
    # the fake's 100 ms (89 ms beside two benchmark processes); unscaled it would be 5 ms.
    assert 450 < s["median_ttft_ms"] < 800
    assert 60 < s["median_tpot_ms"] < 200
    by_rid = {x["rid"]: x for x in served(server.url)["requests"]}
    ttfts = [by_rid[r.rid]["first_token_s"] - by_rid[r.rid]["arrival_s"] for r in result.records]
    assert s["median_ttft_ms"] >= statistics.median(ttfts) * 1000


@pytest.mark.parametrize(("option", "scale"), [("--old-info-only", 20.0), ("--no-info", 1.0)])
def test_time_scale_from_the_older_endpoint_or_none(option, scale):
    with fake_server("--time-scale", "20", "--ttft", "0.05", "--itl", "0.01", option) as s:
        result = run_bench(BenchConfig(url=s.url, workload=random_spec(2), concurrency=2))
    assert result.time_scale == scale
    assert result.summary["completed"] == 2


def test_unreachable_server_is_a_clear_user_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UserError, match=f"cannot reach the server at {url}"):
        run_bench(BenchConfig(url=url, workload=random_spec(2)))


def test_server_still_loading_is_a_clear_user_error():
    with fake_server("--loading") as s, pytest.raises(UserError, match=r"not ready.*HTTP 503"):
        run_bench(BenchConfig(url=s.url, workload=random_spec(2)))


def test_api_key_from_the_environment(monkeypatch):
    with fake_server(*FAKE, "--api-key", "s3cret") as s:
        monkeypatch.delenv("SGLANG_API_KEY", raising=False)
        with pytest.raises(UserError, match="refused us \\(HTTP 401\\); set SGLANG_API_KEY"):
            run_bench(BenchConfig(url=s.url, workload=random_spec(2)))
        monkeypatch.setenv("SGLANG_API_KEY", "s3cret")
        assert run_bench(BenchConfig(url=s.url, workload=random_spec(2))).summary["completed"] == 2
        monkeypatch.delenv("SGLANG_API_KEY")
        cfg = BenchConfig(url=s.url, workload=random_spec(2), api_key="s3cret")
        assert run_bench(cfg).summary["completed"] == 2


def test_http_errors_and_disconnects_are_recorded_not_raised():
    with fake_server(*FAKE, "--fail-every", "4", "--disconnect-every", "5") as s:
        result = run_bench(
            BenchConfig(url=s.url, workload=random_spec(18), concurrency=3, warmup_requests=0)
        )
    errors = [r.error for r in result.records if r.error]
    assert result.summary["failed"] == len(errors) == 7  # 4, 8, 12, 16 and 5, 10, 15
    assert sum(e.startswith("HTTP 500") for e in errors) == 4
    assert sum(e.startswith("disconnected") for e in errors) == 3
    assert result.summary["completed"] == 11
    assert result.summary["total_output_tokens"] == 11 * 5


def test_timeouts_are_recorded_per_request():
    with fake_server("--time-scale", "20", "--ttft", "100", "--itl", "0.01") as s:
        cfg = BenchConfig(
            url=s.url,
            workload=random_spec(3),
            concurrency=3,
            warmup_requests=0,
            request_timeout_s=2.0,
        )
        result = run_bench(cfg)
    assert [r.error for r in result.records] == ["timeout after 2 s"] * 3
    assert all(1.9 < r.latency_s < 5 for r in result.records)


def test_stages_are_cumulative_and_the_callback_sees_them(server):
    seen = []
    result = run_bench(
        BenchConfig(url=server.url, workload=random_spec(20), concurrency=4, stages=4),
        on_stage=lambda i, s: seen.append((i, s["completed"])) or True,
    )
    assert seen == [(0, 5), (1, 10), (2, 15), (3, 20)]
    assert [st["completed"] for st in result.stages] == [5, 10, 15, 20]
    assert result.stages[-1] == result.summary
    assert result.stages[0]["duration"] < result.stages[-1]["duration"]


def test_stopping_cancels_in_flight_requests_and_returns_what_was_measured():
    with fake_server("--time-scale", "20", "--ttft", "0.2", "--itl", "0.2") as s:
        cfg = BenchConfig(
            url=s.url,
            # Lengths that differ, so that finishes come apart and the slots they free are
            # refilled before the stop (equal lengths finish in waves; on a busy host a whole
            # wave can be read at once, leaving nothing in flight to cancel).
            workload=random_spec(40, output_len=40, range_ratio=0.25),
            concurrency=8,
            stages=5,
            warmup_requests=0,
        )
        result = run_bench(cfg, on_stage=lambda i, summary: i < 1)
        assert result.stopped_at_stage == 1
        assert len(result.stages) == 2 and len(result.records) == 16
        assert result.summary == result.stages[-1]
        # The server saw the in-flight requests go away and served nothing past the stop.
        reqs = served(s.url)["requests"]
    assert len(reqs) < 40
    assert sum(r.get("error") == "cancelled" for r in reqs) >= 1


def test_callback_errors_propagate(server):
    def boom(i, s):
        raise RuntimeError("pruner broke")

    with pytest.raises(RuntimeError, match="pruner broke"):
        run_bench(BenchConfig(url=server.url, workload=random_spec(6), stages=2), on_stage=boom)


def test_warmup_is_sent_but_not_counted():
    with fake_server(*FAKE) as s:
        result = run_bench(
            BenchConfig(url=s.url, workload=random_spec(4), concurrency=2, warmup_requests=3)
        )
        assert len(served(s.url)["requests"]) == 7
    assert len(result.warmup_records) == 3 and len(result.records) == 4
    assert result.summary["completed"] == 4


def test_concurrency_cap_holds():
    with fake_server(*FAKE) as s:
        run_bench(BenchConfig(url=s.url, workload=random_spec(12), concurrency=3))
        assert served(s.url)["max_in_flight"] == 3


def test_multi_turn_waits_for_each_turn_and_resends_the_answer():
    spec = WorkloadSpec.from_dict(
        {
            "kind": "multi-turn",
            "conversations": 3,
            "turns": 3,
            "system_prompt_len": 16,
            "user_len": 4,
            "answer_len": 3,
        }
    )
    with fake_server(*FAKE) as s:
        result = run_bench(BenchConfig(url=s.url, workload=spec, concurrency=8, warmup_requests=0))
        bodies = {r["rid"]: r["body"] for r in served(s.url)["requests"]}
    assert result.summary["completed"] == 9
    by_conv = {}
    for r in result.records:
        by_conv.setdefault(r.conversation, {})[r.turn] = r
    assert sorted(by_conv) == [0, 1, 2]
    for turns in by_conv.values():
        assert sorted(turns) == [0, 1, 2]
        for k in (1, 2):
            assert turns[k].start_s >= turns[k - 1].end_s
            before = bodies[turns[k - 1].rid]["input_ids"]
            now = bodies[turns[k].rid]["input_ids"]
            # previous prompt + the server's answer (its output ids) + the new user turn
            assert now[: len(before)] == before
            assert now[len(before) : len(before) + 3] == [7000, 7001, 7002]
            assert len(now) == len(before) + 3 + 4
        assert turns[2].cached_tokens > turns[1].cached_tokens > 0
    assert result.summary["cache_hit_rate"] > 0.4


def test_multi_turn_without_output_ids_uses_synthetic_answers():
    spec = WorkloadSpec.from_dict(
        {
            "kind": "multi-turn",
            "conversations": 2,
            "turns": 2,
            "system_prompt_len": 8,
            "user_len": 4,
            "answer_len": 3,
        }
    )
    with fake_server(*FAKE, "--no-output-ids") as s:
        result = run_bench(BenchConfig(url=s.url, workload=spec, warmup_requests=0))
        bodies = [r["body"]["input_ids"] for r in served(s.url)["requests"]]
    conv = spec.make_conversations()[0]
    assert result.summary["completed"] == 4
    expected = (
        conv.system + conv.turns[0].user + conv.turns[0].synthetic_answer + conv.turns[1].user
    )
    assert expected in bodies


def test_multi_turn_chat_resends_the_generated_text():
    spec = WorkloadSpec.from_dict(
        {"kind": "multi-turn", "conversations": 2, "turns": 2, "system_prompt_len": 8,
         "user_len": 4, "answer_len": 3}
    )  # fmt: skip
    with fake_server(*FAKE) as s:
        result = run_bench(BenchConfig(url=s.url, workload=spec, api="chat", warmup_requests=0))
        messages = [r["body"]["messages"] for r in served(s.url)["requests"]]
    assert result.summary["completed"] == 4
    second_turns = [m for m in messages if len(m) == 4]
    assert len(second_turns) == 2
    assert all(m[2] == {"role": "assistant", "content": " w w w"} for m in second_turns)


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
def test_request_rate_spaces_requests_in_modelled_time(server, arrival):
    rate = 10.0  # modelled requests/s, i.e. 200/s of wall time at scale 20
    cfg = BenchConfig(
        url=server.url,
        workload=random_spec(30, output_len=2),
        request_rate=rate,
        arrival=arrival,
        concurrency=30,
        warmup_requests=0,
    )
    starts = sorted(r.start_s for r in run_bench(cfg).records)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    mean_gap = statistics.mean(gaps)
    assert 0.07 < mean_gap < 0.2
    if arrival == "constant":
        assert statistics.median(gaps) == pytest.approx(0.1, rel=0.3)
    else:
        assert statistics.pstdev(gaps) > 0.03  # exponential gaps vary as much as their mean


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_endpoints(server, api):
    cfg = BenchConfig(
        url=server.url,
        workload=random_spec(4, input_len=16, output_len=6),
        concurrency=2,
        api=api,
        warmup_requests=0,
    )
    result = run_bench(cfg)
    assert result.summary["completed"] == 4
    assert all(r.output_tokens == 6 and len(r.chunk_tokens) == 6 for r in result.records)
    assert all(r.prompt_tokens == 16 for r in result.records)
    bodies = [x["body"] for x in served(server.url)["requests"][-4:]]
    assert all(b.get("model") == "fake-model" and b["max_tokens"] == 6 for b in bodies)


def test_speculative_chunks_and_accept_length():
    with fake_server(*FAKE, "--tokens-per-chunk", "3", "--accept-length", "3.0") as s:
        result = run_bench(BenchConfig(url=s.url, workload=random_spec(4, output_len=7)))
    r = result.records[0]
    assert r.chunk_tokens == [3, 3, 1] and r.output_tokens == 7
    assert result.summary["accept_length"] == pytest.approx(3.0)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_chunks_of_several_tokens_without_per_chunk_usage(api):
    with fake_server(*FAKE, "--tokens-per-chunk", "3") as s:
        cfg = BenchConfig(url=s.url, workload=random_spec(2, output_len=7), api=api)
        result = run_bench(cfg)
    for r in result.records:
        assert r.output_tokens == 7 and sum(r.chunk_tokens) == 7
        assert r.chunk_tokens == [3, 3, 1]  # shared out by text length: " w w w", ..., " w"
        gaps = itls_ms(r)  # a 3-token chunk gives its gap / 3 three times
        # (no comparison with the last gap: both are wall-clock gaps, which a busy host bends)
        times = r.chunk_times_s
        assert len(gaps) == 4 and gaps[0] == gaps[1] == gaps[2]
        assert gaps[0] == pytest.approx((times[1] - times[0]) * 1000 / 3)


def test_spread_shares_a_total_by_weight():
    assert spread(10, [1, 1, 1]) == [4, 3, 3]
    assert spread(10, [5, 1, 4]) == [4, 2, 4]
    assert spread(2, [1, 1, 1]) == [1, 1, 0]
    assert spread(7, [0, 0]) == [4, 3]
    assert sum(spread(256, [3] * 5 + [100])) == 256


def test_async_api_inside_a_running_loop(server):
    async def main():
        return await run_bench_async(BenchConfig(url=server.url, workload=random_spec(3)))

    assert asyncio.run(main()).summary["completed"] == 3


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"request_rate": -1.0}, "request rate must be a number > 0"),
        ({"arrival": "bursty"}, "allowed: poisson, constant"),
        ({"api": "grpc"}, "allowed: generate, completions, chat"),
        ({"stages": 0}, "stages must be an integer >= 1"),
        ({"slos": {"ttft": 5}}, "allowed: ttft_ms, tpot_ms, e2e_latency_ms"),
    ],
)
def test_bad_config_is_a_user_error(kwargs, fragment):
    with pytest.raises(UserError, match=None) as err:
        BenchConfig(url="http://127.0.0.1:1", workload=random_spec(), **kwargs)
    assert fragment in str(err.value)


def test_bad_url_is_a_user_error():
    with pytest.raises(UserError, match="must start with http"):
        BenchClient("localhost:30000")


def test_a_server_that_dies_under_the_benchmark_is_reported_as_gone():
    # Like real sglang fed a token id past its vocabulary: the process exits mid-run.
    spec = WorkloadSpec(kind="random", requests=6, input_len=8, output_len=2)
    with fake_server("--crash-on-token-above", "2000") as server:
        result = run_bench(BenchConfig(url=server.url, workload=spec.with_vocab(50000)))
        server.process.wait(timeout=10)
    assert result.summary["completed"] == 0
    assert result.server_lost is not None
    assert result.server_lost.startswith(f"the server at {server.url} stopped answering")


def test_a_server_that_stays_up_is_not_reported_as_gone():
    spec = WorkloadSpec(kind="random", requests=4, input_len=8, output_len=2)
    with fake_server("--fail-every", "2") as server:
        result = run_bench(BenchConfig(url=server.url, workload=spec))
    assert result.summary["failed"] > 0 and result.server_lost is None


def test_the_vocabulary_comes_from_the_served_models_config(tmp_path):
    from tuner.bench.runner import model_vocab_size

    (tmp_path / "config.json").write_text('{"vocab_size": 2048, "hidden_size": 128}')
    assert model_vocab_size({"model_path": str(tmp_path)}) == 2048
    nested = tmp_path / "vl"
    nested.mkdir()
    (nested / "config.json").write_text('{"text_config": {"vocab_size": 151936}}')
    assert model_vocab_size({"model_path": str(nested)}) == 151936
    assert model_vocab_size({"model_path": "no/such-model-here"}) is None
    assert model_vocab_size({}) is None
