"""The oracle: what the simulator will serve for a configuration and a workload, without serving.

Benchmarks use it to know the true optimum of a search space; the tuner may import it (the
simulator never imports the tuner). It reuses the server's own memory plan and performance
model, and a steady-state queueing model of the scheduler on top:

- closed loop with C clients: B = min(C, max_running_requests, what the KV pool holds) run at
  once; each request waits half a decode step for the step in flight, prefills its uncached
  tokens (chunked), then decodes; every other running request's prefill stalls its decode once
  per lifetime (sglang runs prefill and decode batches in turn);
- open loop at rate r: Little's law B = r x latency, decode slowed by the share of time the GPU
  spends in prefill; saturated when B would exceed the running cap;
- prefix cache: the hit a request can get from the workload's geometry (shared system prompt,
  the previous turn of a chat) at the granularity the cache and the Mamba strategy allow, kept on
  the GPU when the tokens and states inserted between two reuses fit the free pool, else in
  HiCache's host tier when that is on (paid for in PCIe time), else lost.

    >>> r = predict([], OracleWorkload(input_len=128, output_len=256, concurrency=1))
    >>> r.launch_ok, r.max_running_requests, round(r.output_throughput)
    (True, 19, 27)
"""

from __future__ import annotations

import contextlib
import io
import math
import statistics
from dataclasses import dataclass, field

from tuner.sim.args import parse_args
from tuner.sim.config import SimConfig, resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import MemoryPlan, plan_memory
from tuner.sim.perf import PerfModel, build_perf_model
from tuner.sim.profiles import ProfileError
from tuner.sim.scheduler import NEW_TOKEN_RATIO, cache_block, slots_per_running, state_interval

WORKLOAD_KINDS = ("random", "shared-prefix", "multi-turn")


@dataclass(frozen=True)
class OracleWorkload:
    """A benchmark workload.

    kind: "random" (unique prompts of ``input_len``), "shared-prefix" (``num_groups`` system
    prompts of ``shared_prefix_len`` + a question of ``input_len``), "multi-turn" (chats of
    ``turns`` turns: each turn adds a user message of ``input_len`` and re-sends the history;
    the first turn starts with a system prompt of ``shared_prefix_len``).
    Either ``concurrency`` (closed loop) or ``request_rate`` (requests/s, Poisson) drives it.
    ``num_requests``: a finite run (cold prefix misses count); None = steady state.
    """

    kind: str = "random"
    input_len: int = 1024
    output_len: int = 256
    concurrency: int | None = 1
    request_rate: float | None = None
    shared_prefix_len: int = 0
    num_groups: int = 1
    turns: int = 1
    num_requests: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise ValueError(f"kind must be one of {WORKLOAD_KINDS}, got {self.kind!r}")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("input_len and output_len must be >= 1")
        if not self.concurrency and not self.request_rate:
            raise ValueError("set concurrency or request_rate")


@dataclass(frozen=True)
class OracleResult:
    launch_ok: bool
    failure: str | None = None  # the line the server would print (e.g. "RuntimeError: ...")
    failure_kind: str | None = None  # not_enough_memory / out_of_memory / cuda_graph / ...
    max_running_requests: int = 0
    max_total_num_tokens: int = 0
    output_throughput: float = 0.0  # tok/s
    total_throughput: float = 0.0  # (input + output) tok/s
    request_throughput: float = 0.0  # req/s
    median_ttft_ms: float = 0.0
    median_tpot_ms: float = 0.0
    median_itl_ms: float = 0.0
    median_e2e_latency_ms: float = 0.0
    cache_hit_rate: float = 0.0
    accept_length: float | None = None
    running: float = 0.0  # mean requests decoding at once
    saturated: bool = False  # open loop beyond capacity: latencies grow without bound
    memory: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Turn:
    prompt: int
    hit: int  # cached tokens
    host: int  # of which loaded from host memory
    host_states: int


