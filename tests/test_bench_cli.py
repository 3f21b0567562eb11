"""`tuner bench` end to end against the fake server."""

import json
import subprocess
import sys

import pytest
from support.bench_fake_server import fake_server, free_port


def tuner(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def server():
    with fake_server("--time-scale", "20", "--ttft", "0.2", "--itl", "0.05") as s:
        yield s


def test_bench_writes_summary_json_and_details(server, tmp_path):
    out, details = tmp_path / "summary.json", tmp_path / "details.jsonl"
    run = tuner(
        "--url", server.url, "--workload", "random", "--input-len", "64", "--output-len", "8",
        "--concurrency", "4", "--requests", "12", "--stages", "3", "--slo-ttft-ms", "5000",
        "--output-json", str(out), "--output-details", str(details),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "output throughput" in run.stdout and "TTFT" in run.stdout
    summary = json.loads(out.read_text())
    for key in (
        "output_throughput",
        "median_ttft_ms",
        "p99_tpot_ms",
        "request_throughput",
        "total_throughput",
        "input_throughput",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "duration",
        "concurrency",
        "request_goodput",
    ):
        assert key in summary, key
    assert summary["completed"] == 12 and summary["total_output_tokens"] == 96
    assert summary["workload"]["kind"] == "random" and summary["max_concurrency"] == 4
    assert summary["time_scale"] == 20.0 and len(summary["stages"]) == 3
    lines = [json.loads(x) for x in details.read_text().splitlines()]
    assert len(lines) == 12
    assert {"start_s", "ttft_s", "chunk_times_s", "chunk_tokens", "error"} <= set(lines[0])


def test_multi_turn_from_the_command_line(server):
    run = tuner(
        "--url", server.url, "--workload", "multi-turn", "--conversations", "2", "--turns", "2",
        "--system-prompt-len", "32", "--user-len", "8", "--answer-len", "4", "--concurrency", "2",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "multi-turn" in run.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--workload", "random", "--turns", "3"), "'turns' does not apply to kind 'random'"),
        (("--workload", "zipf"), "allowed: random, shared-prefix, multi-turn, jsonl"),
        (("--concurrency", "0"), "concurrency must be an integer >= 1"),
        (("--api", "grpc"), "allowed: generate, completions, chat"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, fragment):
    run = tuner("--url", "http://127.0.0.1:9", *args)
    assert run.returncode == 2
    assert fragment in run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


def test_unreachable_server_exits_2():
    url = f"http://127.0.0.1:{free_port()}"
    run = tuner("--url", url, "--requests", "2")
    assert run.returncode == 2
    assert f"cannot reach the server at {url}" in run.stderr


def test_malformed_jsonl_names_file_and_line(tmp_path, server):
    path = tmp_path / "reqs.jsonl"
    path.write_text('{"prompt": "hi", "output_len": 2}\n{"prompt": "oops", "output_len": 0}\n')
    run = tuner("--url", server.url, "--workload", "jsonl", "--file", str(path))
    assert run.returncode == 2
    assert f"{path}:2: 'output_len' must be an integer >= 1, got 0" in run.stderr


def test_a_server_that_is_not_sglang_is_one_line_and_exit_2(tmp_path):
    """A plain web server (Python's http.server: HTML pages, 404 for sglang's routes) used to
    get a table of zeros and a raw HTML body."""
    (tmp_path / "index.html").write_text("<html><body>a web page</body></html>")
    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(100):  # until it listens
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.HTTPError:
                import time

                time.sleep(0.1)
        run = tuner("--url", url, "--requests", "2", "--output-len", "4")
    finally:
        web.terminate()
        web.wait(timeout=10)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(f"error: {url} does not look like an sglang server: ")
    assert "/server_info answered HTTP 404 (text/html)" in run.stderr
    assert run.stderr.count("\n") == 1 and "<html" not in run.stderr + run.stdout
    assert "output throughput" not in run.stdout  # no table
