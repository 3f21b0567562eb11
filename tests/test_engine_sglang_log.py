"""Capacity and failure classification from sglang server logs (sglang's own wording)."""

from __future__ import annotations

import pytest

from tuner.engines._sglang_log import _clip
from tuner.engines.sglang import READY_LINE, classify_failure, parse_capacity
from tuner.results.record import FAILURE_CLASSES

# A 0.5.23 start of the seed scenario: Qwen3.6-27B with MTP and extra_buffer on one 96 GB GPU.
READY_LOG = f"""\
[2026-03-02 10:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3.6-27B', mem_fraction_static=0.9)
[2026-03-02 10:00:20 TP0] Load weight begin. avail mem=94.37 GB
[2026-03-02 10:01:02 TP0] Load weight end. elapsed=41.83 s, type=Qwen3_5ForConditionalGeneration, avail mem=40.12 GB, mem usage=54.25 GB.
[2026-03-02 10:01:03 TP0] Mamba Cache is allocated. max_mamba_cache_size: 96, conv_state size: 0.31GB, ssm_state size: 3.52GB intermediate_ssm_state_cache size: 2.81GB intermediate_conv_window_cache size: 0.12GB
[2026-03-02 10:01:03 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 412160, K size: 12.58 GB, V size: 12.58 GB
[2026-03-02 10:01:03 TP0] Draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 412160, KV size: 1.57 GB
[2026-03-02 10:01:03 TP0] Memory pool end. avail mem=8.20 GB
[2026-03-02 10:01:20 TP0] Capture cuda graph end. Time elapsed: 15.21 s. mem usage=1.90 GB. avail mem=6.10 GB.
[2026-03-02 10:01:21 TP0] max_total_num_tokens=412160, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4, context_len=262144, available_gpu_mem=6.10 GB
[2026-03-02 10:01:25] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-03-02 10:01:30] {READY_LINE}
"""  # noqa: E501


def test_parse_capacity_reads_every_sizing_line():
    assert parse_capacity(READY_LOG) == {
        "weights_gb": 54.25,
        "available_gpu_mem_after_weights_gb": 40.12,
        "max_mamba_cache_size": 96,
        "mamba_conv_state_gb": 0.31,
        "mamba_ssm_state_gb": 3.52,
        "mamba_intermediate_ssm_state_gb": 2.81,
        "mamba_intermediate_conv_window_gb": 0.12,
        "kv_cache_tokens": 412160,
        "kv_cache_gb": 25.16,
        "draft_kv_cache_tokens": 412160,
        "draft_kv_cache_gb": 1.57,
        "max_total_num_tokens": 412160,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "max_running_requests": 4,
        "context_len": 262144,
        "available_gpu_mem_gb": 6.10,
    }


def test_parse_capacity_of_a_plain_model_and_the_post_capture_resize():
    log = (
        "[t TP0] KV Cache is allocated. #tokens: 2400000, KV size: 120.00 GB\n"
        "[t TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, "
        "#tokens: 2300000, KV size: 115.00 GB, avail mem=9.80 GB\n"
        "[t TP0] max_total_num_tokens=2300000, chunked_prefill_size=-1, max_prefill_tokens=16384, "
        "max_running_requests=2048, context_len=131072, available_gpu_mem=9.80 GB\n"
    )
    capacity = parse_capacity(log)
    assert capacity["kv_cache_tokens"] == 2300000  # the later line wins
    assert capacity["kv_cache_gb"] == 115.0
    assert capacity["chunked_prefill_size"] == -1
    assert capacity["max_running_requests"] == 2048
    assert "max_mamba_cache_size" not in capacity


def test_parse_capacity_of_an_empty_log():
    assert parse_capacity("") == {}


TRACEBACK_RULE = """\
[2026-03-02 10:00:01] Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/usr/lib/python3/site-packages/sglang/launch_server.py", line 29, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/usr/lib/python3/site-packages/sglang/srt/server_args.py", line 700, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "/usr/lib/python3/site-packages/sglang/srt/arg_groups/mamba_hook.py", line 158, in validate_mamba_no_buffer
    assert view.disable_overlap_schedule, (
AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.
"""  # noqa: E501

