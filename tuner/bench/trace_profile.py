"""What a trace holds, in the figures that decide a bench and a space.

Its size and duration, mean and peak arrival rate, length percentiles, block-level prefix reuse
and multi-turn sessions.

Pure: a `Trace` (trace.py) in, a `TraceProfile` out. `tuner init --workload FILE` states it and
sets the bench from it; reports draw it beside their results.

Example:
    >>> profile = profile_trace(read_trace(Path("trace.jsonl")), block_size=512)  # doctest: +SKIP
    >>> f"{profile.requests} requests, {profile.mean_rate_rps:.1f} req/s"  # doctest: +SKIP
    '300 requests, 5.9 req/s'
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tuner.bench.trace import Trace, TraceEntry, block_reuse, text_tokens

PERCENTILES = (50, 90, 99)
# Peak rate: the most requests arriving in any window this long (trace seconds), so that one
# instant of simultaneous requests does not read as an unbounded rate.
PEAK_WINDOW_S = 10.0


@dataclass(frozen=True)
class TraceProfile:
    """A trace's figures; rates in requests per trace second (before any speedup).

    `duration_s`, `mean_rate_rps` and `peak_rate_rps` are None for a file without times;
    `block_reuse` is None without hash ids (only Mooncake files have them); lengths are token
    counts (text formats: estimated at about 4 characters a token); `input_len` and
    `output_len` map each percentile in PERCENTILES to a length.
    """

    format: str
    requests: int
    duration_s: float | None
    mean_rate_rps: float | None
    peak_rate_rps: float | None
    input_len: dict[int, float]
    output_len: dict[int, float]
    block_reuse: float | None
    sessions: int
    multi_turn_sessions: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def profile_trace(trace: Trace, block_size: int, window_s: float = PEAK_WINDOW_S) -> TraceProfile:
    """The profile of `trace` (a whole file or a window of one)."""
    entries = trace.entries
    inputs: list[int] = []
    outputs: list[int] = []
    for entry in entries:
        entry_inputs, entry_outputs = _request_lengths(entry)
        inputs.extend(entry_inputs)
        outputs.extend(entry_outputs)
    times = sorted(e.arrival_s for e in entries if e.arrival_s is not None)
    timed = len(times) == len(entries) and bool(times)
    duration = times[-1] - times[0] if timed else None
    has_hashes = any(e.hash_ids for e in entries)
    return TraceProfile(
        format=trace.format,
        requests=len(inputs),
        duration_s=duration,
        mean_rate_rps=len(times) / duration if duration else None,
        peak_rate_rps=peak_rate(times, window_s) if timed else None,
        input_len=_percentiles(inputs),
        output_len=_percentiles([o for o in outputs if o > 0]),
        block_reuse=block_reuse(entries, block_size) if has_hashes else None,
        sessions=len(entries),
        multi_turn_sessions=sum(1 for e in entries if len(e.turns) > 1),
    )


def peak_rate(times: Sequence[float], window_s: float) -> float:
    """The most arrivals in any window of `window_s` (shortened to the trace's span when it is
    shorter), per second."""
    span = times[-1] - times[0] if times else 0.0
    window = min(window_s, span) if span > 0 else 0.0
    if window <= 0:
        return 0.0
    most = max(bisect.bisect_right(times, t + window) - i for i, t in enumerate(times))
    return most / window


def _request_lengths(entry: TraceEntry) -> tuple[list[int], list[int]]:
    """Prompt and answer lengths of each request an entry sends (a text turn resends the
    history before it); an answer of 0 is one the file does not give."""
    if not entry.is_text:
        return [entry.input_len], [entry.output_len]
    history = text_tokens(entry.system) if entry.system else 0
    inputs, outputs = [], []
    for turn in entry.turns:
        history += text_tokens(turn.user)
        inputs.append(history)
        outputs.append(turn.output_len)
        history += turn.output_len
    return inputs, outputs


def _percentiles(values: list[int]) -> dict[int, float]:
    if not values:
        return {}
    found = np.percentile(np.array(values, dtype=float), PERCENTILES)
    return {p: float(v) for p, v in zip(PERCENTILES, found, strict=True)}
