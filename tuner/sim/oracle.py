"""The oracle: what the simulator serves for a configuration and a workload, without serving.

A headless run of the server's own scheduler (the same memory plan, performance model, prefix
cache and HiCache model: ``tuner.sim.scheduler`` with its headless driver) on a virtual clock: no
HTTP, no sleeping. It is driven the way ``tuner bench`` drives a server: the prompts come from the
benchmark's own workload generator (pass a ``tuner.bench.WorkloadSpec``: anything with
``make_conversations()``, ``make_warmup(n)`` and ``seed``), requests are dispatched like its
runner does (a closed loop of C clients, each carrying its conversation to the end before it
opens another; or Poisson / constant arrivals), warm-up requests first. The request records have
the fields of ``tuner.bench.RequestRecord`` and the summary is sglang's benchmark summary
(``oracle_summary.bench_summary``, the definitions of ``tuner.bench.metrics.summarize``,
percentiles included; a test holds the two equal). Since the served simulator stamps every
chunk with modelled time, a served benchmark and the oracle run the same rounds and agree up to
the order in which a client sends requests due at the same modelled moment.

Like the server, it imports nothing of the tuner: the workload comes in as an argument.

    >>> from tuner.bench import WorkloadSpec
    >>> spec = WorkloadSpec(kind="random", requests=8, input_len=128, output_len=256)
    >>> r = predict([], spec, concurrency=1)
    >>> r.launch_ok, r.max_running_requests, round(r.output_throughput)
    (True, 19, 27)
"""

from __future__ import annotations

import contextlib
import io
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.sim import tokens as tok
from tuner.sim.args import parse_args
from tuner.sim.clock import VirtualClock
from tuner.sim.config import SimConfig, resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import MemoryPlan, plan_memory
from tuner.sim.oracle_summary import OracleRecord, bench_summary
from tuner.sim.perf import build_perf_model
from tuner.sim.profiles import ProfileError
from tuner.sim.request import SimRequest, answer_len
from tuner.sim.scheduler import HeadlessDriver, Scheduler

WORKLOAD_KINDS = ("random", "shared-prefix", "multi-turn")
# Open loop: requests in flight at most (the bench client's limit against the simulator).
MAX_AHEAD = 256


