"""/metrics in Prometheus text format with sglang's ``sglang:`` names, in modelled seconds."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tuner.sim.request import SimRequest
from tuner.sim.scheduler import Scheduler

TTFT_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
)
E2E_BUCKETS = (
    0.1,
    0.25,
    0.5,
    1,
    2,
    5,
    10,
    20,
    40,
    60,
    80,
    100,
    150,
    200,
    250,
    300,
    400,
    500,
    600,
    1200,
    1800,
    2400,
)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.n += times

    def render(self, name: str, labels: str) -> list[str]:
        lines = [f"# TYPE {name} histogram"]
        running = 0
        for bound, c in zip(self.buckets, self.counts, strict=False):
            running += c
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.n}")
        return lines


class Metrics:
    """Collects per-request observations from the scheduler's callbacks."""

    def __init__(self, scheduler: Scheduler, model_name: str) -> None:
        self.scheduler = scheduler
        self.labels = f'model_name="{model_name}"'
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        scheduler.on_first_token = self._first_token
        scheduler.on_release = self._release
        scheduler.on_finish = self._finish

    def _first_token(self, req: SimRequest) -> None:
        first = req.first_token_t
        assert first is not None, "the scheduler stamps first_token_t before on_first_token"
        self.ttft.observe(max(first - req.arrival, 0.0))

    def _release(self, req: SimRequest, new_tokens: int, t: float) -> None:
        if req.released >= 1 and new_tokens > 0:
            self.itl.observe(max(t - req.release_t, 0.0) / new_tokens, new_tokens)

    def _finish(self, req: SimRequest) -> None:
        if req.error is None and req.finish_t is not None:
            self.e2e.observe(max(req.finish_t - req.arrival, 0.0))

    def render(self) -> str:
        s = self.scheduler
        lab = self.labels
        gauges = {
            "sglang:num_running_reqs": s.num_running,
            "sglang:num_queue_reqs": s.num_queued,
            "sglang:num_used_tokens": s.used_tokens,
            "sglang:token_usage": round(s.token_usage(), 6),
            "sglang:cache_hit_rate": round(s.cache_hit_rate(), 6),
            "sglang:gen_throughput": round(s.stats.last_gen_throughput, 3),
            "sglang:spec_accept_length": round(s.avg_accept_length() or 0.0, 4),
            "sglang:mamba_usage": round(s.mamba_usage(), 6),
            "sglang:hicache_host_used_tokens": s.cache.host_tokens if s.cache else 0,
        }
        counters = {
            "sglang:prompt_tokens_total": s.stats.prompt_tokens_total,
            "sglang:generation_tokens_total": s.stats.generation_tokens_total,
            "sglang:cached_tokens_total": s.stats.cached_tokens_total,
            "sglang:num_requests_total": s.stats.finished_total,
            # simulator-only: how far the host fell behind (modelled time ran slower than
            # K x wall), waits for closed-loop clients, and requests that came late
            "sim:behind_wall_seconds_total": s.clock.behind_wall_s,
            "sim:hold_wait_seconds_total": s.holds.wait_s,
            "sim:hold_timeouts_total": s.holds.timeouts,
            "sim:late_requests_total": s.stats.late_requests,
            "sim:late_seconds_total": s.stats.late_s,
        }
        lines: list[str] = []
        for name, value in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name}{{{lab}}} {float(value)}"]
        for name, value in counters.items():
            lines += [f"# TYPE {name} counter", f"{name}{{{lab}}} {float(value)}"]
        lines += self.ttft.render("sglang:time_to_first_token_seconds", lab)
        lines += self.itl.render("sglang:inter_token_latency_seconds", lab)
        lines += self.e2e.render("sglang:e2e_request_latency_seconds", lab)
        return "\n".join(lines) + "\n"
