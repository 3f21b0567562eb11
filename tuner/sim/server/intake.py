"""From a request body to a queued ``SimRequest`` and back to its streamed chunks.

What the native and the OpenAI routes share. ``make_request`` checks the prompt against the
context (sglang's messages) and draws a natural answer length when EOS is not ignored;
``accept`` applies the fault hooks; ``submit`` queues it with the simulator-only ``sim`` options
of its body (``{"after": hold key, "at": modelled seconds, "hold": bool, "order": int}``, see
``scheduler.holds``); ``progress`` yields the chunks the scheduler released, each with the
modelled time its tokens were produced.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import numpy as np

from tuner.sim.faults import Faults
from tuner.sim.request import SimRequest, answer_len
from tuner.sim.server.state import BadRequest, JSONDict, ServerState

SimOptions = tuple[str | None, float | None, bool, int | None]  # (after, at, hold, order)


def sim_options(body: JSONDict) -> SimOptions:
    """The simulator-only ``sim`` object of a request body: (after, at, hold, order)."""
    sim = body.get("sim")
    if not isinstance(sim, dict):
        return None, None, False, None
    after = sim.get("after")
    at = sim.get("at")
    if at is not None and not isinstance(at, int | float):
        raise BadRequest("sim.at must be a number of modelled seconds")
    order = sim.get("order")
    if order is not None and (not isinstance(order, int) or isinstance(order, bool)):
        raise BadRequest("sim.order must be an integer")
    return (
        str(after) if after is not None else None,
        float(at) if at is not None else None,
        bool(sim.get("hold", False)),
        order,
    )


def sim_stamp(req: SimRequest, t: float) -> JSONDict:
    """The modelled times a chunk carries: when its tokens were produced, when the request
    arrived, and by how much it came after its ``at`` (if it did)."""
    stamp: JSONDict = {"sim_time": t, "sim_arrival": req.arrival}
    if req.late_s > 0:
        stamp["sim_late"] = req.late_s
    return stamp


class RequestIntake:
    """Makes, admits and follows the requests of one server."""

    def __init__(self, state: ServerState, faults: Faults) -> None:
        self.state = state
        self.faults = faults
        self._rng = np.random.default_rng(state.args.sim_seed + 1)
        self._seq = 0

    def make_request(
        self, prompt: list[int], max_new: int, ignore_eos: bool, rid: str | None
    ) -> SimRequest:
        """A request for ``prompt``, or BadRequest with sglang's reason."""
        plan = self.state.loaded_plan
        if not prompt:
            raise BadRequest("The input is empty: send text or input_ids")
        if len(prompt) > plan.max_req_input_len:
            raise BadRequest(
                f"The input ({len(prompt)} tokens) is longer than the model's context length "
                f"({plan.context_len} tokens)."
            )
        max_new = max(0, min(int(max_new), plan.context_len - len(prompt)))
        if max_new < 1:
            raise BadRequest("max_new_tokens must be at least 1")
        # a natural answer length: the model stops at EOS before the limit most times
        natural = None if ignore_eos else float(self._rng.lognormal(5.0, 0.8))
        self._seq += 1
        req = SimRequest(
            rid=rid or uuid.uuid4().hex,
            prompt=prompt,
            max_new_tokens=max_new,
            target_len=answer_len(max_new, natural),
            arrival=self.state.clock.now(),
            seed=self._seq,
            natural_len=natural,
        )
        self.state.loaded_scheduler.prepare(req)
        return req

    def accept(self, req: SimRequest) -> bool:
        """Fault hooks at acceptance; False: answer this request with HTTP 500."""
        self.faults.accept()
        if self.faults.should_fail():
            req.error = "Internal server error (simulated fault)"
            self.state.loaded_scheduler.record_error(req)
            return False
        return True

    def submit(self, req: SimRequest, sim: SimOptions) -> None:
        after, at, hold, order = sim
        req.hold = hold
        self.state.loaded_scheduler.submit(req, after, at, order)

    def abort(self, req: SimRequest) -> None:
        """The client went away: drop the request at the scheduler's next step boundary."""
        self.state.loaded_scheduler.abort(req)

    @staticmethod
    async def progress(req: SimRequest) -> AsyncIterator[tuple[int, int, float, bool]]:
        """Yield (from, to, modelled time, finished) per chunk the scheduler released."""
        sent = 0
        index = 0
        while True:
            await req.event.wait()
            req.event.clear()
            marks = req.marks
            finished = req.finished
            while index < len(marks):
                upto, t = marks[index]
                index += 1
                last = finished and index == len(marks) and upto >= req.generated
                yield sent, upto, t, last
                sent = upto
                if last:
                    return
            if finished and sent >= req.generated:
                yield sent, sent, req.finish_t if req.finish_t is not None else req.arrival, True
                return

    async def wait(self, req: SimRequest) -> None:
        """Until ``req`` has finished."""
        async for _ in self.progress(req):
            pass
