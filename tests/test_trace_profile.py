"""A trace's profile: the figures `tuner init --workload` states and the report draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.bench.trace import read_trace
from tuner.bench.trace_profile import peak_rate, profile_trace


def test_a_mooncake_traces_profile(tmp_path: Path) -> None:
    items = [
        {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 100, "input_length": 1024, "output_length": 30, "hash_ids": [0, 1]},
        {"timestamp": 200, "input_length": 512, "output_length": 20, "hash_ids": [0]},
        {"timestamp": 20000, "input_length": 2048, "output_length": 40, "hash_ids": [5, 6, 7, 8]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    profile = profile_trace(read_trace(path), block_size=512)
    assert profile.format == "mooncake" and profile.requests == 4
    assert profile.duration_s == pytest.approx(20.0)
    assert profile.mean_rate_rps == pytest.approx(4 / 20.0)
    assert profile.peak_rate_rps == pytest.approx(3 / 10.0)  # three in the first 10 s
    assert profile.input_len[50] == pytest.approx(1024)
    assert profile.output_len[99] == pytest.approx(39.7)
    # request 2 reuses 1023 of 1024 (never a whole prompt), request 3 511 of 512
    assert profile.block_reuse == pytest.approx((1023 + 511) / 4608)
    assert profile.multi_turn_sessions == 0


def test_a_chat_traces_sessions_and_lengths(tmp_path: Path) -> None:
    line = {
        "messages": [
            {"role": "user", "content": "x" * 40},
            {"role": "assistant", "content": "y" * 80},
            {"role": "user", "content": "z" * 40},
        ],
        "max_tokens": 7,
    }
    path = tmp_path / "chat.jsonl"
    single = {**line, "messages": line["messages"][:1]}
    path.write_text(json.dumps(line) + "\n" + json.dumps(single))
    profile = profile_trace(read_trace(path), block_size=512)
    assert profile.sessions == 2 and profile.multi_turn_sessions == 1
    assert profile.requests == 3
    # the second turn resends the first (10 tokens) and its answer (20) before its own 10
    assert max(profile.input_len.values()) <= 40 and profile.input_len[50] == pytest.approx(10)
    assert profile.duration_s is None and profile.block_reuse is None


def test_peak_rate_is_the_busiest_window() -> None:
    assert peak_rate([0.0, 0.1, 0.2, 5.0, 30.0], 10.0) == pytest.approx(0.4)
    assert peak_rate([1.0, 1.0], 10.0) == 0.0  # no span: no rate
    assert peak_rate([0.0, 1.0, 2.0], 10.0) == pytest.approx(3 / 2.0)  # window cut to the span
