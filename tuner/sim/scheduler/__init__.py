"""Continuous batching in modelled time: one scheduler round and the two drivers that run it.

- ``core``: the scheduler's state (queue, running requests, prefix cache, KV accounting) and
  its round: a prefill batch or a run of decode steps (``Scheduler.start_round``);
- ``paced``: the served simulator's driver, rounds paced to at most K x wall time, tokens
  streamed as they are produced;
- ``headless``: the oracle's driver, rounds back to back on a virtual clock;
- ``holds``: holds of modelled time for closed-loop clients; ``stats``: the counters.

    >>> from tuner.sim.args import parse_args
    >>> from tuner.sim.clock import VirtualClock
    >>> from tuner.sim.config import resolve
    >>> from tuner.sim.memory import plan_memory
    >>> from tuner.sim.perf import build_perf_model
    >>> config = resolve(parse_args([])); memory = plan_memory(config)
    >>> s = Scheduler(config, memory, build_perf_model(config, memory), VirtualClock())
    >>> HeadlessDriver(s).run_round()  # nothing queued
    False
"""

from __future__ import annotations

from tuner.sim.scheduler.core import DecodePlan, DecodeRound, PrefillRound, Scheduler
from tuner.sim.scheduler.headless import HeadlessDriver
from tuner.sim.scheduler.holds import Hold, Holds
from tuner.sim.scheduler.paced import PacedDriver
from tuner.sim.scheduler.stats import SchedulerStats

__all__ = [
    "DecodePlan",
    "DecodeRound",
    "HeadlessDriver",
    "Hold",
    "Holds",
    "PacedDriver",
    "PrefillRound",
    "Scheduler",
    "SchedulerStats",
]
