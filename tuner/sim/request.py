"""One request inside the simulator, and the record of it that /sim/requests returns."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.sim.radix import Node


def answer_len(max_new: int, natural: float | None) -> int:
    """The tokens a request generates: all `max_new` with ignore_eos (`natural` None), else the
    drawn natural length, at least 1 and at most `max_new` (the model stops at EOS first)."""
    if natural is None:
        return max_new
    return int(min(max_new, max(1, natural)))


@dataclass
class SimRequest:
    rid: str
    prompt: list[int]
    max_new_tokens: int
    target_len: int  # tokens it will generate (max_new_tokens with ignore_eos, else sampled)
    arrival: float  # modelled seconds
    seed: int = 0
    # Without ignore_eos, the answer length the model would stop at, drawn when the request
    # was made (`answer_len`); None with ignore_eos. It follows `seed` when same-moment arrivals
    # are put in order (Scheduler.order_arrivals).
    natural_len: float | None = None
    keys: list[int] = field(default_factory=list)  # chained block hashes of the prompt
    # tokens the next prefill must cover: the prompt, plus what it generated before a retraction
    prefill_total: int = -1
    resumed: bool = False
    admit_cached: int = 0  # cached tokens found at the latest admission
    # progress, written by the scheduler
    cached: int = 0
    host_loaded: int = 0
    prefilled: int = 0
    generated: int = 0
    released: int = 0
    release_t: float = 0.0
    verify_ct: int = 0
    retractions: int = 0  # times the scheduler put it back in the queue (meta_info num_retractions)
    first_token_t: float | None = None
    finish_t: float | None = None
    finished: bool = False
    aborted: bool = False
    error: str | None = None
    node: Node | None = None
    owned: int = 0  # KV tokens this request holds outside the prefix cache
    # (tokens released so far, modelled time they were produced), one per streamed chunk
    marks: list[tuple[int, float]] = field(default_factory=list)
    hold: bool = False  # at its finish, hold modelled time for the client's next request
    late_s: float = 0.0  # modelled seconds it came after the time its client meant to send it
    # not yet put in order among the requests that came at its held moment: the claimed hold's
    # seq, and the client's draw order for a request that did not continue a conversation
    claim: tuple[int, int | None] | None = None
    accept_z: float = 0.0  # how easy its text is to draft (effects.AcceptanceShape spread)
    accept_pmfs: dict[int | None, Any] = field(default_factory=dict)  # by draft steps
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        if self.prefill_total < 0:
            self.prefill_total = len(self.prompt)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    @property
    def spec_accept_length(self) -> float | None:
        if self.verify_ct == 0:
            return None
        # sglang's definition: completion tokens / verify steps
        return self.generated / self.verify_ct

    @property
    def finish_reason(self) -> dict[str, Any] | None:
        if not self.finished:
            return None
        if self.error:
            return {"type": "abort", "message": self.error}
        if self.generated >= self.max_new_tokens:
            return {"type": "length", "length": self.generated}
        return {"type": "stop", "matched": 151645}


@dataclass(frozen=True)
class RequestRecord:
    """What /sim/requests reports for one request; times in modelled seconds since start."""

    rid: str
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    spec_accept_length: float | None
    error: str | None

    @classmethod
    def of(cls, req: SimRequest) -> RequestRecord:
        return cls(
            rid=req.rid,
            arrival_s=req.arrival,
            first_token_s=req.first_token_t,
            finish_s=req.finish_t,
            prompt_tokens=req.prompt_len,
            completion_tokens=req.generated,
            cached_tokens=req.cached,
            spec_accept_length=req.spec_accept_length,
            error=req.error,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
