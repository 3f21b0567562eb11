"""One scheduler round: the queue, chunked prefill, runs of decode steps, the prefix cache.

Like sglang's, each round either runs a prefill batch (new requests, chunked at
``chunked_prefill_size``; the running requests wait) or decode steps for every running request.
The scheduler owns modelled time (``self.t``, when the GPU is free): a round moves it forward by
what the performance model says the round takes. It does not wait for anything itself; a driver
lets each round's time pass:

- ``paced.PacedDriver`` (the HTTP server): at most K x wall time (``clock.Clock``), streaming
  tokens as they are produced;
- ``headless.HeadlessDriver`` (the oracle): back to back on a virtual clock.

So the server and the oracle run the same rounds by construction. To keep CPU cost low a decode
round is not one step but a run of steps up to the next event (a request finishing, an arrival
that can be admitted: ``cut_for_arrivals``), planned at once (``DecodePlan``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from tuner.sim import tokens as tok
from tuner.sim.adaptive import AdaptivePolicy
from tuner.sim.clock import Clock, VirtualClock
from tuner.sim.config import SimConfig
from tuner.sim.memory import MemoryPlan
from tuner.sim.perf import PerfModel
from tuner.sim.radix import Node, PrefixCache, block_keys
from tuner.sim.request import RequestRecord, SimRequest, answer_len
from tuner.sim.scheduler.holds import Holds
from tuner.sim.scheduler.stats import SchedulerStats

MAX_MACRO_STEPS = 64
# Share of each running request's remaining max_new_tokens kept free in the KV pool at admission
# (sglang's new_token_ratio): low while nothing is retracted; a retraction sets it to 1 (exact
# reserve, so a retracted request does not come back only to be retracted again), and it decays
# back by NEW_TOKEN_RATIO_DECAY per decode step.
NEW_TOKEN_RATIO = 0.4
NEW_TOKEN_RATIO_DECAY = 0.002
LPM_MAX_QUEUE = 128  # sglang falls back to fcfs for longer queues
BLOCK_TOKENS = 16

PrefillItems = list[tuple[SimRequest, int, int]]  # (request, tokens this round, its prefix)


def cache_block(config: SimConfig) -> int:
    """Tokens per prefix-cache block (the page size, at least BLOCK_TOKENS)."""
    return max(BLOCK_TOKENS, config.page_size)


def state_interval(config: SimConfig) -> int | None:
    """Tokens between saved recurrent states (extra_buffer); None: states only at the ends."""
    if config.mamba_strategy in ("extra_buffer", "extra_buffer_lazy"):
        return max(config.args.mamba_track_interval, cache_block(config))
    return None


def slots_per_running(config: SimConfig) -> int:
    """Mamba slots a running request occupies itself (working state, plus a tracking one)."""
    return 2 if config.mamba_strategy in ("extra_buffer", "extra_buffer_lazy") else 1


_NORMAL = NormalDist()


def text_draw(prompt: list[int], keys: list[int], seed: int) -> float:
    """A standard normal draw fixed by the prompt's text (and the server's seed): the chained
    block hashes the prefix cache computed anyway, the prompt's length and its last tokens."""
    head = keys[-1] if keys else hash(tuple(prompt))
    mixed = hash((seed, head, len(prompt), tuple(prompt[-8:]))) & 0xFFFFFFFFFFFF
    # splitmix-style scrambling, so neighbouring hashes land far apart
    mixed = (mixed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    mixed ^= mixed >> 31
    return _NORMAL.inv_cdf(((mixed >> 11) + 0.5) / 2**53)


@dataclass
class DecodePlan:
    """A run of decode steps planned at once: per request, the tokens it has after each step."""

    batch: list[SimRequest]
    cum: np.ndarray  # tokens each request has after each step
    remaining: np.ndarray
    finish_step: np.ndarray
    k_end: int  # steps to run
    t0: float
    step: float  # modelled seconds per step
    start: float  # modelled time it was planned at (arrivals after it may cut it short)
    steps: int | None = None  # draft steps adaptive speculation chose (None: as configured)

    def end(self) -> float:
        """Modelled time at which its ``k_end``-th step ends."""
        return self.t0 + self.k_end * self.step


@dataclass
class PrefillRound:
    """A prefill batch begun: what it prefills, when it ends, who decodes inside it (mixed)."""

    items: PrefillItems
    t_end: float
    mixed: list[SimRequest]


@dataclass
class DecodeRound:
    """Decode steps for the running requests (``plan`` None: a request was retracted)."""

    plan: DecodePlan | None


class Scheduler:
    """The scheduler's state and its round; drivers call ``start_round`` and end the round."""

    def __init__(
        self,
        config: SimConfig,
        plan: MemoryPlan,
        perf: PerfModel,
        clock: Clock | VirtualClock,
        seed: int = 0,
    ) -> None:
        self.config = config
        self.plan = plan
        self.perf = perf
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self.capacity = plan.max_total_num_tokens
        self.cap = plan.max_running_requests
        self.block = cache_block(config)
        self.interval = state_interval(config)
        self.cache: PrefixCache | None = None
        if config.radix_cache:
            self.cache = PrefixCache(
                block=self.block,
                hybrid=config.model.hybrid,
                state_interval=self.interval,
                host_tokens=plan.hicache_host_tokens,
                host_states=plan.mamba_host_slots,
                write_policy=config.args.hicache_write_policy,
            )
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.chunked: SimRequest | None = None
        self.records: list[RequestRecord] = []
        self.owned_tokens = 0
        self.t = 0.0  # modelled time at which the GPU is free
        self.on_change: Callable[[], None] = lambda: None  # a paced driver's wake-up
        self.holds = Holds(clock, config.args.sim_hold_timeout, lambda: self.on_change())
        self.stats = SchedulerStats()
        self._mixed = config.args.enable_mixed_chunk and not perf.speculative
        self._pmfs: dict[int | None, np.ndarray] = {}
        self.adaptive: AdaptivePolicy | None = None
        spec = config.spec
        if spec is not None and spec.adaptive is not None:
            self.adaptive = AdaptivePolicy(spec.adaptive, spec.num_steps)
        self._text_seed = config.args.sim_seed
        self.new_token_ratio = NEW_TOKEN_RATIO
        self.on_finish: Callable[[SimRequest], None] | None = None
        self.on_release: Callable[[SimRequest, int, float], None] | None = None
        self.on_first_token: Callable[[SimRequest], None] | None = None

    # ------------------------------------------------------------ public
    # ------------------------------------------------------------ public
    def prepare(self, req: SimRequest) -> None:
        """Work out what a new request needs before it is queued: its prefix-cache keys and,
        with an acceptance spread, how easy its text is to draft (a draw fixed by the text,
        so a served run and the oracle draw alike whatever the order of arrivals)."""
        if self.cache is not None:
            req.keys = block_keys(req.prompt, self.block)
        if self.perf.speculative and self.perf.accept_spread > 0:
            req.accept_z = text_draw(req.prompt, req.keys, self._text_seed)

    def submit(
        self,
        req: SimRequest,
        after: str | None = None,
        at: float | None = None,
        order: int | None = None,
    ) -> None:
        """Queue a request. ``after``: the hold it claims (its arrival is the hold's time);
        ``at``: the modelled time the client meant to send it (a later one waits in the queue
        until then, an earlier one it missed is counted as late); ``order``: where the client
        drew it from its queue, for a request that does not continue a conversation
        (``order_arrivals``)."""
        hold = self.holds.claim(after) if after is not None else None
        claimed = hold.t if hold is not None else None
        if hold is not None:
            req.claim = (hold.seq, order)
        base = claimed if claimed is not None else req.arrival
        if at is not None:
            if at >= base:
                base = at
            elif claimed is None and base - at > 1e-9:
                req.late_s = base - at
                self.stats.record_late(req.late_s)
        req.arrival = base
        self.waiting.append(req)
        self.on_change()

    def order_arrivals(self) -> None:
        """Queue the requests that claimed holds of one moment as the headless oracle submits
        them, whatever order the client's connections delivered them in: in the order of the
        finishes whose holds they claim, a conversation's next turn at its own finish's place
        and the other requests at the remaining places in the order the client drew them. Their
        seeds (the text they will generate) and natural answer lengths (without ignore_eos)
        follow that order too: the oracle draws both as it submits. Call it when no hold is
        due, before a round."""
        groups: dict[float, list[tuple[int, SimRequest]]] = {}
        claims: dict[int, tuple[int, int | None]] = {}
        for i, req in enumerate(self.waiting):
            if req.claim is not None:
                groups.setdefault(req.arrival, []).append((i, req))
                claims[id(req)], req.claim = req.claim, None
        for group in groups.values():
            if len(group) < 2:
                continue
            members = [req for _, req in group]
            by_finish = sorted(members, key=lambda r: (claims[id(r)][0], claims[id(r)][1] or 0))
            drawn = sorted(
                (claims[id(r)][1] or 0, n)
                for n, r in enumerate(members)
                if claims[id(r)][1] is not None
            )
            fresh = iter(members[n] for _, n in drawn)
            ordered = [r if claims[id(r)][1] is None else next(fresh) for r in by_finish]
            draws = sorted((r.seed, r.natural_len) for r in members)
            for (i, _), req, (seed, natural) in zip(group, ordered, draws, strict=True):
                self.waiting[i] = req
                req.seed, req.natural_len = seed, natural
                req.target_len = answer_len(req.max_new_tokens, natural)

    def abort(self, req: SimRequest, reason: str = "client disconnected") -> None:
        if req.finished:
            return
        if req in self.waiting:
            self.waiting.remove(req)
            self._finish(req, self.clock.now(), error=reason, insert=False)
        elif req in self.running or req is self.chunked:
            req.aborted = True  # removed at the next step boundary

    @property
    def num_running(self) -> int:
        return len(self.running) + (1 if self.chunked is not None else 0)

    @property
    def num_queued(self) -> int:
        return len(self.waiting)

    @property
    def used_tokens(self) -> int:
        cached = self.cache.gpu_tokens if self.cache is not None else 0
        return self.owned_tokens + cached

    def token_usage(self) -> float:
        return self.owned_tokens / self.capacity if self.capacity else 0.0

    def mamba_usage(self) -> float:
        slots = self.plan.mamba_slots
        if not slots:
            return 0.0
        states = len(self.cache.gpu_states) if self.cache is not None else 0
        return min(1.0, (self.num_running * slots_per_running(self.config) + states) / slots)

    def cache_hit_rate(self) -> float:
        return self.stats.cache_hit_rate()

    def avg_accept_length(self) -> float | None:
        return self.stats.avg_accept_length() if self.perf.speculative else None

    def flush_cache(self) -> bool:
        if self.running or self.waiting or self.chunked is not None:
            return False
        if self.cache is not None:
            self.cache.flush()
        return True

    def next_arrival(self) -> float | None:
        """When nothing can run: the modelled time the first request sent ahead of its time
        is due (None: no such request, or one is waiting that is due already)."""
        future = [r.arrival for r in self.waiting if r.arrival > self.t]
        if future and len(future) == len(self.waiting):
            return min(future)
        return None

    # ------------------------------------------------------------ one round
    def start_round(self) -> PrefillRound | DecodeRound | None:
        """Pick the next round as sglang's scheduler does: a prefill batch when one can be
        admitted, else a run of decode steps for the running requests; None when nothing runs.

        A driver then lets the round's modelled time pass (paced or at once) and ends it with
        ``finish_prefill`` / ``finish_decode``. A decode round without a plan retracted a
        request to make room: it ends at once."""
        batch = self._build_prefill()
        if batch is not None:
            items, loaded, loaded_states = batch
            t_end, mixed = self._prefill_begin(items, loaded, loaded_states)
            return PrefillRound(items, t_end, mixed)
        if self.running:
            return DecodeRound(self._plan_decode())
        return None

    # ------------------------------------------------------------ prefill
    def _free_tokens(self) -> int:
        return self.capacity - self.used_tokens

    def _ensure_free(self, tokens: int) -> bool:
        free = self._free_tokens()
        if free >= tokens:
            return True
        if self.cache is not None:
            self.cache.evict_gpu(tokens - free, self.t)
        return self._free_tokens() >= tokens

    def _reserved_future(self) -> float:
        return (
            sum((r.max_new_tokens - r.generated) * self.new_token_ratio for r in self.running)
            * self.config.args.schedule_conservativeness
        )

    def _own_reserve(self, req: SimRequest) -> float:
        return min(req.max_new_tokens - req.generated, 4096) * self.new_token_ratio

    def _next_waiting(self) -> SimRequest | None:
        if not self.waiting:
            return None
        cache = self.cache
        if (
            self.config.args.schedule_policy == "lpm"
            and cache is not None
            and len(self.waiting) <= LPM_MAX_QUEUE
        ):
            ready = [r for r in self.waiting if r.arrival <= self.t]
            if not ready:
                return None
            best = max(ready, key=lambda r: cache.match(r.keys).total_tokens)
            self.waiting.remove(best)
            self.waiting.appendleft(best)
        head = self.waiting[0]
        return head if head.arrival <= self.t else None

    def _build_prefill(self) -> tuple[list[tuple[SimRequest, int, int]], int, int] | None:
        cfg = self.config
        chunk_limit = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else None
        budget = cfg.max_prefill_tokens
        chunk_budget = chunk_limit if chunk_limit is not None else 1 << 60
        items: list[tuple[SimRequest, int, int]] = []
        loaded = loaded_states = 0
        if self.chunked is not None:
            chunked = self.chunked
            if chunked.aborted:
                self.chunked = None
                self._finish(chunked, self.t, error="aborted", insert=False)
            else:
                n = min(chunked.prefill_total - chunked.prefilled, chunk_budget)
                if not self._ensure_free(n):
                    return None
                items.append((chunked, n, chunked.prefilled))
                chunk_budget -= n
                budget -= n
        reserved = None
        while chunk_budget > 0 and budget > 0:
            if len(self.running) + len(items) >= self.cap:
                break
            req = self._next_waiting()
            if req is None:
                break
            if reserved is None:
                reserved = self._reserved_future()
            # hold the matched prefix first, so making room cannot evict it
            node, cached, host_part = self._match(req)
            if node is not None:
                assert self.cache is not None, "_match returns a node only from the prefix cache"
                self.cache.lock(node, self.t)
            new = max(req.prefill_total - cached, 1)
            cached = req.prefill_total - new
            take = new
            if new > chunk_budget and chunk_limit is None and items:
                self._unlock(node)
                break
            if new > chunk_budget:
                take = chunk_budget if chunk_limit is not None else new
            need = take + host_part + int(reserved) + int(self._own_reserve(req))
            fits = self._ensure_free(need) or (
                not items and not self.running and self._ensure_free(take + host_part)
            )
            if not fits:
                self._unlock(node)
                break
            self.waiting.popleft()
            lt, ls = self._admit(req, node, cached, host_part > 0)
            loaded += lt
            loaded_states += ls
            items.append((req, take, cached))
            reserved += self._own_reserve(req)
            chunk_budget -= take
            budget -= take
            if take < new:
                break
        if not items:
            return None
        return items, loaded, loaded_states

    def _match(self, req: SimRequest) -> tuple[Node | None, int, int]:
        """(node to resume from, usable cached tokens, of which to load from host)."""
        if self.cache is None or not req.keys:
            return None, 0, 0
        m = self.cache.match(req.keys)
        if m.total_tokens > m.gpu_tokens:
            return m.node, m.total_tokens, m.total_tokens - m.gpu_tokens
        return m.gpu_node, m.gpu_tokens, 0

    def _unlock(self, node: Node | None) -> None:
        if node is not None and self.cache is not None:
            self.cache.unlock(node)

    def _admit(
        self, req: SimRequest, node: Node | None, cached: int, from_host: bool
    ) -> tuple[int, int]:
        """Take a request in; ``node`` (its cached prefix) is locked already."""
        loaded = states = 0
        if self.cache is not None and node is not None:
            if from_host:
                loaded, states = self.cache.load_from_host(node)
            self.cache.touch_state(node)
            self.cache.hit(node)
        req.node = node
        req.prefilled = cached
        req.admit_cached = cached
        if not req.resumed:
            req.cached = cached
            req.host_loaded = loaded
            self.stats.prompt_tokens_total += req.prompt_len
            self.stats.cached_tokens_total += cached
        self._trim_states(extra=1)
        return loaded, states

    def _trim_states(self, extra: int = 0) -> None:
        if self.cache is None or not self.config.model.hybrid:
            return
        in_use = (self.num_running + extra) * slots_per_running(self.config)
        self.cache.trim_states(self.plan.mamba_slots - in_use)

    def _prefill_begin(
        self, items: list[tuple[SimRequest, int, int]], loaded: int, loaded_states: int
    ) -> tuple[float, list[SimRequest]]:
        """Start a prefill round: (modelled time it ends, running requests decoding in it)."""
        new_tokens = sum(n for _, n, _ in items)
        pairs = sum(n * p + n * n / 2 for _, n, p in items)
        written = 0
        written_states = 0
        if self.cache is not None:
            written, written_states = self.cache.take_io()
        duration = self.perf.prefill(
            new_tokens, len(items), pairs, loaded, written, loaded_states + written_states
        )
        # --enable-mixed-chunk: the running requests decode one token inside the prefill batch
        mixed = [r for r in self.running if not r.aborted] if self._mixed else []
        if mixed and self._ensure_free(len(mixed)):
            context = sum(r.prompt_len + r.generated for r in mixed)
            duration += self.perf.mixed_decode_extra(len(mixed), context)
        else:
            mixed = []
        for req, n, _ in items:
            req.owned += n
            self.owned_tokens += n
            if req is not self.chunked and req.prefilled + n < req.prefill_total:
                self.chunked = req
        return self.t + duration, mixed

    def finish_prefill(self, round_: PrefillRound) -> None:
        """End a prefill round: the GPU stands at its end; finished prompts decode from now."""
        self.t = round_.t_end
        if round_.mixed:
            self._advance_mixed(round_.mixed)
        for req, n, _ in round_.items:
            req.prefilled += n
            if req.prefilled < req.prefill_total:
                continue
            if req is self.chunked:
                self.chunked = None
            if req.aborted:
                self._finish(req, self.t, error="aborted", insert=False)
                continue
            self._cache_prompt(req)
            if req.resumed:  # back from a retraction: its tokens were streamed already
                req.resumed = False
                self.running.append(req)
                continue
            req.generated = 1
            req.owned += 1
            self.owned_tokens += 1
            req.first_token_t = self.t
            self.stats.generation_tokens_total += 1
            self.stats.record_gen(self.t, 1)
            if self.on_first_token is not None:
                self.on_first_token(req)
            if req.generated >= req.target_len:
                self._finish(req, self.t)
            else:
                self.running.append(req)
                self.release_tokens(req, self.t)

    def _advance_mixed(self, mixed: list[SimRequest]) -> None:
        still = [r for r in self.running if r not in mixed]
        for req in mixed:
            req.generated += 1
            req.owned += 1
            self.owned_tokens += 1
            if req.generated >= req.target_len:
                self._finish(req, self.t)
            else:
                still.append(req)
        self.stats.generation_tokens_total += len(mixed)
        self.stats.record_gen(self.t, len(mixed))
        self.running = still

    def _cache_prompt(self, req: SimRequest) -> None:
        """Insert the prefilled prompt into the tree (sglang caches unfinished requests)."""
        if self.cache is None or not req.keys:
            return
        states = []
        if self.interval:
            per = self.interval // self.block
            states = [i for i in range(per - 1, len(req.keys), per)]
        self.cache.insert(req.keys, states, self.t)
        node = self.cache.nodes.get(req.keys[-1])
        if node is not None:
            self.cache.lock(node, self.t)
        if req.node is not None:
            self.cache.unlock(req.node)
        req.node = node
        covered = len(req.keys) * self.block
        moved = max(0, covered - req.admit_cached)
        req.owned -= moved
        self.owned_tokens -= moved
        self._trim_states()

    # ------------------------------------------------------------ decode
    def _plan_decode(self) -> DecodePlan | None:
        """Plan a run of decode steps up to the next finish (None: nothing to run, or a
        request was retracted to make room)."""
        self._drop_aborted()
        if not self.running:
            return None
        batch = self.running
        b = len(batch)
        context = sum(r.prompt_len + r.generated for r in batch)
        written = written_states = 0
        if self.cache is not None:
            written, written_states = self.cache.take_io()
        steps = None
        if self.adaptive is not None:
            steps = self.adaptive.steps_for(b, self.perf.capture_bs)
        step = self.perf.step(b, context, steps)
        extra = self.perf.hicache_cost(0, written, written_states)
        remaining = np.fromiter(
            (r.target_len - r.generated for r in batch), dtype=np.int64, count=b
        )
        pmf = self._pmf(steps)
        max_per_step = len(pmf)
        # do not run past the KV pool: each step adds up to max_per_step tokens per request
        free = self._free_tokens() + (self.cache.evictable_tokens if self.cache else 0)
        steps_cap = max(1, min(MAX_MACRO_STEPS, free // max(b * max_per_step, 1)))
        if free < b * max_per_step:
            self._retract_one()
            return None
        if self.adaptive is not None:
            # the step count may change only where the policy decides: plan up to there
            steps_cap = min(steps_cap, self.adaptive.batches_to_decision(b, self.perf.capture_bs))
        if max_per_step > 1 and self.perf.accept_spread > 0:
            draws = self._draws_by_text(batch, steps, steps_cap)
        elif max_per_step > 1:
            draws = self.rng.choice(max_per_step, size=(b, steps_cap), p=pmf) + 1
        else:
            draws = np.ones((b, steps_cap), dtype=np.int64)
        cum = np.cumsum(draws, axis=1)
        done = cum >= remaining[:, None]
        finish_step = np.where(done.any(axis=1), done.argmax(axis=1) + 1, steps_cap + 1)
        k_end = int(min(finish_step.min(), steps_cap))
        return DecodePlan(
            batch, cum, remaining, finish_step, k_end, self.t + extra, step, self.t, steps
        )

    def _pmf(self, steps: int | None) -> np.ndarray:
        pmf = self._pmfs.get(steps)
        if pmf is None:
            pmf = self._pmfs[steps] = np.asarray(self.perf.accept_pmf(steps))
        return pmf

    def _draws_by_text(self, batch: list[SimRequest], steps: int | None, count: int) -> np.ndarray:
        """Tokens per verify step for each request and step, each from its own text's pmf
        (inverse CDF, as ``Generator.choice`` samples a shared one)."""
        rows = []
        for req in batch:
            pmf = req.accept_pmfs.get(steps)
            if pmf is None:
                pmf = req.accept_pmfs[steps] = self.perf.request_pmf(req.accept_z, steps)
            rows.append(pmf)
        cdf = np.cumsum(np.stack(rows), axis=1)
        cdf /= cdf[:, -1:]
        u = self.rng.random((len(batch), count))
        return (cdf[:, None, :] <= u[:, :, None]).sum(axis=2) + 1

    def cut_for_arrivals(self, plan: DecodePlan, done: int = 0) -> None:
        """End the run of steps with the one in flight when a request arrives after it was
        planned (it may then be admitted), as sglang's scheduler looks at its queue every step.
        From the arrival's modelled stamp, so the server and the headless oracle cut alike;
        ``done``: steps whose tokens were streamed already (a host that fell behind)."""
        if self.num_running >= self.cap or not self.waiting:
            return
        start = plan.start
        new = [r.arrival for r in self.waiting if r.arrival > start]
        if not new:
            return
        j = int((min(new) - plan.t0) / plan.step) if min(new) > plan.t0 else 0
        plan.k_end = max(1, done, min(plan.k_end, j + 1))

    def finish_decode(self, plan: DecodePlan, release: bool = True) -> None:
        """End a run of decode steps at its ``k_end``-th step: tokens, finishes, accept counts.
        ``release``: stream the unfinished requests' tokens now (a paced driver coalesces
        chunks to its flush interval; finished requests are always released)."""
        batch, cum, remaining = plan.batch, plan.cum, plan.remaining
        finish_step, k, t0, step = plan.finish_step, plan.k_end, plan.t0, plan.step
        produced = np.minimum(cum[:, k - 1], remaining)
        t_end = t0 + k * step
        self.new_token_ratio = max(
            NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY * k
        )
        self.t = t_end
        total = int(produced.sum())
        self._ensure_free(total)
        self.stats.generation_tokens_total += total
        self.stats.record_gen(self.t, total)
        spec = self.perf.speculative and plan.steps != 0
        if self.adaptive is not None:
            self._observe_acceptance(plan)
        still: list[SimRequest] = []
        for i, req in enumerate(batch):
            n = int(produced[i])
            req.generated += n
            req.owned += n
            if spec:
                steps_used = min(int(finish_step[i]), k)
                req.verify_ct += steps_used
                self.stats.accept_steps += steps_used
                self.stats.accept_tokens += n
            if req.generated >= req.target_len:
                self._finish(req, t0 + int(finish_step[i]) * step)
            else:
                still.append(req)
                if release:
                    self.release_tokens(req, t_end)
        self.owned_tokens += total
        self.running = still

    def _observe_acceptance(self, plan: DecodePlan) -> None:
        """Feed adaptive speculation each step's mean accepted drafts over the requests that
        were still decoding in it."""
        assert self.adaptive is not None
        draws = np.diff(plan.cum[:, : plan.k_end], axis=1, prepend=0)
        means = []
        for i in range(plan.k_end):
            active = plan.finish_step > i
            means.append(float((draws[active, i] - 1).mean()) if active.any() else 0.0)
        self.adaptive.observe(len(plan.batch), self.perf.capture_bs, means)

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.running):
            for req in [r for r in self.running if r.aborted]:
                self._finish(req, self.t, error="aborted", insert=False)
            self.running = [r for r in self.running if not r.finished]

    def _retract_one(self) -> None:
        """Out of KV: put the newest running request back at the head of the queue."""
        req = self.running.pop()
        self.owned_tokens -= req.owned
        req.owned = 0
        if self.cache is not None and req.node is not None:
            self.cache.unlock(req.node)
        req.node = None
        # it resumes by prefilling prompt + what it generated so far
        sequence = req.prompt + tok.output_ids(0, req.generated, req.seed)
        req.prefill_total = len(sequence)
        req.resumed = True
        req.keys = block_keys(sequence, self.block) if self.cache is not None else []
        req.prefilled = 0
        self.stats.retracted_total += 1
        req.retractions += 1
        self.new_token_ratio = 1.0
        self.waiting.appendleft(req)

    # ------------------------------------------------------------ completion
    def release_tokens(self, req: SimRequest, t: float, upto: int | None = None) -> None:
        """Hand ``req``'s tokens up to ``upto`` (all it has) to its HTTP stream, stamped ``t``."""
        upto = req.generated if upto is None else upto
        if upto <= req.released and not req.finished:
            return
        if self.on_release is not None and upto > req.released:
            self.on_release(req, upto - req.released, t)
        if upto > req.released:
            req.marks.append((upto, t))
        req.released = upto
        req.release_t = t
        req.event.set()

    def _finish(
        self, req: SimRequest, t: float, error: str | None = None, insert: bool = True
    ) -> None:
        req.finish_t = t
        req.error = error
        if insert and self.cache is not None and req.keys is not None:
            full = req.prompt + tok.output_ids(0, req.generated, req.seed)
            start = len(req.keys)
            keys = req.keys + block_keys(
                full, self.block, req.keys[-1] if req.keys else 0, start * self.block
            )
            if keys:
                if self.interval:
                    boundary = (len(full) // self.interval) * self.interval
                    states = [boundary // self.block - 1] if boundary else []
                elif self.config.model.hybrid:
                    states = [len(keys) - 1]
                else:
                    states = []
                self.cache.insert(keys, states, t)
        self.owned_tokens -= req.owned
        req.owned = 0
        if self.cache is not None and req.node is not None:
            self.cache.unlock(req.node)
            req.node = None
        req.finished = True
        self.stats.finished_total += 1
        if req.hold and error is None:
            self.holds.hold(req.rid, 1, t)
        self._trim_states()
        self.records.append(RequestRecord.of(req))
        if self.on_finish is not None:
            self.on_finish(req)
        self.release_tokens(req, t)

    def record_error(self, req: SimRequest) -> None:
        """A request answered with an error before it reached the queue."""
        req.finished = True
        req.finish_t = req.arrival
        self.records.append(RequestRecord.of(req))
