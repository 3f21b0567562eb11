"""When a study is done before its budget: the front stopped moving, and no estimate says it will.

    rule = StopRule(min_gain=0.02)                     # --min-gain 0.02; 0 turns it off
    decision = decide(study.get_trials(), rule, outlook=guide_outlook)
    if decision.stop:
        print(decision.reason)

`--trials N` stays the cap. Before that, the study stops when all of these hold:

0. a trial within the SLOs beats sglang's defaults (the default trial) in the measure by more
   than a window's move must: a study whose front is still the defaults has not found what
   it is for yet, and ran on in the quality benchmark's worst stopped seeds
   (0.66-0.76 of the full study's best: the defaults), so it goes on to `--trials` rather than
   recommend them; a front ahead of them by a rerun's noise is still theirs. After
   `min_trials + 2 * patience` launches (24) the condition lapses: that many configurations
   that found nothing better say the defaults are the answer, and the reason says so;
1. at least `min_trials` configurations were launched (sglang's defaults, the guide's warm
   start and its first refitted picks come before; skips and repeats do not count, as for the
   budget: tuner/study/budget.py);
2. the last `patience` launched trials moved the front of SLO-feasible trials by at most
   `min_gain`. How far a set of trials moved the front is the multiplicative epsilon indicator
   of the front after them against the front before them: the largest factor by which a new
   point beats every old one in at least one objective (+3% throughput at the same latency is
   a move of 3%; a point the old front dominates is a move of 0). With `measure="throughput"`
   or `"latency"` only that objective counts (the goals: tuner/study/goals.py);
3. the estimate, refitted to every measured trial (tuner/study/guide.py), expects no untried
   configuration to beat the best measured one by more than `min_gain`, and no move from the
   best trial that the estimate cannot rank (a flag it does not read, such as adaptive
   speculation) is untried, unless the same move already made another trial worse, and no
   SLO edge next to the best trial is left unbisected where the trial past it measured more
   than `min_gain` over the best (a running cap between a feasible 34 and a 64 past the TPOT
   limit: the estimate cannot say where between them the limit falls), and, once a study,
   where no trial one number from the best marks such an edge, the best trial's number that
   differs most from a trial past the edge is probed halfway to the nearest value of it a
   trial past the edge has (`EDGE_PROBE`: the best at 35 running with memory 0.93, the trial
   past the edge at 64 with 0.91), nor a *valley* between two trials one number apart that
   both miss the same SLO by a little and measured more than `min_gain` over the best
   (`VALLEY_CHECK`: draft steps 2 and 5 both just past a TPOT limit that 3 steps meet): those
   are measured first, as the estimate's expected gains are.
   The gain is the estimate's score of its best untried configuration over its score of the
   best measured configuration: the same model on both sides, so its bias cancels and what is
   left is the difference it predicts. When it predicts more, the study measures that configuration
   instead of stopping (the caller queues `Outlook.params`); after `max_checks` such
   measurements in the window that moved nothing, the estimate is not believed any more.
   Then, once a study, the trial that missed an SLO by less than a rerun's noise (2% of the
   limit, `SLO_NOISE`) with the most throughput, more than `min_gain` over the best trial that
   meets every SLO by more, is measured again (`REMEASURE_CHECK`): one p99 TPOT measurement
   cannot tell 10.9 ms from 11.1 ms against an 11 ms limit, and a study that took 37 and 38
   running as past it on one measurement each stopped at 34, 0.935 of its full study's best.
   Once a study, the best trial moved by one step in a
   number of at most 5 values is measured where untried
   (`NEIGHBOUR_CHECK`: draft steps 3 -> 4, where the study's full run found 4 best).
   A blind move's, a neighbour's, an edge's, a probe's, a valley's or a re-measurement's
   measurement (`BLIND_CHECK`, `NEIGHBOUR_CHECK`, `EDGE_CHECK`, `EDGE_PROBE`,
   `VALLEY_CHECK`, `REMEASURE_CHECK`) does not count toward `max_checks`: it
   tested no prediction, and each is measured once (a bisection halves the edge's gap each
   time). In the tpot-8b space the median stopped seed (shipped world) had kept 0.935 of
   the full study's best, stopping before the search bisected the edge. Counted, two blind
   moves from the best trial (HiCache off, the other write policy) used up both checks in a
   10 s seed of the quality benchmark's slow-constants world, the estimate was never asked,
   and the study stopped at 0.948 of its full study's best: asked, it expected +4.4% from
   the memory fraction's top with 4 draft steps and HiCache, and measured it.
   Those checks other than the estimate's expected gain start before the window is quiet, once
   its last `patience - _EARLY_CHECKS` launches are (2: from 4 quiet launches of
   6): they are measured inside the window instead of after it.
   Without an estimate (no GPU found, no config.json: the local search alone) nothing is
   asked, and the study stops on conditions 0-2 (33 of 60 stopped studies of the 3 s cells
   then end at sglang's defaults:
   docs/decisions.md#checks-for-the-stop-rule-without-an-estimate).

A study in which no launched trial met the SLOs has no front to judge by. It stops once it has
launched `min_trials + patience` configurations, every one that served the whole benchmark
missed an SLO by more than `_OUT_OF_REACH` of its limit (2.0: it measured more than 3x an upper
limit), and the last `patience` came no closer than a tenth of the way from the closest one
before them: the limits are out of this space's reach (a limit written in the wrong unit, a
model too large for the GPU), and the rest of the budget would search for what the trials say
is not there. The reason names the closest trial and by how much it missed, so that the user
can loosen those limits or change the space. The margin is wide because distance to an SLO in
latency is not distance in the space: an open loop's TTFT tail grows without bound past the
server's capacity, and in the quality benchmark's open-loop space with slow constants a study
whose closest trial measured 2.0x the 10 s limit after 20 launches (a window of 8 then) met
it at launch 27 (a 50% margin stopped it at nothing; benchmarks/out_of_reach.py).

A window trial the estimate cannot tell from a trial launched before it (the same predicted
throughput and SLO metrics, and the same values of every flag the estimate does not read), and
that measured within `_REMEASURE_TOLERANCE` (3%) of it in throughput and latency, moves nothing:
it re-measured what the study already knew, and what it adds over the earlier launch is
measurement noise. Memory fractions of 0.84 and 0.87 that both run every client on the seed
space's hybrid model are such a pair; windows of them kept studies going on moves of 1.4-1.6%
that were noise alone. Measured further apart, the pair shows something the estimate does not
see, and the move counts: one more running slot (11 against 10 on the hybrid model, where the
estimate counted 10 for both) measured 7.5% more, and a rule without the tolerance stopped
there at 0.948 of what 40 trials found.

For the same reason such launches are judged against the SLOs together: a
launch within every SLO is no point of the front when the mean of its group's graded
violations is past a limit by more than a rerun's noise (`SLO_NOISE`, 2% of the limit) over
the square root of the group's size. One measurement of a p99 tail within a limit, among
several of the same configuration past it, is the noise's luck: a study that took two such
launches (of seven, HiCache ratios that change nothing) as within a 3 s p99 TTFT limit
stopped on them, and without noise the configuration measures 3,059 ms. The report and
`tuner export` still show each trial as measured; the stop rule only refuses to call the
search done on such a front, and its reason names the trials it set aside.

Optuna's terminator (`optuna.terminator`, after Makarova et al. 2022) stops when a GP's regret
bound falls below the cross-validation noise. It reads single-objective COMPLETE trials only;
this study has two objectives, SLO constraints, pruned and skipped trials, and an estimate that
already models the space, so the rule above is built from those instead: the front's recent
movement, and the refitted estimate's expected gain.

Measurement noise sets how small `min_gain` may usefully be: a move within the run-to-run
spread of one configuration is chance, and keeps a study going without buying anything. The
study does not measure that spread itself: identical configurations are launched twice only
for the one re-measurement above (tuner/trial/identical.py), and a trial's stage-to-stage
rates mix noise with the workload's phases (one configuration on the deterministic simulator
measured 427, 440 and 455 tok/s in its three later stages, with no noise at all). `noise` is
therefore given, 0 by default: the threshold is `max(min_gain, 2 * noise)`, twice the noise
because a move compares two noisy measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.results.goals import SLO_NOISE
from tuner.study.budget import counts
from tuner.study.standing import within_slos

Measure = Literal["front", "throughput", "latency"]
_WHAT = {"front": "the front", "throughput": "the best throughput", "latency": "the best latency"}
# `guided_by` of the trials the stop rule queued before stopping (tuner/study/guide.py):
STOP_CHECK = "stop-check"  # the estimate expected a gain from it
BLIND_CHECK = "blind-check"  # a move from the best trial the estimate cannot rank
EDGE_CHECK = "edge-check"  # halfway between the best trial and one past an SLO's edge
# halfway in one number from the best trial towards a trial past an SLO's edge that differs
# from it in more than that number (one a study: tuner/study/local_search.py `edge_probe`)
EDGE_PROBE = "edge-probe"
# halfway between two trials one number apart that both miss the same SLO by a little, beside
# the one of their row that misses by least (tuner/study/local_search.py `valley_move`)
VALLEY_CHECK = "valley-check"
# the trial that missed an SLO by less than a rerun's noise with the most throughput over the
# best trial that meets every SLO by more, measured again (once a study: tuner/study/near_misses.py)
REMEASURE_CHECK = record.REMEASURE_CHECK
# the best trial one step away in a number of few values (draft steps 3 -> 4): the estimate
# ranks such a move, but a structure it lacks (acceptance that decays by position) moves
# the best step count by one (tuner/study/local_search.py `neighbour_move`)
NEIGHBOUR_CHECK = "neighbour-check"
# The checks that count toward `StopRule.max_checks`: the estimate's expected gains. Blind
# moves, edge bisections and edge probes test no prediction of the estimate's, and each is
# measured once.
COUNTED_CHECKS = frozenset({STOP_CHECK})
# --min-gain's default: a move of the front worth the rest of the budget (relative). 2%, the
# benchmark's throughput noise: at 1% the six 10 s cells' stopped studies spent 49-60% of the
# full studies' GPU hours, at 2% 37-49%, keeping the same best in every cell
# (docs/decisions.md#--min-gain-002-by-default).
DEFAULT_MIN_GAIN = 0.02


# The rule's constants (each measured on the quality benchmark, docs/decisions.md).
# A window trial the estimate cannot tell from an earlier launch, measured within this share of
# it in both objectives, re-measured what the study knew: it moves nothing.
_REMEASURE_TOLERANCE = 0.03
# No trial met the SLOs, and the closest broke one by more than this share of its limit (more
# than 3x an upper limit) for min_trials + patience launches: the limits are out of reach.
_OUT_OF_REACH = 2.0
# Checks start this many launches before the window ends, once the rest of it is quiet: inside
# the window rather than after it (a TPOT cell's median stopped study 61.9% -> 51.3% of the
# GPU hours, the same best kept).
_EARLY_CHECKS = 2


@dataclass(frozen=True)
class StopRule:
    """When a study may stop before `--trials`; `min_gain` 0 turns the rule off."""

    min_gain: float = DEFAULT_MIN_GAIN  # a move of the front worth the rest of the budget
    min_trials: int = 12  # launched trials before the rule may stop the study
    patience: int = 6  # the window: launches that must have moved the front too little
    max_checks: int = 1  # estimate-led launches in the window that found nothing: stop then
    measure: Measure = "front"  # what a move is measured in: the front or one objective
    noise: float = 0.0  # relative run-to-run noise of one measurement, when known

    @property
    def enabled(self) -> bool:
        return self.min_gain > 0


@dataclass(frozen=True)
class Outlook:
    """What the refitted estimate expects: its best untried configuration and the relative
    throughput gain it predicts over the best measured one. `why` replaces the gain in the
    reason when the configuration is measured for another cause (the estimate cannot rank it)."""

    params: dict[str, Any]
    gain: float
    why: str = ""
    check: str = STOP_CHECK  # what kind of check its measurement is (`guided_by`)
    base: int | None = None  # the trial it moves from or measures again, when there is one


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str  # why it stops, or why not yet
    launched: int  # configurations launched so far
    moved: float | None = None  # how far the window moved the front (None: not judged yet)
    noise: float = 0.0  # the relative measurement noise taken into account
    outlook: Outlook | None = None  # set when the estimate expects a gain: measure it next
    best_trial: int | None = None  # the best feasible trial by throughput
    details: dict[str, Any] = field(default_factory=dict)


def launched_trials(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count against `--trials`, in the order they were asked."""
    return sorted((t for t in trials if counts(t)), key=lambda t: t.number)


