"""`tuner init --workload FILE` for a trace file: what it holds, and the bench and SLO it implies.

    found = read_trace_workload(Path("trace.jsonl"))   # None: not a trace (a JSONL of prompts)
    found.workload      # {"kind": "trace", "file": ..., "mode": "open-loop", "speedup": 1.0, ...}
    found.concurrency   # None: an open loop at the trace's own times
    found.statement     # the lines init prints: requests, rate, lengths, reuse, sessions

The rules (each is repeated in the written space's comments):

- A file with arrival times and single requests replays in an open loop at its own pace
  (speedup 1); the bench has no cap on requests in flight (a cap would hold arrivals back, which
  is send lag, not the queueing an SLO must see). A trace of more than MAX_REQUESTS requests is
  cut to its first MAX_REQUESTS, which keeps its rate and bursts and bounds a trial's length.
- A file without times, or of multi-turn conversations, replays in a closed loop: one client per
  conversation (a conversation's turns go one after the other), at most MAX_CLIENTS.
- The SLO: a p99 TTFT of 1 s plus 0.5 ms per token of the trace's p99 prompt, rounded up to
  500 ms; the same rule gives the chat, RAG and random templates' limits within 2 s (3000,
  3500, 2000 against 3000, 5000, 2000).
- Prefix reuse: the share of prompt tokens an earlier request already sent (the block-level
  reuse of a Mooncake trace's hash ids; a conversation's history in a text trace) decides
  whether the prefix-cache params are offered (tuner/init/params.py: REUSE_FOR_SCHEDULING,
  REUSE_FOR_HICACHE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import UserError

if TYPE_CHECKING:
    from tuner.bench.trace_profile import TraceProfile

MAX_REQUESTS = 1000
MAX_CLIENTS = 32
# p99 TTFT limit = SLO_BASE_MS + SLO_MS_PER_TOKEN x p99 prompt tokens, rounded up to SLO_STEP_MS.
SLO_BASE_MS = 1000.0
SLO_MS_PER_TOKEN = 0.5
SLO_STEP_MS = 500.0


@dataclass(frozen=True)
class TraceWorkload:
    workload: dict[str, Any]  # the space's `workload:` mapping
    concurrency: int | None  # bench.concurrency: None for an open loop (no cap)
    slo: str  # the proposed SLO
    story: list[str]  # the comment above `workload:` (the rules applied, with the figures)
    statement: list[str]  # what init prints about the file


def read_trace_workload(path: Path) -> TraceWorkload | None:
    """The workload a trace file implies, or None when the file is not in a trace format (a
    JSONL of prompts without times is the `jsonl` kind). A trace with a bad line is a
    UserError naming the file, the line and the field."""
    from tuner.bench.trace import MOONCAKE_BLOCK, detect_format, read_trace  # numpy
    from tuner.bench.trace_profile import profile_trace
    from tuner.predict.workload_shape import WorkloadShape

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UserError(f"--workload {path}: cannot read it: {reason}") from None
    try:
        format = detect_format(path, text)
    except UserError:
        return None
    trace = read_trace(path, format)
    profile = profile_trace(trace, MOONCAKE_BLOCK)
    multi_turn = profile.multi_turn_sessions > 0
    open_loop = trace.timed and not multi_turn
    workload: dict[str, Any] = {"kind": "trace", "file": str(path.resolve()), "format": format}
    story = [f"Requests replayed from the {format} trace {path.name}"]
    concurrency: int | None = None
    if open_loop:
        workload.update(mode="open-loop", speedup=1.0)
        story[0] += (
            " in an open loop at its own times (speedup 1: raise it to send the same requests "
            "faster); the bench has no cap on requests in flight, so the server's queueing, "
            "not the client, shows in TTFT."
        )
    else:
        concurrency = max(1, min(profile.sessions, MAX_CLIENTS))
        workload["mode"] = "closed-loop"
        why = "its conversations have several turns" if multi_turn else "it has no times"
        story[0] += (
            f" in a closed loop ({why}): {concurrency} clients, one per conversation "
            f"(at most {MAX_CLIENTS}), each sending its next request when the last one ended."
        )
    if profile.sessions > MAX_REQUESTS:
        workload["max_requests"] = MAX_REQUESTS
        story.append(
            f"Its first {MAX_REQUESTS} of {profile.sessions} "
            f"{'requests' if not multi_turn else 'conversations'} only, to bound a trial "
            "(start / duration pick another window)."
        )
    if trace.format == "mooncake":
        workload["block_size"] = MOONCAKE_BLOCK
    workload["seed"] = 0
    p99_prompt = profile.input_len.get(99, 0.0)
    limit = math.ceil((SLO_BASE_MS + SLO_MS_PER_TOKEN * p99_prompt) / SLO_STEP_MS) * SLO_STEP_MS
    slo = f"p99_ttft_ms <= {limit:.0f}"
    story.append(
        f"SLO from the trace's lengths: p99 TTFT {SLO_BASE_MS:.0f} ms + {SLO_MS_PER_TOKEN:g} ms "
        f"per token of its p99 prompt ({p99_prompt:.0f} tokens), rounded up to "
        f"{SLO_STEP_MS:.0f} ms."
    )
    shape = WorkloadShape.of(workload, concurrency or 1)
    reuse = shape.shareable / max(shape.prompt, 1.0)
    return TraceWorkload(workload, concurrency, slo, story, _statement(path, profile, reuse))


def _statement(path: Path, profile: TraceProfile, reuse: float) -> list[str]:
    """A few lines: size and times, lengths, reuse, sessions."""
    lines = [f"{path.name}: {profile.format} trace, {profile.requests} requests"]
    if profile.duration_s is not None and profile.mean_rate_rps is not None:
        lines[0] += (
            f" over {profile.duration_s:.1f} s, {profile.mean_rate_rps:.2f} req/s mean, "
            f"{profile.peak_rate_rps or 0:.2f} at the peak (busiest 10 s)"
        )
    else:
        lines[0] += ", no arrival times"
    lengths = []
    for name, found in (("prompt", profile.input_len), ("output", profile.output_len)):
        if found:
            lengths.append(f"{name} p50/p90/p99 " + "/".join(f"{v:.0f}" for v in found.values()))
    if lengths:
        lines.append("tokens: " + ", ".join(lengths))
    if profile.block_reuse is not None:
        lines.append(
            f"prefix reuse: {profile.block_reuse:.1%} of prompt tokens repeat an earlier "
            "request's blocks (hash ids)"
        )
    elif profile.multi_turn_sessions:
        lines.append(
            f"prefix reuse: ~{reuse:.1%} of prompt tokens are a conversation's history, resent"
        )
    elif profile.format in ("azure", "burstgpt"):
        lines.append(
            f"prefix reuse: none; the {profile.format} format records no prefixes, so the "
            "replayed prompts share none"
        )
    if profile.sessions != profile.requests or profile.multi_turn_sessions:
        lines.append(
            f"sessions: {profile.sessions}, {profile.multi_turn_sessions} of them multi-turn"
        )
    return lines


def over_context_note(workload: dict[str, Any], context_length: int) -> str:
    """A sentence when some of the trace's requests (prompt + answer) do not fit the model's
    context, which sglang refuses: they would fail in every trial. "" when all fit."""
    from tuner.bench.trace import text_tokens
    from tuner.bench.workload import WorkloadSpec

    spec = WorkloadSpec.from_dict(workload)
    longest: list[int] = []
    for entry in spec.trace().entries:
        if not entry.is_text:
            longest.append(entry.input_len + entry.output_len)
            continue
        history = text_tokens(entry.system) if entry.system else 0
        for turn in entry.turns:
            history += text_tokens(turn.user) + (turn.output_len or spec.output_len or 256)
            longest.append(history)
    over = [n for n in longest if n > context_length]
    if not over:
        return ""
    return (
        f"{len(over)} of its {len(longest)} requests (up to {max(over):,} tokens) do not fit "
        f"the model's context of {context_length:,} (max_position_embeddings): sglang refuses "
        "them and they count as failed in every trial; window the trace (start, duration, "
        "max_requests) or serve a longer context."
    )
