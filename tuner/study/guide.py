"""Trials the study chooses itself, between the sampler's: a model-guided start and a late polish.

    guide = Guide(space, estimator, seed=0)       # estimator None: polish only
    run_trials(study, objective, 40, guide=guide)

- **Warm start** (needs an `Estimator`, tuner/predict/estimate.py): the 4 trials after
  sglang's defaults are the estimate's best configurations not yet tried, each chosen after the
  estimate was refitted to everything measured so far (bandwidth fraction, prefill cost,
  speculative acceptance, prefix reuse, and a correction per categorical value). The best is
  searched on the estimate alone: random candidates (range ends drawn often), then hill climbs
  from the best few and from the best with each categorical choice. Until the polish starts, one
  trial in four is again the refitted estimate's best untried configuration. The
  sampler explores the others, and sees the guided trials like its own.
- **Polish** (from the 8th measured trial on, three trials in four): the local
  search of tuner/study/local_search.py, one move from the best trial (or from another branch's
  best, or from the SLO boundary), its moves of one level ordered by the estimate when there is
  one. Without an estimate (a GPU missing from the spec table) it starts right after sglang's
  defaults: TPE alone rarely finds the SLO-feasible corner of a space in 40 trials.

- **Corrected estimate** (every trial the sampler would draw after the warm
  start): the configuration whose expected improvement, by the estimate corrected with a
  Gaussian process on its measured residuals (tuner/study/residuals.py), times the
  probability that every SLO holds, is highest. It sees what the formula leaves out once trials
  near it were measured (changes that pay only together, a TTFT term the formula lacks).

A guided trial is an ordinary queued trial (`study.enqueue_trial`): it is checked, skipped, or
launched and measured as any other, and counts against the budget the same way. Its user attr
`guided_by` names the rule that chose it, and `guided_from` the trial it moved from: the rules
and their order are the table of tuner/study/policy.py.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.host import HostFacts
from tuner.predict.estimate import Estimator, Observation
from tuner.predict.gpu_specs import gpu_spec, known_gpus, provisional_spec
from tuner.results import record
from tuner.results.goals import (
    SUSTAINED_RATE,
    as_float,
    is_capacity,
)
from tuner.space.model import ParamSpec, SearchSpace, active_values, same_value
from tuner.study.budget import measured_count
from tuner.study.local_search import EDGE_TIE, LocalSearch
from tuner.study.moves import neutral
from tuner.study.near_misses import remeasure_check
from tuner.study.options import StudyOptions
from tuner.study.policy import CORRECTED_ESTIMATE, ESTIMATE, is_guided
from tuner.study.residuals import ResidualModel, estimate_flags
from tuner.study.standing import best_feasible, within_slos
from tuner.study.stopping import (
    BLIND_CHECK,
    EDGE_CHECK,
    EDGE_PROBE,
    NEIGHBOUR_CHECK,
    VALLEY_CHECK,
    Outlook,
)
from tuner.trial.identical import launches
from tuner.trial.same_run import SameRunRules

_log = logging.getLogger(__name__)


# The policy's constants (each measured on the quality benchmark, docs/decisions.md).
_WARM_START = 4  # the estimate's picks after sglang's defaults: enough to find its hill
# Measured trials before the polish starts with an estimate: an estimate wrong in structure
# stays wrong after its refit (24 left the seed space at 10 s at 0.83 of its optimum at 20).
_POLISH_FROM = 8
_POLISH_SHARE = 0.75  # from then on, this share of the trials is the local search's
_ESTIMATE_EVERY = 4  # between the warm start and the polish, one trial in this many
_CANDIDATES = 3000  # random configurations the estimate ranks before its hill climbs
_ENDS = 0.3  # a candidate's number sits at a range end this often: optima often do
_CLIMBS = 4  # the best candidates, each hill-climbed on the estimate
_MODEL_SHARE = 1.0  # of the sampler's turns after the warm start, the corrected estimate's
_MODEL_CANDIDATES = 1000  # of the random candidates, those the corrected estimate ranks
_NEIGHBOUR_CHECKS = 1  # stop checks of the best trial one step away in a number of few values
_NEIGHBOUR_UPTO = 5  # "few values": draft steps 1-5


# Configurations whose flags the guide keeps: its candidates and climbs (a few thousand) with
# room for the neighbours of each pick.
_FLAG_CACHE_SIZE = 20_000


class Guide:
    """The search's trial-choice policy: which configuration the study measures next.

    Before each ``study.ask()``, :meth:`before_ask` may queue one configuration, chosen by the
    rules of tuner/study/policy.py in their order: the estimate's warm start and later picks,
    the local search's polish (windows, edges, probes, valleys, partner flips, slot repairs,
    moves), and the corrected estimate on the sampler's turns; on any other turn the study's
    Optuna sampler draws. The queued trial records the rule in its ``guided_by`` user attr and
    the trial it moved from in ``guided_from``. Before the stop rule stops a study, it asks
    :meth:`outlook` for the checks of tuner/study/stopping.py and :meth:`queue_check` queues
    the one it names.

    Example:

        .. code::

            import optuna
            from tuner.study import GuideSettings, run_trials
            from tuner.study.guide import Guide

            guide = Guide(space, estimator=None, settings=GuideSettings(seed=0))
            study = optuna.create_study(directions=["maximize", "minimize"])
            run_trials(study, objective, 40, guide=guide)
            print({t.number: t.user_attrs["guided_by"] for t in study.trials})

    Args:
        space: The search space.
        estimator: The performance estimate (tuner/predict/estimate.py), or None: without it
            there is no warm start and the polish starts right after sglang's defaults.
        settings: Which of its trials the study wants (:class:`GuideSettings`).
        seed: Seed of its random candidates and tie-breaks.
    """

    def __init__(
        self,
        space: SearchSpace,
        estimator: Estimator | None,
        settings: GuideSettings | None = None,
        seed: int | None = None,
    ) -> None:
        self.space = space
        self.estimator = estimator
        self.settings = settings = settings or GuideSettings()
        # Without an estimate there is nothing to start from but what is measured: no warm
        # start, and the local search from the first measured trial on.
        self.warm_start = _WARM_START if estimator is not None else 0
        polish_from = _POLISH_FROM if estimator is not None else 1
        self.polish_from = polish_from if settings.polish else 0
        self.model_share = _MODEL_SHARE if settings.model else 0.0
        self.rng = random.Random(seed)
        self._candidates: list[dict[str, Any]] | None = None
        self._seen: dict[tuple[Any, ...], dict[str, Any]] = {}  # configurations the climbs scored
        self._fitted_on = -1
        self._flag_cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._local = LocalSearch(space, seed=seed)
        self.same_run: SameRunRules | None = None  # set by make_guide when the host is known
        self._residuals: ResidualModel | None = None
        if estimator is not None:  # what the estimate cannot rank, measured early
            self._local.blind = frozenset(space.params) - Estimator.MODELLED

    # -- the hook --------------------------------------------------------------------------

    def before_ask(self, study: optuna.Study) -> None:
        """Queue the next guided trial, if the next trial is one; called before `study.ask`."""
        trials = study.get_trials(deepcopy=False)
        if any(t.state == TrialState.WAITING for t in trials):
            return  # the baseline or a retry goes first
        measured = measured_count(trials)
        if measured == 0:
            return
        tried = _tried(trials)
        guided = sum(1 for t in trials if t.user_attrs.get(record.GUIDED_BY) == ESTIMATE)
        warm = guided < self.warm_start and measured <= self.warm_start
        # Between the warm start and the polish, one trial in `_ESTIMATE_EVERY` is the refitted
        # estimate's best untried configuration; the sampler explores the others.
        later = (
            measured > self.warm_start
            and (not self.polish_from or measured < self.polish_from)
            and measured % _ESTIMATE_EVERY == 0
        )
        if self.estimator is not None and (warm or later):
            self._refit(trials)
            params = self._best_candidate(tried, [t.params for t in trials])
            if params is not None:
                self._enqueue(study, params, ESTIMATE)
            return
        if self.polish_from and measured >= self.polish_from and self._polish_turn(measured):
            params = self._polish(trials, tried)
            if params is not None:
                rule, base = self._local.proposed_by or ("polish:move", None)
                self._enqueue(study, params, rule, base)
                return
        if self._model_turn(trials, measured):
            params = self._model_pick(trials, tried)
            if params is not None:
                self._enqueue(study, params, CORRECTED_ESTIMATE)

    def _model_turn(self, trials: list[FrozenTrial], measured: int) -> bool:
        """`model_share` of the sampler's trials after the warm start, spread evenly."""
        share = self.model_share
        if share <= 0 or is_capacity(self.space.objectives.throughput):
            return False
        if measured <= self.warm_start:
            return False
        # The sampler's turns so far: trials after the warm start no rule of the guide chose.
        sampled = sum(
            1
            for t in trials
            if t.number >= self.warm_start and not is_guided(t.user_attrs.get(record.GUIDED_BY))
        )
        model = sum(
            1
            for t in trials
            if t.user_attrs.get(record.GUIDED_BY) in (CORRECTED_ESTIMATE, "model")  # former name
        )
        return math.floor((sampled + model + 1) * share) > model

    def _model_pick(
        self, trials: list[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> dict[str, Any] | None:
        found = self._model_best(trials, tried)
        return found[0] if found is not None else None

    def _model_best(
        self, trials: list[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> tuple[dict[str, Any], float] | None:
        """The corrected estimate's pick, and its expected relative gain (residuals.py)."""
        if self.estimator is not None:
            self._refit(trials)
        if self._residuals is None:
            self._residuals = ResidualModel(self.space, self.estimator, self._flags)
        self._residuals.fit(trials)
        if not self._residuals.fitted:
            return None
        if self._candidates is None and self.estimator is not None:
            self._best_candidate(tried)  # draws the candidates and climbs the estimate
        if self._candidates is None:
            self._candidates = [
                random_params(self.space, self.rng, ends=_ENDS) for _ in range(_CANDIDATES)
            ]
        # Random configurations, the estimate's climbs so far, and the best trials' neighbours.
        measured = [t for t in trials if t.state == TrialState.COMPLETE and t.params]
        measured.sort(key=lambda t: t.values[0] if t.values else 0.0, reverse=True)
        near = [n for t in measured[:5] for n in neighbours(self.space, t.params, self.rng)]
        drawn = (self._candidates or [])[:_MODEL_CANDIDATES]
        pool = [*drawn, *self._seen.values(), *near]
        # A flag the estimate cannot read, at a value no measured trial had: the residuals
        # know nothing of it either, and a pick there is a blind move (the polish's to make).
        known = {(name, repr(t.params.get(name))) for t in measured for name in self._local.blind}
        pool = [p for p in pool if all(
            (name, repr(p[name])) in known for name in self._off_neutral(p))]  # fmt: skip
        return self._residuals.best(pool, tried, self._known_runs(trials))

    def _known_runs(self, trials: list[FrozenTrial]) -> Callable[[Mapping[str, Any]], bool] | None:
        """Which configurations would repeat a run a trial measured, flags that cannot change it
        aside (tuner/trial/same_run.py); None without the rule's facts. The objective would not
        launch them, so a pick among them measures nothing."""
        rules = self.same_run
        if rules is None:
            return None
        launched = launches(trials)

        def known(params: Mapping[str, Any]) -> bool:
            flags = self._flags(params)
            return any(
                rules.repeats(flags, measured, capacity, launched) is not None
                for _, measured, capacity in launched
            )

        return known

    def _off_neutral(self, params: Mapping[str, Any]) -> list[str]:
        """The categorical params of `params` the estimate cannot read that are off their first
        choice (sglang's default where the space lists it first). A number it cannot read has
        no such default, and a measured trial seldom holds a candidate's exact value."""
        specs = self.space.params
        return [
            name
            for name in self._local.blind
            if name in params
            and specs[name].kind == "categorical"
            and not same_value(params[name], neutral(specs[name]))
        ]

    def _as_estimated(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """A configuration's key as the estimate sees it: without the params it cannot read."""
        return tuple(item for item in key if item[0] not in self._local.blind)

    def _polish_turn(self, measured: int) -> bool:
        """`_POLISH_SHARE` of the trials from `polish_from` on, spread evenly."""
        done = measured - self.polish_from
        return math.ceil((done + 1) * _POLISH_SHARE) > math.ceil(done * _POLISH_SHARE)

    def first_picks(self, count: int) -> list[dict[str, Any]]:
        """The warm start's first picks as the estimate ranks them before anything is measured
        (what `tuner optimize --dry-run` shows); a study refits after each trial."""
        tried: set[tuple[Any, ...]] = set()
        picks: list[dict[str, Any]] = []
        while self.estimator is not None and len(picks) < count:
            params = self._best_candidate(tried)
            if params is None:
                break
            picks.append(params)
            tried.add(_key(params))
        return picks

    @property
    def estimates(self) -> bool:
        """Whether the stop rule may ask it for an outlook: it has an estimate."""
        return self.estimator is not None

    def outlook(self, study: optuna.Study, min_gain: float = 0.0) -> Outlook | None:
        """What the refitted estimate expects from the rest of the study: its best untried
        configuration and the throughput gain it predicts over the best SLO-feasible trial,
        both scored by the same estimate (tuner/study/stopping.py). Before it, a move from the
        best trial the estimate cannot rank (not one the study measured worse from another
        trial), then the best trial one step away in a number of few
        values (`_NEIGHBOUR_CHECKS` a study), then an SLO edge next to the best trial that is not
        bisected, or a valley between two trials that both miss an SLO by a little
        (`LocalSearch.valley_move`), that could gain more than `min_gain`. None without an
        estimate or a feasible trial."""
        if self.estimator is None:
            return None
        trials = study.get_trials(deepcopy=False)
        best = best_feasible(trials)
        if best is None:
            return None
        tried = _tried(trials)
        unseen = self._local.blind_move(best, tried, trials)
        if unseen is not None:
            why = (
                f"a move from trial {best.number} the estimate cannot rank ({unseen[0]}) is untried"
            )
            return Outlook(unseen[1], math.inf, why, BLIND_CHECK, best.number)
        checked = sum(t.user_attrs.get(record.GUIDED_BY) == NEIGHBOUR_CHECK for t in trials)
        near = (
            self._local.neighbour_move(best, tried, trials, _NEIGHBOUR_UPTO)
            if checked < _NEIGHBOUR_CHECKS
            else None
        )
        if near is not None:
            why = f"trial {best.number} one step away in {near[0]} is untried"
            return Outlook(near[1], math.inf, why, NEIGHBOUR_CHECK, best.number)
        # The estimate cannot place an SLO's edge between two measured trials; a move towards
        # it can gain at most what the trial past the edge measured.
        edges = (
            (
                EDGE_CHECK,
                self._local.edge_move(trials, tried),
                f"the SLO edge between trial {best.number} (or a trial within {EDGE_TIE:.0%} of "
                "its throughput) and a trial past it with more throughput is not bisected",
            ),
            (
                VALLEY_CHECK,
                self._local.valley_move(trials, tried),
                "two trials one number apart both miss the same SLO by a little, with more "
                f"throughput than trial {best.number}: the SLO may hold between them",
            ),
            (
                EDGE_PROBE,
                self._edge_probe(trials, tried),
                f"no trial one number from trial {best.number} marks the SLO edge that a trial "
                "with more throughput is past",
            ),
        )
        for kind, edge, because in edges:
            if edge is not None and (bound := edge[1] / best.values[0] - 1) > min_gain:
                moved = ", ".join(
                    f"{k}={v}" for k, v in sorted(edge[0].items()) if best.params.get(k) != v
                )
                why = f"{because} ({moved} is untried)"
                return Outlook(edge[0], bound, why, kind, best.number)
        again = remeasure_check(self.space, trials, min_gain)
        if again is not None:
            return again
        if self.model_share > 0 and not self.estimator.capacity:
            # The estimate corrected by the trials: its expected gain, uncertainty included.
            found = self._model_best(trials, tried)
            if found is not None:
                return Outlook(
                    found[0],
                    math.expm1(found[1]),
                    f"the corrected estimate expects {math.expm1(found[1]):+.1%} "
                    "(uncertainty included) from an untried configuration",
                )
        self._refit(trials)
        params = self._best_candidate(tried)
        if params is None:
            return None
        # The best trial's own flags: sglang's defaults pass no tuned flag at all.
        measured = self.estimator.score(estimate_flags(best, self._flags({})))
        expected = self.estimator.score(self._flags(params))
        if measured <= 0:
            return None  # the estimate cannot judge the configuration that is best
        return Outlook(params, expected / measured - 1)

    def _edge_probe(
        self, trials: list[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> tuple[dict[str, Any], float] | None:
        """The stop rule's probe of an SLO edge (`LocalSearch.edge_probes`), once a study: of
        the numbers to move, the first whose move the estimate sees (a memory fraction above
        what the cap uses changes nothing it predicts, and would re-measure the same run)."""
        if self.estimator is None:
            return None
        if any(t.user_attrs.get(record.GUIDED_BY) == EDGE_PROBE for t in trials):
            return None
        self._refit(trials)
        estimator = self.estimator
        return self._local.seen_probe(
            trials, tried, lambda params: estimator.score(self._flags(params))
        )

    def alike(self, study: optuna.Study) -> Callable[[FrozenTrial], Hashable] | None:
        """What the refitted estimate sees of a trial: its predicted throughput and SLO metrics
        (to 6 significant digits) and the values of the params it does not read; None for a
        trial it cannot predict. The stop rule counts a window trial alike to an earlier launch
        as no move (tuner/study/stopping.py)."""
        if self.estimator is None or self.estimator.capacity:
            return None
        self._refit(study.get_trials(deepcopy=False))
        sight = self._sight()
        if sight is None:
            return None
        return lambda t: sight(t.params, estimate_flags(t, self._flags(t.params)))

    def _sight(self) -> Callable[[Mapping[str, Any], Mapping[str, Any] | None], Hashable] | None:
        """What the estimate, as last fitted, sees of a configuration (its params, and its flags
        where a trial recorded them): the key `alike` groups trials by."""
        estimator = self.estimator
        if estimator is None or estimator.capacity:
            return None
        blind = sorted(self._local.blind)

        def seen(params: Mapping[str, Any], flags: Mapping[str, Any] | None = None) -> Hashable:
            expected = estimator.expected(dict(flags or self._flags(params)))
            if expected is None:
                return None
            throughput, slos = expected
            predicted = tuple(f"{v:.6g}" for _k, v in sorted(slos.items()))
            return f"{throughput:.6g}", predicted, tuple(repr(params.get(k)) for k in blind)

        return seen

    def queue_check(self, study: optuna.Study, outlook: Outlook) -> None:
        """Measure the configuration the estimate expects a gain from, before the study stops."""
        self._enqueue(study, outlook.params, outlook.check, outlook.base)

    # -- the estimate ----------------------------------------------------------------------

    def _refit(self, trials: list[FrozenTrial]) -> None:
        assert self.estimator is not None
        done = [t for t in trials if record.learned_from(t)]
        if len(done) == self._fitted_on:
            return
        self._fitted_on = len(done)
        observations = []
        for t in done:
            metrics = t.user_attrs.get(record.METRICS) or {}
            capacity = t.user_attrs.get(record.CAPACITY) or {}
            if record.DUPLICATE_OF in t.user_attrs:
                continue
            observations.append(
                Observation(
                    flags=t.user_attrs.get(record.FLAGS) or {},
                    throughput=float(metrics.get("output_throughput") or 0.0),
                    tpot_ms=float(metrics.get("median_tpot_ms") or math.nan),
                    running=capacity.get("max_running_requests"),
                    accept_length=metrics.get("accept_length") or None,
                    params=dict(t.params),
                    metrics=metrics,
                    sustained_rate=as_float(metrics.get(SUSTAINED_RATE)),
                )
            )
        self.estimator.fit(observations)

    def _flags(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The sglang flags of `params`, kept per configuration: the picks score the same
        candidates again after every trial. Callers read the dict, never change it."""
        key = _key(params)
        flags = self._flag_cache.get(key)
        if flags is None:
            if len(self._flag_cache) >= _FLAG_CACHE_SIZE:
                self._flag_cache.clear()  # a long study's neighbours: start again, not grow
            flags = {
                "model_path": self.space.model_path,
                **self.space.fixed_flags,
                **complete_flags(self.space, params),
            }
            self._flag_cache[key] = flags
        return flags

    def _best_candidate(
        self, tried: set[tuple[Any, ...]], measured: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any] | None:
        assert self.estimator is not None
        if self._candidates is None:
            self._candidates = [
                random_params(self.space, self.rng, ends=_ENDS) for _ in range(_CANDIDATES)
            ]
        estimator = self.estimator
        scores: dict[tuple[Any, ...], float] = {}

        def score(params: dict[str, Any]) -> float:
            key = _key(params)
            if key not in scores:
                scores[key] = estimator.score(self._flags(params))
            return scores[key]

        ranked = sorted(self._candidates, key=score, reverse=True)
        # Random configurations seldom hold the optimum's exact corner (a cap at the client
        # count, the largest memory fraction): climb from the best few, one move at a time,
        # and from the best with each categorical choice (the climbs end on different hills).
        starts = ranked[:_CLIMBS]
        for name, spec in self.space.params.items():
            for choice in spec.choices or () if spec.kind == "categorical" else ():
                with_it = (p for p in ranked if name in p and same_value(p[name], choice))
                starts.append(next(with_it, ranked[0]))
        climbed: set[tuple[Any, ...]] = set()
        for start in starts:
            if _key(start) not in climbed:
                climbed.add(_key(start))
                self._climb(start, score)
        # Earlier picks' climbs stay candidates: the refitted estimate may rank them first now.
        # A tried configuration with only an unread flag changed is the same one to the
        # estimate: it expects nothing new from it, and that move is the polish's to make.
        seen_tried = {self._as_estimated(k) for k in tried}
        untried = [
            params
            for key, params in self._seen.items()
            if key not in tried and self._as_estimated(key) not in seen_tried
        ]
        if measured and estimator.capacity:
            # A pick it scores exactly as a measured trial would teach it nothing new (caps
            # above the slots sglang settles on; a KV pool unfilled at either memory fraction).
            known = {round(score(dict(p)), 9) for p in measured}
            untried = [p for p in untried if round(score(p), 9) not in known] or untried
        # Of configurations it scores alike, the one with its unread flags at their defaults.
        return (
            max(untried, key=lambda p: (score(p), -len(self._off_neutral(p)))) if untried else None
        )

    def _climb(
        self, params: dict[str, Any], score: Callable[[dict[str, Any]], float], limit: int = 30
    ) -> None:
        """Hill-climb on the estimate from `params`: each step to the best configuration one
        param away (`neighbours` with a sweep of each number's range), until none scores
        higher; every configuration scored is kept."""
        current = params
        self._seen[_key(current)] = current
        for _ in range(limit):
            moves = neighbours(self.space, current, self.rng, sweep=True)
            for move in moves:
                self._seen.setdefault(_key(move), move)
            best = max(moves, key=score, default=None)
            if best is None or score(best) <= score(current):
                return
            current = best

    # -- the polish ------------------------------------------------------------------------

    def _polish(
        self, trials: list[FrozenTrial], tried: set[tuple[Any, ...]]
    ) -> dict[str, Any] | None:
        rank = None
        # While no measured trial meets the SLOs, the estimate's picks have all missed them:
        # its SLO model is refuted here, so the moves go in the model-free order.
        refuted = not any(within_slos(t) for t in trials)
        if self.estimator is not None and not refuted:
            self._refit(trials)
            estimator = self.estimator
            rank = lambda params: estimator.score(self._flags(params))  # noqa: E731
        self._local.rank = rank
        return self._local.propose(trials, tried)

    def _enqueue(
        self, study: optuna.Study, params: dict[str, Any], rule: str, base: int | None = None
    ) -> None:
        """Queue `params` as proposed by `rule` (tuner/study/policy.py), moved from trial
        `base` when there is one."""
        attrs: dict[str, Any] = {record.GUIDED_BY: rule}
        if base is not None:
            attrs[record.GUIDED_FROM] = base
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)


# ---- configurations of the space, without Optuna ------------------------------------------


def random_params(space: SearchSpace, rng: random.Random, ends: float = 0.0) -> dict[str, Any]:
    """One configuration drawn uniformly (log-uniformly for log ranges), conditions honoured;
    each number is one of its range's two ends with probability `ends`."""
    return _fill(space, {}, rng, ends)


def complete_flags(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    """The flags a trial with these params passes: active params, derived ones computed."""
    return _walk(space, params, None)


def neighbours(
    space: SearchSpace, params: Mapping[str, Any], rng: random.Random, sweep: bool = False
) -> list[dict[str, Any]]:
    """One-step moves from `params`: each categorical to each other choice, each number up and
    down by about a tenth of its range (at least one step), and with `sweep` also to each of
    up to 12 values across its range, ends included. Params a move makes active get a random
    value."""
    out: list[dict[str, Any]] = []
    for name, value in params.items():
        spec = space.params.get(name)
        if spec is None or spec.kind == "derived":
            continue
        moves: list[Any] = []
        if spec.kind == "categorical":
            moves = [c for c in spec.choices or () if not same_value(c, value)]
        else:
            for direction in (-1, 1):
                moved = _step(spec, float(value), direction)
                if moved != value:
                    moves.append(moved)
            if sweep:
                moves += [v for v in _grid(spec) if v != value and v not in moves]
        for moved in moves:
            candidate = {**params, name: moved}
            out.append(_fill(space, candidate, rng))
    return out


def _fill(
    space: SearchSpace, params: dict[str, Any], rng: random.Random, ends: float = 0.0
) -> dict[str, Any]:
    values = _walk(space, params, rng, ends)
    return {k: v for k, v in values.items() if space.params[k].kind != "derived"}


def _walk(
    space: SearchSpace, params: Mapping[str, Any], rng: random.Random | None, ends: float = 0.0
) -> dict[str, Any]:
    """The active params in sampling order, derived ones computed; with `rng`, an active param
    missing from `params` gets a random value, without it the param is left out."""
    if rng is None:
        return active_values(space, params)

    def draw(spec: ParamSpec) -> Any:
        if spec.kind == "categorical":
            return rng.choice(list(spec.choices or ()))
        if rng.random() < ends:
            return _snap(spec, float(rng.choice([spec.low, spec.high]) or 0))
        return _snap(spec, _draw(spec, rng))

    return active_values(space, params, draw)


def _grid(spec: ParamSpec, points: int = 12) -> list[Any]:
    low, high = float(spec.low or 0), float(spec.high or 0)
    if spec.log and low > 0:
        raw = [low * (high / low) ** (i / (points - 1)) for i in range(points)]
    else:
        raw = [low + (high - low) * i / (points - 1) for i in range(points)]
    return list(dict.fromkeys(_snap(spec, v) for v in raw))


def _draw(spec: ParamSpec, rng: random.Random) -> float:
    low, high = float(spec.low or 0), float(spec.high or 0)
    if spec.log:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def _step(spec: ParamSpec, value: float, direction: int) -> Any:
    low, high = float(spec.low or 0), float(spec.high or 0)
    if spec.log:
        moved = value * (1.25 if direction > 0 else 0.8)
        if spec.kind == "int" and round(moved) == round(value):
            moved = value + direction
    else:
        unit = float(spec.step or (1 if spec.kind == "int" else 0))
        span = (high - low) / 10
        if unit:
            span = max(unit, round(span / unit) * unit)
        moved = value + direction * span
    return _snap(spec, min(max(moved, low), high))


def _snap(spec: ParamSpec, value: float) -> Any:
    low, high = float(spec.low or 0), float(spec.high or 0)
    if spec.step:
        step = float(spec.step)
        value = low + round((value - low) / step) * step
        value = min(max(value, low), high)
        if spec.kind == "float":
            text = f"{step:.10f}".rstrip("0")
            return round(value, len(text.split(".")[1]) if "." in text else 0)
    if spec.kind == "int":
        return int(min(max(round(value), low), high))
    return float(value)


def _tried(trials: list[FrozenTrial]) -> set[tuple[Any, ...]]:
    # A queued trial another worker has just asked is RUNNING with its params not yet
    # suggested: its queued params count as tried, or two workers would launch one pick.
    return {_key(t.params or t.system_attrs.get("fixed_params") or {}) for t in trials}


def _key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


@dataclass(frozen=True)
class GuideSettings:
    """Which of the guide's trials a study wants, and its seed."""

    warm_start: bool = True  # the estimate's picks first
    polish: bool = True  # late one-step neighbours of the best trial
    seed: int | None = None
    # The corrected estimate takes the sampler's trials; a sampler the user chose explicitly
    # (`--sampler random`, `grid`, ...) keeps them.
    model: bool = True

    @classmethod
    def of(cls, options: StudyOptions) -> GuideSettings:
        default_sampler = StudyOptions.__dataclass_fields__["sampler"].default
        return cls(
            options.warm_start, options.polish, options.seed, options.sampler == default_sampler
        )


def make_guide(space: SearchSpace, host: HostFacts, settings: GuideSettings) -> Guide | None:
    """The study's guide: warm start when the estimate has its inputs, polish unless turned off.

    The estimate needs the model's config.json and a GPU: one in the spec table starts from its
    spec sheet, one the table lacks from a provisional row (the table's means, fitted from trial
    0 on). Without a GPU or a config.json the study says so once and runs without the warm start."""
    if not settings.warm_start and not settings.polish:
        return None
    estimator = None
    if settings.warm_start:
        spec = gpu_spec(host.gpu_name)
        if host.gpu_name is None:
            # A CPU host (sglang's CPU mode) or no nvidia-ml-py: nothing to estimate from.
            _log.warning("no GPU found (NVML): no model-guided start; the sampler alone")
        elif host.model is None:
            _log.warning("no config.json for %s: no model-guided start", space.model_path)
        elif spec is None and not host.gpu_memory_gb:
            _log.warning("GPU %r: no memory size reported: no model-guided start", host.gpu_name)
        else:
            if spec is None:
                spec = provisional_spec(host.gpu_name, float(host.gpu_memory_gb or 0.0))
                _log.warning(
                    "GPU %r is not in the spec table (tuner/predict/gpu_specs.py: %s): the "
                    "estimate starts from the table's mean bandwidth and bf16 peak and learns "
                    "this GPU's from the trials",
                    host.gpu_name,
                    ", ".join(known_gpus()),
                )
            estimator = Estimator(space, host.model, spec, host.gpu_memory_gb or spec.memory_gb)
    guide = Guide(space, estimator, settings, seed=settings.seed)
    guide.same_run = SameRunRules.of(space, host.model, host.gpu_memory_gb)
    return guide