def feasible_point(trial: FrozenTrial) -> tuple[float, float] | None:
    """(throughput, latency) of a trial that served the whole benchmark within every SLO."""
    if not within_slos(trial):
        return None
    throughput, latency = float(trial.values[0]), float(trial.values[1])
    if not (throughput > 0 and latency > 0):
        return None
    return throughput, latency


def front_move(
    before: Sequence[tuple[float, float]],
    after: Sequence[tuple[float, float]],
    measure: Measure = "front",
) -> float:
    """How far the points `after` moved the front of `before` (throughput up, latency down),
    relative: 0.03 is 3%. Infinite when `before` is empty and `after` is not."""
    if not after:
        return 0.0
    if not before:
        return math.inf
    if measure == "throughput":
        return max(0.0, max(p[0] for p in after) / max(p[0] for p in before) - 1)
    if measure == "latency":
        return max(0.0, min(p[1] for p in before) / min(p[1] for p in after) - 1)
    best = 0.0
    for thr, lat in after:
        # The smallest margin by which this point beats every old point in some objective.
        beats = min(max(thr / o_thr - 1, o_lat / lat - 1) for o_thr, o_lat in before)
        best = max(best, beats)
    return best


def decide(
    trials: Sequence[FrozenTrial],
    rule: StopRule,
    outlook: Callable[[], Outlook | None] | None = None,
    alike: Callable[[FrozenTrial], Hashable] | None = None,
) -> StopDecision:
    """Stop now, or not yet and why. `outlook` is asked only when the measured trials alone say
    stop, or when the last `patience - _EARLY_CHECKS` of them do and it may name a check that is
    not the estimate's expected gain (it refits and searches the estimate, about a second).
    `alike` says what the estimate sees of a trial (None: it cannot say): a window trial alike
    to an earlier launch moves nothing."""
    launched = launched_trials(trials)
    n = len(launched)
    alike = None if alike is None else _asked_once(alike)
    past = pooled_past(launched, alike) if alike is not None else set()
    points = [(t, None if t.number in past else feasible_point(t)) for t in launched]
    feasible = [(t, p) for t, p in points if p is not None]
    best_trial = max(feasible, key=lambda tp: tp[1][0])[0].number if feasible else None
    lucky = [t.number for t in launched if t.number in past and feasible_point(t) is not None]
    pooled_note = (
        f" (trial{'s' if len(lucky) > 1 else ''} {', '.join(map(str, lucky))} met the SLOs as "
        "measured, but not on the mean of the launches the estimate cannot tell from "
        f"{'them' if len(lucky) > 1 else 'it'})"
        if lucky
        else ""
    )

    def keep_going(reason: str, **kw: Any) -> StopDecision:
        return StopDecision(False, reason + pooled_note, n, best_trial=best_trial, **kw)

    if not rule.enabled:
        return keep_going("the stop rule is off (--min-gain 0)")
    if n < rule.min_trials:
        return keep_going(f"{n} of at least {rule.min_trials} trials launched")
    split = n - rule.patience
    before = [p for t, p in points[:split] if p is not None]
    if not feasible and n >= rule.min_trials + rule.patience:
        reason = _out_of_reach(launched, split, rule)
        if reason is not None:
            return StopDecision(True, reason, n)
    if not before:
        return keep_going(
            f"no trial within the SLOs before the last {rule.patience}: nothing to judge by"
        )
    noise = rule.noise
    threshold = max(rule.min_gain, 2 * noise)
    default = next((p for t, p in points if t.user_attrs.get(record.IS_DEFAULT)), None)
    others = [p for t, p in feasible if not t.user_attrs.get(record.IS_DEFAULT)]
    by = threshold
    margin = f" by more than {by:.0%}" if by > 0 else ""
    at_defaults = default is not None and front_move([default], others, rule.measure) <= by
    until = rule.min_trials + 2 * rule.patience
    if at_defaults and n < until:
        return keep_going(f"no trial within the SLOs has beaten sglang's defaults{margin} yet")
    moved, again = _window_move(points, launched, split, rule, alike)
    what = _WHAT[rule.measure]
    if moved > threshold:
        early = _early_check(points, launched, rule, threshold, outlook, alike)
        if early is not None:
            return keep_going(early.why, moved=moved, noise=noise, outlook=early)
        return keep_going(
            f"the last {rule.patience} trials moved {what} by {moved:.1%}", moved=moved, noise=noise
        )
    checks = [t for t in launched[split:] if t.user_attrs.get(record.GUIDED_BY) in COUNTED_CHECKS]
    if outlook is not None and len(checks) < rule.max_checks:
        expected = outlook()
        if expected is not None and expected.gain > rule.min_gain:
            return keep_going(
                expected.why
                or f"the estimate expects {expected.gain:+.1%} from an untried configuration",
                moved=moved,
                noise=noise,
                outlook=expected,
            )
    noise_note = f", noise {noise:.1%}" if 2 * noise > rule.min_gain else ""
    if again:
        noise_note += (
            f"; {len(again)} of them re-measured configurations the estimate cannot tell from "
            "earlier ones"
        )
    if at_defaults:
        noise_note += (
            f"; no trial beat sglang's defaults{margin} in {n} launches: they are the answer"
        )
    found_none = "the check" if len(checks) == 1 else f"the last {len(checks)} checks"
    model_note = (
        f"; {found_none} of an expected gain found none"
        if len(checks) >= rule.max_checks
        else "; the estimate expects no more"
        if outlook is not None
        else ""
    )
    return StopDecision(
        True,
        f"the last {rule.patience} launched trials moved {what} by {moved:.1%} "
        f"(at most {threshold:.1%} asked{noise_note}){model_note}{pooled_note}",
        n,
        moved=moved,
        noise=noise,
        best_trial=best_trial,
    )


