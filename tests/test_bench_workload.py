import json

import pytest

from tuner.bench import WorkloadSpec, build_body
from tuner.bench.payload import flatten, ids_to_text
from tuner.errors import UserError


def test_random_is_seeded_and_sized():
    spec = WorkloadSpec.from_dict({"kind": "random", "requests": 5, "input_len": 64, "seed": 3})
    a, b = spec.make_conversations(), spec.make_conversations()
    assert a == b
    assert spec.num_requests == 5
    assert all(len(c.turns[0].user) == 64 and c.turns[0].output_len == 256 for c in a)
    other = WorkloadSpec.from_dict({"kind": "random", "requests": 5, "input_len": 64, "seed": 4})
    assert other.make_conversations() != a


def test_random_range_ratio_draws_lengths_in_range():
    spec = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 200, "input-len": 100, "output-len": 50, "range-ratio": 0.5}
    )
    inputs = [len(c.turns[0].user) for c in spec.make_conversations()]
    outputs = [c.turns[0].output_len for c in spec.make_conversations()]
    assert min(inputs) >= 50 and max(inputs) <= 100 and len(set(inputs)) > 10
    assert min(outputs) >= 25 and max(outputs) <= 50


def test_shared_prefix_groups_share_their_system_prompt():
    spec = WorkloadSpec.from_dict(
        {
            "kind": "shared-prefix",
            "groups": 3,
            "prompts_per_group": 4,
            "system_prompt_len": 32,
            "question_len": 8,
            "output_len": 16,
        }
    )
    convs = spec.make_conversations()
    assert spec.num_requests == 12 == len(convs)
    prefixes = {tuple(c.system) for c in convs}
    assert len(prefixes) == 3
    assert all(len(c.system) == 32 and len(c.turns[0].user) == 8 for c in convs)
    # sent interleaved, not group after group
    order = [tuple(c.system) for c in convs]
    assert order != sorted(order, key=order.index)


def test_multi_turn_counts_and_shape():
    spec = WorkloadSpec.from_dict(
        {
            "kind": "multi-turn",
            "conversations": 16,
            "turns": 4,
            "system_prompt_len": 2048,
            "user_len": 256,
            "answer_len": 256,
            "seed": 0,
        }
    )
    assert spec.num_requests == 64
    convs = spec.make_conversations()
    assert len(convs) == 16 and all(len(c.turns) == 4 for c in convs)
    assert all(len(t.synthetic_answer) == 256 and t.output_len == 256 for t in convs[0].turns)
    assert len({tuple(c.system) for c in convs}) == 1


def test_warmup_differs_from_measured_prompts():
    spec = WorkloadSpec.from_dict({"kind": "shared-prefix", "groups": 2, "prompts_per_group": 2})
    warm = spec.make_warmup(5)
    assert len(warm) == 5
    measured = {tuple(c.system) for c in spec.make_conversations()}
    assert not measured & {tuple(c.system) for c in warm}
    assert spec.make_warmup(0) == []


def test_round_trip_through_to_dict():
    spec = WorkloadSpec.from_dict({"kind": "multi-turn", "turns": 2, "user_len": 10})
    assert WorkloadSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"kind": "zipf"}, "allowed: random, shared-prefix, multi-turn, jsonl"),
        ({"kind": "random", "turns": 3}, "'turns' does not apply to kind 'random'"),
        ({"kind": "random", "input_len": 0}, "'input_len' must be an integer >= 1, got 0"),
        ({"kind": "random", "input_len": "big"}, "'input_len' must be an integer"),
        ({"kind": "random", "range_ratio": 1.5}, "'range_ratio' must be a number in [0, 1]"),
        ({"kind": "multi-turn", "turns": True}, "'turns' must be an integer"),
        ({"kind": "jsonl"}, "needs the key 'file'"),
        ({"kind": "jsonl", "file": "/nonexistent/x.jsonl"}, "does not exist"),
        ({"requests": 3, "num_requests": 4}, "given twice"),
        ({"kind": "random", "colour": "red"}, "allowed: kind, seed, requests"),
    ],
)
def test_bad_workloads_name_the_key_and_what_is_allowed(data, fragment):
    with pytest.raises(UserError) as err:
        WorkloadSpec.from_dict(data)
    assert fragment in str(err.value)


