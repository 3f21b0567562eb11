"""What a benchmark records: one `RequestRecord` per request, and the `Summary` made of them.

The bottom of `tuner.bench`: it imports nothing of the tuner. The client fills the records, the
runner collects them, and `metrics.summarize` turns them into a `Summary` (sglang's key names).

Example:
    >>> record = RequestRecord(index=0, start_s=0.5, end_s=2.0, ttft_s=0.1, output_tokens=16)
    >>> record.success, record.latency_s
    (True, 1.5)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A benchmark summary: sglang's key names (`output_throughput`, `p99_ttft_ms`, ...) -> figures.
Summary = dict[str, float | int]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Times are modelled seconds.

    `start_s` and `end_s` are measured from the start of the benchmark; `ttft_s` and
    `chunk_times_s` from the request's own start. `chunk_times_s[i]` is when the i-th chunk that
    carried new output tokens arrived and `chunk_tokens[i]` how many it carried (several with
    speculative decoding).
    """

    index: int
    start_s: float
    end_s: float = 0.0
    ttft_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    expected_output_tokens: int = 0
    cached_tokens: int = 0
    spec_accept_length: float | None = None
    error: str | None = None
    http_status: int | None = None
    conversation: int | None = None
    turn: int | None = None
    rid: str | None = None
    # simulator only: modelled seconds the request reached the server after it was due
    late_s: float = 0.0
    # a trace replayed in an open loop: modelled seconds from the first request to when the
    # trace says this one arrives (`start_s` is when it went out)
    scheduled_s: float | None = None

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def latency_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
