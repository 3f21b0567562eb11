"""The first configurations a study would launch, found without launching or storing anything.

    for row in first_configurations(space, options, model_memory, gpu_memory_gb, gpu_name):
        print(row.number, row.chosen_by, row.argv, row.skip)

The order a study follows: trial 0 is sglang's defaults; with the warm start (a GPU in the spec
table and the model's config.json) the next ones are the performance estimate's best
configurations (tuner/study/guide.py; the study refits the estimate to each measured trial, so
its later picks can differ from these); then the sampler's proposals, drawn here from an
in-memory Optuna study with the same sampler and seed (a real study also learns from what it
measured). Each proposal goes through the same pre-launch checks as a trial (the release's
parser, sglang's start-up rules, the memory estimate); one they reject is shown with the reason
and, as in a study, not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.engines import sglang as engine
from tuner.errors import UserError
from tuner.predict.estimate import Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.memory import estimate_memory
from tuner.space.model import suggest_flags
from tuner.study.guide import Guide, complete_flags
from tuner.study.run import Run
from tuner.study.sampler import grid_points_left, make_sampler

MAX_DRAWS = 50


@dataclass(frozen=True)
class Proposal:
    number: int | None  # the trial number it would get; None when skipped before launch
    chosen_by: str  # "sglang's defaults", "estimate", "sampler"
    flags: dict[str, Any]  # the tuned flags (derived ones included)
    argv: list[str]  # after `python -m sglang.launch_server`
    skip: str | None  # why the pre-launch checks would skip it


def first_configurations(run: Run, count: int = 6) -> list[Proposal]:
    """Up to `count` launchable proposals in study order, with the skipped ones between them."""
    space, options = run.space, run.options
    model, gpu_memory_gb = run.host.model, run.host.gpu_memory_gb
    rows: list[Proposal] = []
    seen: set[tuple[tuple[str, str], ...]] = set()

    def offer(flags: dict[str, Any], chosen_by: str) -> None:
        key = tuple(sorted((k, repr(v)) for k, v in flags.items()))
        if key in seen:
            return  # a repeat is not launched again
        seen.add(key)
        argv, skip = _check(run, flags)
        launched = sum(1 for r in rows if r.skip is None)
        rows.append(Proposal(None if skip else launched, chosen_by, flags, argv, skip))

    offer({}, "sglang's defaults")
    spec = gpu_spec(run.host.gpu_name)
    if options.warm_start and model is not None and spec is not None:
        estimator = Estimator(space, model, spec, gpu_memory_gb or spec.memory_gb)
        guide = Guide(space, estimator, seed=options.seed)
        for params in guide.first_picks(guide.warm_start):
            offer(complete_flags(space, params), "estimate")
    seed = None if options.seed is None else (options.seed * 1_000_003) % 2**32
    study = optuna.create_study(  # in memory: nothing is written anywhere
        directions=["maximize", "minimize"], sampler=make_sampler(options.sampler, space, seed)
    )
    for _ in range(MAX_DRAWS):
        if sum(1 for r in rows if r.skip is None) >= count or grid_points_left(study) == 0:
            break  # enough, or a grid with no point left (a study stops there too)
        trial = study.ask()
        offer(suggest_flags(trial, space), "sampler")
        study.tell(trial, state=TrialState.FAIL)  # nothing measured: no sampler learns from it
    return rows


def _check(run: Run, tuned: dict[str, Any]) -> tuple[list[str], str | None]:
    space, model, gpu_memory_gb = run.space, run.host.model, run.host.gpu_memory_gb
    flags = {"model_path": space.model_path, **space.fixed_flags, **tuned}
    version = space.engine_version
    try:
        argv = engine.build_server_args(flags, version)
    except UserError as exc:
        return [], str(exc)
    violations = engine.check_startup_rules(flags, version)
    if violations:
        return argv, "start-up rule: " + "; ".join(violations)
    if model is not None and gpu_memory_gb and run.options.feasibility:
        memory = estimate_memory(flags, model, gpu_memory_gb, version=version)
        if not memory.fits:
            return argv, f"memory estimate: {memory.reason}"
    return argv, None
