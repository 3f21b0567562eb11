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
a move that made things worse elsewhere waits `_WORSE_PENALTY` levels, one that helped goes first
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
2% of its throughput (`EDGE_TIE`): under measurement noise the best trial changes between
configurations that run alike, and a bisection begun from one goes on instead of starting over
from the other's range ends. An edge is *carried* (`_CARRY_TIE`) to a trial within 5% of the
best's throughput that meets the SLO bounding it with more room: that trial at the nearest
value past the edge, then its own edge bisected (lpm at fcfs's edge cap, with TPOT to spare,
may reach the next step of the cap's staircase). Where no trial one number from the best
marks an edge, the stop rule may *probe* one (`edge_probes`): the best trial with a number in
which a trial past the edge differs from it set halfway to the nearest value of that number
any trial past the edge has on that side; the polish's own probe goes
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
Each kind of proposal is a rule of the search's table (tuner/study/policy.py: its name, its
priority level); after `propose`, `proposed_by` names the chosen one's rule and base trial.

This module ranks and proposes; its parts live beside it: the moves and the params they make
(tuner/study/moves.py), how a finished trial stands (tuner/study/standing.py), the window, edge
and valley bisections (tuner/study/bisection.py) and the trend (tuner/study/trend.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
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
from tuner.study.policy import REPAIR_AHEAD
from tuner.study.policy import level as rule_level
from tuner.study.standing import (
    Standing,
    by_standing,
    informative,
    outcome,
    past_throughput,
    sure_view,
)
from tuner.study.trend import Trend

# The local search's constants: levels are in move steps (a range end is level 0, one step 3);
# a lower level is tried first. Each was measured on the quality benchmark (docs/decisions.md).
_WORSE_PENALTY = 2.0  # levels a move waits when the same move made another trial worse
_BETTER_BONUS = 1.0  # levels a move gains when the same move made another trial better
_RESTARTS = 3  # next best trials moved from once the best trial's moves are all tried
_SLOTS_BONUS = 1.5  # levels a queued trial's move to more running slots gains (TTFT waits on it)
_TREND_WEIGHT = 3.0  # levels per unit of rank the ridge trend predicts a move gains (0-1)
_TREND_FROM = 5  # finished trials before the trend is fitted: fewer say nothing of a slope
_PAIR_BONUS = 1.0  # levels an untried pair of choices gains while no trial meets the SLOs
_BLIND_BONUS = 1.0  # levels a move the ranking estimate cannot see gains: its rank is noise
# Without an estimate the extension needs this gain: a plateau's copies measure alike by noise.
_UNRANKED_EXTEND_MIN_GAIN = 0.03
_KNOWN_LOW_PENALTY = 3.0  # levels a move to a value every trial ran poorly at waits
_KNOWN_LOW_SHARE = 0.5  # "poorly": below this share of the base trial's throughput
_FLAT_TOLERANCE = 0.03  # two values within this share of throughput ran alike: no valley
EDGE_TIE = 0.02  # trials within this share of the best's throughput start edge moves too
_CARRY_TIE = 0.05  # trials within this share of the best's throughput get its edges carried
_EDGE_MARGIN = SLO_NOISE  # a trial within a limit by less than this may be past it (2%)
_REPAIR_SHARE = 0.15  # slot repairs for queued trials within this share of the best or above
_VALLEY_NEAR = 0.10  # valley pairs miss their SLO by less than this share of its limit
# The polish rules' priority levels, from the search's table (tuner/study/policy.py).
_WINDOW_LEVEL = rule_level("polish:window")
_EDGE_LEVEL = rule_level("polish:edge")
_PROBE_LEVEL = rule_level("polish:probe")
_VALLEY_LEVEL = rule_level("polish:valley")
_PARTNER_LEVEL = rule_level("polish:partner-flip")
_EXTENSION = rule_level("polish:extension")
_REPAIR_LEVEL = rule_level("polish:slot-repair")
_REPAIR_AHEAD = REPAIR_AHEAD
_BOUNDARY_OFFSET = rule_level("polish:boundary")
_BRANCH_OFFSET = rule_level("polish:branch")


class LocalSearch:
    def __init__(
        self,
        space: SearchSpace,
        seed: int | None = None,
        rank: Callable[[Params], float] | None = None,
    ) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.rank = rank  # an estimate's score of a configuration (higher is better), if any
        self.blind: frozenset[str] = frozenset()  # params that estimate does not read
        self._trend: Trend | None = None
        # The most throughput any complete trial measured at each value of each number
        # (`_value_best`), for `_KNOWN_LOW_PENALTY`: set once a proposal, read for every base.
        self._value_best: dict[tuple[str, str], float] = {}
        # Which rule proposed each option, and the trial it moved from, by the option's
        # tie-break draw (unique to it); `proposed_by` is the chosen one's.
        self._sources: dict[float, tuple[str, int | None]] = {}
        self.proposed_by: tuple[str, int | None] | None = None

    def propose(self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]) -> Params | None:
        """The next configuration to measure, one move from the best trial or from the best of
        another branch; None when every such move has been tried (or nothing was measured)."""
        self._sources, self.proposed_by = {}, None
        scored = by_standing(trials)
        if not scored:
            return None
        effects = _move_effects(self.space, trials)
        trend = Trend.fit(self.space, trials)
        self._trend = trend if trend.size >= _TREND_FROM else None
        self._value_best = _value_best(self.space, scored)
        best = scored[0][0]
        options = self._from(best, scored, effects, tried)
        # Bisections: while no trial meets the SLOs (windows), and once the best one does (edges).
        bisections: list[tuple[float, Params, str]] = []
        windows = window_moves(self.space, scored)
        bisections += [(_WINDOW_LEVEL, p, "polish:window") for p in windows]
        found = [params for params, _past in self._edge_bounds(scored)]
        bisections += [(_EDGE_LEVEL, p, "polish:edge") for p in found]
        if not found:
            # The polish's probe goes halfway to the trial past the edge itself: made to the
            # nearest value past the edge, as the stop rule's is, it changed full studies both
            # ways (two held-out seeds 1.000 -> 0.952, one development seed 0.999 -> 0.951).
            probe = self._seen_probe(scored, tried, self.rank, nearest=False)
            if probe is not None:
                bisections.append((_PROBE_LEVEL, probe[0], "polish:probe"))
        valleys = self._valleys(scored)
        bisections += [(_VALLEY_LEVEL, p, "polish:valley") for p, _past in valleys]
        for at, params, rule in bisections:
            if key(params) not in tried:
                options.append((at, 0.0, self._source(rule, best), params))
        for branch, name in self._branches(best, scored):
            options += self._from(branch, scored, effects, tried, keep=name, rule="polish:branch")
        boundary = boundary_trial(self.space, scored)
        if boundary is not None and boundary.number != best.number:
            extra = self._from(
                boundary, scored, effects, tried, extend=False, rule="polish:boundary"
            )
            options += [(p + _BOUNDARY_OFFSET, r, tie, c) for p, r, tie, c in extra]
        options += self._partner_flips(scored, effects, tried, _PARTNER_LEVEL)
        if self.rank is None:
            options += self._repairs(scored, effects, tried, _REPAIR_LEVEL)
        for base, _s in scored[1 : 1 + _RESTARTS]:
            if options:
                break
            options = self._from(base, scored, effects, tried, rule="polish:restart")
        if not options:
            return None
        chosen = min(options, key=lambda o: o[:3])
        self.proposed_by = self._sources.get(chosen[2])
        return chosen[3]

    def _source(self, rule: str, base: FrozenTrial) -> float:
        """A fresh tie-break draw for an option, remembered as proposed by `rule` from `base`."""
        tie = self.rng.random()
        self._sources[tie] = (rule, base.number)
        return tie

    def _partner_flips(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        level: float,
    ) -> list[tuple[float, float, float, Params]]:
        """The window partner's untried moves of a categorical param (`_PARTNER_LEVEL`)."""
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
            "polish:partner-flip",
        )

    def _repairs(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        effects: dict[Effect, float],
        tried: set[tuple[Any, ...]],
        level: float,
    ) -> list[tuple[float, float, float, Params]]:
        """The untried moves to more running slots (`_more_slots`, to the
        top of each slot flag's range) of every trial over a TTFT SLO that queued (`_queued`)
        and measured within `_REPAIR_SHARE` of the best trial's throughput or more, once a
        trial meets the SLOs."""
        best, mine = scored[0]
        if mine[0] != 1 or not best.values:
            return []
        top = float(best.values[0])
        floor = top * (1 - _REPAIR_SHARE)
        out = []
        for t, s in scored:
            if s[0] != 0 or not _queued(self.space, t):
                continue
            measured = past_throughput(self.space, t)
            if measured is None or measured < floor:
                continue
            # ahead of the extension when it measured more than the best (`_REPAIR_AHEAD`)
            at = level if measured <= top * (1 + SLO_NOISE) else _REPAIR_AHEAD
            out += self._kept_moves(
                t,
                scored,
                effects,
                tried,
                at,
                partial(_to_more_slots, self.space, t.params),
                "polish:slot-repair",
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
        rule: str,
    ) -> list[tuple[float, float, float, Params]]:
        """`base`'s untried moves (the extension aside) that `keep` accepts, `level` later."""
        return [
            (level + priority, rank, tie, candidate)
            for priority, rank, tie, candidate in self._from(
                base, scored, effects, tried, extend=False, rule=rule
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
        rule: str = "polish:move",
    ) -> list[tuple[float, float, float, Params]]:
        """Untried moves from `base`, ranked (priority, estimate, tie-break); with `keep`, the
        branch's param stays, its own params first. Each is remembered as `rule`'s (the
        extension of a plain move as the extension's)."""
        params = dict(base.params)
        min_gain = 0.0 if self.rank is not None else _UNRANKED_EXTEND_MIN_GAIN
        extension = _extension(self.space, base, scored, min_gain) if extend else None
        here = self._trend.predict(params) if self._trend is not None else 0.0
        queued = _queued(self.space, base)
        low = _known_low(self._value_best, base, _KNOWN_LOW_SHARE)
        measured = [t for t, _s in scored]
        lost = scored[0][1][0] < 1  # no trial meets every SLO
        options: list[tuple[float, float, float, Params]] = []
        for move in moves(self.space, params):
            if move.param == keep:
                continue
            candidate = self._apply(params, move, scored)
            if key(candidate) in tried:
                continue
            priority = move.level
            source = rule
            if keep is not None:
                own = keep in self.space.params[move.param].when
                priority += _BRANCH_OFFSET - (1.0 if own else 0.0)
            if queued and _more_slots(move, params):
                priority -= _SLOTS_BONUS
            found = _effect_of(self.space, params, move)
            effect = None if found is None else effects.get(found)
            if effect is not None:
                priority += _WORSE_PENALTY if effect < 0 else -_BETTER_BONUS
            if (
                extension is not None
                and move.param == extension[0]
                and _same_direction(params[move.param], move.value, extension[1])
            ):
                priority += _EXTENSION  # the way that just paid off, further
                source = "polish:extension" if rule == "polish:move" else rule
            if (move.param, repr(move.value)) in low:
                priority += _KNOWN_LOW_PENALTY
            if self._trend is not None:
                gain = self._trend.predict(candidate) - here
                if lost and _untried_pair(self.space, measured, move, candidate):
                    gain = max(gain, 0.0) + _PAIR_BONUS / _TREND_WEIGHT
                priority -= _TREND_WEIGHT * gain
            blind = self.rank is not None and self._blind(move, params)
            if blind:
                priority -= _BLIND_BONUS
            rank = -self.rank(candidate) if self.rank is not None else 0.0
            options.append((priority, rank, self._source(source, base), candidate))
        return options

    def blind_move(
        self,
        base: FrozenTrial,
        tried: set[tuple[Any, ...]],
        trials: Sequence[FrozenTrial] = (),
    ) -> tuple[str, Params] | None:
        """(the moved param, the configuration) of the lowest-level untried move from `base`
        that the estimate cannot see (`blind`), or None. Not one whose
        same move made one of `trials` worse than the trial it moved from (`_move_effects`)."""
        params = dict(base.params)
        worse = self._known_worse(params, trials)
        for move in sorted(moves(self.space, params), key=lambda m: m.level):
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
        the trial it moved from (`_move_effects`, read on the first question)."""
        effects: dict[Effect, float] | None = None

        def worse(move: Move) -> bool:
            nonlocal effects
            if effects is None:
                effects = _move_effects(self.space, trials)
            found = _effect_of(self.space, params, move)
            return found is not None and effects.get(found, 0.0) < 0

        return worse

    def edge_move(
        self, trials: Sequence[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> tuple[Params, float] | None:
        """The untried edge move (`edge_moves`) from the best trial whose trial past the edge
        measured the most throughput, with that throughput; None when there is none. The
        estimate cannot say where an SLO's edge lies between two measured trials: the stop
        rule measures such a move before it stops (tuner/study/stopping.py)."""
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
        valleys = self._valleys(by_standing(trials))
        return next(((p, past) for p, past in valleys if key(p) not in tried), None)

    def _valleys(self, scored: list[tuple[FrozenTrial, Standing]]) -> list[tuple[Params, float]]:
        """`valley_moves` with this search's nearness, margin and flat tolerance."""
        return valley_moves(self.space, scored, _VALLEY_NEAR, _EDGE_MARGIN, _FLAT_TOLERANCE)

    def _edge_bounds(
        self, scored: list[tuple[FrozenTrial, Standing]]
    ) -> list[tuple[Params, float]]:
        """`edge_moves` with this search's tie, margin and carry tie."""
        return edge_moves(self.space, scored, EDGE_TIE, _EDGE_MARGIN, _CARRY_TIE)

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
        return self._seen_probe(by_standing(trials), tried, rank, nearest=True)

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
        return self._probes(by_standing(trials), tried, nearest=True)

    def _probes(
        self,
        scored: list[tuple[FrozenTrial, Standing]],
        tried: set[tuple[Any, ...]],
        nearest: bool,
    ) -> list[tuple[Params, float]]:
        scored = sure_view(scored, _EDGE_MARGIN)
        if not scored or scored[0][1][0] != 1 or not scored[0][0].values:
            return []
        best = scored[0][0]
        past = past_edge(self.space, scored, float(best.values[0]))
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
        below = _descendants(self.space, move.param)
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
    space: SearchSpace, params: Mapping[str, Any], name: str
) -> tuple[tuple[str, str], ...]:
    """The values of the params that `name` switches on or off (its children and theirs in
    turn, `_descendants`), as they are in `params`: a move's effect carries over only where
    they are the same. Draft steps 3 -> 1 without adaptive speculation says nothing about the
    same move with it."""
    return _values_of(params, _descendants(space, name))


