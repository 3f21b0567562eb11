"""`tuner init --workload FILE` with a trace: it says what the trace holds, writes an open loop at
the trace's times (or a closed loop of one client per conversation), an SLO from its lengths and
HiCache only where the reuse can pay; the space's dry run and a short study on the simulator
work."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from support.traces import mooncake_trace, sharegpt_file
from typer.testing import CliRunner

from tuner.bench.trace import block_reuse, read_trace
from tuner.cli import app
from tuner.engines.model_config import ModelMemory, read_config
from tuner.errors import UserError
from tuner.init.command import written_space
from tuner.init.write import InitRequest
from tuner.predict.estimate import Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.workload_shape import WorkloadShape
from tuner.space.load import load_space
from tuner.study.loop import run_study
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run

ROOT = Path(__file__).resolve().parents[1]
QWEN3_8B = ROOT / "tuner" / "sim" / "profiles" / "model" / "qwen3-8b"
MIXTRAL = ROOT / "tests" / "data" / "models" / "mixtral-8x7b"
HICACHE = {"enable_hierarchical_cache", "hicache_ratio", "hicache_write_policy"}


def _comments(path: Path) -> str:
    """The file's comments as one line of text (wrapping aside)."""
    lines = path.read_text().splitlines()
    return " ".join(line.strip().removeprefix("#").strip() for line in lines if "#" in line)


def test_init_writes_an_open_loop_at_a_traces_times_whose_dry_run_and_study_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mooncake_trace(tmp_path / "trace.jsonl", requests=60)
    args = ["init", "--model-path", str(QWEN3_8B), "--gpu", "h200", "--engine", "sim"]
    result = CliRunner().invoke(app, [*args, "--workload", "trace.jsonl", "-o", "space.yaml"])
    assert result.exit_code == 0, result.output
    said = result.output
    assert "trace.jsonl: mooncake trace, 60 requests over" in said
    assert "req/s mean" in said and "at the peak (busiest 10 s)" in said
    assert "prompt p50/p90/p99" in said and "prefix reuse: " in said

    space = load_space(tmp_path / "space.yaml")
    assert space.workload["kind"] == "trace" and space.workload["mode"] == "open-loop"
    assert space.workload["speedup"] == 1.0 and space.workload["format"] == "mooncake"
    assert space.bench.concurrency is None and space.bench.request_rate is None
    assert space.params["max_running_requests"].relative == {"high": "capacity"}
    assert "schedule_policy" in space.params  # the trace shares prefixes
    p99 = max(json.loads(line)["input_length"] for line in (tmp_path / "trace.jsonl").open())
    (slo,) = space.slos
    assert slo.metric == "p99_ttft_ms" and slo.op == "<="
    assert 1000 + 0.5 * p99 * 0.9 <= slo.limit <= 1000 + 0.5 * p99 + 500 and slo.limit % 500 == 0
    comments = _comments(tmp_path / "space.yaml")
    assert "SLO from the trace's lengths: p99 TTFT 1000 ms + 0.5 ms per token" in comments
    assert "HiCache is considered (from 20%" in comments or "No HiCache" in comments

    dry = CliRunner().invoke(app, ["optimize", "--space", "space.yaml", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "dry run: nothing launched" in dry.output
    # The cost knows the open loop: the trace's span, not one client per request.
    assert "over the trace's 1" in dry.output and " clients" not in dry.output

    options = StudyOptions(
        trials=6, space_path=tmp_path / "space.yaml", studies_dir=tmp_path / "studies", seed=0
    )
    run_study(resolve_run(options))
    study = optuna.load_study(
        study_name=space.name, storage=f"sqlite:///{tmp_path / 'studies' / space.name}.db"
    )
    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    measured = [t for t in done if t.user_attrs.get("outcome") != "skipped"]
    assert len(measured) >= 6
    assert any(t.state == TrialState.COMPLETE for t in done)


def test_a_trace_without_times_is_a_closed_loop_of_its_conversations(tmp_path: Path) -> None:
    chats = sharegpt_file(tmp_path / "chats.json", conversations=5)
    request = InitRequest(model_path=str(QWEN3_8B), gpu="h200", workload=str(chats), engine="sim")
    written = written_space(request, tmp_path / "chats.yaml", reach=False)
    space = written.space
    assert space.workload["mode"] == "closed-loop" and space.bench.concurrency == 5
    assert space.params["max_running_requests"].relative == {"high": "concurrency"}
    assert "schedule_policy" in space.params  # each turn resends its conversation's history
    assert "sessions: 5, 5 of them multi-turn" in written.found
    assert any(line.startswith("chats.json: sharegpt trace, 15 requests") for line in written.found)
    assert "5 clients, one per conversation (at most 32)" in _comments(written.path)


def test_hicache_is_offered_only_from_the_reuse_threshold(tmp_path: Path) -> None:
    """Mixtral's 93 GB of weights leave a small KV pool that a long trace outgrows: HiCache
    is offered for heavy reuse, not for a trace whose prompts share (almost) nothing."""
    shared = mooncake_trace(tmp_path / "shared.jsonl", requests=400)
    request = InitRequest(model_path=str(MIXTRAL), gpu="h200", workload=str(shared), engine="sim")
    written = written_space(request, tmp_path / "shared.yaml", reach=False)
    assert set(written.space.params) >= HICACHE

    unshared = tmp_path / "unshared.jsonl"
    with unshared.open("w") as out:
        for i, line in enumerate(shared.read_text().splitlines()):
            item = json.loads(line)
            item["hash_ids"] = [10_000 + i * 10 + k for k in range(len(item["hash_ids"]))]
            out.write(json.dumps(item) + "\n")
    request = InitRequest(model_path=str(MIXTRAL), gpu="h200", workload=str(unshared), engine="sim")
    written = written_space(request, tmp_path / "unshared.yaml", reach=False)
    assert not HICACHE & set(written.space.params)
    assert "schedule_policy" not in written.space.params
    assert "The trace's replayed prompts share no prefix: no schedule policy" in _comments(
        written.path
    )

    # One shared block in ten: a prefix order can pay, HiCache cannot.
    light = tmp_path / "light.jsonl"
    with light.open("w") as out:
        for i in range(400):
            ids = [i % 4] + [100_000 + i * 10 + k for k in range(9)]
            item = {"timestamp": i * 100, "input_length": 5120, "output_length": 8}
            out.write(json.dumps({**item, "hash_ids": ids}) + "\n")
    request = InitRequest(model_path=str(MIXTRAL), gpu="h200", workload=str(light), engine="sim")
    written = written_space(request, tmp_path / "light.yaml", reach=False)
    assert "schedule_policy" in written.space.params
    assert not HICACHE & set(written.space.params)
    assert "No HiCache: the trace reuses 10% of its prompt tokens, under 20%" in _comments(
        written.path
    )


def test_a_jsonl_of_prompts_stays_a_jsonl_workload_and_a_bad_trace_is_one_line(
    tmp_path: Path,
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(3)))
    request = InitRequest(model_path=str(QWEN3_8B), gpu="h200", workload=str(prompts), engine="sim")
    written = written_space(request, tmp_path / "prompts.yaml", reach=False)
    assert written.space.workload["kind"] == "jsonl" and written.found == ()

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]})
        + "\n"
        + json.dumps({"timestamp": 5, "input_length": -3, "output_length": 2, "hash_ids": [2]})
        + "\n"
    )
    result = CliRunner().invoke(
        app,
        ["init", "--model-path", str(QWEN3_8B), "--gpu", "h200", "--engine", "sim",
         "--workload", str(bad), "-o", str(tmp_path / "bad.yaml")],
    )  # fmt: skip
    # The command line's entry point turns a UserError into its one line and exit code 2.
    assert isinstance(result.exception, UserError)
    said = str(result.exception)
    assert said == f"{bad}:2: field 'input_length' must be an integer >= 1, got -3"