@dataclass(frozen=True)
class OracleWorkload:
    """A benchmark workload in a few numbers, for the simulator's own probe client
    (``tuner.bench.WorkloadSpec`` is what ``predict`` takes).

    kind: "random" (unique prompts of ``input_len``), "shared-prefix" (``num_groups`` system
    prompts of ``shared_prefix_len`` + a question of ``input_len``), "multi-turn" (chats of
    ``turns`` turns: each turn adds a user message of ``input_len`` and re-sends the history;
    the first turn starts with a system prompt of ``shared_prefix_len``).
    Either ``concurrency`` (closed loop) or ``request_rate`` (requests/s, Poisson) drives it.
    ``num_requests``: how many requests a run sends (None: the caller decides).
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
    """A configuration's figures under a workload, as ``tuner bench`` would report them.

    ``summary`` has every key of a benchmark summary (sglang's names, percentiles included);
    the attributes below are shorthands for the ones used most.
    """

    launch_ok: bool
    failure: str | None = None  # the line the server would print (e.g. "RuntimeError: ...")
    failure_kind: str | None = None  # not_enough_memory / out_of_memory / cuda_graph / ...
    max_running_requests: int = 0
    max_total_num_tokens: int = 0
    summary: dict[str, float | int] = field(default_factory=dict)
    records: list[OracleRecord] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)
    warmup_s: float = 0.0  # modelled seconds the warm-up requests took

    def _get(self, key: str) -> float:
        return float(self.summary.get(key, 0.0))

    @property
    def output_throughput(self) -> float:
        return self._get("output_throughput")

    @property
    def p99_ttft_ms(self) -> float:
        return self._get("p99_ttft_ms")

    @property
    def cache_hit_rate(self) -> float:
        return self._get("cache_hit_rate")

    @property
    def accept_length(self) -> float | None:
        value = self._get("accept_length")
        return value or None

    @property
    def running(self) -> float:
        """Mean requests in flight (sglang's benchmark `concurrency`)."""
        return self._get("concurrency")

    @property
    def duration_s(self) -> float:
        return self._get("duration")


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


def plan(
    server_args: list[str], hardware: str | None = None, model: str | None = None
) -> tuple[SimConfig, MemoryPlan] | OracleResult:
    """The server's start-up: its config and memory plan, or the failure it would print."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            config = build(server_args, hardware, model)
        memory = plan_memory(config)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        return _failure("bad_argument", lines[-1] if lines else "invalid arguments")
    except ProfileError as exc:
        return _failure("bad_argument", str(exc))
    except StartupFailure as failure:
        return _failure(failure.kind, failure.line)
    return config, memory


def predict(
    server_args: list[str],
    workload: Any,
    hardware: str | None = None,
    model: str | None = None,
    *,
    concurrency: int | None = None,
    request_rate: float | None = None,
    arrival: str = "poisson",
    warmup_requests: int = 0,
    ignore_eos: bool = True,
    slos: dict[str, float] | None = None,
    keep_records: bool = False,
) -> OracleResult:
    """What ``tuner bench`` would measure on ``python -m tuner.sim *server_args``.

    ``server_args``: the argv the server would get (sglang flags, ``--sim-*`` allowed).
    ``workload``: a ``tuner.bench.WorkloadSpec``; ``concurrency`` / ``request_rate`` /
    ``arrival`` / ``warmup_requests`` / ``ignore_eos`` as for ``tuner.bench.BenchConfig``;
    ``slos`` as there (for goodput). ``hardware`` / ``model``: profile names, unless the argv
    names them. ``keep_records``: keep the request records (in completion order).
    """
    spec = workload
    started = plan(server_args, hardware, model)
    if isinstance(started, OracleResult):
        return started
    config, memory = started
    driver = HeadlessServer(config, memory, ignore_eos=ignore_eos)
    warmup_s = 0.0
    if warmup_requests:
        # as the bench runner: shaped like the first turns, another seed, all at once
        warm = driver.run(spec.make_warmup(warmup_requests), concurrency, None, "poisson", 0)
        warmup_s = max((r.end_s for r in warm), default=0.0)
    records = driver.run(spec.make_conversations(), concurrency, request_rate, arrival, spec.seed)
    duration = max((r.end_s for r in records), default=0.0)
    return OracleResult(
        launch_ok=True,
        max_running_requests=memory.max_running_requests,
        max_total_num_tokens=memory.max_total_num_tokens,
        summary=bench_summary(records, duration, slos),
        records=records if keep_records else [],
        memory={
            "mem_fraction_static": memory.mem_fraction_static,
            "mamba_slots": float(memory.mamba_slots),
            "kv_gib": memory.kv_k_gib + memory.kv_v_gib,
            "available_gpu_mem_gib": memory.available_gpu_mem_gib,
            "hicache_host_tokens": float(memory.hicache_host_tokens),
        },
        warmup_s=warmup_s,
    )


class HeadlessServer:
    """The server's scheduler driven by a benchmark client's dispatch rules, on a virtual clock.

    One instance is one server: runs one after the other share its prefix cache and its
    random state, as a warm-up and the measured run share a served simulator.
    """

    def __init__(self, config: SimConfig, memory: MemoryPlan, ignore_eos: bool = True) -> None:
        self.config = config
        self.plan = memory
        self.clock = VirtualClock()
        perf = build_perf_model(config, memory)
        args = config.args
        self.scheduler = Scheduler(config, memory, perf, self.clock, args.sim_seed)
        self.driver = HeadlessDriver(self.scheduler)
        self.scheduler.on_finish = self._finished
        self.ignore_eos = ignore_eos
        self._rng = np.random.default_rng(args.sim_seed + 1)  # the server's, for EOS lengths
        self._seq = 0
        self._run: _RunState | None = None

    def run(
        self,
        conversations: list[Any],
        concurrency: int | None,
        request_rate: float | None,
        arrival: str,
        seed: int,
    ) -> list[OracleRecord]:
        """Serve ``conversations`` as the bench runner sends them; records as it keeps them
        (times in modelled seconds from the run's start)."""
        sched = self.scheduler
        total = sum(len(c.turns) for c in conversations)
        t0 = sched.t
        gaps = np.zeros(total)
        if request_rate is not None and total > 1:
            rng = np.random.default_rng(seed)
            for i in range(1, total):
                gaps[i] = (
                    rng.exponential(1.0 / request_rate)
                    if arrival == "poisson"
                    else 1 / request_rate
                )
        run = _RunState(
            conversations=conversations,
            total=total,
            t0=t0,
            due=(t0 + np.cumsum(gaps)).tolist(),
            free=concurrency or MAX_AHEAD,
            ready=deque((i, 0, t0) for i in range(len(conversations))),
            histories=[list(c.system) if c.system else [] for c in conversations],
        )
        self._run = run
        self._pump(t0)
        self.driver.run_until_idle()
        self._run = None
        if len(run.records) < total:
            raise RuntimeError(
                f"the headless run stalled with {total - len(run.records)} requests unserved"
            )
        return run.records

    def _pump(self, t: float) -> None:
        run = self._run
        assert run is not None
        while run.next_index < run.total and run.free > 0 and run.ready:
            conv, turn_index, ready_t = run.ready.popleft()
            index = run.next_index
            run.next_index += 1
            run.free -= 1
            turn = run.conversations[conv].turns[turn_index]
            prompt = run.histories[conv] + _ids(turn.user)
            req = self._request(prompt, turn.output_len, max(run.due[index], ready_t, t))
            run.meta[id(req)] = (index, conv, turn_index, prompt)
            self.scheduler.submit(req)

    def _request(self, prompt: list[int], max_new: int, at: float) -> SimRequest:
        memory = self.plan
        if len(prompt) > memory.max_req_input_len:
            raise ValueError(
                f"a prompt of {len(prompt)} tokens is longer than the context "
                f"({memory.context_len} tokens)"
            )
        max_new = max(1, min(int(max_new), memory.context_len - len(prompt)))
        natural = None if self.ignore_eos else float(self._rng.lognormal(5.0, 0.8))
        self._seq += 1
        req = SimRequest(
            rid=f"oracle-{self._seq}",
            prompt=prompt,
            max_new_tokens=max_new,
            target_len=answer_len(max_new, natural),
            arrival=at,
            seed=self._seq,
            natural_len=natural,
        )
        self.scheduler.prepare(req)
        return req

    def _finished(self, req: SimRequest) -> None:
        run = self._run
        if run is None or id(req) not in run.meta:
            return
        index, conv, turn_index, prompt = run.meta.pop(id(req))
        t0 = run.t0
        chunk_times: list[float] = []
        chunk_tokens: list[int] = []
        sent = 0
        for upto, t in req.marks:
            chunk_times.append(t - req.arrival)
            chunk_tokens.append(upto - sent)
            sent = upto
        end = req.finish_t if req.finish_t is not None else req.arrival
        multi = len(run.conversations[conv].turns) > 1
        record = OracleRecord(
            index=index,
            start_s=req.arrival - t0,
            end_s=end - t0,
            ttft_s=chunk_times[0] if chunk_times else None,
            chunk_times_s=chunk_times,
            chunk_tokens=chunk_tokens,
            prompt_tokens=req.prompt_len,
            output_tokens=req.generated,
            expected_output_tokens=req.max_new_tokens,
            cached_tokens=req.cached,
            spec_accept_length=req.spec_accept_length,
            error=req.error,
            conversation=conv if multi else None,
            turn=turn_index if multi else None,
            rid=req.rid,
        )
        run.records.append(record)
        run.free += 1
        if turn_index + 1 < len(run.conversations[conv].turns):
            run.histories[conv] = prompt + tok.output_ids(0, req.generated, req.seed)
            run.ready.appendleft((conv, turn_index + 1, end))
        self._pump(end)


@dataclass
class _RunState:
    conversations: list[Any]
    total: int
    t0: float
    due: list[float]
    free: int
    ready: deque[tuple[int, int, float]]
    histories: list[list[int]]
    next_index: int = 0
    records: list[OracleRecord] = field(default_factory=list)
    meta: dict[int, tuple[int, int, int, list[int]]] = field(default_factory=dict)


def _ids(prompt: Any) -> list[int]:
    """A workload prompt as token ids (text is encoded as the simulator's tokenizer does)."""
    return list(prompt) if isinstance(prompt, list) else tok.encode(str(prompt))
