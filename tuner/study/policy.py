"""The search's rules, in one table: what proposes each trial, when, and how soon.

Every launched trial records the name of the rule that proposed it in its `guided_by` user attr
(tuner/results/record.py GUIDED_BY), and the trial it moved from, when there is one, in
`guided_from`. The table is data the search reads: the polish's priority levels below are the
levels tuner/study/local_search.py ranks its proposals by (a lower level is tried first; a
move's own level is 0-3, from a range end to one step), and `tuner explain` reads the
descriptions.

    from tuner.study.policy import RULES, rule_named
    print(rule_named("polish:window").proposes)

A trial is chosen in this order (tuner/study/guide.py `Guide.before_ask`):

1. `defaults` (trial 0), then any `retry` of an interrupted trial.
2. `estimate` while the warm start or an estimate turn is due (an estimate is needed).
3. On a polish turn, the proposal of the lowest level among the `polish:*` rules.
4. On the sampler's other turns, `corrected-estimate`, unless the user chose the sampler.
5. Otherwise the `sampler`.

Before the stop rule stops a study (tuner/study/stopping.py), the `*-check` and `edge-probe`
rules are asked, in the table's order; the first that has something to measure is launched.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One rule of the search: its `guided_by` name, when it applies, what it proposes, and
    its priority level among the polish's proposals (None: outside the polish)."""

    name: str
    stage: str  # "start", "guide", "polish", "sampler" or "stop-check"
    when: str
    proposes: str
    level: float | None = None


# A slot repair whose trial measured more than the best trial by more than a rerun's noise
# waits this level instead of its rule's: before the extension, which would otherwise lead
# the search along a plateau that all measures alike.
REPAIR_AHEAD = -12.0