def _failure(kind: str, line: str) -> OracleResult:
    return OracleResult(launch_ok=False, failure=line, failure_kind=kind)


def build(
    server_args: list[str], hardware: str | None = None, model: str | None = None
) -> SimConfig:
    """Parse and resolve like the server; raises SystemExit / StartupFailure / ProfileError."""
    argv = list(server_args)
    if hardware and "--sim-hardware" not in argv:
        argv += ["--sim-hardware", hardware]
    if model and "--sim-model" not in argv:
        argv += ["--sim-model", model]
    return resolve(parse_args(argv))


def predict(
    server_args: list[str],
    workload: OracleWorkload,
    hardware: str | None = None,
    model: str | None = None,
) -> OracleResult:
    """Expected steady-state figures of ``python -m tuner.sim *server_args`` under ``workload``.

    ``server_args``: the argv the server would get (sglang flags, ``--sim-*`` allowed).
    ``hardware`` / ``model``: profile names, unless the argv names them.
    """
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            config = build(server_args, hardware, model)
        plan = plan_memory(config)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        return _failure("bad_argument", lines[-1] if lines else "invalid arguments")
    except ProfileError as exc:
        return _failure("bad_argument", str(exc))
    except StartupFailure as failure:
        return _failure(failure.kind, failure.line)
    perf = build_perf_model(config, plan)
    return _steady_state(config, plan, perf, workload)


def _granular(config: SimConfig, length: int, at_finish: bool) -> int:
    """The longest usable prefix of ``length`` cached tokens (block / state granularity)."""
    if not config.radix_cache or length <= 0:
        return 0
    block = cache_block(config)
    if not config.model.hybrid:
        return length // block * block
    interval = state_interval(config)
    if interval:
        return length // interval * interval
    return length // block * block if at_finish else 0


def _turns(config: SimConfig, plan: MemoryPlan, w: OracleWorkload, running: int) -> list[_Turn]:
    """Prompt and cache hit of each turn of a conversation, steady state."""
    q, o, s = w.input_len, w.output_len, w.shared_prefix_len
    groups = max(w.num_groups, 1)
    clients = running if w.concurrency is None else max(w.concurrency, 1)
    turns = []
    history = 0
    n_turns = w.turns if w.kind == "multi-turn" else 1
    for t in range(n_turns):
        if t == 0:
            prompt = (s if w.kind != "random" else 0) + q
            ideal = 0 if w.kind == "random" else _granular(config, s, at_finish=False)
            # a new request reuses its group's system prompt once another request used it
            reuse_tokens = (
                groups * (s + q + o) if w.kind == "shared-prefix" else clients * (q + o) * n_turns
            )
            new_states = _new_states(config, prompt - ideal, prompt + o)
            reuse_states = (groups if w.kind == "shared-prefix" else clients) * new_states
        else:
            prompt = history + q
            ideal = _granular(config, history, at_finish=True)
            reuse_tokens = clients * (q + o)
            new_states = _new_states(config, prompt - ideal, prompt + o)
            reuse_states = clients * new_states
        ideal = min(ideal, prompt - 1)
        hit, host, host_states = _place(
            config, plan, ideal, reuse_tokens, reuse_states, running, prompt + o
        )
        if t == 0 and w.num_requests and w.kind != "random":
            # the first request of each group / chat finds nothing cached
            cold = min(1.0, (groups if w.kind == "shared-prefix" else 0) / w.num_requests)
            hit = int(hit * (1.0 - cold))
            host = int(host * (1.0 - cold))
        turns.append(_Turn(prompt, hit, host, host_states))
        history = prompt + o
    return turns


def _new_states(config: SimConfig, new_tokens: int, total: int) -> int:
    """Recurrent states one request adds to the cache (prefill track points + its end)."""
    if not config.model.hybrid or not config.radix_cache:
        return 0
    interval = state_interval(config)
    if interval:
        return max(new_tokens, 0) // interval + 1
    return 1