def _values_of(params: Mapping[str, Any], names: set[str]) -> tuple[tuple[str, str], ...]:
    """(name, repr of its value) of the params among `names` that `params` sets."""
    return tuple((k, repr(v)) for k, v in params.items() if k in names)


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
    below `share` of `base`'s throughput (`_KNOWN_LOW_PENALTY`), from `_value_best`."""
    if not base.values:
        return frozenset()
    floor = float(base.values[0]) * share
    return frozenset(at for at, value in value_best.items() if value < floor)


def _effect_of(space: SearchSpace, params: Mapping[str, Any], move: Move) -> Effect | None:
    """The key `_move_effects` gives `move` from `params`; None for a move that switches on a
    param `params` already sets (two moves in one, which no single pair of trials measured)."""
    if any(name in params for name, _v in move.switched_on):
        return None
    return (
        move.param,
        repr(params.get(move.param)),
        repr(move.value),
        _context(space, params, move.param),
    )


def _move_effects(space: SearchSpace, trials: Sequence[FrozenTrial]) -> dict[Effect, float]:
    """(param, from value, to value, context) -> +1 when a trial that differed from another only
    in that param (and in the params it switches) was better for the change, -1 when worse (the
    latest pair decides); the context is the switched params' values where the move starts.
    Pairs of trials both over an SLO are not counted: they say little about a move where the
    SLO is met."""
    finished = [
        t
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and informative(t) and t.params
    ]
    by_rest: dict[tuple[str, tuple[Any, ...]], list[FrozenTrial]] = {}
    switched = {name: _descendants(space, name) for name in space.params}
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
                if sa == sb or (sa[0] < 1 and sb[0] < 1):
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
    space: SearchSpace, params: Mapping[str, Any], candidate: Mapping[str, Any]
) -> bool:
    """Does `candidate` differ from `params` in one slot flag alone, raised (`_more_slots`; with
    its range's top)?"""
    moved = [k for k in candidate if repr(candidate[k]) != repr(params.get(k))]
    if set(candidate) != set(params) or len(moved) != 1:
        return False
    name, value = moved[0], candidate[moved[0]]
    return _more_slots(Move(name, value, 0), params) and same_value(value, space.params[name].high)


def _descendants(space: SearchSpace, parent: str) -> set[str]:
    """The params `parent` switches on, and those they switch on in turn: speculative
    adaptation hangs on the draft steps, which hang on the algorithm. A branch of the
    algorithm that counted its children alone never matched the best trial without a draft,
    which sets neither (model-free search in the effects world at 3 s,
    docs/decisions.md#branches-count-every-param-a-choice-switches-on-in-turn)."""
    found: set[str] = set()
    frontier = {parent}
    while frontier:
        step = {o.name for o in space.params.values() if frontier & set(o.when)} - found
        found |= step
        frontier = step
    return found - {parent}


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


def _untried_pair(
    space: SearchSpace,
    trials: Sequence[FrozenTrial],
    move: Move,
    candidate: Mapping[str, Any],
) -> bool:
    """`move` sets a categorical param to a value that none of `trials` ran beside the value
    `candidate` has of some other categorical param (params the move switches aside)."""
    if space.params[move.param].kind != "categorical":
        return False
    mates = [t for t in trials if same_value(t.params.get(move.param), move.value)]
    switched = _descendants(space, move.param)
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
