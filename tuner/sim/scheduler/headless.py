"""The oracle's driver: the scheduler's rounds back to back on a virtual clock.

No waiting and no streaming: each round's modelled time passes at once (``VirtualClock``), and
a run of decode steps ends where an arrival after it was planned cuts it, exactly where the
paced driver cuts it from the same modelled stamps.
"""

from __future__ import annotations

from tuner.sim.scheduler.core import DecodeRound, PrefillRound, Scheduler


class HeadlessDriver:
    """Runs ``scheduler``'s rounds until nothing is left to run."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def run_round(self) -> bool:
        """Run one round; False when nothing can run."""
        s = self.scheduler
        round_ = s.start_round()
        if isinstance(round_, PrefillRound):
            s.finish_prefill(round_)
            s.clock.settle(s.t)
            return True
        if isinstance(round_, DecodeRound):
            if round_.plan is not None:
                s.cut_for_arrivals(round_.plan)
                s.finish_decode(round_.plan)
                s.clock.settle(s.t)
            return True
        due = s.next_arrival()
        if due is not None:
            s.t = due
            s.clock.settle(s.t)
            return True
        return False

    def run_until_idle(self) -> None:
        while self.run_round():
            pass