def _window_move(
    points: list[tuple[FrozenTrial, tuple[float, float] | None]],
    launched: list[FrozenTrial],
    split: int,
    rule: StopRule,
    alike: Callable[[FrozenTrial], Hashable] | None,
) -> tuple[float, set[int]]:
    """How far the launches from `split` on moved the front of the feasible ones before them
    (`front_move`), leaving out those that re-measured an earlier launch (`_remeasured`), and
    the numbers of those."""
    before = [p for _t, p in points[:split] if p is not None]
    again = _remeasured(launched, split, alike, _REMEASURE_TOLERANCE) if alike else set()
    window = [p for t, p in points[split:] if p is not None and t.number not in again]
    return front_move(before, window, rule.measure), again


def _early_check(
    points: list[tuple[FrozenTrial, tuple[float, float] | None]],
    launched: list[FrozenTrial],
    rule: StopRule,
    threshold: float,
    outlook: Callable[[], Outlook | None] | None,
    alike: Callable[[FrozenTrial], Hashable] | None,
) -> Outlook | None:
    """A check the rule would ask for once the window is quiet, asked for now: the last
    `patience - _EARLY_CHECKS` launches moved the front by at most `threshold` (`_EARLY_CHECKS`).
    None when that part of the window moved it, or when what is left is the estimate's own
    expected gain (it waits for the whole window)."""
    quiet = rule.patience - _EARLY_CHECKS
    if not _EARLY_CHECKS or outlook is None or quiet < 1:
        return None
    if _window_move(points, launched, len(launched) - quiet, rule, alike)[0] > threshold:
        return None  # that part of the window moved it too
    expected = outlook()
    return expected if expected is not None and expected.check != STOP_CHECK else None


