"""A staged benchmark run: arrival, warm-up, multi-turn ordering and an early-stop hook.

Requests are released by arrival (a maximum concurrency, or a Poisson / constant request rate
with an optional concurrency cap). A multi-turn conversation sends turn k+1 only after turn k
finished, with the answer appended to its history. The run is split into stages by requests
completed; after each stage a callback gets the cumulative summary and may stop the run, which
cancels the requests in flight (closing their connections, so the server aborts them) and
returns what was measured.

Example:
    >>> spec = WorkloadSpec.from_dict({"kind": "random", "requests": 40, "input_len": 512})
    >>> cfg = BenchConfig(url="http://127.0.0.1:30000", workload=spec, concurrency=8, stages=4)
    >>> keep_going = lambda stage, summary: summary["output_throughput"] > 100
    >>> result = run_bench(cfg, on_stage=keep_going)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.bench.client import BenchClient, ModelClock
from tuner.bench.dispatch import (
    REPLAY_LAG_LIMIT_S,
    REPLAY_MAX_AHEAD,
    Dispatch,
    ReadyTurns,
    SimFields,
    arrival_gaps,
    replay_gaps,
    replay_kept_time,
    send_lag_summary,
)
from tuner.bench.metrics import check_slos, summarize
from tuner.bench.modelled import (
    LATE_TOLERANCE_S,
    BenchLagError,
    ModelledDispatch,
    lag_reason,
    with_sim,
)
from tuner.bench.payload import APIS, History, build_body, flatten, prompt_length
from tuner.bench.records import RequestRecord, Summary
from tuner.bench.wallclock import WallClockDispatch
from tuner.bench.workload import Conversation, WorkloadSpec
from tuner.engines.model_config import ModelConfigError, find_config_dir, read_config, text_config
from tuner.errors import UserError
from tuner.signals import run_async

ARRIVALS = ("poisson", "constant")

# Stage callback: (stage index from 0, cumulative summary) -> False to stop the run.
StageCallback = Callable[[int, Summary], bool | None]
# Progress callback: (requests finished, requests in the run).
ProgressCallback = Callable[[int, int], None]


@dataclass
class BenchConfig:
    """How to run one benchmark. Times and rates are in modelled units (see BenchResult).

    concurrency: most requests in flight (None: no cap).
    request_rate: requests per second released by `arrival` (None: as fast as the cap allows).
    warmup_requests: sent and awaited before the measurement; not counted.
    stages: the run is split into this many stages by requests completed.
    api: "generate" (native, token ids, exact lengths), "completions" or "chat" (OpenAI).
    api_key: sent as `Authorization: Bearer`; None reads SGLANG_API_KEY from the environment.
    request_timeout_s: a request running longer is recorded as a timeout (None: no limit).
    model: the `model` field of OpenAI requests (None: what /server_info says).
    slos: limits for goodput, e.g. {"ttft_ms": 2000, "tpot_ms": 50, "e2e_latency_ms": 30000}.
    use_server_time: against the simulator, measure with its modelled timestamps (False: the
      client's wall clock x the time scale, as against a real server).
    """

    url: str
    workload: WorkloadSpec
    concurrency: int | None = None
    request_rate: float | None = None
    arrival: str = "poisson"
    warmup_requests: int = 1
    stages: int = 1
    api: str = "generate"
    api_key: str | None = None
    request_timeout_s: float | None = 1800.0
    ignore_eos: bool = True
    model: str | None = None
    slos: Mapping[str, float] | None = None
    use_server_time: bool = True

    def __post_init__(self) -> None:
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise UserError(message)

        check(isinstance(self.workload, WorkloadSpec), "workload must be a WorkloadSpec")
        check(
            self.concurrency is None or (_is_int(self.concurrency) and self.concurrency >= 1),
            f"concurrency must be an integer >= 1, got {self.concurrency!r}",
        )
        check(
            self.request_rate is None or (_is_number(self.request_rate) and self.request_rate > 0),
            f"request rate must be a number > 0, got {self.request_rate!r}",
        )
        check(
            self.arrival in ARRIVALS,
            f"arrival {self.arrival!r} is not known; allowed: {', '.join(ARRIVALS)}",
        )
        check(
            _is_int(self.warmup_requests) and self.warmup_requests >= 0,
            f"warm-up requests must be an integer >= 0, got {self.warmup_requests!r}",
        )
        check(
            _is_int(self.stages) and self.stages >= 1,
            f"stages must be an integer >= 1, got {self.stages!r}",
        )
        check(self.api in APIS, f"api {self.api!r} is not known; allowed: {', '.join(APIS)}")
        check(
            self.request_timeout_s is None
            or (_is_number(self.request_timeout_s) and self.request_timeout_s > 0),
            f"request timeout must be a number of seconds > 0, got {self.request_timeout_s!r}",
        )
        try:
            check_slos(self.slos)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        replay = self.workload.replay_mode
        check(
            replay != "open-loop" or self.request_rate is None,
            "a trace replayed in an open loop sends at its own times: drop the request rate "
            "(or replay it with mode: closed-loop)",
        )
        check(
            replay != "closed-loop" or self.effective_concurrency is not None,
            "a trace replayed in a closed loop needs its number of clients: set the workload's "
            "concurrency or the bench's",
        )

    @property
    def effective_concurrency(self) -> int | None:
        """The bench's concurrency, else a closed-loop trace's own number of clients."""
        return self.concurrency if self.concurrency is not None else self.workload.concurrency


@dataclass
class BenchResult:
    """What a run measured. All times are modelled seconds: wall time x the server's
    `sim_time_scale` (1.0 on a real server), so the figures do not depend on the scale.

    summary: the full summary (sglang's key names) of every request that finished.
    stages: the cumulative summary after each completed stage.
    stopped_at_stage: the stage whose callback returned False, None when none did.
    server_lost: the server stopped answering during the run (see server_lost_message).
    """

    summary: Summary
    stages: list[Summary]
    records: list[RequestRecord]
    stopped_at_stage: int | None
    duration_s: float
    time_scale: float = 1.0
    warmup_records: list[RequestRecord] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)
    # Set when requests failed and the server no longer answered afterwards: it died under the
    # benchmark (a crash kills real sglang's whole process tree), one line saying so.
    server_lost: str | None = None


def run_bench(
    cfg: BenchConfig,
    on_stage: StageCallback | None = None,
    on_progress: ProgressCallback | None = None,
) -> BenchResult:
    """Run a benchmark to the end or until `on_stage` returns False (blocking).

    Raises UserError when the server cannot be reached at all; failures of single requests
    are recorded in their RequestRecord and counted in `summary["failed"]`.
    """
    return run_async(run_bench_async(cfg, on_stage, on_progress))


async def run_bench_async(
    cfg: BenchConfig,
    on_stage: StageCallback | None = None,
    on_progress: ProgressCallback | None = None,
) -> BenchResult:
    """`run_bench` for callers that already run an event loop."""
    clock = ModelClock()
    async with BenchClient(
        cfg.url,
        api=cfg.api,
        api_key=cfg.api_key,
        request_timeout_s=cfg.request_timeout_s,
        clock=clock,
        use_server_time=cfg.use_server_time,
    ) as client:
        info = await client.probe()
        model = cfg.model or info.model
        workload = cfg.workload
        if workload.vocab_size is None:
            workload = workload.with_vocab(model_vocab_size(info.raw))
        conversations = workload.make_conversations()
        warmup = workload.make_warmup(cfg.warmup_requests)
        warmup_records = await _Run(cfg, client, model, warmup, paced=False).warm_up()
        clock.restart()
        run = _Run(cfg, client, model, conversations, on_stage, on_progress)
        await run.measure()
        lag = run.send_lag()
        failed = [r for r in [*warmup_records, *run.records] if r.error]
        lost = None
        if failed and not await client.reachable():
            lost = server_lost_message(cfg.url, failed, len(run.records))
    result = run.result(info.time_scale, warmup_records, info.raw)
    result.server_lost = lost
    reuse = cfg.workload.trace_reuse()
    if reuse is not None:
        # What the cache hit rate of this run is to be read against.
        result.summary["trace_block_reuse"] = reuse
    if lag:
        result.summary.update(lag)
        if lost is None and not replay_kept_time(lag, len(result.records)):
            raise BenchLagError(replay_lag_reason(lag))
    return result


def replay_lag_reason(lag: Summary) -> str:
    """One line for a trace replay whose requests went out too long after their times."""
    return (
        f"not a measurement: {lag['late_sends']} of the trace's requests went out more than "
        f"{REPLAY_LAG_LIMIT_S * 1000:.0f} ms late (send lag p50 {lag['p50_send_lag_ms']:.1f} ms, "
        f"p99 {lag['p99_send_lag_ms']:.1f} ms, max {lag['max_send_lag_ms']:.1f} ms, modelled): "
        "the client could not keep the trace's times (an overloaded host, a concurrency cap, "
        "or a speedup past what it can send)"
    )


def server_lost_message(url: str, failed: list[RequestRecord], measured: int) -> str:
    """One line for a server that stopped answering during the run (it died or was stopped)."""
    return (
        f"the server at {url} stopped answering during the benchmark (it crashed or was "
        f"stopped; its log says why): {len(failed)} request(s) failed of {measured} measured "
        f"(warm-up included), first error: {failed[0].error}"
    )


def model_vocab_size(server_info: Mapping[str, Any]) -> int | None:
    """The served model's vocabulary size from its config.json, when this host has that file
    (a local model directory or the Hugging Face cache); None otherwise."""
    for key in ("model_path", "tokenizer_path"):
        path = server_info.get(key)
        directory = find_config_dir(path) if isinstance(path, str) else None
        if directory is None:
            continue
        try:
            vocab = text_config(read_config(directory)).get("vocab_size")
        except ModelConfigError:
            return None
        return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None
    return None


class _Run:
    """The state of one measured (or warm-up) pass over a list of conversations.

    What goes out is decided here; when it goes out, by the dispatch strategy the server calls
    for (dispatch.py): modelled time against the simulator, the wall clock otherwise.
    """

    def __init__(
        self,
        cfg: BenchConfig,
        client: BenchClient,
        model: str | None,
        conversations: list[Conversation],
        on_stage: StageCallback | None = None,
        on_progress: ProgressCallback | None = None,
        *,
        paced: bool = True,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.model = model
        self.conversations = conversations
        self.on_stage = on_stage
        self.on_progress = on_progress
        self.total = sum(len(c.turns) for c in conversations)
        stages = min(cfg.stages, self.total)
        self.boundaries = [math.ceil((i + 1) * self.total / stages) for i in range(stages)]
        self.records: list[RequestRecord] = []
        self.stage_summaries: list[Summary] = []
        self.stopped_at_stage: int | None = None
        self.histories: list[History] = [
            [("system", c.system)] if c.system else [] for c in conversations
        ]
        self.turns = ReadyTurns(len(conversations))
        self.finished = asyncio.Event()
        self.failure: BaseException | None = None
        self.late: list[RequestRecord] = []
        self.measured = paced
        # Warm-up requests go out at once (up to the cap), not at the measured request rate.
        offsets = cfg.workload.arrival_offsets() if paced else None
        gaps = (
            replay_gaps(offsets)
            if offsets is not None
            else arrival_gaps(
                self.total, cfg.request_rate if paced else None, cfg.arrival, cfg.workload.seed
            )
        )
        # The trace's time of each request, to measure how late it went out.
        self.scheduled = offsets
        concurrency = cfg.effective_concurrency
        if offsets is not None and concurrency is None and client.modelled:
            # Sent ahead of their times, the trace's requests reach the simulator on time even
            # when it falls behind; the default window (MAX_AHEAD) would hold back those past
            # it until a finish, which an overloaded configuration makes late.
            concurrency = min(self.total, REPLAY_MAX_AHEAD)
        self.dispatch: Dispatch
        if client.modelled:
            self.dispatch = ModelledDispatch(
                client,
                self.turns,
                self._one,
                self.finished,
                total=self.total,
                gaps=gaps,
                concurrency=concurrency,
            )
        else:
            self.dispatch = WallClockDispatch(
                client.clock,
                self.turns,
                self._one,
                self._fail,
                total=self.total,
                gaps=gaps,
                concurrency=concurrency,
            )

    async def warm_up(self) -> list[RequestRecord]:
        if not self.conversations:
            return []
        await self._run_all()
        return self.records

    async def measure(self) -> None:
        await self._run_all()
        if self.failure is not None:
            raise self.failure

    async def _run_all(self) -> None:
        await self.dispatch.start()
        try:
            await self.finished.wait()
        finally:
            # Reached on completion, on a stop from the callback, and when our caller is
            # cancelled: in-flight requests are cancelled, which closes their connections.
            await self.dispatch.stop()

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.finished.set()

    async def _one(self, index: int, conv_index: int, turn_index: int, sim: SimFields) -> None:
        try:
            await self._send_turn(index, conv_index, turn_index, sim)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug must end the run, not hang it
            self._fail(exc)

    async def _send_turn(
        self, index: int, conv_index: int, turn_index: int, sim: SimFields
    ) -> None:
        conversation = self.conversations[conv_index]
        turn = conversation.turns[turn_index]
        history = [*self.histories[conv_index], ("user", turn.user)]
        has_next = turn_index + 1 < len(conversation.turns)
        body = build_body(
            self.cfg.api,
            history,
            turn.output_len,
            ignore_eos=self.cfg.ignore_eos,
            model=self.model,
        )
        record, output = await self.client.send(
            index,
            with_sim(body, sim) if sim is not None else body,
            expected_output_tokens=turn.output_len,
            conversation=conv_index if len(conversation.turns) > 1 else None,
            turn=turn_index if len(conversation.turns) > 1 else None,
            capture_output=has_next,
        )
        if self.scheduled is not None:
            record.scheduled_s = self.scheduled[index]
        if record.prompt_tokens == 0 and record.success:
            record.prompt_tokens = prompt_length(flatten(history))
        if has_next:
            # The server's own answer keeps the history a prefix of what it has cached; the
            # synthetic answer of the same length stands in when it does not send its ids.
            answer = output if output is not None else turn.synthetic_answer
            self.histories[conv_index] = [*history, ("assistant", answer)]
            self.turns.put_next(conv_index, turn_index + 1, record.end_s)
        self._finish(record)
        self.dispatch.done(record, sim)

    def _finish(self, record: RequestRecord) -> None:
        if self.finished.is_set():
            return
        self.records.append(record)
        done = len(self.records)
        if self.measured and record.late_s > LATE_TOLERANCE_S:
            self.late.append(record)
            self._fail(BenchLagError(lag_reason(self.late)))
            return
        if self.on_progress is not None:
            self.on_progress(done, self.total)
        stage = len(self.stage_summaries)
        if stage < len(self.boundaries) and done == self.boundaries[stage]:
            summary = summarize(self.records, self._duration(), self.cfg.slos)
            self.stage_summaries.append(summary)
            if self.on_stage is not None:
                try:
                    keep_going = self.on_stage(stage, summary)
                except BaseException as exc:
                    self._fail(exc)
                    return
                if keep_going is False:
                    self.stopped_at_stage = stage
                    self.finished.set()
                    return
        if done == self.total:
            self.finished.set()

    def send_lag(self) -> Summary:
        """Send-lag percentiles of a trace replayed in an open loop (empty otherwise)."""
        return send_lag_summary(self.records) if self.scheduled is not None else {}

    def _duration(self) -> float:
        # The benchmark starts at 0 (the clock restarts just before the first request).
        return max((r.end_s for r in self.records), default=0.0)

    def result(
        self, time_scale: float, warmup_records: list[RequestRecord], server_info: dict[str, Any]
    ) -> BenchResult:
        duration = self._duration()
        return BenchResult(
            summary=summarize(self.records, duration, self.cfg.slos),
            stages=list(self.stage_summaries),
            records=list(self.records),
            stopped_at_stage=self.stopped_at_stage,
            duration_s=duration,
            time_scale=time_scale,
            warmup_records=warmup_records,
            server_info=server_info,
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