def test_the_estimate_sees_a_traces_lengths_reuse_and_rate(tmp_path: Path) -> None:
    path = mooncake_trace(tmp_path / "trace.jsonl", requests=60)
    items = [json.loads(line) for line in path.read_text().splitlines()]
    workload = {"kind": "trace", "file": str(path), "mode": "open-loop", "speedup": 2.0}
    shape = WorkloadShape.of(workload, clients=8)
    assert shape.prompt == pytest.approx(sum(i["input_length"] for i in items) / 60)
    assert shape.output == pytest.approx(sum(i["output_length"] for i in items) / 60)
    reuse = block_reuse(read_trace(path).entries, 512)
    assert shape.shareable / shape.prompt == pytest.approx(reuse)
    span_s = (items[-1]["timestamp"] - items[0]["timestamp"]) / 1000
    assert shape.arrival_rate == pytest.approx(59 / span_s * 2.0)
    closed = WorkloadShape.of({**workload, "mode": "closed-loop", "speedup": 1.0}, clients=8)
    assert closed.arrival_rate is None

    request = InitRequest(model_path=str(QWEN3_8B), gpu="h200", workload=str(path), engine="sim")
    space = written_space(request, tmp_path / "space.yaml", reach=False).space
    model = ModelMemory.from_hf_config(read_config(QWEN3_8B))
    slow = Estimator(space, model, gpu_spec("H200"), 141)
    # Little's law at the trace's rate: far fewer in flight than the 64 clients assumed for a
    # closed loop without a count, or one per request.
    assert 1 <= slow.clients < 60
    faster = space.model_copy(update={"workload": {**space.workload, "speedup": 20.0}})
    assert Estimator(faster, model, gpu_spec("H200"), 141).clients > slow.clients


def test_requests_longer_than_the_models_context_are_named(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 60000, "output_length": 100, "hash_ids": [1, 3]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    request = InitRequest(model_path=str(QWEN3_8B), gpu="h200", workload=str(path), engine="sim")
    written = written_space(request, tmp_path / "long.yaml", reach=False)
    note = (
        "note: 1 of its 2 requests (up to 60,100 tokens) do not fit the model's context of "
        "40,960 (max_position_embeddings)"
    )
    assert any(line.startswith(note) for line in written.found), written.found
    assert note.removeprefix("note: ") in _comments(written.path)


TIMED_FILES = {
    "azure.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2000000,879,100\n",
    "burst.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,276,693,API log\n",
    "chat.jsonl": '{"messages": [{"role": "user", "content": "hello"}], "timestamp": 0}\n'
    '{"messages": [{"role": "user", "content": "again"}], "timestamp": 800, "max_tokens": 30}\n',
}


@pytest.mark.parametrize("name", list(TIMED_FILES))
def test_timed_traces_of_every_format_are_open_loops(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(TIMED_FILES[name])
    request = InitRequest(model_path=str(QWEN3_8B), gpu="h200", workload=str(path), engine="sim")
    written = written_space(request, tmp_path / "space.yaml", reach=False)
    assert written.space.workload["mode"] == "open-loop"
    assert written.space.bench.concurrency is None
    assert written.found[0].startswith(f"{name}: {written.space.workload['format']} trace, ")
    assert "share no prefix" in _comments(written.path)  # none of these record prefixes