def slo_violations(trial: FrozenTrial) -> dict[str, float] | None:
    """The SLOs a trial that served the whole benchmark measured, each as its graded violation
    (> 0: broken by that share of the limit); None for any other trial (a stage figure of a
    pruned trial is no measurement of the whole benchmark)."""
    if trial.state != TrialState.COMPLETE:
        return None
    constraints = record.trial_constraints(trial)
    if constraints.get("launch", 0.0) > 0:
        return None
    slos = {k.removeprefix("slo:"): v for k, v in constraints.items() if k.startswith("slo:")}
    return slos or None


def _out_of_reach(launched: list[FrozenTrial], split: int, rule: StopRule) -> str | None:
    """Why the study's SLOs are out of reach (`_OUT_OF_REACH`), or None while a trial
    came within the margin or the last `patience` trials still closed in. A trial's distance
    is its largest violation, as `tuner export` ranks the closest trial (results/pick.py)."""
    measured = [(i, t, v) for i, t in enumerate(launched) if (v := slo_violations(t))]
    earlier = [max(v.values()) for i, _t, v in measured if i < split]
    window = [max(v.values()) for i, _t, v in measured if i >= split]
    if not earlier:
        return None
    _i, closest, slos = min(measured, key=lambda itv: max(itv[2].values()))
    if max(slos.values()) <= _OUT_OF_REACH:
        return None
    if window and min(window) < 0.9 * min(earlier):
        return None  # still closing in
    broken = ", ".join(f"{k} {_past(v)}" for k, v in sorted(slos.items()) if v > 0)
    return (
        f"no trial met the SLOs in {len(launched)} launches, and the last {rule.patience} came "
        f"no closer: the closest, trial {closest.number}, measured {broken} (loosen the "
        "limits, or change the space)"
    )


