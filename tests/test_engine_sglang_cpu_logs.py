"""The log reader on what real sglang 0.5.23 printed on a CPU (tests/data/sglang_cpu/).

The logs were captured from the real server serving the tiny Llama of tests/support/tiny_llama.py
(paths replaced by VENV and tiny-llama): a start-up with its noise (15 "Ignore import error"
lines, "Fail to set RLIMIT_NOFILE", warnings), a flag the CPU refuses, and a crash under a
benchmark whose token ids were past the vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from tuner.engines.sglang import READY_LINE, classify_failure, crash_cause, parse_capacity

DATA = Path(__file__).parent / "data" / "sglang_cpu"


def _log(name: str) -> str:
    return (DATA / name).read_text()


def test_the_real_start_up_is_read_through_its_noise():
    text = _log("startup_0.5.23.log")
    assert text.count("Ignore import error when loading") == 15
    assert "Fail to set RLIMIT_NOFILE" in text
    assert READY_LINE in text
    capacity = parse_capacity(text)
    # The scheduler's summary line on a CPU says available_cpu_mem where a GPU says _gpu_.
    assert capacity == {
        "kv_cache_tokens": 8192,
        "kv_cache_gb": 0.0,
        "max_total_num_tokens": 8192,
        "chunked_prefill_size": 4096,
        "max_prefill_tokens": 16384,
        "max_running_requests": 2048,
        "context_len": 2048,
        "available_cpu_mem_gb": 21.35,
    }


def test_a_start_up_stopped_before_ready_is_not_blamed_on_its_noise():
    text = _log("startup_0.5.23.log")
    before_ready = text[: text.index(READY_LINE)]
    failure_class, message = classify_failure(before_ready, -15)
    assert failure_class == "exited_before_ready"
    assert "signal 15" in message
    assert "Ignore import error" not in message and "RLIMIT" not in message


def test_a_flag_the_cpu_refuses_is_a_start_up_rule_with_sglangs_words():
    failure_class, message = classify_failure(_log("kv_cache_dtype_fp8_e5m2_0.5.23.log"), -9)
    assert failure_class == "startup_rule"
    assert message == "ValueError: --kv-cache-dtype fp8_e5m2 is not supported on CPU."


def test_a_crash_under_the_benchmark_names_its_exception():
    text = _log("died_under_benchmark_0.5.23.log")
    assert READY_LINE in text  # it was serving when it died
    failure_class, message = classify_failure(text, -9)
    assert failure_class == "exited_before_ready"
    assert message.endswith("IndexError: index out of range in self")
    assert crash_cause(text) == "IndexError: index out of range in self"
    assert crash_cause(_log("startup_0.5.23.log")) is None