NOT_ENOUGH_MEMORY = """\
[2026-03-02 10:01:02 TP0] Load weight end. elapsed=41.83 s, type=Qwen3_5ForConditionalGeneration, avail mem=40.12 GB, mem usage=54.25 GB.
[2026-03-02 10:01:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/sglang/srt/managers/scheduler.py", line 3011, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/usr/lib/python3/site-packages/sglang/srt/model_executor/pool_configurator.py", line 96, in __post_init__
    raise RuntimeError(msg)
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7

[2026-03-02 10:01:03] Received sigquit from a child process. It usually means the child failed.
"""  # noqa: E501

CUDA_GRAPH = """\
[2026-03-02 10:01:03 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.20 GB
[2026-03-02 10:01:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 603, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB of which 1.02 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)
3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose
"""  # noqa: E501

OUT_OF_MEMORY = """\
[2026-03-02 10:01:02 TP0] Load weight end. elapsed=41.83 s, type=Qwen3_5ForConditionalGeneration, avail mem=0.90 GB, mem usage=54.25 GB.
[2026-03-02 10:01:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/torch/utils/_device.py", line 104, in __torch_function__
    return func(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 94.97 GiB of which 512.00 MiB is free.
"""  # noqa: E501

HOST_MEMORY = """\
[2026-03-02 10:01:02 TP0] Load weight end. elapsed=41.83 s, type=LlamaForCausalLM, avail mem=120.00 GB, mem usage=16.00 GB.
[2026-03-02 10:01:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/sglang/srt/mem_cache/pool_host/base.py", line 253, in _allocate_host_buffer
    raise ValueError(
ValueError: Not enough host memory available. Requesting 920.00 GB but only have 700.00 GB free. Please reduce the size of the hierarchical cache.
"""  # noqa: E501


@pytest.mark.parametrize(
    ("log", "exit_code", "expected_class", "expected_message"),
    [
        (
            "usage: launch_server.py [-h] --model-path MODEL_PATH [--mem-fraction-static ...]\n"
            "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n",
            2,
            "bad_argument",
            "sglang rejected an argument: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (
            "usage: sglang serve [-h] --model-path MODEL_PATH\n"
            "sglang serve: error: argument --mamba-scheduler-strategy: invalid choice: "
            "'extra_buffer_lazy' (choose from 'auto', 'no_buffer', 'extra_buffer')\n",
            2,
            "bad_argument",
            "sglang rejected an argument: argument --mamba-scheduler-strategy: invalid choice: "
            "'extra_buffer_lazy' (choose from 'auto', 'no_buffer', 'extra_buffer')",
        ),
        (
            "something unexpected\n",
            2,
            "bad_argument",
            "sglang exited with code 2 (argument error): something unexpected",
        ),
        (
            TRACEBACK_RULE,
            1,
            "startup_rule",
            "AssertionError: no_buffer do not support overlap schedule. Try to set "
            "disable_overlap_schedule=True.",
        ),
        (
            "[t] ValueError: Unknown speculative algorithm name: MTP\n",
            1,
            "startup_rule",
            "ValueError: Unknown speculative algorithm name: MTP",
        ),
        (
            "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are "
            "mutually exclusive and cannot be used at the same time. Please use only one of them."
            "\n",
            1,
            "startup_rule",
            "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are "
            "mutually exclusive and cannot be used at the same time. Please use only one of them.",
        ),
        (
            NOT_ENOUGH_MEMORY,
            1,
            "not_enough_memory",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.7",
        ),
        (
            CUDA_GRAPH,
            1,
            "cuda_graph",
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 94.97 GiB of which 1.02 GiB is free.",
        ),
        (
            OUT_OF_MEMORY,
            -9,
            "out_of_memory",
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
            "capacity of 94.97 GiB of which 512.00 MiB is free.",
        ),
        (
            HOST_MEMORY,
            1,
            "exited_before_ready",
            "server exited with code 1 before it was ready: ValueError: Not enough host memory "
            "available. Requesting 920.00 GB but only have 700.00 GB free. Please reduce the size "
            "of the hierarchical cache.",
        ),
        (
            "[t TP0] Load weight begin. avail mem=94.37 GB\n",
            -9,
            "exited_before_ready",
            "server was killed by signal 9 before it was ready: Load weight begin. "
            "avail mem=94.37 GB",
        ),
        (
            "",
            1,
            "exited_before_ready",
            "server exited with code 1 before it was ready with an empty log",
        ),
        (
            "OSError: Qwen/Qwen3.6-27B does not appear to have a file named config.json\n",
            1,
            "exited_before_ready",
            "server exited with code 1 before it was ready: OSError: Qwen/Qwen3.6-27B does not "
            "appear to have a file named config.json",
        ),
    ],
)
def test_classify_failure(log, exit_code, expected_class, expected_message):
    failure_class, message = classify_failure(log, exit_code)
    assert (failure_class, message) == (expected_class, expected_message)
    assert failure_class in FAILURE_CLASSES
    assert "\n" not in message