def _past(violation: float) -> str:
    """A graded violation in words: 80% past the limit; 4.2x it (only an upper limit can be
    missed by a whole limit or more)."""
    return f"{violation:.0%} past its limit" if violation < 1 else f"{1 + violation:.1f}x its limit"


def _asked_once(alike: Callable[[FrozenTrial], Hashable]) -> Callable[[FrozenTrial], Hashable]:
    """`alike` asked once a trial in one decision: the pooled judgment and the window's
    re-measurements (twice with the early checks) read every launch's, a prediction each."""
    keys: dict[int, Hashable] = {}

    def key(t: FrozenTrial) -> Hashable:
        if t.number not in keys:
            keys[t.number] = alike(t)
        return keys[t.number]

    return key


def pooled_past(
    launched: Sequence[FrozenTrial], alike: Callable[[FrozenTrial], Hashable]
) -> set[int]:
    """The numbers of the launches that served the whole benchmark and whose group of launches
    the estimate cannot tell apart (`alike`, two or more) is past an SLO on the mean of their
    graded violations by more than `SLO_NOISE` over the square root of their number: one
    measurement within a limit among several that are past it is the noise's luck, not the
    configuration's."""
    groups: dict[Hashable, list[tuple[int, dict[str, float]]]] = {}
    for t in launched:
        slos = slo_violations(t)
        if slos is None or not t.values or (a := alike(t)) is None:
            continue
        groups.setdefault(a, []).append((t.number, slos))
    out: set[int] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        names = {name for _n, slos in members for name in slos}
        bar = SLO_NOISE / math.sqrt(len(members))
        if any(
            sum(slos.get(name, 0.0) for _n, slos in members) / len(members) > bar for name in names
        ):
            out.update(number for number, _slos in members)
    return out


