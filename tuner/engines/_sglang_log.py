"""Reading an sglang server log: the capacity it settled on, and why it died.

The patterns follow the lines sglang 0.5.10-0.5.23 write (and the simulator copies):

    Load weight end. elapsed=41.2 s, type=Qwen3_5ForConditionalGeneration, avail mem=40.1 GB, mem usage=54.2 GB.
    KV Cache is allocated. dtype: torch.bfloat16, #tokens: 412000, K size: 12.6 GB, V size: 12.6 GB
    Mamba Cache is allocated. max_mamba_cache_size: 96, conv_state size: 0.30GB, ssm_state size: 3.52GB
    max_total_num_tokens=412000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=19, context_len=262144, available_gpu_mem=6.10 GB
    The server is fired up and ready to roll!
"""  # noqa: E501

from __future__ import annotations

import re

READY_LINE = "The server is fired up and ready to roll!"

_NUMBER = r"(-?\d+(?:\.\d+)?)"

# key=value pairs of the scheduler's summary line; values are ints, or floats with " GB".
_SUMMARY = re.compile(r"max_total_num_tokens=\d+.*")
_PAIR = re.compile(r"(\w+)=" + _NUMBER + r"( GB)?")

_KV = re.compile(
    r"(?:(\w+) )?KV [Cc]ache (?:is )?allocated\. (?:dtype: [^,]+, )?#tokens: (\d+), "
    r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)"
)
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)(.*)")
_MAMBA_PART = re.compile(r"(\w+) size: ([\d.]+) ?GB")
_WEIGHTS = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")

_MAMBA_KEYS = {
    "conv_state": "mamba_conv_state_gb",
    "ssm_state": "mamba_ssm_state_gb",
    "intermediate_ssm_state_cache": "mamba_intermediate_ssm_state_gb",
    "intermediate_conv_window_cache": "mamba_intermediate_conv_window_gb",
}


def parse_capacity(log_text: str) -> dict[str, int | float]:
    """What the server sized itself to, from its start-up lines; later lines win (a restart or
    the post-capture resize reports the final size). Keys present only when their line is:

    max_total_num_tokens, chunked_prefill_size, max_prefill_tokens, max_running_requests,
    context_len, available_gpu_mem_gb   (the scheduler's summary line)
    kv_cache_tokens, kv_cache_gb, draft_kv_cache_tokens, draft_kv_cache_gb
    max_mamba_cache_size, mamba_conv_state_gb, mamba_ssm_state_gb,
    mamba_intermediate_ssm_state_gb, mamba_intermediate_conv_window_gb
    weights_gb, available_gpu_mem_after_weights_gb
    """
    capacity: dict[str, int | float] = {}
    for line in log_text.splitlines():
        if (summary := _SUMMARY.search(line)) is not None:
            for key, number, gb in _PAIR.findall(summary.group(0)):
                capacity[f"{key}_gb" if gb else key] = float(number) if gb else int(number)
        elif (kv := _KV.search(line)) is not None:
            label, tokens, k_gb, v_gb, kv_gb = kv.groups()
            prefix = f"{label.lower()}_" if label else ""  # "Draft KV Cache" -> draft_...
            size = float(kv_gb) if kv_gb else float(k_gb) + float(v_gb)
            capacity[f"{prefix}kv_cache_tokens"] = int(tokens)
            capacity[f"{prefix}kv_cache_gb"] = round(size, 3)
        elif (mamba := _MAMBA.search(line)) is not None:
            capacity["max_mamba_cache_size"] = int(mamba.group(1))
            for part, gb in _MAMBA_PART.findall(mamba.group(2)):
                if part in _MAMBA_KEYS:
                    capacity[_MAMBA_KEYS[part]] = float(gb)
        elif (weights := _WEIGHTS.search(line)) is not None:
            capacity["available_gpu_mem_after_weights_gb"] = float(weights.group(1))
            capacity["weights_gb"] = float(weights.group(2))
    return capacity


# --------------------------------------------------------------------------- failures

# argparse ends with "<prog>: error: <message>"; log lines have a timestamp (colons) first.
_ARGPARSE_ERROR = re.compile(r"^\S[^\n:]*: error: (.+)$", re.MULTILINE)
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit)|Exception)(?::\s*(.*))?$"
)
# The memory planner's refusals, as (text, where sglang raises it). 0.5.10 and 0.5.23 both say the
# first (model_runner_kv_cache_mixin.py in 0.5.10, model_executor/pool_configurator.py in 0.5.23);
# the others are 0.5.23's (mem_cache/kv_cache_configurator.py).
_NOT_ENOUGH_MEMORY = (
    "Not enough memory. Please try to increase",
    "Loaded weights leave no GPU memory for the KV cache",
    "state cache is too small to serve any requests",
    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache",
)
# Graph capture: "Capture cuda graph failed" (decode and draft runners), "Capture prefill CUDA
# graph failed", "Capture frozen-KV MTP cuda graph failed" (0.5.23), "Capture CPU graph failed".
_CUDA_GRAPH = re.compile(r"Capture (?:[\w-]+ ){1,3}graph failed", re.IGNORECASE)
_OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory")
# A rejected combination raises from sglang's argument checks (these files), which run before a
# single weight is loaded.
_RULE_FRAMES = re.compile(r"server_args\.py|arg_groups[/\\]|spec_info\.py")
_RULE_EXCEPTIONS = ("ValueError", "AssertionError", "NotImplementedError")
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')
# A flag the device cannot serve, raised while the model runner sets itself up (after the weights
# are loaded), e.g. 0.5.23's "--kv-cache-dtype fp8_e5m2 is not supported on CPU."
# (mem_cache/kv_cache_dtype.py): a rejected combination like any argument check.
_UNSUPPORTED = re.compile(r"\bis not supported on\b|\bonly supported on\b", re.IGNORECASE)


