"""Names vulture cannot see used: framework callbacks, record fields, and sim fields under rewrite.

Read by `vulture` (configured in pyproject.toml); never imported.
"""

# Called by asyncio, httpx, http.server and argparse, not by our code.
_.connection_made
_.data_received
_.eof_received
_.connection_lost
_.handle_async_request
_.log_message
daemon_threads
option_string
_.create_module
_.__path__
_.__class__
__getitem__
__iter__
__len__
__repr__
_.after_trial  # Optuna calls a sampler's after_trial on every tell

# Fields of records and snapshots, read by people (JSON, reports) or kept for their shape.
stages_run
guided_by  # benchmarks/quality/study.py TrialLog: written to the JSON results
_.stages_run
mean_tpot_ms
action_class
new_flag
description
activation_room_gb
activation_need_gb

# The simulator: parsed sglang flags it accepts and ignores, and fields, left to its rewrite.
max_queued_requests
stream_interval
hicache_storage_backend
log_level
random_seed
trust_remote_code
skip_server_warmup
attention_backend
chat_template
reasoning_parser
tool_call_parser
enable_torch_compile
watchdog_timeout
requested
mem_fraction_auto
gpu_total_gib
rest_gib
activation_gib
intermediate_size
NO_MATCH
host_loaded
arrival_s
first_token_s
finish_s
_._timer
TOKENS_PER_MESSAGE
GENERATION_PROMPT_TOKENS

# sglang's planning module patched by tools/dump_sglang_plans.py: sglang calls these.
_.override
_.get_schedule
_.get_spec
_.get_exec
_.get_memory
_._pd_prefill_skips_mamba_spec_state
# PoolPlan fields, kept for the fixtures and for people reading a plan.
state_pool_bytes
kv_pool_bytes
# Fields of the simulator probe's summary and of the bench client's server description, kept for
# people reading them (debuggers, benchmark output).
total_throughput
median_ttft_ms
median_tpot_ms
median_itl_ms
median_e2e_latency_ms
modelled_time

# Set on tokenizers / transformers objects, read by those libraries (tests/support/tiny_llama.py).
_.pre_tokenizer
_.decoder
_.model_max_length
# Called by real sglang in CPU mode (tests/support/sglang_cpu/sgl_kernel).
assign_req_to_token_pool_cpu
# A pydantic validator, called by pydantic (tuner/space/model.py).
_env_as_text
_.trials_to_95  # benchmarks/quality/matrix.py Cell: read from tuner_quality_worlds.json
