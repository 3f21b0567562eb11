"""One change of the search side by side, off and on, on the quality benchmark's studies.

    python benchmarks/off_on.py TOGGLE WORLDS SPACES SEEDS JOBS [per-seed]

TOGGLE names the change (`TOGGLES`):

- `slo-cut`: the stage pruner's SLO cut (tuner/trial/pruning.py `slo_cut`). Off, the pruner is
  the one before it came and no trial is learnt from by its stage figures, so `off` reproduces
  the studies of the code before the cut.
- `alike`: the stage pruner's first rule counts as dominators only completed trials with the
  trial's categorical choices (tuner/trial/pruning.py `alike_dominators`; off: any feasible
  completed trial, as before).
- `front-alike`: the stage pruner's front cut bounds a trial's ramp by the full runs with the
  trial's categorical choices alone, and waits for two of them (tuner/trial/pruning.py
  `front_alike`; off: by every full run, as before).
- `doomed`: the local search's wait for moves the estimate scores far below the trial they
  move from (tuner/study/local_search.py `doomed_penalty`; on: 3 levels, off: 0).
- `extend`: the local search extends the move that reached the best trial only when the best
  beat the trial it moved from by more than 3% (`extend_min_gain`, with an estimate to rank
  the moves; off: any gain).
- `extend-unranked`: the same 3% without an estimate to rank the moves, model-free search
  (`unranked_extend_min_gain`, on by default since 2026-12-07; off: any gain).
- `flat`: moves of a number to values between two that measured within 3% of each other wait
  3 levels (`flat_penalty`; off: 0).
- `ordered`: an int param with at most 6 values (draft steps 1-5) moves to its adjacent values
  first, as ordered choices do (`ordered_upto`; off: 0, the range's ends first).
- `branch-first`: moves from another branch's best trial (HiCache on when the best has it
  off) wait no level behind the best trial's own (`branch_offset` 0; off: 1, the default).
- `branch-tie`: a branch whose best measured within 3% of the best trial is searched as the
  best is, its own params without a head start (`branch_tie`; off: 0).
- `state-fit`: the estimate fits how many spare state slots a hybrid model's prefix cache
  needs from the measured cache hit rates (tuner/predict/estimate.py `state_need`; off: no
  state limit is ever fitted, as before it).
- `blind-checks`: a stop check queued for a move the estimate cannot rank (a blind move from
  the best trial) does not count toward the stop rule's `max_checks` (tuner/study/stopping.py
  `COUNTED_CHECKS`; off: it counts, as an expected gain's check does).
- `edge-checks`: before it stops, the stop rule measures an SLO edge next to the best trial
  that is not bisected (tuner/study/guide.py `edge_checks`; off: it does not wait for edges).
- `edge-tie`: edge moves and edge checks bisect from every trial within 2% of the best
  trial's throughput too, not from the best alone (tuner/study/local_search.py `edge_tie`; off:
  0, the best alone).
- `edge-probe`: before it stops, where no trial one number from the best marks an SLO edge,
  the stop rule measures the best trial with the number in which a trial past the edge (with
  more throughput) differs most set halfway to it, once a study (tuner/study/guide.py
  `edge_probes`; off: no probe).
- `probe-polish`: the polish makes the edge probe as soon as the best trial has an SLO edge no
  trial one number from it marks, at the edge moves' level (tuner/study/local_search.py
  `probe_level`; off: None, only the stop rule probes, before it stops), `edge_margin` 0 in
  both arms.
- `edge-margin`: with the polish's probe on in both arms, edge moves and probes start from the
  best trial within the SLOs by more than 2% of a limit, and take a trial within them by less
  as one past the edge (tuner/study/local_search.py `edge_margin`; off: 0).
- `probe-margin`: the two above together (`probe_level` -20, `edge_margin` 0.02, the defaults
  since 2026-12-04) against neither (the defaults before).
- `untried-pairs`: while no trial meets every SLO, a move to a categorical choice that no trial
  has run beside the base's other categorical choices gains a level and is not held back by
  the local search's trend (tuner/study/local_search.py `pair_bonus`; off: 0).
- `known-blind`: the stop rule's blind check passes over a move from the best trial that the
  estimate cannot rank when the same move already made a trial worse (tuner/study/local_search.py
  `blind_known_skip`; off: it checks the lowest-level blind move, measured or not).
- `cut-edges`: a trial past an SLO that the dominated or the front cut stopped marks an SLO
  edge at the most its full run could have measured (tuner/study/local_search.py `cut_edges`;
  off: only trials the SLO cut stopped, or complete ones, mark one).
- `remeasure`: before it stops, the stop rule measures again, once a study, the trial that
  missed an SLO by less than 2% of its limit with the most throughput over the best trial that
  meets every SLO by more (tuner/study/guide.py `remeasure_checks`; off: no trial twice).
- `step-back`: when the stop rule's re-measurement misses the SLO by less than 2% of its limit
  again, the stop rule measures it moved one step towards the best trial that meets every SLO
  by more (tuner/study/guide.py `step_back_checks`; off: no step back). A stop rule's change
  only (`STOP_ONLY`).
- `known-low`: a move of a number to a value that every complete trial running it measured
  below half the base trial's throughput waits 3 levels (tuner/study/local_search.py
  `known_low_penalty`; off: 0).
- `trend-feasible`: the local search's trend is fitted to the trials within every SLO alone,
  once two are (tuner/study/local_search.py `trend_feasible`; off: to every finished trial).
- `carry`: an edge of the best trial is carried to a trial within 5% of its throughput that
  meets the SLO bounding it with more room (by 2% of the limit): that trial at the nearest
  value past the edge is an edge move (tuner/study/bisection.py `carried_edges`,
  tuner/study/local_search.py `carry_tie`, on since 2026-12-06; off: 0).
- `carry-slack`: `carry`, and the front cut's factors widened by 10% instead of 5%
  (tuner/trial/pruning.py `front_slack`; off: neither).
- `boundary-still`: moves from the boundary trial (of the trials past an SLO with more
  throughput than the best, the one that breaks it least) do not extend the move that reached
  it (tuner/study/local_search.py `boundary_extend` False, the default since 2026-12-06;
  off: True, they do, as the best trial's moves do).
- `probe-nearest`: an edge probe moves a number halfway to the nearest value of it that a
  trial past the edge has on that side of the best's, not to the value of the trial past the
  edge with the most throughput (tuner/study/local_search.py `probe_nearest`; off: that
  trial's value, as before).
- `beat-defaults`: the study may stop only once a trial within the SLOs beats sglang's
  defaults by more than a window's move must (tuner/study/stopping.py `defaults_gain`; off: by
  any margin). A stop rule's change only: the full study is run once (`STOP_ONLY`).
- `defaults-until`: a study whose front is still sglang's defaults may stop after 24 launches
  (tuner/study/stopping.py `defaults_until`; off: never, it runs to `--trials`). A stop rule's
  change only, as `beat-defaults`.
- `early-checks`: the checks the stop rule asks for before it stops (blind moves, edges,
  probes, valleys, the re-measurement) start once 4 of the window's 6 launches moved nothing,
  inside the window (tuner/study/stopping.py `early_checks` 2; off: 0, once all 6 did). A stop
  rule's change only, as `beat-defaults`.
- `neighbour-checks`: before it stops, the stop rule measures the best trial moved by one step
  in an int param of at most 5 values (draft steps), where untried, once a study, the value
  fewer trials ran first (tuner/study/guide.py `neighbour_checks` 1; off: 0). A stop rule's
  change only, as `beat-defaults`.
- `pool-alike`: launches the estimate cannot tell apart are judged against the SLOs together
  by the stop rule: one within them is no point of the front when its group's mean graded
  violation is past a limit by more than 2% over the square root of the group's size
  (tuner/study/stopping.py `pool_alike`; off: each as measured). A stop rule's change only,
  as `beat-defaults`.
- `climb`: the stop rule also needs the last 12 launches to have moved the front by at most
  twice a window's move, from the first launch within the SLOs where none before them is
  (tuner/study/stopping.py `climb_window`; off: 0). A stop rule's change only, as
  `beat-defaults`.
- `settled`: a group of configurations the estimate cannot tell apart that two launches
  measured within 3% of each other in throughput and latency is settled: the polish's moves
  into it wait 25 levels (after every other move) and the corrected estimate's picks pass
  over it (tuner/study/guide.py `settled_penalty`; off: 0).
- `none-choices`: a measured trial is predicted with the params it left at a None choice
  (no draft) among its recorded flags, as its params and an untried configuration's flags
  are (tuner/study/guide.py `none_choices`, tuner/study/residuals.py `estimate_flags`; off:
  its recorded flags alone, which drop them).
- `plug-in`: the corrected estimate's expected improvement counts from its own prediction of
  the best trial within the SLOs, not that trial's measured figure (tuner/study/guide.py
  `plug_in`, tuner/study/residuals.py `ResidualModel.plug_in`; off: the measured figure).
- `plug-in-none`: `plug-in` and `none-choices` together, against neither.
- `valley`: of trials one number apart that all miss the same SLO, the two beside the one
  that misses by least, when both miss by less than 10% of the limit with more than 3% more
  throughput than the best trial within the SLOs, have the number halfway tried at the edge
  moves' level, and
  the stop rule measures it before it stops (tuner/study/local_search.py `valley_level`; off:
  None).
- `fresh-picks`: the estimate's picks pass over a configuration it scores exactly as a
  measured trial (tuner/study/guide.py `fresh_picks`; off, the default: only for the capacity
  goal).
- `window-wide`: while no trial meets every SLO, a trial that breaks only other SLOs than the
  best trial and differs from it in more than one number marks a window too: each number is
  tried halfway to the nearest value such a trial has on either side of the best's
  (tuner/study/local_search.py `window_wide`; off: only a trial one number away marks one).
- `partner`: while no trial meets every SLO, the window's partner (of the trials that break
  only SLOs the best meets, the one nearest the best) is tried with each categorical param set
  to another choice, after the window moves (tuner/study/local_search.py `partner_level`;
  off: None).
- `partner-late`: the partner flips after the extension of the last move that paid off (-5)
  instead of before it (off: -15, as shipped).
- `edge-nearer`: an edge is bisected against the trial past its SLO nearest the base on its
  line too, whatever that trial measured, in its full run or its last stage
  (tuner/study/bisection.py `first_broken_on_line`, tuner/study/local_search.py `edge_nearer`; off:
  against the trials past the edge with more throughput than the best alone).
- `deep-context`: a move's learnt effect, its context, the blind check and the untried pairs
  read every param the moved one switches on in turn, not its children alone
  (tuner/study/local_search.py `deep_context`; off: the direct children).
- `slot-repairs`: without an estimate, every trial past a TTFT SLO that queued for running
  slots and measured at least 85% of the best trial's throughput is moved to its most slots
  (tuner/study/local_search.py `repair_level`; off: none; with an estimate it is never made,
  so only model-free runs move).
- `repair-ahead`: a slot repair whose trial measured more than the best trial within the SLOs
  (by more than the noise) is made ahead of the extension, at level -12
  (tuner/study/local_search.py `repair_ahead`; off: at the repairs' own level, 0).
- `expected-cut`: a trial the SLO cut stopped stands, for the local search, by the violations
  its full run would likely have ended at: its stage's loads times the median factor by which
  the completed trials' full runs ended from that stage (tuner/trial/pruning.py `slo_cut`,
  tuner/study/standing.py `EXPECTED_CUT`; off: by its last stage's violations).
- `wide-expected`: the two above together, against neither.
- `expected-narrow`: `expected-cut` with windows one number apart only in both arms.
- `bounds`: the corrected estimate reads a trial the front or the dominated cut stopped as
  measuring its throughput bound (tuner/study/guide.py `cut_bounds`; off: it skips them).

For each world x space x seed it runs the default method (`OFF_ON_METHOD=model-free` in the
environment: another of benchmarks/quality/methods.py) for the whole 40 trials and with the
stop rule (`--min-gain`'s default, as the quick start), each with the change off and on, and prints
per cell: the full study's best noise-free SLO-feasible throughput as a share of the cell's
best seen (median, and the worst seed), its modelled GPU hours, the launched trials until its
best reached 99% of that (median; 41: never), the stopped study's GPU hours and their share
of its own full study's, the stopped study's best over its full study's, and the share of the
full study's front the stopped study's front keeps (`front_kept`, the stop rule's measure).
WORLDS and SPACES are comma-separated names (benchmarks/quality/worlds.py); a SPACE that is a
file (`benchmarks/heldout/*.yaml`) runs as it is, in its own world, once per WORLD. With `per-seed`,
a second table gives each seed's stopped study: its best over its full study's, its launches
and its share of the full study's GPU hours, off -> on.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

# (best noise-free feasible throughput, modelled GPU seconds, launched trials, launches until
# the best reached each value: the running best after each launch, the noise-free (throughput,
# latency) of every feasible trial: its front)
Outcome = tuple[float, float, int, list[float], list[tuple[float, float]]]
Runs = dict[str, Outcome]  # "full-off", "stop-off", "full-on", "stop-on"


def _pruner(field: str) -> Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]:
    """A toggle of one boolean StagePrunerConfig field, the rest default."""

    def toggle(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
        from benchmarks.early_cut import Seen, pruner_config
        from tuner.trial import StagePrunerConfig

        return method, pruner_config(StagePrunerConfig(**{field: on}), Seen())

    return toggle


def _configs(off: dict[str, Any], on: dict[str, Any]) -> Callable[[Any, bool], tuple[Any, Any]]:
    """A toggle of several LocalSearchConfig fields at once: `on`'s values against `off`'s, the
    rest default."""

    def toggle(method: Any, is_on: bool) -> tuple[Any, AbstractContextManager[Any]]:
        from tuner.study.local_search import LocalSearchConfig

        config = LocalSearchConfig(**(on if is_on else off))
        return replace(method, guide=(("local_search", config),)), nullcontext()

    return toggle


def _local_search(
    field: str, value: float, off: float | None = 0.0
) -> Callable[[Any, bool], tuple[Any, Any]]:
    """A toggle of one LocalSearchConfig field: `value` when on, `off` when off, the rest
    default."""
    return _configs({field: off}, {field: value})


def _guide(field: str) -> Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]:
    """A toggle of one GuideConfig bool field."""
    return _guide_value(field, False, True)


def _guide_value(
    field: str, off: Any, on: Any
) -> Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]:
    """A toggle of one GuideConfig field: `off` against `on`."""
    return _guide_fields(((field, off),), ((field, on),))


def _guide_fields(
    off: tuple[tuple[str, Any], ...], on: tuple[tuple[str, Any], ...]
) -> Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]:
    """A toggle of GuideConfig fields: the (field, value) pairs `off` against `on` (the rest
    default)."""

    def toggle(method: Any, is_on: bool) -> tuple[Any, AbstractContextManager[Any]]:
        return replace(method, guide=on if is_on else off), nullcontext()

    return toggle


@contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    """`module.name` set to `value` while the study runs."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _state_fit(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
    from tuner.predict import estimate

    # Off: no state limit explains the hit rates better than none (a factor of 0).
    return method, _patched(estimate, "_STATE_FIT_GAIN", 0.5 if on else 0.0)