def test_jsonl_reads_text_and_ids(tmp_path):
    path = tmp_path / "reqs.jsonl"
    lines = [
        {"prompt": "hello there", "output_len": 5},
        {"input_ids": [1, 2, 3]},
        {"input_ids": [4, 5], "output_len": 2},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    spec = WorkloadSpec.from_dict({"kind": "jsonl", "file": str(path), "output_len": 9})
    convs = spec.make_conversations()
    assert spec.num_requests == 3
    assert [c.turns[0].output_len for c in convs] == [5, 9, 2]
    assert convs[0].turns[0].user == "hello there"
    limited = WorkloadSpec.from_dict(
        {"kind": "jsonl", "file": str(path), "requests": 2, "output_len": 1}
    )
    assert limited.num_requests == 2


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"prompt": "a", "input_ids": [1]}', "exactly one of 'prompt'"),
        ('{"output_len": 3}', "exactly one of 'prompt'"),
        ('{"input_ids": [1, "x"]}', "'input_ids' must be a non-empty list of integers"),
        ('{"prompt": ""}', "'prompt' must be a non-empty string"),
        ('{"prompt": "a", "output_len": -1}', "'output_len' must be an integer >= 1"),
        ('{"prompt": "a"}', "no 'output_len' on this line"),
        ('{"prompt": "a", "max_tokens": 3}', "unknown key(s) max_tokens"),
    ],
)
def test_jsonl_errors_name_file_line_and_problem(tmp_path, line, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine", "output_len": 1}\n\n' + line + "\n")
    spec = WorkloadSpec.from_dict({"kind": "jsonl", "file": str(path)})
    with pytest.raises(UserError) as err:
        spec.make_conversations()
    assert f"{path}:3: " in str(err.value)
    assert fragment in str(err.value)


def test_jsonl_asking_for_more_requests_than_lines(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text('{"prompt": "a", "output_len": 1}\n')
    with pytest.raises(UserError, match="asks for 3 requests but the file has only 1"):
        _ = WorkloadSpec.from_dict({"kind": "jsonl", "file": str(path), "requests": 3}).num_requests


def test_bodies_for_each_api():
    history = [("system", [1001, 1002]), ("user", [1003])]
    gen = build_body("generate", history, 7, ignore_eos=True, model=None)
    assert gen["input_ids"] == [1001, 1002, 1003]
    assert gen["sampling_params"] == {"max_new_tokens": 7, "ignore_eos": True, "temperature": 0.0}
    assert gen["stream"] is True
    comp = build_body("completions", history, 7, ignore_eos=True, model="m")
    assert comp["prompt"] == [1001, 1002, 1003] and comp["max_tokens"] == 7
    assert comp["model"] == "m" and comp["stream_options"]["include_usage"] is True
    chat = build_body(
        "chat", [*history, ("assistant", "ok"), ("user", "go")], 3, ignore_eos=False, model=None
    )
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "user"]
    assert chat["messages"][0]["content"] == ids_to_text([1001, 1002])
    assert len(chat["messages"][0]["content"].split()) == 2
    assert "model" not in chat
    assert flatten([("user", "a b"), ("assistant", [1001])]) == "a b\n" + ids_to_text([1001])


def _all_ids(spec: WorkloadSpec) -> list[int]:
    ids: list[int] = []
    for conversation in spec.make_conversations() + spec.make_warmup(3):
        ids += list(conversation.system)
        for turn in conversation.turns:
            ids += list(turn.user) + list(turn.synthetic_answer)
    return ids


@pytest.mark.parametrize(
    "workload",
    [
        {"kind": "random", "requests": 20, "input_len": 200},
        {"kind": "shared-prefix", "groups": 2, "prompts_per_group": 3, "system_prompt_len": 64},
        {"kind": "multi-turn", "conversations": 2, "turns": 2, "user_len": 32, "answer_len": 8},
    ],
)
def test_token_ids_stay_inside_a_small_vocabulary(workload):
    # Real sglang's embedding raises IndexError on an id past the vocabulary and the whole
    # server dies (tests/data/sglang_cpu/died_under_benchmark_0.5.23.log).
    spec = WorkloadSpec.from_dict(workload).with_vocab(2048)
    ids = _all_ids(spec)
    assert max(ids) < 2048
    assert min(ids) >= 256  # the low ids, where tokenizers keep special tokens, are left out
    assert len(set(ids)) > 100


def test_a_large_vocabulary_keeps_the_same_prompts():
    spec = WorkloadSpec.from_dict({"kind": "random", "requests": 4, "input_len": 50})
    assert spec.with_vocab(128256).make_conversations() == spec.make_conversations()
    assert spec.with_vocab(None).make_conversations() == spec.make_conversations()
    assert max(_all_ids(spec)) < 30000 and min(_all_ids(spec)) >= 1000


def test_the_vocabulary_is_not_a_workload_key():
    with pytest.raises(UserError, match="vocab_size"):
        WorkloadSpec.from_dict({"kind": "random", "vocab_size": 100})
    with pytest.raises(UserError, match="vocabulary size"):
        WorkloadSpec().with_vocab(1)
    assert "vocab_size" not in WorkloadSpec().with_vocab(2048).to_dict()