def classify_failure(log_text: str, exit_code: int | None) -> tuple[str, str]:
    """(failure class, one-line message) for a server that ended before it was ready.

    Classes as in tuner.results.record.FAILURE_CLASSES: bad_argument, startup_rule,
    not_enough_memory, out_of_memory, cuda_graph, exited_before_ready (anything else).
    """
    lines = log_text.splitlines()
    argparse_error = _ARGPARSE_ERROR.search(log_text)
    if argparse_error is not None and (exit_code in (2, None) or "usage:" in log_text):
        return "bad_argument", f"sglang rejected an argument: {argparse_error.group(1).strip()}"
    memory = next((text for text in _NOT_ENOUGH_MEMORY if text in log_text), None)
    if memory is not None:
        return "not_enough_memory", _clip(_strip_exception_prefix(_line_with(lines, memory)))
    if (graph := _line_matching(lines, _CUDA_GRAPH)) is not None:
        return "cuda_graph", _clip(_strip_exception_prefix(graph))
    if (oom := _line_matching(lines, _OUT_OF_MEMORY)) is not None:
        return "out_of_memory", _clip(_strip_exception_prefix(oom))
    if exit_code == 2:
        last = _last_meaningful(lines)
        return "bad_argument", _clip(f"sglang exited with code 2 (argument error): {last}")

    exception = _last_exception(lines)
    if exception is not None:
        index, kind, message = exception
        is_rule = kind in _RULE_EXCEPTIONS and (
            _raised_by_argument_checks(lines[:index], message)
            or _UNSUPPORTED.search(message) is not None
        )
        text = f"{kind}: {message}" if message else kind
        if is_rule:
            return "startup_rule", _clip(text)
        return "exited_before_ready", _clip(f"{_exit_text(exit_code)}: {text}")
    last = _last_meaningful(lines)
    detail = f": {last}" if last else " with an empty log"
    return "exited_before_ready", _clip(f"{_exit_text(exit_code)}{detail}")


def crash_cause(log_text: str) -> str | None:
    """The exception that ended a server that had been serving (`IndexError: ...`), or None
    when its log names none (killed from outside, say)."""
    exception = _last_exception(log_text.splitlines())
    if exception is None:
        return None
    _, kind, message = exception
    return _clip(f"{kind}: {message}" if message else kind)


def _raised_by_argument_checks(before: list[str], message: str) -> bool:
    if "Unknown speculative algorithm name" in message:
        return True
    frames = [m.group(1) for line in before if (m := _FRAME.match(line))]
    if frames:
        # The innermost frame says who raised: sglang's argument checks, or e.g. a model
        # loader called from them (a bad model path is not a rejected combination).
        return _RULE_FRAMES.search(frames[-1]) is not None
    # No traceback (a one-line error): the checks run before any weight is loaded.
    return not any("Load weight" in line for line in before)


def _exit_text(exit_code: int | None) -> str:
    if exit_code is None:
        return "server stopped before it was ready"
    if exit_code < 0:
        return f"server was killed by signal {-exit_code} before it was ready"
    return f"server exited with code {exit_code} before it was ready"


def _last_exception(lines: list[str]) -> tuple[int, str, str] | None:
    # The last exception line is the one that ended the process; earlier ones are chained.
    for index in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION.match(_without_prefix(lines[index]))
        if match and match.group(1) not in ("SystemExit", "KeyboardInterrupt"):
            return index, match.group(1), (match.group(2) or "").strip()
    return None


def _line_with(lines: list[str], text: str) -> str:
    return next((line for line in reversed(lines) if text in line), text)


def _line_matching(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    # The first match is the cause; later ones repeat it from other processes.
    return next((line for line in lines if pattern.search(line)), None)


def _without_prefix(line: str) -> str:
    return re.sub(r"^\[[^\]]*\]\s*", "", line.strip())  # sglang's "[time TP0] " prefix


def _strip_exception_prefix(line: str) -> str:
    line = _without_prefix(line)
    match = _EXCEPTION.match(line)
    if match and match.group(2):
        return f"{match.group(1)}: {match.group(2)}"
    return line


def _last_meaningful(lines: list[str]) -> str:
    for line in reversed(lines):
        text = _without_prefix(line)
        if text and not text.startswith(("Traceback", "File ", "^")):
            return text
    return ""


def _clip(text: str, limit: int = 300) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."
