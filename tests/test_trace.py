"""Trace files in the five formats: each loads from a file the test writes, a bad line ends in
one line naming the file, the line and the field, and prompts share exactly the prefixes the
trace's hash ids say they share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.bench import BenchConfig, WorkloadSpec
from tuner.bench.trace import block_reuse, read_trace
from tuner.bench.workload import TOKEN_ID_HIGH, TOKEN_ID_LOW
from tuner.errors import UserError


def write_lines(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


MOONCAKE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 12, "hash_ids": [0, 1, 2]},
    {"timestamp": 250, "input_length": 1300, "output_length": 20, "hash_ids": [0, 1, 3]},
    {"timestamp": 3000, "input_length": 700, "output_length": 5, "hash_ids": [4, 5]},
    {"timestamp": 3100, "input_length": 600, "output_length": 7, "hash_ids": [0, 6]},
]

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2800000,879,4
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""

SHAREGPT = [
    {
        "id": "a1",
        "conversations": [
            {"from": "human", "value": "What is a radix tree?"},
            {"from": "gpt", "value": "A compressed trie: each node holds a run of symbols."},
            {"from": "human", "value": "And why does a server cache prefixes in one?"},
            {"from": "gpt", "value": "Requests that start alike share the work of their start."},
        ],
    },
    {"id": "a2", "conversations": [{"from": "human", "value": "Say hello."}]},
]

CHAT = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
    {
        "messages": [
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "Seven."},
            {"role": "user", "content": "Another?"},
        ],
        "max_tokens": 9,
    },
]


def spec(path: Path, **keys: object) -> WorkloadSpec:
    return WorkloadSpec.from_dict({"kind": "trace", "path": str(path), **keys})


def test_mooncake_loads_with_its_times_and_shares_prefixes_by_hash_id(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trace.jsonl", MOONCAKE)
    workload = spec(path)
    assert workload.trace().format == "mooncake"
    assert workload.replay_mode == "open-loop"
    assert workload.arrival_offsets() == [0.0, 0.25, 3.0, 3.1]
    prompts = [c.turns[0].user for c in workload.make_conversations()]
    assert [len(p) for p in prompts] == [1100, 1300, 700, 600]
    assert [c.turns[0].output_len for c in workload.make_conversations()] == [12, 20, 5, 7]
    # ids 0 and 1 in common: the first 1024 tokens are the same, the third block is not
    assert prompts[0][:1024] == prompts[1][:1024]
    assert prompts[0][1024:1100] != prompts[1][1024:1100]
    # only block 0 in common with the fourth request; nothing with the third
    assert prompts[3][:512] == prompts[0][:512] and prompts[3][512:] != prompts[0][512:600]
    assert prompts[2][:512] != prompts[0][:512]
    assert all(TOKEN_ID_LOW <= t < TOKEN_ID_HIGH for p in prompts for t in p)
    # the same seed gives the same prompts, another seed others
    assert [c.turns[0].user for c in spec(path).make_conversations()] == prompts
    other = spec(path, seed=1).make_conversations()
    assert other[0].turns[0].user != prompts[0]
    # reuse: request 2 reuses 2 blocks, request 4 one block, of 3700 prompt tokens
    assert block_reuse(workload.trace().entries, 512) == pytest.approx((1024 + 512) / 3700)


def test_token_ids_fit_a_small_vocabulary(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trace.jsonl", MOONCAKE)
    prompts = [c.turns[0].user for c in spec(path).with_vocab(4000).make_conversations()]
    flat = [t for p in prompts for t in p if isinstance(t, int)]
    assert min(flat) >= 500 and max(flat) < 4000


def test_azure_and_burstgpt_load_lengths_and_times(tmp_path: Path) -> None:
    azure = tmp_path / "azure.csv"
    azure.write_text(AZURE)
    workload = spec(azure)
    assert workload.trace().format == "azure"
    offsets = workload.arrival_offsets()
    assert offsets is not None and offsets[1] == pytest.approx(4.314579)
    turns = [c.turns[0] for c in workload.make_conversations()]
    assert [(len(t.user), t.output_len) for t in turns] == [(374, 44), (396, 109), (879, 4)]

    burst = tmp_path / "burst.csv"
    burst.write_text(BURSTGPT)
    workload = spec(burst, speedup=2.0)
    assert workload.trace().format == "burstgpt"
    # the failed request (0 response tokens) is skipped; times from the first, halved
    assert workload.arrival_offsets() == [0.0, 56.5]
    turns = [c.turns[0] for c in workload.make_conversations()]
    assert [(len(t.user), t.output_len) for t in turns] == [(472, 18), (417, 276)]


def test_sharegpt_and_chat_are_sent_as_text_turns(tmp_path: Path) -> None:
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps(SHAREGPT, indent=2))
    workload = spec(share, output_len=32)
    assert workload.trace().format == "sharegpt"
    assert workload.replay_mode == "closed-loop" and workload.arrival_offsets() is None
    first, second = workload.make_conversations()
    assert [t.user for t in first.turns] == [
        "What is a radix tree?",
        "And why does a server cache prefixes in one?",
    ]
    assert first.turns[0].synthetic_answer.startswith("A compressed trie")
    assert first.turns[0].output_len == 13  # its answer's length, ~4 characters a token
    assert second.turns[0].output_len == 32  # no answer in the file: the workload's
    assert workload.num_requests == 3

    chat = write_lines(tmp_path / "chat.jsonl", CHAT)
    workload = spec(chat)
    assert workload.trace().format == "openai-chat"
    first, second = workload.make_conversations()
    assert first.system == "Be brief." and first.turns[0].user == "Hi"
    assert [t.user for t in second.turns] == ["Name a prime.", "Another?"]
    assert second.turns[0].synthetic_answer == "Seven." and second.turns[1].output_len == 9


def test_window_and_cap(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trace.jsonl", MOONCAKE)
    full = [c.turns[0].user for c in spec(path).make_conversations()]
    windowed = spec(path, start=0.2, duration=2.9)
    assert windowed.arrival_offsets() == [0.0, pytest.approx(2.75)]
    # a window sends the prompts the whole trace sends
    assert [c.turns[0].user for c in windowed.make_conversations()] == full[1:3]
    assert spec(path, max_requests=3).num_requests == 3
    with pytest.raises(UserError, match="no request of the trace falls in the window"):
        spec(path, start=100).make_conversations()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "trace.jsonl",
            json.dumps(MOONCAKE[0]) + "\n" + json.dumps({**MOONCAKE[1], "input_length": -3}),
            r"trace\.jsonl:2: field 'input_length' must be an integer >= 1, got -3",
        ),
        (
            "trace.jsonl",
            json.dumps(MOONCAKE[0]) + "\n\n" + '{"timestamp": 5, "input_length": 3,',
            r"trace\.jsonl:3: not valid JSON",
        ),
        (
            "moon.jsonl",
            json.dumps(MOONCAKE[0]) + "\n" + json.dumps({**MOONCAKE[1], "hash_ids": "x"}),
            r"moon\.jsonl:2: field 'hash_ids' must be a list of integers >= 0",
        ),
        (
            "azure.csv",
            AZURE.replace("396,109", "396,lots"),
            r"azure\.csv:3: field 'GeneratedTokens' must be an integer >= 0, got 'lots'",
        ),
        (
            "azure.csv",
            AZURE.replace("2023-11-16 18:15:51.2800000", "yesterday"),
            r"azure\.csv:4: field 'TIMESTAMP' must be a date and time",
        ),
        (
            "burst.csv",
            BURSTGPT.replace("118,GPT-4", "soon,GPT-4"),
            r"burst\.csv:4: field 'Timestamp' must be seconds >= 0, got 'soon'",
        ),
        (
            "share.json",
            json.dumps(SHAREGPT, indent=2).replace('"gpt"', '"robot"', 1),
            r"share\.json:2: field 'conversations' must hold objects with 'from'",
        ),
        (
            "chat.jsonl",
            json.dumps(CHAT[0]) + "\n" + json.dumps({"messages": [{"role": "user"}]}),
            r"chat\.jsonl:2: field 'messages' must hold objects with 'role'",
        ),
    ],
)
def test_a_bad_line_names_file_line_and_field(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UserError, match=message) as err:
        spec(path).make_conversations()
    assert "\n" not in str(err.value)


def test_keys_that_do_not_fit_the_mode_are_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trace.jsonl", MOONCAKE)
    with pytest.raises(UserError, match="'concurrency' applies to mode 'closed-loop'"):
        spec(path, mode="open-loop", concurrency=4)
    with pytest.raises(UserError, match="'mode' is 'sometimes'"):
        spec(path, mode="sometimes")
    with pytest.raises(UserError, match="does not exist"):
        spec(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="drop the request rate"):
        BenchConfig(url="http://127.0.0.1:1", workload=spec(path), request_rate=3.0)
    with pytest.raises(UserError, match="needs its number of clients"):
        BenchConfig(url="http://127.0.0.1:1", workload=spec(path, mode="closed-loop"))
    closed = BenchConfig(
        url="http://127.0.0.1:1", workload=spec(path, mode="closed-loop", concurrency=3)
    )
    assert closed.effective_concurrency == 3
    share = tmp_path / "s.json"
    share.write_text(json.dumps(SHAREGPT))
    with pytest.raises(UserError, match="has no arrival times"):
        spec(share, mode="open-loop").arrival_offsets()
    with pytest.raises(UserError, match="'start' and 'duration' need them"):
        spec(share, start=1.0).make_conversations()


def test_an_unrecognised_file_asks_for_the_format(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UserError, match=r"odd\.csv:1: cannot tell the trace's format"):
        read_trace(path)


def test_warmup_prompts_do_not_warm_the_measured_prefixes(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trace.jsonl", MOONCAKE)
    workload = spec(path)
    measured = {tuple(c.turns[0].user[:512]) for c in workload.make_conversations()}
    warmup = workload.make_warmup(2)
    assert len(warmup) == 2 and [len(c.turns[0].user) for c in warmup] == [1100, 1300]
    assert not {tuple(c.turns[0].user[:512]) for c in warmup} & measured