def _place(
    config: SimConfig,
    plan: MemoryPlan,
    ideal: int,
    reuse_tokens: int,
    reuse_states: int,
    running: int,
    live_per_request: int,
) -> tuple[int, int, int]:
    """Where a reusable prefix survives until its reuse: (hit, of it from host, host states)."""
    if ideal <= 0:
        return 0, 0, 0
    free_kv = plan.max_total_num_tokens - running * live_per_request
    state_room = plan.mamba_slots - running * slots_per_running(config)
    gpu_ok = reuse_tokens <= free_kv and (not config.model.hybrid or reuse_states <= state_room)
    if gpu_ok:
        return ideal, 0, 0
    if config.hicache:
        host_ok = reuse_tokens <= plan.hicache_host_tokens and (
            not config.model.hybrid or reuse_states <= plan.mamba_host_slots
        )
        if host_ok:
            return ideal, ideal, 1 if config.model.hybrid else 0
    return 0, 0, 0


def _prefill_time(config: SimConfig, perf: PerfModel, turn: _Turn, count: int = 1) -> float:
    """Modelled seconds to prefill ``count`` such requests together (chunked batches)."""
    new = max(turn.prompt - turn.hit, 1)
    total_new = new * count
    chunk = config.chunked_prefill_size if config.chunked_prefill_size > 0 else total_new
    # HiCache writes every new token to host (write-through now, write-back on eviction)
    written = total_new if config.hicache else 0
    total = 0.0
    done = 0
    while done < total_new:
        n = min(chunk, total_new - done)
        reqs = max(1, min(count, math.ceil(n / new)))
        prefix = turn.hit + (done % new)
        per = n / reqs
        loads = turn.host * reqs if done == 0 else 0
        states = turn.host_states * reqs if done == 0 else 0
        total += perf.prefill(n, reqs, reqs * (per * prefix + per * per / 2), loads, 0, states)
        done += n
    return total + perf.hicache_cost(0, written, 0)


