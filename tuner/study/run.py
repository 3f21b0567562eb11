"""One `tuner optimize` run, resolved once: the space, the launch target and the host's facts.

    run = resolve_run(StudyOptions(trials=40))
    run.space          # loaded and validated, relative bounds and `capacity` resolved
    run.target         # which program serves each trial (sglang or the simulator) and how
    run.host           # GPU name and memory, the model's memory needs (tuner/host.py)
    run.options.engine # "sim" or "sglang": --engine, else the space's engine.server

The space file is parsed once and the host asked once per process; every layer below gets these
facts, never the options they came from. Worker processes receive the resolved run itself
(tuner/study/workers.py), so they read nothing again.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner.engines import sglang as engine
from tuner.errors import UserError
from tuner.host import HostFacts, read_host_facts
from tuner.launcher import LaunchTarget
from tuner.predict.capacity_bound import running_capacity
from tuner.results.engine_label import engine_label
from tuner.results.goals import goal_defaults, goal_named
from tuner.space.load import default_space_path, read_space_file
from tuner.space.model import SIMULATED_SERVER, SearchSpace
from tuner.space.model_path import model_path_problem
from tuner.study.options import StudyOptions, check_options


@dataclass(frozen=True)
class Run:
    """What a study run works with: the user's settings and the facts resolved from them."""

    options: StudyOptions  # budget, storage, sampler, ...: what the study loop is asked to do
    space: SearchSpace
    space_path: Path
    target: LaunchTarget
    host: HostFacts

    @property
    def study_name(self) -> str:
        return self.options.study_name or self.space.name

    @property
    def engine(self) -> str:
        """ "sim" or "sglang": `--engine` when given, else where the space says it runs."""
        return run_engine(self.space, self.options)

    @property
    def engine_label(self) -> str:
        """ "real sglang 0.5.23 (python ...)" or "simulated sglang 0.5.23": what serves trials."""
        python = self.target.python if self.options.engine == "sglang" else None
        return engine_label(self.options.engine, self.space.engine_version, python)

    def for_worker(self, gpus: str | None, seed: int | None) -> Run:
        """The same run on another GPU group, with another seed (tuner/study/workers.py)."""
        options = replace(self.options, gpus=gpus, seed=seed)
        return replace(self, options=options, target=replace(self.target, gpus=gpus))


def resolve_run(options: StudyOptions) -> Run:
    """Check the options, load the space, ask the host: once, before anything is created.

    A bad option or space file is a UserError (one line, exit 2)."""
    check_options(options)
    path = options.space_path or default_space_path()
    source = read_space_file(path)
    # --goal fills in what the file leaves out; the file's own objectives and SLOs win.
    goal = goal_defaults(goal_named(options.goal), source.data)
    space = source.build(**goal)
    space, options = tensor_parallel(space, options)
    options = with_engine(space, options, path)
    if options.engine == "sglang" and (problem := model_path_problem(space.model_path)):
        raise UserError(f"{path}: {problem}")  # before a launch that could only fail
    target = launch_target(space, options)
    host = read_host_facts(
        run_engine(space, options),
        target.module,
        target.extra_args,
        space.model_path,
        gpus=options.gpus,
        gpu_memory_gb=options.gpu_memory_gb,
    )
    if space.needs_capacity:  # a bound relative to what this GPU can run
        capacity = running_capacity(space, host.model, host.gpu_memory_gb)
        space = source.build(**goal, capacity=capacity)
    return Run(options=options, space=space, space_path=Path(path), target=target, host=host)


def run_engine(space: SearchSpace, options: StudyOptions) -> str:
    """ "sim" or "sglang": `--engine` when given, else where the space says it runs."""
    if options.engine is not None:
        return options.engine
    return "sim" if space.engine.server == SIMULATED_SERVER else "sglang"


def with_engine(space: SearchSpace, options: StudyOptions, path: str | Path) -> StudyOptions:
    """The options with the engine the space decides when `--engine` was not given, and the
    engine-only options checked against it (a UserError names the space's setting)."""
    if options.engine is not None:
        return options
    engine = run_engine(space, options)
    given = "--engine-python" if options.engine_python else "--engine-env"
    if engine == "sim" and (options.engine_python or options.engine_env):
        raise UserError(
            f"{given} applies to --engine sglang only, and {path} runs on the simulator "
            "(engine.server: simulated): add --engine sglang, or drop it"
        )
    if engine == "sglang" and options.time_scale is not None:
        raise UserError(
            f"--time-scale applies to the simulator only, and {path} runs real sglang "
            "(engine.server: real, the default): add --engine sim, or drop it"
        )
    return replace(options, engine=engine)


def tensor_parallel(space: SearchSpace, options: StudyOptions) -> tuple[SearchSpace, StudyOptions]:
    """One tensor-parallel size for the launches, the estimate and the GPU groups: the space's
    `fixed_flags: {tp_size: N}` or `--tp-size N`, written into both (a clash is a UserError)."""
    fixed = space.fixed_flags.get("tp_size")
    if fixed is None:
        if options.tp_size == 1:
            return space, options
        flags = {**space.fixed_flags, "tp_size": options.tp_size}
        return space.model_copy(update={"fixed_flags": flags}), options
    if options.tp_size not in (1, int(fixed)):
        raise UserError(
            f"--tp-size {options.tp_size} and the space's fixed_flags tp_size {fixed} differ: "
            "drop --tp-size, or change the space"
        )
    return space, replace(options, tp_size=int(fixed))


def launch_target(space: SearchSpace, options: StudyOptions) -> LaunchTarget:
    """The program that serves the trials, with the simulator's options from the space's `sim:`."""
    api_key = os.environ.get("SGLANG_API_KEY") or None
    if run_engine(space, options) == "sglang":
        return LaunchTarget(
            module=engine.LAUNCH_MODULE,
            gpus=options.gpus,
            api_key=api_key,
            ready_timeout_s=options.ready_timeout_s or 1800.0,
            python=engine_python(options.engine_python or space.engine.python),
            env=tuple({**space.engine.env, **options.engine_env}.items()),
        )
    sim = dict(space.sim or {})
    if options.time_scale is not None:
        sim["time_scale"] = options.time_scale
    # Behave exactly like the sglang release whose flag names the study uses.
    sim.setdefault("sglang_version", space.engine_version)
    return LaunchTarget(
        module="tuner.sim",
        extra_args=tuple(sim_args(sim)),
        gpus=options.gpus,
        api_key=api_key,
        ready_timeout_s=options.ready_timeout_s or 60.0,
    )


def engine_python(given: str | None) -> str:
    """The interpreter that runs sglang: `given` (`~` and $VARS expanded) or the tuner's own.

    A path that is not an executable file is a UserError naming it."""
    if not given:
        return sys.executable
    path = Path(os.path.expandvars(os.path.expanduser(given)))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UserError(
            f"engine python {given!r}: no executable file there (for sglang on a CPU, "
            "tools/install_real_sglang.sh installs one and prints its path)"
        )
    return str(path)


def sim_args(sim: dict[str, Any]) -> list[str]:
    """The space's `sim:` mapping as simulator options: {time_scale: 50} -> --sim-time-scale 50.

    Every key becomes `--sim-<key>` (true = a bare switch, false / null = omitted), so fault
    injection and any later simulator option need no change here.
    """
    args: list[str] = []
    for key, value in sim.items():
        if value is None or value is False:
            continue
        flag = "--sim-" + str(key).replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args