def _blind_checks(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
    from tuner.study import stopping

    # Off: a blind move's check counts toward max_checks, as an expected gain's does.
    counted = {stopping.STOP_CHECK} if on else {stopping.STOP_CHECK, stopping.BLIND_CHECK}
    return method, _patched(stopping, "COUNTED_CHECKS", frozenset(counted))


def _expected_cut(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
    from tuner.study import standing

    # Off: a trial the SLO cut stopped stands by the violations its last stage measured.
    return method, _patched(standing, "EXPECTED_CUT", on)


def _expected_with(wide_off: bool, wide_on: bool) -> Callable[[Any, bool], tuple[Any, Any]]:
    """`expected-cut` with `window_wide` set to `wide_on` in the on arm and `wide_off` in the
    off arm."""

    def toggle(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
        method, _ = _local_search("window_wide", wide_on, off=wide_off)(method, on)
        return _expected_cut(method, on)

    return toggle


def _stop_rule(
    field: str, off: Any, on: Any = None
) -> Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]:
    """A toggle of one `StopRule` field: off sets `off`, on sets `on` (None: keeps the rule's
    default)."""

    def toggle(method: Any, is_on: bool) -> tuple[Any, AbstractContextManager[Any]]:
        from functools import partial

        from benchmarks.quality import study
        from tuner.study.stopping import StopRule

        value = on if is_on else off
        rule = StopRule if value is None else partial(StopRule, **{field: value})
        return method, _patched(study, "StopRule", rule)

    return toggle


def _carry_slack(method: Any, on: bool) -> tuple[Any, AbstractContextManager[Any]]:
    """`carry` with the front cut's factors widened by 10% instead of 5% (`front_slack`), against
    neither."""
    from benchmarks.early_cut import Seen, pruner_config
    from tuner.trial import StagePrunerConfig

    method, _ = _local_search("carry_tie", 0.05)(method, on)
    return method, pruner_config(StagePrunerConfig(front_slack=0.10 if on else 0.05), Seen())


TOGGLES: dict[str, Callable[[Any, bool], tuple[Any, AbstractContextManager[Any]]]] = {
    "slo-cut": _pruner("slo_cut"),
    "alike": _pruner("alike_dominators"),
    "front-alike": _pruner("front_alike"),
    "doomed": _local_search("doomed_penalty", 3.0),
    "extend": _local_search("extend_min_gain", 0.03),
    "extend-unranked": _local_search("unranked_extend_min_gain", 0.03),
    "flat": _local_search("flat_penalty", 3.0),
    "ordered": _local_search("ordered_upto", 6),
    "bounds": _guide("cut_bounds"),
    "branch-first": _local_search("branch_offset", 0.0, off=1.0),
    "branch-tie": _local_search("branch_tie", 0.03),
    "state-fit": _state_fit,
    "blind-checks": _blind_checks,
    "edge-checks": _guide("edge_checks"),
    "edge-tie": _local_search("edge_tie", 0.02),
    "valley": _local_search("valley_level", -20.0, off=None),
    "probe-nearest": _local_search("probe_nearest", True, off=False),
    "edge-probe": _guide("edge_probes"),
    "probe-polish": _configs(
        {"probe_level": None, "edge_margin": 0.0}, {"probe_level": -20.0, "edge_margin": 0.0}
    ),
    "edge-margin": _configs(
        {"probe_level": -20.0, "edge_margin": 0.0}, {"probe_level": -20.0, "edge_margin": 0.02}
    ),
    "probe-margin": _configs({"probe_level": None, "edge_margin": 0.0}, {}),
    "untried-pairs": _local_search("pair_bonus", 1.0),
    "known-blind": _local_search("blind_known_skip", True, off=False),
    "cut-edges": _local_search("cut_edges", True, off=False),
    "remeasure": _guide("remeasure_checks"),
    "step-back": _guide("step_back_checks"),
    "known-low": _local_search("known_low_penalty", 3.0),
    "trend-feasible": _local_search("trend_feasible", True, off=False),
    "carry": _local_search("carry_tie", 0.05),
    "carry-slack": _carry_slack,
    "boundary-still": _configs({"boundary_extend": True}, {"boundary_extend": False}),
    "beat-defaults": _stop_rule("defaults_gain", 0.0),  # off: any margin over the defaults
    "defaults-until": _stop_rule("defaults_until", 10**9),  # off: the defaults never stop it
    "early-checks": _stop_rule("early_checks", 0, 2),  # on: checks from 4 quiet launches
    "fresh-picks": _guide("fresh_picks"),
    "neighbour-checks": _guide_value("neighbour_checks", 0, 1),
    "pool-alike": _stop_rule("pool_alike", False, True),
    "climb": _stop_rule("climb_window", 0, 12),
    "settled": _guide_value("settled_penalty", 0.0, 25.0),
    "none-choices": _guide("none_choices"),
    "plug-in": _guide("plug_in"),
    "plug-in-none": _guide_fields((), (("none_choices", True), ("plug_in", True))),
    "window-wide": _local_search("window_wide", True, off=False),
    "partner": _local_search("partner_level", -15.0, off=None),
    "edge-nearer": _local_search("edge_nearer", True, off=False),
    "deep-context": _local_search("deep_context", True, off=False),
    "slot-repairs": _local_search("repair_level", 0.0, off=None),
    "repair-ahead": _local_search("repair_ahead", -12.0, off=None),
    "partner-late": _local_search("partner_level", -5.0, off=-15.0),
    "expected-cut": _expected_cut,
    "wide-expected": _expected_with(False, True),
    "expected-narrow": _expected_with(False, False),
}


# Toggles of the stop rule alone: a full study (no stop rule) runs the same off and on, so it is
# run once.
STOP_ONLY = frozenset(
    {
        "beat-defaults",
        "defaults-until",
        "step-back",
        "early-checks",
        "neighbour-checks",
        "pool-alike",
        "climb",
    }
)


def outcome(run: Any) -> Outcome:
    best, gpu, curve, points = 0.0, 0.0, [], []
    for t in run.trials:
        gpu += t.gpu_s
        if t.counted and t.truth and t.truth.feasible:
            best = max(best, t.truth.throughput)
            points.append((t.truth.throughput, t.truth.latency))
        curve.append(best)
    return best, gpu, len(run.trials), curve, points


def front_kept(stopped: Outcome, full: Outcome) -> float:
    """What the stopped study's front keeps of the full study's, in the stop rule's own
    measure (tuner/study/stopping.py `front_move`): 1 / (1 + how far the full study's feasible
    trials move the stopped study's front); 1.0 when the full study found no point beyond it,
    0.0 when the stopped study found none."""
    from tuner.study.stopping import front_move

    return 1 / (1 + front_move(stopped[4], full[4]))


def _cell_seed(task: tuple[str, str, str, int]) -> tuple[str, str, int, Runs]:
    toggle, world, space_name, seed = task
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.study.loop import quiet_optuna
    from tuner.study.stopping import DEFAULT_MIN_GAIN

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    noise = NoiseModel(0.02, 0.02, 0.05)
    default = method_named(os.environ.get("OFF_ON_METHOD", "default"))
    out: Runs = {}
    for state in ("off", "on"):
        stop = replace(default, min_gain=DEFAULT_MIN_GAIN)
        for name, base in (("full", default), ("stop", stop)):
            if name == "full" and state == "on" and toggle in STOP_ONLY:
                out["full-on"] = out["full-off"]  # the toggle changes nothing a full study does
                continue
            method, context = TOGGLES[toggle](base, state == "on")
            with context:
                run = study.run_study(method, seed, 40, space, oracle, noise)
            out[f"{name}-{state}"] = outcome(run)
    oracle.save()
    return world, space_name, seed, out


def main(argv: list[str]) -> None:
    toggle, worlds, spaces = argv[0], argv[1].split(","), argv[2].split(",")
    if toggle not in TOGGLES:
        raise SystemExit(f"unknown toggle {toggle!r}: one of {', '.join(TOGGLES)}")
    seeds, jobs = int(argv[3]), int(argv[4])
    tasks = [(toggle, w, s, k) for s in spaces for w in worlds for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_cell_seed, tasks))
    cells: dict[tuple[str, str], list[Runs]] = {}
    for world, space, _seed, out in results:
        cells.setdefault((world, space), []).append(out)
    print(
        "| world | space | full study's best (worst seed), off -> on | its GPU h, off -> on "
        "| launches to 99%, off -> on | stopped: GPU h, off -> on "
        "| stopped: share of full (max), off -> on | stopped: best / full (worst), off -> on "
        "| stopped: front kept (worst), off -> on | seeds whose full best fell / rose |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (world, space), outs in cells.items():
        top = max(o[k][0] for o in outs for k in o) or 1.0
        med = statistics.median
        cols = []
        for state in ("off", "on"):
            full = [o[f"full-{state}"] for o in outs]
            stop = [o[f"stop-{state}"] for o in outs]
            shares = [s[1] / f[1] for s, f in zip(stop, full, strict=True)]
            kept = [s[0] / f[0] if f[0] else 1.0 for s, f in zip(stop, full, strict=True)]
            fronts = [front_kept(s, f) for s, f in zip(stop, full, strict=True)]
            to99 = [next((i + 1 for i, b in enumerate(f[3]) if b >= 0.99 * top), 41) for f in full]
            cols.append(
                (
                    f"{med([f[0] / top for f in full]):.3f} ({min(f[0] for f in full) / top:.3f})",
                    f"{med([f[1] / 3600 for f in full]):.2f}",
                    f"{med(to99):.0f}",
                    f"{med([s[1] / 3600 for s in stop]):.2f}",
                    f"{med(shares):.1%} ({max(shares):.1%})",
                    f"{med(kept):.3f} ({min(kept):.3f})",
                    f"{med(fronts):.3f} ({min(fronts):.3f})",
                )
            )
        fell = sum(1 for o in outs if o["full-on"][0] < 0.995 * o["full-off"][0])
        rose = sum(1 for o in outs if o["full-on"][0] > 1.005 * o["full-off"][0])
        row = " | ".join(f"{a} -> {b}" for a, b in zip(cols[0], cols[1], strict=True))
        print(f"| {world} | {space} | {row} | {fell} / {rose} |", flush=True)
    if argv[5:] == ["per-seed"]:
        _per_seed(results)


def _per_seed(results: list[tuple[str, str, int, Runs]]) -> None:
    tops: dict[tuple[str, str], float] = {}
    for world, space, _seed, out in results:
        top = max(o[0] for o in out.values())
        tops[(world, space)] = max(tops.get((world, space), 0.0), top)
    print(
        "\n| world | space | seed | full: best / cell's best | stopped: best / full | launches "
        "| GPU-hour share |"
    )
    print("|---|---|---:|---|---|---|---|")
    for world, space, seed, out in results:
        cols: list[list[str]] = [[], [], [], []]
        top = tops[(world, space)] or 1.0
        for state in ("off", "on"):
            full, stop = out[f"full-{state}"], out[f"stop-{state}"]
            cols[0].append(f"{full[0] / top:.3f}")
            cols[1].append(f"{stop[0] / full[0] if full[0] else 1.0:.3f}")
            cols[2].append(f"{stop[2]}")
            cols[3].append(f"{stop[1] / full[1]:.1%}")
        row = " | ".join(" -> ".join(c) for c in cols)
        print(f"| {world} | {space} | {seed} | {row} |")


if __name__ == "__main__":
    main(sys.argv[1:])
