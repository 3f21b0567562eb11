"""What a scheduler counts while it runs: the totals ``/metrics`` and ``/server_info`` report.

>>> stats = SchedulerStats()
>>> stats.record_gen(0.0, 10); stats.record_gen(2.0, 30)
>>> stats.last_gen_throughput
20.0
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# modelled seconds over which last_gen_throughput averages, as sglang's log interval
GEN_WINDOW_S = 5.0


@dataclass
class SchedulerStats:
    """Counters of one scheduler (sglang's names where sglang has the figure)."""

    prompt_tokens_total: int = 0
    cached_tokens_total: int = 0
    generation_tokens_total: int = 0
    finished_total: int = 0
    retracted_total: int = 0
    accept_tokens: int = 0  # tokens produced by speculative iterations
    accept_steps: int = 0  # speculative iterations (verify steps), summed over requests
    late_requests: int = 0  # requests that came after the modelled time they were meant for
    late_s: float = 0.0  # modelled seconds by which they came late
    last_gen_throughput: float = 0.0
    _gen_window: deque[tuple[float, int]] = field(default_factory=deque)

    def record_gen(self, t: float, tokens: int) -> None:
        """``tokens`` generated at modelled time ``t``; updates ``last_gen_throughput``."""
        window = self._gen_window
        window.append((t, tokens))
        while len(window) > 2 and window[0][0] < t - GEN_WINDOW_S:
            window.popleft()
        span = t - window[0][0]
        if span > 0:
            self.last_gen_throughput = sum(n for _, n in window) / span

    def record_late(self, late_s: float) -> None:
        self.late_requests += 1
        self.late_s += late_s

    def cache_hit_rate(self) -> float:
        if not self.prompt_tokens_total:
            return 0.0
        return self.cached_tokens_total / self.prompt_tokens_total

    def avg_accept_length(self) -> float | None:
        """Tokens per verify step (None before the first speculative iteration)."""
        if not self.accept_steps:
            return None
        return self.accept_tokens / self.accept_steps
