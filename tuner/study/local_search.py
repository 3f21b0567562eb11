"""A model-free local search over the space's structure, run between the sampler's trials.

    search = LocalSearch(space, seed=0)
    params = search.propose(study.get_trials(deepcopy=False), tried)   # None: nothing to try

The study's *incumbent* is its best measured trial: the SLO-feasible one with the most
throughput, or, while none is feasible, the launched one that violates its SLOs least (the
search then walks towards the SLO boundary). A proposal is one move away from it:

- a categorical param to another choice (choices that are all numbers are ordered: the adjacent
  ones first); params the move switches on take the values of the best trial that had them, else
  the middle of their range;
- a number to one of its range's ends, then halfway there, a quarter of the way, one step
  (levels 0-3; a log range moves geometrically). Optima sit at range ends often (the largest
  memory fraction, a cap at the client count), so the ends are tried before the small steps.

Moves are ranked by level, and by what earlier trials say about the same move made from another
configuration (the effect of one param is assumed to carry over, as a coordinate search does):
a move that made things worse elsewhere waits `worse_penalty` levels, one that helped goes first
(pairs of trials both over an SLO are not counted);
and by a ridge regression of every finished trial's rank on its params (`Trend`: the sampler's
trials count too), which moves towards what ranked well.
The move that reached the incumbent is extended first. Moves are also made from the best trial of
each other branch (another choice of a categorical param that switches params on, the rest as
the incumbent's) and from the *boundary* trial (of those with more throughput than the incumbent
but over an SLO, the least over): a branch's first trial seldom shows what it can do, and the
optimum often sits on the SLO boundary. When the incumbent's every move has been tried, the next
best trial's moves come next (a restart).

While no trial meets every SLO, and the best one and a trial one number away from it break
different SLOs (a running cap too low for the TTFT tail, too high for TPOT), the number halfway
between them comes first (a *window* move): the SLOs can hold only between the two. Where
that line meets them nowhere (lpm queues the TTFT tail at every running cap low enough for
the TPOT limit), the window's *partner* (the trial nearest the best that breaks only the other
SLOs) is tried with each categorical param set to another choice (a *partner flip*). Once the
best trial meets the SLOs, a trial one number away from it with more throughput that breaks one
is bisected against it the same way (an *edge* move): the best value of such a number sits on
the SLO's edge between the two. Edge moves start from the best trial and from every trial within
2% of its throughput (`edge_tie`): under measurement noise the best trial changes between
configurations that run alike, and a bisection begun from one goes on instead of starting over
from the other's range ends. An edge is *carried* (`carry_tie`) to a trial within 5% of the
best's throughput that meets the SLO bounding it with more room: that trial at the nearest
value past the edge, then its own edge bisected (lpm at fcfs's edge cap, with TPOT to spare,
may reach the next step of the cap's staircase). Where no trial one number from the best
marks an edge, the stop rule may *probe* one (`edge_probes`): the best trial with a number in
which a trial past the edge differs from it set halfway to the nearest value of that number
any trial past the edge has on that side (`probe_nearest`); the polish's own probe goes
halfway to the trial's value.

An SLO metric need not be monotone in a number: p99 TPOT falls with the draft steps while more
drafts are accepted and rises once a step costs more than it saves. Where trials that differ
in one number only all miss the same SLO, the two beside the one that misses by least, if both
miss by a little and both measured more than 3% over the best trial within the SLOs, leave
the bottom of that metric between them: the number halfway is tried at the edge moves' level
(a *valley* move), and the stop rule measures it before it stops.

A trial over a TTFT SLO of a closed loop that ran fewer requests at once than there are clients
(its measured capacity) moves first towards more running slots (a larger memory fraction, a
higher cap): queueing for a slot is what such a tail waits on. So does a trial of a capacity
study whose rate search broke on a TTFT SLO. Without an estimate, every such trial that
measured about as much as the best trial within the SLOs (within 15%) is moved to its most
running slots too, not only the trial the search moves from (a *slot repair*): NEXTN at one
draft step queued at a memory fraction of 0.91 and meets a 3 s TTFT limit at 0.95. A repair
of a trial that measured more than the best comes before the extension of the last move.

Without any estimate it uses what the study measured and nothing else, so it works the same for
a GPU missing from the spec table; with one (`rank`), moves of one level are ordered by it.
Everything is recomputed from the trials, so resumed studies and several workers agree.

This module ranks and proposes; its parts live beside it: the moves and the params they make
(tuner/study/moves.py), how a finished trial stands (tuner/study/standing.py), the window, edge
and valley bisections (tuner/study/bisection.py) and the trend (tuner/study/trend.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.results.goals import SLO_NOISE, is_capacity
from tuner.space.model import SearchSpace, same_value
from tuner.study.bisection import (
    boundary_trial,
    by_gap,
    edge_moves,
    halfway_in,
    nearest_past,
    past_edge,
    valley_moves,
    window_moves,
    window_partner,
)
from tuner.study.moves import Move, Params, complete, few_values, key, moves
from tuner.study.standing import (
    Standing,
    by_standing,
    informative,
    outcome,
    past_throughput,
    sure_view,
)
from tuner.study.trend import Trend


@dataclass(frozen=True)
class LocalSearchConfig:
    worse_penalty: float = 2.0  # levels a move waits when the same move made a trial worse
    better_bonus: float = 1.0  # levels a move gains when the same move made a trial better
    # Pairs of trials both over an SLO say little about a move where the SLO is met.
    infeasible_effects: bool = False
    restarts: int = 3  # how many of the next best trials to move from once the best is done
    branch_offset: float = 1.0  # levels a move from another branch's best waits
    # A branch whose best measured within this share of the best trial's throughput (both
    # within the SLOs) is as good a base: its moves wait no level, and its own params get no
    # head start (0: off). Measured and left off (docs/design.md).
    branch_tie: float = 0.0
    # Levels a move from the *boundary* trial waits: of the trials with more throughput than
    # the best feasible one, the one that violates its SLOs least (the optimum often sits on
    # the SLO boundary, between those and the feasible ones).
    boundary_offset: float | None = 0.5  # None: no moves from the boundary trial
    # Moves from the boundary trial extend the move that reached it, as the best trial's do
    # (the extension, -10 levels). Off: reached from a cap of 64 by a lower one, the boundary
    # trial (54 running, just past a TPOT limit) sent caps of 1, 7 and 20 ahead of every
    # other move, below the best trial's 46, where the best already rules (the spent retrieval
    # cell on an H100, seed 4). Off since 2026-12-06: there the median at 20 trials 0.944 ->
    # 0.970; on the development matrix one full tpot-8b seed (shipped, decay) reaches the
    # optimum, and nothing else moves (benchmarks/results/boundary_still.md). True: they do.
    boundary_extend: bool = False
    # Levels a move gains that gives a trial over a TTFT SLO more running slots, while fewer
    # slots than clients ran (queueing is what the tail waits on; see `_more_slots`).
    slots_bonus: float = 1.5
    # Levels a move gains per unit of predicted gain in rank (0-1) by a ridge regression of
    # every finished trial's rank on its params (0: off); from `trend_from` trials on.
    trend_weight: float = 3.0
    trend_from: int = 5
    # The trend is fitted to the trials within every SLO alone, once two are: fitted to all, it
    # ranks a trial past an SLO below every one within, so it learns that the way into the SLOs
    # is better, and sends a best trial within them further that way (a running cap of 1, 7 and
    # 19 from a best at 43 of 64 clients, which the TPOT limit bounds from above). Measured and
    # left off (benchmarks/results/trend_feasible.md): stopped tpot-8b seeds lost 5-7% in three
    # worlds, and full seed 10 s studies reached 99% later. False: all.
    trend_feasible: bool = False
    # Levels a move gains while no trial meets every SLO (the search has yet to find where they
    # hold) when it sets a categorical param to a choice that no finished trial has run beside
    # the base's value of some other categorical param: extra_buffer with HiCache on, when every
    # extra_buffer trial ran without it. The trend is additive and would blame the choice for
    # what it measured in other company; for an untried pair its loss is a guess, so the move
    # loses no level to it and gains these (benchmarks/results/untried_pairs.md). It acts
    # through the trend, so only from `trend_from` trials on, as measured. 0: off.
    pair_bonus: float = 1.0
    # Levels a move gains when the estimate that ranks the moves cannot see it: it moves a param
    # the estimate does not read (`LocalSearch.blind`), switches one, or moves a param that one
    # such, set in the base, depends on (draft steps under adaptive speculation). Its rank is
    # noise, so it would otherwise wait behind every move the estimate likes.
    blind_bonus: float = 1.0
    # The stop rule's blind check (`LocalSearch.blind_move`) passes over a move whose same move
    # (from the same value, to the same value, its switched params alike) already made a trial
    # worse (`_move_effects`): the estimate cannot rank it, but the study measured it
    # (benchmarks/results/known_blind.md). False: every untried blind move is checked.
    blind_known_skip: bool = True
    # Levels a move waits when the estimate that ranks the moves scores it more than
    # `doomed_loss` below the configuration it moves from (a running cap of 1, no speculation,
    # the smallest memory fraction: range ends, tried before the one-step moves). Measured and
    # left off (docs/design.md): full studies reached 99% of the optimum sooner in two worlds
    # at a 10 s TTFT limit, but stopped studies spent more GPU hours in five of six. 0: off.
    doomed_penalty: float = 0.0
    doomed_loss: float = 0.2
    # The move that reached the best trial is extended first only when the best beat the trial
    # it moved from by more than this share of throughput (both within the SLOs): a gain within
    # the measurement noise is no direction. 0: any gain.
    extend_min_gain: float = 0.0
    # The same share without an estimate to rank the moves (model-free search). There a
    # plateau's copies (HiCache ratios, memory fractions that change nothing) measure alike,
    # noise hands the best trial from one to the next, and each new best extended the move
    # that reached it: 15 of 40 launches of a traced 3 s study (shipped, seed 5) measured the
    # no-draft plateau, and NEXTN at the optimum's chunk size was never launched. Model-free,
    # seeds 0-9 of the six 3 s cells and 0-4 of the 10 s, open-loop and tpot-8b ones: 8 full
    # studies rise (three of them from sglang's defaults or near: 0.764, 0.722 and 0.705 ->
    # 1.000, 1.000, 0.968) and 2 fall (1.000 -> 0.726 at 3 s, 1.000 -> 0.933 at 10 s); of
    # the stopped studies two rise from the defaults to the optimum at 3 s and none falls by
    # more than 0.001 (benchmarks/results/extend_model_free.md). Judged on six held-out
    # cells: two full studies rise, one falls (1.000 -> 0.949), two stopped ones rise from
    # 0.83 to 1.000 (benchmarks/results/heldout/extend_model_free.md). With an estimate it was
    # measured twice and left at 0: at 10 s no median or worst seed moved (docs/design.md),
    # and at 3 s one slow constants seed traded a full study that found nothing within the
    # limit for a stopped one that found nothing. 0: any gain.
    unranked_extend_min_gain: float = 0.03
    # Levels a move of a number waits when every complete trial that ran the value it moves to
    # (whatever its other params) measured less than `known_low_share` of the base's
    # throughput: a running cap of 1 serves a seventh of a plateau's, and moved to from each
    # new best trial of a flat landscape it was launched six times in one study. It changes
    # no study of the development matrix; in that (spent) retrieval cell the full studies
    # spend 8% fewer GPU hours and the stopped ones 15% (benchmarks/results/known_low.md).
    # 0: off.
    known_low_penalty: float = 3.0
    known_low_share: float = 0.5
    # An int param with at most this many values moves like ordered choices: the adjacent
    # values first (level 0), then two away, ... (draft steps 3 -> 4 before 3 -> 5), instead of
    # the range's ends first. 0: every number moves to its ends first.
    ordered_upto: int = 0
    # Levels a move of a number waits when it lands between two values of it that measured
    # within `flat_tolerance` of each other in throughput (both within the SLOs, the rest the
    # same): a value between two that measured alike seldom beats both. 0: off.
    flat_penalty: float = 0.0
    flat_tolerance: float = 0.03
    # Level of a *window* move: while no trial meets every SLO, the best one and a trial that
    # differs from it in one number only break different SLOs (a running cap: too low queues
    # the TTFT tail, too high slows every token), so the SLOs can hold only between them: the
    # number halfway between the two (geometric on a log range) is tried first, before the
    # extension of the last move that paid off (-10), which would cross the window. None: off.
    window_level: float | None = -20.0
    # Window moves from a trial that breaks only other SLOs than the best does and differs from
    # it in more than one number too (`window_moves`'s `wide`): each number halfway to the
    # nearest value such a trial has on either side of the best's. False: one number apart only.
    window_wide: bool = True
    # Level of a *partner flip*: while no trial meets every SLO, of the trials that break only
    # SLOs the best meets, the one nearest the best (`window_partner`) with a categorical param
    # set to another choice. The line between the two may meet the SLOs nowhere (lpm below 64
    # clients queues the TTFT tail past its limit at every running cap that meets the TPOT
    # limit); at the partner's numbers another choice may (fcfs). Added to the move's own
    # priority, after the window moves (-20) and before the extension (-10). Built for the
    # spent Qwen3-30B cell over two H100s (model-free seed 2: nothing within both limits by 40
    # trials -> the optimum); on the spent KV-dtype cell model-free 0.992 (worst 0.000) ->
    # 1.000 (0.974); tpot-8b's full studies do not move (benchmarks/results/partner_flips.md).
    # None: off.
    partner_level: float | None = -15.0
    # Level of an *edge* move: once the best trial meets the SLOs, the same bisection between it
    # and a trial one number away with more throughput that breaks one (`edge_moves`). None: off.
    edge_level: float | None = -20.0
    # Edge moves bisect from the best trial and from every trial within this share of its
    # throughput (both within the SLOs): under measurement noise the best trial changes between
    # configurations that run alike, and a bisection begun from the one would otherwise start
    # again from the other's range end. 0: from the best trial only.
    edge_tie: float = 0.02
    # Carried edges (tuner/study/bisection.py `carried_edges`): a trial within this share of
    # the best trial's throughput that meets the SLO bounding an edge of the best with more room
    # (by `edge_margin` of the limit) is tried at the nearest value past that edge, at the edge
    # moves' level, and its own edge bisected; the stop rule measures such a move before it
    # stops. In the spent retrieval cell on an H100 (lpm at the running cap of the fcfs edge
    # has 14% of the TPOT limit to spare) full studies' worst seed 0.941 -> 0.994; on the
    # development matrix no study's best moved (benchmarks/results/carried_edges.md). 0: off.
    carry_tie: float = 0.05
    # Level of an edge *probe*: while the best trial meets the SLOs but no trial one number
    # from it (or from a trial within `edge_tie` of it) marks an SLO edge that a trial with
    # more throughput is past, the best trial with one number set halfway to that trial's
    # (`LocalSearch.edge_probes`; the widest gap first of the numbers whose move the ranking
    # estimate sees). The stop rule makes the same probe before it stops
    # (tuner/study/guide.py `edge_probes`); this makes it as soon as the polish can, at the
    # edge moves' level (benchmarks/results/probe_polish.md). None: off.
    probe_level: float | None = -20.0
    # The stop rule's edge probe (`edge_probes`, `seen_probe`) moves a number halfway to the
    # nearest value of it that a trial past the edge (with more throughput than the best) has,
    # on that trial's side of the best's, not to that trial's own value: with 36 running within
    # a TPOT limit, 39 (at another memory fraction) and 64 past it, the probe is 37, not 48,
    # which 39 already shows past the edge (a held-out chat cell on an H200, docs/quality.md).
    # The polish's probe (`probe_level`) keeps the trial's own value: made nearest too, it
    # changed full studies both ways (two seeds of that cell 1.000 -> 0.952, one development
    # seed 0.999 -> 0.951). False: the trial's own value.
    probe_nearest: bool = True
    # A trial within the SLOs by less than this share of a limit may be past it, measured again
    # (a p99 TPOT of 10.9 ms against 11 under 2% noise): edge moves and probes start from the
    # best trial within the SLOs by more, and take such a trial as one past the edge
    # (benchmarks/results/probe_polish.md). 0: off.
    edge_margin: float = SLO_NOISE  # 2%, tuner/results/goals.py
    # A trial past an SLO that the dominated or the front cut stopped at a stage (a running cap
    # of 44 whose first stage ran slower than the trials it was judged by, as a higher cap
    # ramps up later under a closed loop) marks an edge too: what its full run could have
    # measured at most (`record.throughput_bound`) stands for its throughput, so edge moves and
    # the stop rule's edge checks and probes bisect towards it. Measured in tpot-8b and left
    # off (benchmarks/results/cut_edges.md): one of nine stopped seeds that lost more than 2%
    # recovered, the others ran the same, and two cells' median shares rose 3-5 points.
    # False: only the SLO cut's stops mark one.
    cut_edges: bool = False
    # An edge is bisected against the nearest trial past it on its line too, whatever that
    # trial measured, in its full run or its last stage (tuner/study/bisection.py
    # `first_broken_on_line`): a cap cut after a stage slower than a full run, between the best and
    # the trial past the edge, otherwise ended the bisection. Measured on the five spent
    # held-out cells with a TPOT limit and left off: as many stopped seeds below 0.98 of their
    # full study either way, one rising to 1.000 and another falling to 0.941
    # (benchmarks/results/edge_nearer.md). False: against the trials past the edge with more
    # throughput than the best alone.
    edge_nearer: bool = False
    # A move's effect (`_move_effects`) and its context (`_context`) read every param the
    # moved one switches on, directly or through another (`_descendants`), not its children
    # alone: a NEXTN trial sets adaptive speculation through its draft steps, so the move
    # None -> NEXTN was never learnt from a pair of trials, as `_branches` once missed it.
    # Seeds 0-4 of the twelve seed cells: two of the default's full studies rise (0.986 ->
    # 0.999, 0.981 -> 0.999) and none falls; model-free, six rise and four fall, every median
    # 0.949 or more (benchmarks/results/deep_context.md). The blind check (`_blind`) and the
    # untried pairs (`_untried_pair`) read them the same way since: no study of those cells
    # moved, default or model-free (benchmarks/results/deep_pairs.md). False: the direct
    # children alone, everywhere.
    deep_context: bool = True
    # Level of a *slot repair*, made only without an estimate to rank the moves (model-free
    # search): a trial over a TTFT SLO that queued (`_queued`: fewer running than clients) and
    # measured within `repair_share` of the best trial's throughput or more (a stage's figure
    # when the SLO cut stopped it, and a closed loop's first stage runs below its full run) is
    # moved to its most running slots: each slot flag to its range's top (`repair_ends`;
    # False: the halfway moves too). Model-free seeds at 3 s that ended at sglang's defaults
    # had launched NEXTN at 1 step with too little memory (0.91: 15 of 16 running, p99 TTFT
    # 7.2 s against 3) but searched on from NEXTN at 5 steps, the branch's least violation;
    # the same at memory 0.95 is the optimum. Seeds 0-9 of the six 3 s cells: 14 -> 6 of 60
    # end at the defaults and none falls by more than 1%; at 10 s the medians do not move
    # (benchmarks/results/slot_repairs.md). With an estimate (the default) the full studies ran
    # the same but for one seed, and the stopped ones spent more (slow constants at 10 s:
    # median share 45% -> 52%), so it is not made there, though it raised that one seed
    # (slow constants 3 s: nothing within the limit -> the optimum). None: off.
    repair_level: float | None = 0.0
    repair_share: float = 0.15
    repair_ends: bool = True
    # A repair whose trial measured more than the best trial within the SLOs, by more than a
    # rerun's noise (`SLO_NOISE`), is made at this level instead, before the extension (-10):
    # at level 0, NEXTN at 1 step (queued at memory 0.90, 13% over the best where the SLO cut
    # stopped it) waited behind moves of the no-draft plateau's memory fraction and HiCache
    # ratio that all measured alike, until the best rose and the repair's floor passed it
    # (3 s, shipped, seed 9: sglang's defaults -> the optimum). Seeds 0-9 of the six 3 s
    # cells: those ending at the defaults 6 -> 2 of 60, none lower; at 10 s two of 30 rise
    # and two fall (0.985 -> 0.904, 1.000 -> 0.981), no median moves; the open loop and
    # tpot-8b do not move (benchmarks/results/repair_ahead.md). None: at `repair_level`.
    repair_ahead: float | None = -12.0
    # Level of a *valley* move (`valley_moves`): of trials that differ in one number only and all
    # miss the same SLOs, the one that misses by least and a neighbour (the nearest value
    # measured on either side), both by less than `valley_near` of a limit, both with more
    # throughput than the best trial within the SLOs by more than `flat_tolerance` (any, while
    # none is; less, and the move cannot gain a launch's worth), and more than `flat_tolerance`
    # apart in it (else the number changed nothing): the number halfway
    # between the two. Draft steps 2 and 5 measured a p99 TPOT of 18.9 and 18.8 ms against an
    # 18 ms limit, 1 step 21.4, and 3 steps met it with the most throughput (docs/quality.md).
    # A trial within an SLO by less than `edge_margin` counts as one that misses it, as for
    # the edge moves. The stop rule measures one before it stops (tuner/study/stopping.py
    # VALLEY_CHECK). None: off.
    valley_level: float | None = -20.0
    valley_near: float = 0.10


class LocalSearch:
    def __init__(
        self,
        space: SearchSpace,
        config: LocalSearchConfig | None = None,
        seed: int | None = None,
        rank: Callable[[Params], float] | None = None,
    ) -> None:
        self.space = space
        self.config = config or LocalSearchConfig()
        self.rng = random.Random(seed)
        self.rank = rank  # an estimate's score of a configuration (higher is better), if any
        self.blind: frozenset[str] = frozenset()  # params that estimate does not read
        # Levels a proposal waits on top of its own (the guide's `settled` groups), if any.
        self.wait: Callable[[Params], float] | None = None
        self._trend: Trend | None = None
        # The most throughput any complete trial measured at each value of each number
        # (`_value_best`), for `known_low_penalty`: set once a proposal, read for every base.
        self._value_best: dict[tuple[str, str], float] = {}
        self._flat: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}

    def propose(self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]) -> Params | None:
        """The next configuration to measure, one move from the best trial or from the best of
        another branch; None when every such move has been tried (or nothing was measured)."""
        scored = by_standing(trials)
        if not scored:
            return None
        effects = _move_effects(
            self.space, trials, self.config.infeasible_effects, self.config.deep_context
        )
        self._trend = (
            Trend.fit(self.space, trials, feasible_only=self.config.trend_feasible)
            if self.config.trend_weight
            else None
        )
        if self._trend is not None and self._trend.size < self.config.trend_from:
            self._trend = None
        self._value_best = _value_best(self.space, scored) if self.config.known_low_penalty else {}
        self._flat = (
            _flat_spans(self.space, scored, self.config.flat_tolerance)
            if self.config.flat_penalty
            else {}
        )
        best = scored[0][0]
        options = self._from(best, scored, effects, tried)
        # Bisections: while no trial meets the SLOs (windows), and once the best one does (edges).
        bisections: list[tuple[float, Params]] = []
        if self.config.window_level is not None:
            bisections += [
                (self.config.window_level, p)
                for p in window_moves(self.space, scored, self.config.window_wide)
            ]
        if self.config.edge_level is not None:
            found = [params for params, _past in self._edge_bounds(scored)]
            bisections += [(self.config.edge_level, p) for p in found]
            if not found and self.config.probe_level is not None:
                # The polish's own probe goes to the trial's value (`probe_nearest`'s note).
                probe = self._seen_probe(scored, tried, self.rank, nearest=False)
                if probe is not None:
                    bisections.append((self.config.probe_level, probe[0]))
        if self.config.valley_level is not None:
            valleys = self._valleys(scored)
            bisections += [(self.config.valley_level, p) for p, _past in valleys]
        options += [
            (level, 0.0, self.rng.random(), p) for level, p in bisections if key(p) not in tried
        ]
        for branch, name in self._branches(best, scored):
            options += self._from(branch, scored, effects, tried, keep=name)
        boundary = (
            boundary_trial(self.space, scored) if self.config.boundary_offset is not None else None
        )
        if boundary is not None and boundary.number != best.number:
            offset = self.config.boundary_offset or 0.0
            extra = self._from(boundary, scored, effects, tried, extend=self.config.boundary_extend)
            options += [(p + offset, r, tie, c) for p, r, tie, c in extra]
        if self.config.partner_level is not None:
            options += self._partner_flips(scored, effects, tried, self.config.partner_level)
        if self.config.repair_level is not None and self.rank is None:
            options += self._repairs(scored, effects, tried, self.config.repair_level)
        for base, _s in scored[1 : 1 + self.config.restarts]:
            if options:
                break
            options = self._from(base, scored, effects, tried)
        if not options:
            return None
        wait = self.wait
        if wait is not None:
            options = [(level + wait(p), r, tie, p) for level, r, tie, p in options]
        return min(options, key=lambda o: o[:3])[3]

    def _partner_flips(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        level: float,
    ) -> list[tuple[float, float, float, Params]]:
        """The window partner's untried moves of a categorical param (`partner_level`)."""
        partner = window_partner(self.space, scored)
        if partner is None:
            return []
        numbers = [n for n in partner.params if self.space.params[n].kind in ("int", "float")]
        return self._kept_moves(
            partner,
            scored,
            effects,
            tried,
            level,
            lambda candidate: all(same_value(candidate.get(n), partner.params[n]) for n in numbers),
        )

    def _repairs(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        level: float,
    ) -> list[tuple[float, float, float, Params]]:
        """The untried moves to more running slots (`_more_slots`; with `repair_ends`, to the
        top of each slot flag's range) of every trial over a TTFT SLO that queued (`_queued`)
        and measured within `repair_share` of the best trial's throughput or more, once a
        trial meets the SLOs (`LocalSearchConfig.repair_level`)."""
        best, mine = scored[0]
        if mine[0] != 1 or not best.values:
            return []
        top = float(best.values[0])
        floor = top * (1 - self.config.repair_share)
        ahead = self.config.repair_ahead
        out = []
        for t, s in scored:
            if s[0] != 0 or not _queued(self.space, t):
                continue
            measured = past_throughput(self.space, t)
            if measured is None or measured < floor:
                continue
            # ahead of the extension when it measured more than the best (`repair_ahead`)
            at = level if ahead is None or measured <= top * (1 + SLO_NOISE) else ahead
            out += self._kept_moves(
                t,
                scored,
                effects,
                tried,
                at,
                partial(_to_more_slots, self.space, t.params, self.config.repair_ends),
            )
        return out

    def _kept_moves(
        self,
        base: FrozenTrial,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        level: float,
        keep: Callable[[Params], bool],
    ) -> list[tuple[float, float, float, Params]]:
        """`base`'s untried moves (the extension aside) that `keep` accepts, `level` later."""
        return [
            (level + priority, rank, tie, candidate)
            for priority, rank, tie, candidate in self._from(
                base, scored, effects, tried, extend=False
            )
            if keep(candidate)
        ]

    def _branches(
        self, best: FrozenTrial, scored: list[tuple[FrozenTrial, Standing]]
    ) -> list[tuple[FrozenTrial, str]]:
        """(the best trial that differs from `best` only in another choice of a categorical
        param that switches others on, and in the params that choice switches on, directly or
        in turn (`_descendants`); that param): its own params are searched for a while, since
        one setting of them seldom shows what the branch can do."""
        out = []
        for name, spec in self.space.params.items():
            if spec.kind != "categorical" or name not in best.params:
                continue
            children = _descendants(self.space, name)
            if not children:
                continue
            rest = {k: repr(v) for k, v in best.params.items() if k != name and k not in children}
            for t, _s in scored:
                if same_value(t.params.get(name), best.params[name]) or name not in t.params:
                    continue
                mine = {k: repr(v) for k, v in t.params.items() if k != name and k not in children}
                if mine == rest:
                    out.append((t, name))
                    break
        return out

    def _from(
        self,
        base: FrozenTrial,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        keep: str | None = None,
        extend: bool = True,
    ) -> list[tuple[float, float, float, Params]]:
        """Untried moves from `base`, ranked (priority, estimate, tie-break); with `keep`, the
        branch's param stays, its own params first."""
        params = dict(base.params)
        min_gain = (
            self.config.extend_min_gain
            if self.rank is not None
            else self.config.unranked_extend_min_gain
        )
        extension = _extension(self.space, base, scored, min_gain) if extend else None
        flat = self._flat
        here = self._trend.predict(params) if self._trend is not None else 0.0
        queued = self.config.slots_bonus > 0 and _queued(self.space, base)
        doomed_below = (
            self.rank(params) * (1 - self.config.doomed_loss)
            if self.rank is not None and self.config.doomed_penalty
            else None
        )
        tied = keep is not None and _tied(base, scored, self.config.branch_tie)
        low = (
            _known_low(self._value_best, base, self.config.known_low_share)
            if self.config.known_low_penalty
            else frozenset()
        )
        measured = [t for t, _s in scored]
        lost = scored[0][1][0] < 1  # no trial meets every SLO
        options: list[tuple[float, float, float, Params]] = []
        for move in moves(self.space, params, self.config.ordered_upto):
            if move.param == keep:
                continue
            candidate = self._apply(params, move, scored)
            if key(candidate) in tried:
                continue
            priority = move.level
            if keep is not None and not tied:
                own = keep in self.space.params[move.param].when
                priority += self.config.branch_offset - (1.0 if own else 0.0)
            if queued and _more_slots(move, params):
                priority -= self.config.slots_bonus
            found = _effect_of(self.space, params, move, self.config.deep_context)
            effect = None if found is None else effects.get(found)
            if effect is not None:
                priority += self.config.worse_penalty if effect < 0 else -self.config.better_bonus
            if (
                extension is not None
                and move.param == extension[0]
                and _same_direction(params[move.param], move.value, extension[1])
            ):
                priority -= 10  # the way that just paid off, further
            if (move.param, repr(move.value)) in low:
                priority += self.config.known_low_penalty
            if flat and _between(flat, params, move):
                priority += self.config.flat_penalty
            if self._trend is not None:
                gain = self._trend.predict(candidate) - here
                if (
                    lost
                    and self.config.pair_bonus
                    and _untried_pair(
                        self.space, measured, move, candidate, self.config.deep_context
                    )
                ):
                    gain = max(gain, 0.0) + self.config.pair_bonus / self.config.trend_weight
                priority -= self.config.trend_weight * gain
            blind = self.rank is not None and self._blind(move, params)
            if blind:
                priority -= self.config.blind_bonus
            rank = -self.rank(candidate) if self.rank is not None else 0.0
            if doomed_below is not None and doomed_below > 0 and not blind and -rank < doomed_below:
                priority += self.config.doomed_penalty
            options.append((priority, rank, self.rng.random(), candidate))
        return options

    def blind_move(
        self,
        base: FrozenTrial,
        tried: set[tuple[Any, ...]],
        trials: Sequence[FrozenTrial] = (),
    ) -> tuple[str, Params] | None:
        """(the moved param, the configuration) of the lowest-level untried move from `base`
        that the estimate cannot see (`blind`), or None. With `blind_known_skip`, not one whose
        same move made one of `trials` worse than the trial it moved from (`_move_effects`)."""
        params = dict(base.params)
        worse = self._known_worse(params, trials)
        for move in sorted(
            moves(self.space, params, self.config.ordered_upto), key=lambda m: m.level
        ):
            if worse(move) or not self._blind(move, params):
                continue
            candidate = complete(self.space, {**params, move.param: move.value,
                                              **dict(move.switched_on)}, params)  # fmt: skip
            if key(candidate) not in tried:
                return move.param, candidate
        return None

    def neighbour_move(
        self,
        base: FrozenTrial,
        tried: set[tuple[Any, ...]],
        trials: Sequence[FrozenTrial] = (),
        upto: int = 0,
    ) -> tuple[str, Params] | None:
        """(the moved param, the configuration) of an untried move of `base` by one step in an
        int param of at most `upto` values (draft steps 1-5, `few_values`); None when there is
        none (or `upto` is 0). The value fewer launched `trials` ran first (what the study has
        not seen), then the smaller. As for `blind_move`, not one whose same move made one of
        `trials` worse than the trial it moved from."""
        params = dict(base.params)
        worse = self._known_worse(params, trials)
        for name, value in params.items():
            spec = self.space.params.get(name)
            values = None if spec is None or value is None else few_values(spec, upto)
            if spec is None or values is None:
                continue
            step = int(spec.step or 1)
            ran = [t.params.get(name) for t in trials if t.state != TrialState.WAITING]
            targets = [v for v in (int(value) - step, int(value) + step) if v in values]
            for target in sorted(targets, key=lambda v: (ran.count(v), v)):
                if worse(Move(name, target, 3.0)):
                    continue
                candidate = complete(self.space, {**params, name: target}, params)
                if key(candidate) not in tried:
                    return name, candidate
        return None

    def _known_worse(self, params: Params, trials: Sequence[FrozenTrial]) -> Callable[[Move], bool]:
        """Whether a move from `params` is one whose same move made one of `trials` worse than
        the trial it moved from (`_move_effects`, read on the first question); never without
        `blind_known_skip`."""
        effects: dict[Effect, float] | None = None

        def worse(move: Move) -> bool:
            nonlocal effects
            if not self.config.blind_known_skip:
                return False
            if effects is None:
                effects = _move_effects(
                    self.space, trials, self.config.infeasible_effects, self.config.deep_context
                )
            found = _effect_of(self.space, params, move, self.config.deep_context)
            return found is not None and effects.get(found, 0.0) < 0

        return worse

    def edge_move(
        self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> tuple[Params, float] | None:
        """The untried edge move (`edge_moves`) from the best trial whose trial past the edge
        measured the most throughput, with that throughput; None when there is none. The
        estimate cannot say where an SLO's edge lies between two measured trials: the stop
        rule measures such a move before it stops (tuner/study/stopping.py)."""
        if self.config.edge_level is None:
            return None
        scored = by_standing(trials)
        if not scored:
            return None
        edges = [(p, past) for p, past in self._edge_bounds(scored) if key(p) not in tried]
        return max(edges, key=lambda pp: pp[1]) if edges else None

    def valley_move(
        self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> tuple[Params, float] | None:
        """The untried valley move (`valley_moves`) whose two trials measured the most throughput
        (the lesser of the two), with that throughput; None when there is none. The estimate
        cannot say where between two measured trials an SLO metric bottoms out: the stop rule
        measures such a move before it stops (tuner/study/stopping.py)."""
        if self.config.valley_level is None:
            return None
        valleys = self._valleys(by_standing(trials))
        return next(((p, past) for p, past in valleys if key(p) not in tried), None)

    def _valleys(self, scored: list[tuple[FrozenTrial, Standing]]) -> list[tuple[Params, float]]:
        """`valley_moves` with this search's nearness, margin and flat tolerance."""
        config = self.config
        return valley_moves(
            self.space, scored, config.valley_near, config.edge_margin, config.flat_tolerance
        )

    def _edge_bounds(
        self, scored: list[tuple[FrozenTrial, Standing]]
    ) -> list[tuple[Params, float]]:
        """`edge_moves` with this search's tie, margin, `cut_edges` and `carry_tie`."""
        config = self.config
        return edge_moves(
            self.space,
            scored,
            config.edge_tie,
            config.edge_margin,
            config.cut_edges,
            config.carry_tie,
            config.edge_nearer,
        )

    def seen_probe(
        self,
        trials: Sequence[FrozenTrial],
        tried: set[tuple[Any, ...]],
        rank: Callable[[Params], float] | None,
    ) -> tuple[Params, float] | None:
        """The first edge probe (`edge_probes`) whose move `rank`, an estimate, sees (the first,
        without one), with the throughput of the trial past the edge: a memory fraction above
        what the running cap uses changes nothing the estimate predicts, and its probe would
        re-measure the best trial's run."""
        return self._seen_probe(by_standing(trials), tried, rank, self.config.probe_nearest)

    def _seen_probe(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        tried: set[tuple[Any, ...]],
        rank: Callable[[Params], float] | None,
        nearest: bool,
    ) -> tuple[Params, float] | None:
        probes = self._probes(scored, tried, nearest)
        if not probes or rank is None:
            return probes[0] if probes else None
        here = rank(dict(scored[0][0].params))
        return next((pv for pv in probes if not math.isclose(rank(pv[0]), here)), None)

    def edge_probes(
        self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> list[tuple[Params, float]]:
        """Where no trial one number from the best marks an SLO's edge: for the trial past the
        edge that measured the most throughput (more than the best), the best trial with each
        number in which the two differ set halfway to that trial's, the widest gap (on the
        range's scale) first, each with that throughput; [] when there is none. A probe past
        the edge becomes an edge move's bound (`edge_move`); one within it, a better best. The
        stop rule measures one before it stops (tuner/study/stopping.py EDGE_PROBE)."""
        return self._probes(by_standing(trials), tried, self.config.probe_nearest)

    def _probes(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        tried: set[tuple[Any, ...]],
        nearest: bool,
    ) -> list[tuple[Params, float]]:
        scored = sure_view(scored, self.config.edge_margin)
        if not scored or scored[0][1][0] != 1 or not scored[0][0].values:
            return []
        best = scored[0][0]
        past = past_edge(self.space, scored, float(best.values[0]), self.config.cut_edges)
        for t, value in sorted(past, key=lambda tv: tv[1], reverse=True):
            probes = []
            for name in by_gap(self.space, best.params, t.params):
                target = float(t.params[name])
                if nearest:
                    target = nearest_past(self.space, name, best.params, target, past)
                probe = halfway_in(self.space, best.params, name, target)
                if probe is not None and key(probe) not in tried:
                    probes.append(probe)
            if probes:
                return [(probe, value) for probe in probes]
        return []

    def _blind(self, move: Move, params: Params) -> bool:
        if not self.blind:
            return False
        if move.param in self.blind or any(name in self.blind for name, _v in move.switched_on):
            return True
        below = _switched(self.space, move.param, self.config.deep_context)
        return any(
            name in below and params[name] is not None for name in params if name in self.blind
        )

    def _apply(
        self, params: Params, move: Move, scored: list[tuple[FrozenTrial, Standing]]
    ) -> Params:
        """`params` with the move made; params it switches on take the values of the best
        trial that had them with the same choice, else a neutral value."""
        moved = {**params, move.param: move.value, **dict(move.switched_on)}
        donor = next(
            (
                t.params
                for t, _s in scored
                if move.param in t.params and same_value(t.params[move.param], move.value)
            ),
            {},
        )
        return complete(self.space, moved, donor)


# ---- the moves -----------------------------------------------------------------------------


# ---- what the trials say -------------------------------------------------------------------


Effect = tuple[str, str, str, tuple[tuple[str, str], ...]]  # param, from, to, its context


def _context(
    space: SearchSpace, params: Mapping[str, Any], name: str, deep: bool = True
) -> tuple[tuple[str, str], ...]:
    """The values of the params that `name` switches on or off (its children; with `deep`,
    their children in turn), as they are in `params`: a move's effect carries over only where
    they are the same. Draft steps 3 -> 1 without adaptive speculation says nothing about the
    same move with it."""
    return _values_of(params, _switched(space, name, deep))


def _values_of(params: Mapping[str, Any], names: set[str]) -> tuple[tuple[str, str], ...]:
    """(name, repr of its value) of the params among `names` that `params` sets."""
    return tuple((k, repr(v)) for k, v in params.items() if k in names)


def _switched(space: SearchSpace, name: str, deep: bool) -> set[str]:
    """The params `name` switches on: its children, or with `deep` every param below it
    (`LocalSearchConfig.deep_context`)."""
    if deep:
        return _descendants(space, name)
    return {k for k in space.params if _child(space, k, name)}


def _value_best(
    space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]]
) -> dict[tuple[str, str], float]:
    """(number, repr of a value) -> the most throughput a complete trial running that value
    measured."""
    most: dict[tuple[str, str], float] = {}
    for t, _s in scored:
        if t.state != TrialState.COMPLETE or not t.values:
            continue
        for name, value in t.params.items():
            spec = space.params.get(name)
            if spec is not None and spec.kind in ("int", "float"):
                at = (name, repr(value))
                most[at] = max(most.get(at, 0.0), float(t.values[0]))
    return most


def _known_low(
    value_best: dict[tuple[str, str], float], base: FrozenTrial, share: float
) -> frozenset[tuple[str, str]]:
    """(number, repr of a value) of the values every complete trial running them measured
    below `share` of `base`'s throughput (`known_low_penalty`), from `_value_best`."""
    if not base.values:
        return frozenset()
    floor = float(base.values[0]) * share
    return frozenset(at for at, value in value_best.items() if value < floor)


def _effect_of(
    space: SearchSpace, params: Mapping[str, Any], move: Move, deep: bool = True
) -> Effect | None:
    """The key `_move_effects` gives `move` from `params`; None for a move that switches on a
    param `params` already sets (two moves in one, which no single pair of trials measured)."""
    if any(name in params for name, _v in move.switched_on):
        return None
    return (
        move.param,
        repr(params.get(move.param)),
        repr(move.value),
        _context(space, params, move.param, deep),
    )


def _move_effects(
    space: SearchSpace, trials: Sequence[FrozenTrial], infeasible: bool = True, deep: bool = True
) -> dict[Effect, float]:
    """(param, from value, to value, context) -> +1 when a trial that differed from another only
    in that param (and in the params it switches) was better for the change, -1 when worse (the
    latest pair decides); the context is the switched params' values where the move starts."""
    finished = [
        t
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and informative(t) and t.params
    ]
    by_rest: dict[tuple[str, tuple[Any, ...]], list[FrozenTrial]] = {}
    switched = {name: _switched(space, name, deep) for name in space.params}
    for t in finished:
        for name in t.params:
            if name in space.params and space.params[name].kind != "derived":
                rest = {k: v for k, v in t.params.items() if k != name and k not in switched[name]}
                by_rest.setdefault((name, key(rest)), []).append(t)
    effects: dict[Effect, float] = {}
    for (name, _rest), group in by_rest.items():
        group.sort(key=lambda t: t.number)
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                va, vb = repr(a.params[name]), repr(b.params[name])
                if va == vb:
                    continue
                sa, sb = outcome(a), outcome(b)
                if sa == sb or (not infeasible and sa[0] < 1 and sb[0] < 1):
                    continue
                ca, cb = _values_of(a.params, switched[name]), _values_of(b.params, switched[name])
                if any(v != dict(cb)[k] for k, v in ca if k in dict(cb)):
                    continue  # a switched param both have differs: two moves, not one
                effects[(name, va, vb, ca)] = 1.0 if sb > sa else -1.0
                effects[(name, vb, va, cb)] = 1.0 if sa > sb else -1.0
    return effects


# sglang flags that give a server more running slots when raised: the KV pool's share of the
# GPU (server_args.py mem_fraction_static) and the cap itself (max_running_requests).
_SLOT_FLAGS = ("mem_fraction_static", "max_running_requests")


def _queued(space: SearchSpace, t: FrozenTrial) -> bool:
    """A closed-loop trial over a TTFT SLO whose server ran fewer requests at once than the
    benchmark has clients: the others queued, and a TTFT tail is mostly that wait. In a
    capacity study, a trial whose rate search broke on a TTFT SLO: an open loop's tail is the
    wait for a running slot (and for prefills a larger prefix cache would spare) when arrivals
    bunch, so more memory and a higher cap come first (benchmarks/capacity_check.py)."""
    if is_capacity(space.objectives.throughput):
        steps = t.user_attrs.get(record.RATE_STEPS) or []
        return any(not s.get("met") and "ttft" in str(s.get("broke") or "") for s in steps)
    clients = space.bench.concurrency
    if clients is None or space.bench.request_rate is not None:
        return False
    constraints = record.named_constraints(t.constraints)
    over = any(v > 0 and "ttft" in k for k, v in constraints.items())
    running = (t.user_attrs.get(record.CAPACITY) or {}).get("max_running_requests")
    return over and isinstance(running, int | float) and running < clients


def _more_slots(move: Move, params: Mapping[str, Any]) -> bool:
    current = params.get(move.param)
    return (
        move.param in _SLOT_FLAGS
        and isinstance(current, int | float)
        and isinstance(move.value, int | float)
        and move.value > current
    )


def _to_more_slots(
    space: SearchSpace, params: Mapping[str, Any], ends: bool, candidate: Mapping[str, Any]
) -> bool:
    """Does `candidate` differ from `params` in one slot flag alone, raised (`_more_slots`; with
    `ends`, to the top of its range)?"""
    moved = [k for k in candidate if repr(candidate[k]) != repr(params.get(k))]
    if set(candidate) != set(params) or len(moved) != 1:
        return False
    name, value = moved[0], candidate[moved[0]]
    return _more_slots(Move(name, value, 0), params) and (
        not ends or same_value(value, space.params[name].high)
    )


def _descendants(space: SearchSpace, parent: str) -> set[str]:
    """The params `parent` switches on, and those they switch on in turn: speculative
    adaptation hangs on the draft steps, which hang on the algorithm. A branch of the
    algorithm that counted its children alone never matched the best trial without a draft,
    which sets neither (model-free search in the effects world at 3 s, docs/quality.md)."""
    found: set[str] = set()
    frontier = {parent}
    while frontier:
        step = {o.name for o in space.params.values() if frontier & set(o.when)} - found
        found |= step
        frontier = step
    return found - {parent}


def _child(space: SearchSpace, name: str, parent: str) -> bool:
    spec = space.params.get(name)
    return spec is not None and parent in spec.when


def _extension(
    space: SearchSpace,
    base: FrozenTrial,
    scored: list[tuple[FrozenTrial, Standing]],
    min_gain: float = 0.0,
) -> tuple[str, float] | None:
    """(param, previous value) when `base` beat an earlier trial that differed from it only in
    one numeric param (by more than `min_gain` of throughput when both met the SLOs): the
    search goes on the same way first."""
    mine = next(s for t, s in scored if t.number == base.number)
    for t, s in scored:
        if t.number >= base.number or s >= mine:
            continue
        if min_gain and s[0] == 1 and mine[0] == 1 and mine[1] <= s[1] * (1 + min_gain):
            continue
        diff = [k for k in base.params if repr(base.params[k]) != repr(t.params.get(k))]
        if set(t.params) == set(base.params) and len(diff) == 1:
            spec = space.params[diff[0]]
            if spec.kind in ("int", "float"):
                return diff[0], float(t.params[diff[0]])
    return None


def _flat_spans(
    space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]], tolerance: float
) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]]:
    """(param, the other params) -> the (low, high) spans of a number between two values that
    measured within `tolerance` of each other in throughput, both within the SLOs, the other
    params the same (LocalSearchConfig.flat_penalty)."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for t, s in scored:
        if s[0] != 1:
            continue
        for name, value in t.params.items():
            spec = space.params.get(name)
            if spec is None or spec.kind not in ("int", "float"):
                continue
            rest = tuple(sorted((k, repr(v)) for k, v in t.params.items() if k != name))
            groups.setdefault((name, rest), []).append((float(value), s[1]))
    spans: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for where, measured in groups.items():
        for i, (va, ta) in enumerate(measured):
            for vb, tb in measured[i + 1 :]:
                if va != vb and ta > 0 and tb > 0 and abs(ta / tb - 1) <= tolerance:
                    spans.setdefault(where, []).append((min(va, vb), max(va, vb)))
    return spans


def _between(
    spans: Mapping[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]],
    params: Mapping[str, Any],
    move: Move,
) -> bool:
    """Does the move set a number strictly between two values of it that measured alike?"""
    if move.switched_on or not isinstance(move.value, int | float):
        return False
    rest = tuple(sorted((k, repr(v)) for k, v in params.items() if k != move.param))
    value = float(move.value)
    return any(low < value < high for low, high in spans.get((move.param, rest), ()))


def _untried_pair(
    space: SearchSpace,
    trials: Sequence[FrozenTrial],
    move: Move,
    candidate: Mapping[str, Any],
    deep: bool = True,
) -> bool:
    """`move` sets a categorical param to a value that none of `trials` ran beside the value
    `candidate` has of some other categorical param (params the move switches aside)."""
    if space.params[move.param].kind != "categorical":
        return False
    mates = [t for t in trials if same_value(t.params.get(move.param), move.value)]
    switched = _switched(space, move.param, deep)
    return any(
        not any(same_value(t.params.get(name), value) for t in mates)
        for name, value in candidate.items()
        if name != move.param
        and name in space.params
        and space.params[name].kind == "categorical"
        and name not in switched
    )


def _same_direction(current: float, target: float, previous: float) -> bool:
    return (current - previous) * (target - current) > 0


def _tied(base: FrozenTrial, scored: list[tuple[FrozenTrial, Standing]], share: float) -> bool:
    """`base` and the best trial both meet the SLOs and measured within `share` of each other
    in throughput (`LocalSearchConfig.branch_tie`; 0: never)."""
    if share <= 0 or not scored:
        return False
    best = scored[0][1]
    mine = next((s for t, s in scored if t.number == base.number), None)
    return mine is not None and best[0] == 1 and mine[0] == 1 and mine[1] >= best[1] * (1 - share)
