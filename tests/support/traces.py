"""Small trace files the tests write (never downloaded): a Mooncake trace with shared prefixes
and bursty arrivals, and a ShareGPT file of multi-turn conversations without times."""

from __future__ import annotations

import json
import random
from pathlib import Path


def mooncake_trace(
    path: Path, requests: int, seed: int = 1, block: int = 512, mean_gap_ms: float = 120.0
) -> Path:
    """Requests on one of 6 system prompts of 3 blocks plus 1-2 blocks of their own, gaps drawn
    around `mean_gap_ms` with one in five about five times longer (bursts)."""
    rng = random.Random(seed)
    groups = [list(range(g * 3, g * 3 + 3)) for g in range(6)]
    own_id = 1000
    t = 0.0
    with path.open("w") as out:
        for _ in range(requests):
            gap = mean_gap_ms * (5.0 if rng.random() < 0.2 else 0.5)
            t += rng.expovariate(1 / gap)
            own = rng.randint(1, 2)
            ids = groups[rng.randrange(len(groups))] + list(range(own_id, own_id + own))
            own_id += own
            item = {
                "timestamp": int(t),
                "input_length": (len(ids) - 1) * block + rng.randint(block // 4, block),
                "output_length": rng.randint(4, 24),
                "hash_ids": ids,
            }
            out.write(json.dumps(item) + "\n")
    return path


def sharegpt_file(path: Path, conversations: int, turns: int = 3) -> Path:
    """Conversations of `turns` human / gpt exchanges, as ShareGPT's JSON array holds them."""
    items = []
    for c in range(conversations):
        messages = []
        for t in range(turns):
            messages.append({"from": "human", "value": f"question {t} of chat {c}: " + "ab " * 40})
            messages.append({"from": "gpt", "value": f"answer {t}: " + "cd " * 30})
        items.append({"id": f"chat-{c}", "conversations": messages})
    path.write_text(json.dumps(items))
    return path