def test_an_error_from_a_loader_called_during_argument_checks_is_not_a_rule():
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/server_args.py", line 700, in prepare_server_args\n'
        '  File "/x/transformers/configuration_auto.py", line 1200, in from_pretrained\n'
        "ValueError: Unrecognized model in Qwen/Qwen3.6-27B.\n"
    )
    assert classify_failure(log, 1) == (
        "exited_before_ready",
        "server exited with code 1 before it was ready: ValueError: Unrecognized model in "
        "Qwen/Qwen3.6-27B.",
    )


def test_classify_failure_keeps_the_message_short():
    log = "ValueError: " + "x" * 2000 + "\n"
    failure_class, message = classify_failure(log, 1)
    assert failure_class == "startup_rule"
    assert len(message) <= 300 and message.endswith("...")


# Every start-up failure of sglang 0.5.10 and 0.5.23 that ends a launch in memory planning or
# graph capture, as its last traceback line, with where sglang raises it (srt/ paths).
STARTUP_FAILURES = [
    # (sglang file, the line sglang prints, class)
    (
        "0.5.10 model_executor/model_runner_kv_cache_mixin.py; "
        "0.5.23 model_executor/pool_configurator.py",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "not_enough_memory",
    ),
    (
        "0.5.23 mem_cache/kv_cache_configurator.py (_profile_available_bytes)",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.5. Raise --mem-fraction-static above 0.601 (minimum viable = "
        "1 - available/pre = 0.6005). If using speculative decoding, draft weights are now "
        "counted.",
        "not_enough_memory",
    ),
    (
        "0.5.23 mem_cache/kv_cache_configurator.py (resolve_max_num_reqs)",
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any "
        "requests. max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0. Try: (1) "
        "reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs "
        "with more memory.",
        "not_enough_memory",
    ),
    (
        "0.5.23 mem_cache/kv_cache_configurator.py (_handle_max_mamba_cache)",
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        "Computed max_mamba_cache_size=-3 (total_rest_memory=1.20 GB, mamba_cache_per_req="
        "146.81 MB). Try: (1) reduce --max-running-requests, (2) increase "
        "--mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs with "
        "more memory.",
        "not_enough_memory",
    ),
    (
        "0.5.10 model_executor/cuda_graph_runner.py; 0.5.23 model_executor/runner/"
        "decode_cuda_graph_runner.py and speculative/eagle_draft*_cuda_graph_runner.py",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "cuda_graph",
    ),
    (
        "0.5.23 model_executor/runner/prefill_cuda_graph_runner.py",
        "Exception: Capture prefill CUDA graph failed: CUDA out of memory. Tried to allocate "
        "1.00 GiB.",
        "cuda_graph",
    ),
    (
        "0.5.23 speculative/frozen_kv_mtp_cuda_graph_runner.py",
        "Exception: Capture frozen-KV MTP cuda graph failed: CUDA out of memory. Tried to "
        "allocate 512.00 MiB.",
        "cuda_graph",
    ),
    (
        "0.5.10 and 0.5.23 model_executor/cpu_graph_runner.py",
        "Exception: Capture CPU graph failed: out of memory",
        "cuda_graph",
    ),
    (
        "torch, raised anywhere during start-up (both releases)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
        "total capacity of 94.97 GiB of which 512.00 MiB is free.",
        "out_of_memory",
    ),
]


@pytest.mark.parametrize(("where", "line", "expected"), STARTUP_FAILURES)
def test_every_startup_memory_failure_of_0_5_10_and_0_5_23_is_classified(where, line, expected):
    log = (
        "[2026-01-01 00:00:00 TP0] Load weight end. elapsed=40.1 s, avail mem=43.0 GB\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/scheduler.py", line 3000, in run_scheduler_process\n'
        f"{line}\n"
    )
    failure_class, message = classify_failure(log, 1)
    assert failure_class == expected, where
    assert message == _clip(line.removeprefix("torch."))
