"""The shape of a space's workload, as the performance estimate (estimate.py) sees it.

Mean prompt and output lengths, how much of a prompt an earlier request already sent (a shared
system prompt, a conversation's history), the tokens a prefix cache must hold to keep all of it,
and what the clients' opening burst sends: each client's first prompt, the part of it the others
share, and how many distinct shared prefixes it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkloadShape:
    prompt: float  # mean prompt tokens per request
    output: float  # mean output tokens per request
    shareable: float  # mean prompt tokens an earlier request already sent
    working_set: float  # tokens the cache must hold to keep all of them
    # The clients' opening burst: a first request's prompt, the part of it another client's
    # first request also sends, and how many distinct such prefixes the burst holds.
    first_prompt: float = 0.0
    first_shared: float = 0.0
    prefixes: int = 1
    requests: int = 200  # requests the benchmark sends (the burst is `clients` of them)
    # Of `shareable`, what an earlier request sent in full (a conversation's history ends where
    # the previous turn ended; a system prompt shared across conversations does not).
    request_end_shareable: float = 0.0
    # An open-loop trace's arrivals per (modelled) second, its times / speedup; None for a
    # closed loop, whose clients set the pace.
    arrival_rate: float | None = None

    @classmethod
    def of(cls, workload: Mapping[str, Any], clients: int) -> WorkloadShape:
        kind = workload.get("kind", "random")
        if kind == "trace":
            return cls._of_trace(workload, clients)
        out = float(workload.get("output_len") or 256)
        if kind == "multi-turn":
            turns = int(workload.get("turns", 4))
            system = float(workload.get("system_prompt_len", 2048))
            user = float(workload.get("user_len", 256))
            answer = float(workload.get("answer_len", 256))
            prompts = [system + k * (user + answer) + user for k in range(turns)]
            shared = [system + k * (user + answer) for k in range(turns)]
            chats = min(int(workload.get("conversations", 16)), clients)
            return cls(
                prompt=sum(prompts) / turns,
                output=answer,
                shareable=sum(shared) / turns,
                working_set=system + chats * (prompts[-1] + answer - system),
                first_prompt=prompts[0],
                first_shared=system,
                requests=int(workload.get("conversations", 16)) * turns,
                request_end_shareable=sum(shared[1:]) / turns,
            )
        if kind == "shared-prefix":
            system = float(workload.get("system_prompt_len", 2048))
            question = float(workload.get("question_len", 128))
            groups = int(workload.get("groups", 8))
            per_group = int(workload.get("prompts_per_group", 16))
            first_share = (per_group - 1) / per_group
            return cls(
                prompt=system + question,
                output=out,
                shareable=system * first_share,
                working_set=groups * system + clients * (question + out),
                first_prompt=system + question,
                first_shared=system,
                prefixes=min(groups, clients),
                requests=groups * per_group,
            )
        prompt = float(workload.get("input_len", 1024))
        return cls(
            prompt=prompt,
            output=out,
            shareable=0.0,
            working_set=clients * (prompt + out),
            first_prompt=prompt,
            prefixes=clients,
            requests=int(workload.get("requests") or workload.get("num_requests") or 200),
        )

    @classmethod
    def _of_trace(cls, workload: Mapping[str, Any], clients: int) -> WorkloadShape:
        """The shape of the requests a trace replays: its own lengths, the prefix reuse its
        hash ids (length formats) or its conversations' histories (text formats) imply, and
        for an open loop its arrival rate."""
        from tuner.bench.trace import block_reuse, text_tokens  # numpy: only for a trace
        from tuner.bench.workload import WorkloadSpec

        spec = WorkloadSpec.from_dict(workload)
        entries = spec.trace().entries
        default_output = float(spec.output_len or 256)
        prompts: list[float] = []
        shared: list[float] = []
        outputs: list[float] = []
        for entry in entries:
            if not entry.is_text:
                prompts.append(float(entry.input_len))
                outputs.append(float(entry.output_len))
                continue
            history = float(text_tokens(entry.system)) if entry.system else 0.0
            for turn in entry.turns:
                shared.append(history)  # a turn resends the history before it
                history += text_tokens(turn.user)
                prompts.append(history)
                answer = float(turn.output_len or default_output)
                outputs.append(answer)
                history += answer
        requests = len(prompts)
        prompt = sum(prompts) / requests
        total = sum(prompts)
        if shared:  # text: the histories, which end where the previous turn ended
            reused = sum(shared)
            end_shareable = reused / requests
        else:
            reused = block_reuse(entries, spec.block_size) * total
            end_shareable = 0.0  # a shared block run rarely ends where a request ended
        offsets = spec.arrival_offsets()
        rate = None
        if offsets and offsets[-1] > offsets[0]:
            rate = (len(offsets) - 1) / (offsets[-1] - offsets[0])
        return cls(
            prompt=prompt,
            output=sum(outputs) / requests,
            shareable=reused / requests,
            # Every prompt token no earlier request sent: what a cache holds to keep it all.
            working_set=max(total - reused, prompt),
            first_prompt=prompts[0],
            prefixes=clients,
            requests=requests,
            request_end_shareable=end_shareable,
            arrival_rate=rate,
        )