def _remeasured(
    launched: list[FrozenTrial],
    split: int,
    alike: Callable[[FrozenTrial], Hashable],
    tolerance: float,
) -> set[int]:
    """The numbers of the window's trials (from `split` on) that the estimate cannot tell from
    a completed launch before them and that measured within `tolerance` of it in throughput
    and latency: what they measured differently is noise, not a move. One that measured
    further off shows something the estimate does not see (a running slot more than it
    counts), and counts."""
    seen: dict[Hashable, list[tuple[float, float]]] = {}
    out: set[int] = set()
    for i, t in enumerate(launched):
        if t.state != TrialState.COMPLETE or not t.values or (a := alike(t)) is None:
            continue
        thr, lat = float(t.values[0]), float(t.values[1])
        if i >= split and any(
            within(thr, o_thr, tolerance) and within(lat, o_lat, tolerance)
            for o_thr, o_lat in seen.get(a, ())
        ):
            out.add(t.number)
        seen.setdefault(a, []).append((thr, lat))
    return out


def within(a: float, b: float, tolerance: float) -> bool:
    """Both positive, and `a` within `tolerance` (a share) of `b`."""
    return a > 0 and b > 0 and abs(a / b - 1) <= tolerance


class Forecaster(Protocol):
    """What the stop rule asks of the guide (tuner/study/guide.py)."""

    # Whether it has an estimate to forecast with: a guide without one (no GPU found, no
    # config.json) is asked nothing, and the reason a study stopped names no estimate.
    @property
    def estimates(self) -> bool: ...

    def outlook(self, study: optuna.Study, min_gain: float = 0.0) -> Outlook | None: ...

    def alike(self, study: optuna.Study) -> Callable[[FrozenTrial], Hashable] | None: ...

    def queue_check(self, study: optuna.Study, outlook: Outlook) -> None: ...


class Stopping:
    """The rule as the study loop applies it before each new trial: stop, go on, or queue the
    configuration the estimate expects a gain from. The decision that stopped the study is
    written to the study (`record.STUDY_STOPPED`) so that every worker's summary reads it."""

    def __init__(self, rule: StopRule, forecaster: Forecaster | None = None) -> None:
        self.rule = rule
        self.forecaster = forecaster
        self.decision: StopDecision | None = None

    def should_stop(self, study: optuna.Study) -> bool:
        if not self.rule.enabled:
            return False
        forecaster = self.forecaster
        if forecaster is not None and not forecaster.estimates:
            forecaster = None
        min_gain = self.rule.min_gain
        outlook = None if forecaster is None else (lambda: forecaster.outlook(study, min_gain))
        alike = None if forecaster is None else forecaster.alike(study)
        decision = decide(study.get_trials(deepcopy=False), self.rule, outlook, alike)
        self.decision = decision
        if decision.outlook is not None and forecaster is not None:
            forecaster.queue_check(study, decision.outlook)
            return False
        if decision.stop:
            study.set_user_attr(
                record.STUDY_STOPPED,
                {"launched": decision.launched, "reason": decision.reason},
            )
        return decision.stop