RULES: tuple[Rule, ...] = (
    Rule(
        "defaults",
        "start",
        "trial 0 of every study",
        "sglang's defaults, no tuned flag: the reference every trial is compared with",
    ),
    Rule(
        "retry",
        "start",
        "a trial that a stop or a dead worker interrupted",
        "the interrupted trial's params again",
    ),
    Rule(
        "estimate",
        "guide",
        "with an estimate: the first 4 measured trials, then one in 4 until the polish starts",
        "the refitted estimate's best untried configuration (random candidates, then hill "
        "climbs from the best few)",
    ),
    Rule(
        "polish:window",
        "polish",
        "no trial meets every SLO, and the best one and a trial that breaks only other SLOs "
        "differ in numbers",
        "each such number halfway between the two: the SLOs can hold only between them",
        -20.0,
    ),
    Rule(
        "polish:edge",
        "polish",
        "the best trial meets the SLOs, and a trial one number away (from it, a trial within 2% "
        "of it, or one carried from such a trial) with more throughput breaks one",
        "that number halfway between the two: its best value sits on the SLO's edge",
        -20.0,
    ),
    Rule(
        "polish:probe",
        "polish",
        "as for an edge, but no trial one number from the best marks it",
        "the best trial with one number halfway to the trial past the edge, the widest gap first",
        -20.0,
    ),
    Rule(
        "polish:valley",
        "polish",
        "trials one number apart all miss the same SLO by a little, with more throughput than "
        "the best trial",
        "the number halfway between the least miss and its neighbour: the metric's bottom",
        -20.0,
    ),
    Rule(
        "polish:partner-flip",
        "polish",
        "no trial meets every SLO, and the line between the best trial and its window partner "
        "meets them nowhere",
        "the partner (the nearest trial that breaks only other SLOs) with a categorical param "
        "set to another choice",
        -15.0,
    ),
    Rule(
        "polish:extension",
        "polish",
        "the best trial beat the trial it moved from in one number (by more than 3% without "
        "an estimate)",
        "the same number moved further the same way",
        -10.0,
    ),
    Rule(
        "polish:slot-repair",
        "polish",
        "no estimate ranks the moves, and a trial over a TTFT SLO queued for running slots and "
        "measured within 15% of the best trial or more (level -12 when it measured more)",
        "that trial with each slot flag (memory fraction, running cap) at its range's top",
        0.0,
    ),
    Rule(
        "polish:move",
        "polish",
        "always, from the best trial (the least violation while none meets the SLOs)",
        "one param moved: a choice to another, a number to a range end, halfway, a quarter "
        "or one step (levels 0-3), ranked by the same move's effect elsewhere, the trend and "
        "the estimate",
        0.0,
    ),
    Rule(
        "polish:boundary",
        "polish",
        "trials with more throughput than the best are over an SLO",
        "a move from the one of them that is over by least (its level + 0.5)",
        0.5,
    ),
    Rule(
        "polish:branch",
        "polish",
        "another choice of a categorical param that switches params on has its own best trial",
        "a move from that branch's best (its level + 1, its own params + 0)",
        1.0,
    ),
    Rule(
        "polish:restart",
        "polish",
        "every move from the best trial, the branches and the boundary trial was tried",
        "a move from one of the next 3 best trials",
    ),
    Rule(
        "corrected-estimate",
        "guide",
        "a sampler's turn after the warm start, unless the user chose the sampler",
        "the best expected improvement by the estimate corrected by a Gaussian process on its "
        "residuals (the measured values alone without an estimate), times the odds that every "
        "SLO holds",
    ),
    Rule(
        "sampler",
        "sampler",
        "every other turn",
        "the study's Optuna sampler's draw (TPE unless --sampler says otherwise)",
    ),
    Rule(
        "blind-check",
        "stop-check",
        "a move from the best trial that the estimate cannot rank is untried (not one the "
        "study measured worse elsewhere)",
        "that move",
    ),
    Rule(
        "neighbour-check",
        "stop-check",
        "once a study: the best trial one step away in a number of at most 5 values is untried",
        "that step (the value fewer trials ran first)",
    ),
    Rule(
        "edge-check",
        "stop-check",
        "an SLO edge next to the best trial is not bisected, and the trial past it measured "
        "more than --min-gain over the best",
        "the edge move",
    ),
    Rule(
        "valley-check",
        "stop-check",
        "a valley between two near misses with more than --min-gain over the best is untried",
        "the valley move",
    ),
    Rule(
        "edge-probe",
        "stop-check",
        "once a study: no trial one number from the best marks the edge a trial with more "
        "throughput is past",
        "the best trial with the number the estimate sees halfway to the nearest value past "
        "the edge",
    ),
    Rule(
        "remeasure-check",
        "stop-check",
        "once a study: a trial missed an SLO by less than a rerun's noise (2%) with more than "
        "--min-gain over the best",
        "that trial measured again (its record pools both measurements)",
    ),
    Rule(
        "stop-check",
        "stop-check",
        "the estimate expects more than --min-gain from an untried configuration",
        "that configuration (at most one such check in a quiet window)",
    ),
)

DEFAULTS, RETRY, SAMPLER = "defaults", "retry", "sampler"
ESTIMATE, CORRECTED_ESTIMATE = "estimate", "corrected-estimate"
_BY_NAME = {rule.name: rule for rule in RULES}
# `guided_by` values written before the rules had these names.
_FORMER = {"model": "corrected-estimate", "polish": "polish:move"}
# The rules the guide chooses a trial by; the others leave the turn to the sampler's count.
GUIDE_CHOSEN = frozenset(r.name for r in RULES if r.stage in ("guide", "polish", "stop-check"))


def rule_named(name: str) -> Rule:
    """The rule of this `guided_by` name (a former name too); KeyError for any other."""
    return _BY_NAME[_FORMER.get(name, name)]


def level(name: str) -> float:
    """The priority level of a polish rule (lower is tried first)."""
    found = _BY_NAME[name].level
    assert found is not None, name
    return found


def is_guided(name: object) -> bool:
    """Was a trial of this `guided_by` chosen by the guide (not the defaults, a retry or the
    sampler)?"""
    return isinstance(name, str) and _FORMER.get(name, name) in GUIDE_CHOSEN