def _steady_state(
    config: SimConfig, plan: MemoryPlan, perf: PerfModel, w: OracleWorkload
) -> OracleResult:
    cap = plan.max_running_requests
    o = w.output_len
    tau = perf.expected_accept_length()
    mean_prompt_guess = (
        (w.shared_prefix_len if w.kind != "random" else 0)
        + w.input_len
        + ((w.turns - 1) * (w.input_len + o) / 2 if w.kind == "multi-turn" else 0)
    )
    # requests the KV pool holds at once, with sglang's reserve for their outputs
    per_req = mean_prompt_guess + o * max(NEW_TOKEN_RATIO, 0.5)
    kv_fit = max(1, int(plan.max_total_num_tokens // max(per_req, 1)))
    limit = min(cap, kv_fit)

    def lifetimes(b: float) -> tuple[list[_Turn], list[float], list[float], float]:
        turns = _turns(config, plan, w, max(1, round(b)))
        pf = [_prefill_time(config, perf, t) for t in turns]
        ctx = statistics.fmean(t.prompt for t in turns) + o / 2
        d = perf.step(max(1, round(b)), int(max(b, 1) * ctx))
        return turns, pf, [d] * len(turns), d

    steps = max(o - 1, 0) / tau
    saturated = False
    if w.request_rate:
        rate = w.request_rate / (w.turns if w.kind == "multi-turn" else 1)
        rate_req = w.request_rate
        b = 1.0
        for _ in range(60):
            turns, pf, _, d = lifetimes(b)
            busy = min(rate_req * statistics.fmean(pf), 0.95)
            life = d / 2 + statistics.fmean(pf) + steps * d / (1.0 - busy)
            b_new = rate_req * life
            if b_new > limit:
                saturated = True
                b_new = float(limit)
            if abs(b_new - b) < 1e-3:
                break
            b = 0.5 * b + 0.5 * b_new
        del rate
        running = b
        ttfts = [d / 2 + p for p in pf]
        decode = [steps * d / (1.0 - busy) for _ in pf]
        e2es = [tt + dec for tt, dec in zip(ttfts, decode, strict=True)]
        throughput_req = rate_req if not saturated else limit / statistics.fmean(e2es)
        if saturated:
            ttfts = [math.inf] * len(ttfts)
            e2es = [math.inf] * len(e2es)
    else:
        clients = w.concurrency or 1
        running = float(min(clients, limit))
        b = max(1, round(running))
        turns, pf, _, d = lifetimes(running)
        mean_pf = statistics.fmean(pf)
        if perf.speculative or b == 1:
            # staggered: acceptance varies, so requests end (and the next ones start) one by
            # one; an arrival waits for the step in flight, each prefill stalls the others
            inflight = d / 2 if b > 1 else 0.0
            firsts = [inflight + p for p in pf]
            own_steps = steps
            if config.args.enable_mixed_chunk and b > 1:
                # the others' prefill batches each carry one decode token of this request
                ctx = statistics.fmean(t.prompt for t in turns) + o / 2
                mean_pf += perf.mixed_decode_extra(b - 1, int((b - 1) * ctx))
                own_steps = max(o - 1 - (b - 1), 0) / tau
            lives = [f + own_steps * d + (b - 1) * mean_pf for f in firsts]
        else:
            # in lockstep: equal lengths end together and the next wave comes together. Its
            # first batch is the queued requests (or the first arrival), then the rest
            first_n = min(clients - b, b) if clients > b else 1
            first = [_prefill_time(config, perf, t, count=first_n) for t in turns]
            rest = [_prefill_time(config, perf, t, count=b - first_n) for t in turns]
            wave = [p + r for p, r in zip(first, rest, strict=True)]
            firsts = [(p + w_) / 2 if b == 2 else w_ for p, w_ in zip(first, wave, strict=True)]
            lives = [w_ + steps * d for w_ in wave]
        mean_life = statistics.fmean(lives)
        # beyond the cap, a share of the requests waits a whole lifetime in the queue (the
        # mean wait is Little's law); the median is either no wait or a whole one
        share = min(1.0, (clients - running) / running) if clients > running else 0.0
        waits = share >= 0.5
        ttfts = [mean_life if waits else f for f in firsts]
        e2es = [tt + life - f for tt, life, f in zip(ttfts, lives, firsts, strict=True)]
        decode = [life - f for life, f in zip(lives, firsts, strict=True)]
        throughput_req = running / mean_life
    mean_prompt = statistics.fmean(t.prompt for t in turns)
    hit_rate = sum(t.hit for t in turns) / max(sum(t.prompt for t in turns), 1)
    tpots = [dec / max(o - 1, 1) for dec in decode]
    memory = {
        "mem_fraction_static": plan.mem_fraction_static,
        "mamba_slots": float(plan.mamba_slots),
        "kv_gib": plan.kv_k_gib + plan.kv_v_gib,
        "ssm_state_gib": plan.ssm_state_gib,
        "intermediate_ssm_gib": plan.intermediate_ssm_gib,
        "available_gpu_mem_gib": plan.available_gpu_mem_gib,
        "hicache_host_tokens": float(plan.hicache_host_tokens),
    }
    return OracleResult(
        launch_ok=True,
        max_running_requests=cap,
        max_total_num_tokens=plan.max_total_num_tokens,
        output_throughput=throughput_req * o,
        total_throughput=throughput_req * (o + mean_prompt),
        request_throughput=throughput_req,
        median_ttft_ms=statistics.median(ttfts) * 1000,
        median_tpot_ms=statistics.median(tpots) * 1000,
        median_itl_ms=d / tau * 1000,
        median_e2e_latency_ms=statistics.median(e2es) * 1000,
        cache_hit_rate=hit_rate,
        accept_length=tau if perf.speculative else None,
        running=running,
        saturated=saturated,
        memory=memory,
    )
