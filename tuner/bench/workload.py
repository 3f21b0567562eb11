"""Seeded, reproducible request streams: random, shared-prefix, multi-turn, JSONL and traces.

A workload is a list of conversations. Single-request workloads are conversations of one turn;
a multi-turn conversation resends its whole history every turn, which is what makes prefix
caching and HiCache matter. Prompts are token ids wherever possible, so that input and output
lengths are exact without a tokenizer; JSONL files may also carry prompt text. A trace
(trace.py) adds arrival times: `arrival_offsets` says when each conversation starts.

Example:
    >>> spec = WorkloadSpec.from_dict({"kind": "multi-turn", "conversations": 2, "turns": 3})
    >>> spec.num_requests
    6
    >>> len(spec.make_conversations())
    2
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tuner.bench.trace import (
    FORMATS,
    MODES,
    MOONCAKE_BLOCK,
    PromptMaker,
    Trace,
    block_reuse,
    read_window,
)
from tuner.errors import UserError

# Token ids drawn from this range are valid in every vocabulary of 32k tokens or more, and stay
# clear of the low ids where tokenizers keep their special tokens. A smaller vocabulary (the
# model's config.json, when the bench can read it) narrows the range to fit: an id past the
# vocabulary makes sglang's embedding raise IndexError, which kills the whole server.
TOKEN_ID_LOW = 1000
TOKEN_ID_HIGH = 30000

# Warm-up requests come from the same kind of workload under another seed, so that they do not
# put the measured prompts into the server's prefix cache.
_WARMUP_SEED_SALT = 0x5EED

Prompt = list[int] | str

KINDS = ("random", "shared-prefix", "multi-turn", "jsonl", "trace")


@dataclass(frozen=True)
class Turn:
    """One user turn: what is appended to the history, and how many tokens the answer has."""

    user: Prompt
    output_len: int
    # Stands in for the answer in the next turn's history when the server does not hand back
    # the ids it generated (OpenAI endpoints); same length as the answer.
    synthetic_answer: Prompt = field(default_factory=list)


@dataclass(frozen=True)
class Conversation:
    """A system prompt (possibly empty) and turns that must be sent one after the other."""

    index: int
    system: Prompt
    turns: tuple[Turn, ...]


def longest_request(conversations: Sequence[Conversation]) -> int | None:
    """Prompt plus answer tokens of the longest request (a turn resends the whole history
    before it, each earlier answer at its longer of generated and stand-in length); None for
    text prompts (no exact count)."""
    longest = 0
    for conversation in conversations:
        prompts = [conversation.system, *(t.user for t in conversation.turns)]
        if any(isinstance(p, str) for p in prompts):
            return None
        history = len(conversation.system)
        for turn in conversation.turns:
            history += len(turn.user)
            longest = max(longest, history + turn.output_len)
            history += max(turn.output_len, len(turn.synthetic_answer))
    return longest


# Key names equal the `tuner bench` option names with `-` written as `_`; `-` is accepted too.
_COMMON_KEYS = ("kind", "seed")
_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "random": ("requests", "input_len", "output_len", "range_ratio"),
    "shared-prefix": (
        "groups",
        "prompts_per_group",
        "system_prompt_len",
        "question_len",
        "output_len",
    ),
    "multi-turn": ("conversations", "turns", "system_prompt_len", "user_len", "answer_len"),
    "jsonl": ("file", "requests", "output_len"),
    "trace": (
        "file",
        "format",
        "mode",
        "speedup",
        "concurrency",
        "start",
        "duration",
        "max_requests",
        "block_size",
        "output_len",
    ),
}
_ALIASES = {"num_requests": "requests", "workload": "kind", "path": "file"}


@dataclass(frozen=True)
class WorkloadSpec:
    """What to send: the kind of workload and its sizes. All lengths are in tokens.

    Keys (for `from_dict`, the search-space `workload:` mapping and the `tuner bench` options,
    where `--prompts-per-group` is the key `prompts_per_group`; `-` and `_` are both accepted):

    - `kind`: `random` | `shared-prefix` | `multi-turn` | `jsonl` (CLI `--workload`)
    - `seed`: int, default 0; the same seed gives the same prompts
    - random: `requests` (200), `input_len` (1024), `output_len` (256), `range_ratio` (1.0):
      each length is drawn uniformly from [ceil(len * range_ratio), len]; 1.0 keeps it fixed
    - shared-prefix: `groups` (8), `prompts_per_group` (16), `system_prompt_len` (2048),
      `question_len` (128), `output_len` (256); requests = groups x prompts_per_group, sent in a
      seeded shuffled order
    - multi-turn: `conversations` (16), `turns` (4), `system_prompt_len` (2048; one system
      prompt shared by all conversations, as one deployed assistant has), `user_len` (256),
      `answer_len` (256); requests = conversations x turns
    - jsonl: `file` (required), `requests` (default: every line), `output_len` (used for lines
      that give none). Each line is an object with `prompt` (text) or `input_ids` (list of
      ints), and optionally `output_len`.
    - trace: `file` (required; `path` is accepted too), `format` (`auto` | `mooncake` | `azure`
      | `burstgpt` | `sharegpt` | `openai-chat`), `mode` (`open-loop`: arrivals at the trace's
      times / `speedup`; `closed-loop`: its requests in order by `concurrency` clients; default
      open-loop when the trace has times), `speedup` (1.0), `concurrency` (closed loop; default
      the bench's), `start` and `duration` (a window, trace seconds), `max_requests`,
      `block_size` (512: tokens per Mooncake hash id), `output_len` (answers a text trace does
      not give; 256). See docs/traces.md.

    `num_requests` (also accepted as a key, meaning `requests`) is derived for every kind.
    """

    kind: str = "random"
    seed: int = 0
    requests: int | None = None
    input_len: int = 1024
    output_len: int | None = None
    range_ratio: float = 1.0
    groups: int = 8
    prompts_per_group: int = 16
    system_prompt_len: int = 2048
    question_len: int = 128
    conversations: int = 16
    turns: int = 4
    user_len: int = 256
    answer_len: int = 256
    file: str | None = None
    format: str = "auto"
    mode: str | None = None
    speedup: float = 1.0
    concurrency: int | None = None
    start: float | None = None
    duration: float | None = None
    max_requests: int | None = None
    block_size: int = MOONCAKE_BLOCK
    # Not a workload key: the model's vocabulary size, set by the bench from the model's
    # config.json (`with_vocab`); None keeps ids in [TOKEN_ID_LOW, TOKEN_ID_HIGH).
    vocab_size: int | None = None

    _DEFAULT_REQUESTS: ClassVar[int] = 200
    _DEFAULT_OUTPUT_LEN: ClassVar[int] = 256

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkloadSpec:
        """Validate a mapping (YAML `workload:` block or CLI options) into a spec.

        Raises UserError naming the bad key or value and what is allowed.
        """
        if not isinstance(data, Mapping):
            raise UserError(f"workload must be a mapping of keys to values, got {data!r}")
        values: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = str(raw_key).replace("-", "_")
            key = _ALIASES.get(key, key)
            if key in values:
                raise UserError(f"workload key {raw_key!r} is given twice (under another spelling)")
            values[key] = value
        kind = values.get("kind", "random")
        if kind not in KINDS:
            raise UserError(f"workload kind {kind!r} is not known; allowed: {', '.join(KINDS)}")
        allowed = _COMMON_KEYS + _KIND_KEYS[kind]
        for key in values:
            if key not in allowed:
                raise UserError(
                    f"workload key {key!r} does not apply to kind {kind!r}; "
                    f"allowed: {', '.join(allowed)}"
                )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The keys that apply to this kind, with their values (round-trips through from_dict)."""
        keys = _COMMON_KEYS + _KIND_KEYS[self.kind]
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(
                f"workload kind {self.kind!r} is not known; allowed: {', '.join(KINDS)}"
            )

        def positive_int(key: str, minimum: int = 1) -> None:
            value = getattr(self, key)
            if value is None:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise UserError(
                    f"workload key {key!r} must be an integer >= {minimum}, got {value!r}"
                )

        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserError(f"workload key 'seed' must be an integer, got {self.seed!r}")
        for key in ("requests", "input_len", "output_len", "groups", "prompts_per_group"):
            positive_int(key)
        for key in ("conversations", "turns", "user_len", "answer_len", "question_len"):
            positive_int(key)
        # A shared-prefix or multi-turn workload without a system prompt is legitimate.
        positive_int("system_prompt_len", minimum=0)
        ratio = self.range_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise UserError(f"workload key 'range_ratio' must be a number in [0, 1], got {ratio!r}")
        if self.kind == "trace":
            self._check_trace_keys()
        if self.kind == "jsonl":
            if not self.file:
                raise UserError("workload kind 'jsonl' needs the key 'file' (a JSONL file path)")
            if not Path(self.file).is_file():
                raise UserError(f"workload file {self.file!r} does not exist or is not a file")

    def _check_trace_keys(self) -> None:
        if not self.file:
            raise UserError("workload kind 'trace' needs the key 'file' (a trace file path)")
        if not Path(self.file).is_file():
            raise UserError(f"trace file {self.file!r} does not exist or is not a file")
        if self.format not in FORMATS:
            raise UserError(
                f"workload key 'format' is {self.format!r}; allowed: {', '.join(FORMATS)}"
            )
        if self.mode is not None and self.mode not in MODES:
            raise UserError(f"workload key 'mode' is {self.mode!r}; allowed: {', '.join(MODES)}")
        for key, minimum in (("concurrency", 1), ("max_requests", 1), ("block_size", 1)):
            value = getattr(self, key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise UserError(
                    f"workload key {key!r} must be an integer >= {minimum}, got {value!r}"
                )
        for key, positive in (("speedup", True), ("start", False), ("duration", True)):
            value = getattr(self, key)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (value > 0 if positive else value >= 0)
                or math.isinf(value)
            ):
                bound = "> 0" if positive else ">= 0"
                raise UserError(f"workload key {key!r} must be a number {bound}, got {value!r}")
        if self.mode == "open-loop" and self.concurrency is not None:
            raise UserError(
                "workload key 'concurrency' applies to mode 'closed-loop'; an open loop sends "
                "at the trace's times"
            )
        if self.mode == "closed-loop" and self.speedup != 1.0:
            raise UserError(
                "workload key 'speedup' applies to mode 'open-loop'; a closed loop sends as "
                "fast as its clients' answers come"
            )
        # Read now (once: the file is cached), so that a bad line stops a space at load time.
        trace = self.trace()
        if self.replay_mode != "open-loop":
            return
        if not trace.timed:
            raise UserError(
                f"{trace.path}: a {trace.format} file has no arrival times; use mode: closed-loop"
            )
        multi = next((e for e in trace.entries if len(e.turns) > 1), None)
        if multi is not None:
            raise UserError(
                f"{trace.path}:{multi.line}: a conversation of {len(multi.turns)} turns; an "
                "open loop replays single requests (use mode: closed-loop)"
            )

    def trace(self) -> Trace:
        """The window of the trace file this workload replays (kind `trace` only)."""
        path = Path(self.file or "")
        return read_window(path, self.format, self.start, self.duration, self.max_requests)

    def trace_reuse(self) -> float | None:
        """The share of prompt tokens the trace's hash ids say a prefix cache can reuse, for a
        trace that has them (Mooncake); None otherwise."""
        if self.kind != "trace":
            return None
        entries = self.trace().entries
        if not any(e.hash_ids for e in entries):
            return None
        return block_reuse(entries, self.block_size)

    @property
    def replay_mode(self) -> str | None:
        """`open-loop` or `closed-loop` for a trace, None for the other kinds."""
        if self.kind != "trace":
            return None
        if self.mode is not None:
            return self.mode
        return "open-loop" if self.trace().timed else "closed-loop"

    def arrival_offsets(self) -> list[float] | None:
        """Modelled seconds from the first request to each conversation's first turn, for a
        trace replayed in an open loop (its times / speedup); None otherwise."""
        if self.replay_mode != "open-loop":
            return None
        offsets = self.trace().offsets() or []
        return [offset / self.speedup for offset in offsets]

    def with_vocab(self, vocab_size: int | None) -> WorkloadSpec:
        """This workload with token ids drawn inside a vocabulary of `vocab_size` tokens.

        Vocabularies of TOKEN_ID_HIGH tokens or more give the same prompts as before.
        """
        if vocab_size is not None and (isinstance(vocab_size, bool) or vocab_size < 2):
            raise UserError(f"vocabulary size must be an integer >= 2, got {vocab_size!r}")
        return dataclasses.replace(self, vocab_size=vocab_size)

    def token_id_range(self) -> tuple[int, int]:
        """[low, high) of the token ids of generated prompts."""
        if self.vocab_size is None or self.vocab_size >= TOKEN_ID_HIGH:
            return TOKEN_ID_LOW, TOKEN_ID_HIGH
        # Keep the lowest eighth free: tokenizers put their special tokens first.
        return min(TOKEN_ID_LOW, self.vocab_size // 8), self.vocab_size

    @property
    def num_requests(self) -> int:
        """How many measured requests this workload sends."""
        if self.kind == "random":
            return self.requests or self._DEFAULT_REQUESTS
        if self.kind == "shared-prefix":
            return self.groups * self.prompts_per_group
        if self.kind == "multi-turn":
            return self.conversations * self.turns
        if self.kind == "trace":
            return sum(max(1, len(e.turns)) for e in self.trace().entries)
        return sum(len(c.turns) for c in self.make_conversations())

    def make_conversations(self) -> list[Conversation]:
        """The measured workload, in the order its first turns are sent."""
        return self._build(self.seed)

    def make_warmup(self, count: int) -> list[Conversation]:
        """`count` single-turn requests shaped like the workload's first turns.

        They come from another seed so that they do not warm the cache for the measured prompts;
        a JSONL file has no other seed, so its first lines are used.
        """
        if count <= 0:
            return []
        seed = self.seed if self.kind == "jsonl" else self.seed ^ _WARMUP_SEED_SALT
        # A trace may be long: make only the prompts used.
        shaped = self._trace(seed, count) if self.kind == "trace" else self._build(seed)
        firsts = [Conversation(i, c.system, c.turns[:1]) for i, c in enumerate(shaped)]
        # Small workloads may have fewer conversations than warm-up requests asked for.
        return [
            Conversation(i, firsts[i % len(firsts)].system, firsts[i % len(firsts)].turns)
            for i in range(count)
        ]

    def _build(self, seed: int) -> list[Conversation]:
        rng = _TokenRng(seed, *self.token_id_range())
        if self.kind == "random":
            return self._random(rng)
        if self.kind == "shared-prefix":
            return self._shared_prefix(rng)
        if self.kind == "multi-turn":
            return self._multi_turn(rng)
        if self.kind == "trace":
            return self._trace(seed)
        return read_jsonl(Path(self.file or ""), self.output_len, self.requests)

    def _random(self, rng: _TokenRng) -> list[Conversation]:
        n = self.num_requests
        output_len = self.output_len or self._DEFAULT_OUTPUT_LEN
        input_lens = _draw_lengths(rng, self.input_len, self.range_ratio, n)
        output_lens = _draw_lengths(rng, output_len, self.range_ratio, n)
        return [
            Conversation(i, [], (Turn(_token_ids(rng, int(li)), int(lo)),))
            for i, (li, lo) in enumerate(zip(input_lens, output_lens, strict=True))
        ]

    def _shared_prefix(self, rng: _TokenRng) -> list[Conversation]:
        output_len = self.output_len or self._DEFAULT_OUTPUT_LEN
        prefixes = [_token_ids(rng, self.system_prompt_len) for _ in range(self.groups)]
        items = [
            (prefixes[g], _token_ids(rng, self.question_len))
            for g in range(self.groups)
            for _ in range(self.prompts_per_group)
        ]
        # Interleave the groups as real traffic does, rather than sending each group back to back.
        order = rng.permutation(len(items))
        return [
            Conversation(i, items[j][0], (Turn(items[j][1], output_len),))
            for i, j in enumerate(order.tolist())
        ]

    def _multi_turn(self, rng: _TokenRng) -> list[Conversation]:
        system = _token_ids(rng, self.system_prompt_len)
        return [
            Conversation(
                c,
                system,
                tuple(
                    Turn(
                        _token_ids(rng, self.user_len),
                        self.answer_len,
                        _token_ids(rng, self.answer_len),
                    )
                    for _ in range(self.turns)
                ),
            )
            for c in range(self.conversations)
        ]

    def _trace(self, seed: int, limit: int | None = None) -> list[Conversation]:
        maker = PromptMaker(seed, *self.token_id_range(), self.block_size)
        default_output = self.output_len or self._DEFAULT_OUTPUT_LEN
        conversations = []
        for index, entry in enumerate(self.trace().entries[:limit]):
            if entry.is_text:
                turns = tuple(
                    Turn(t.user, t.output_len or default_output, t.answer) for t in entry.turns
                )
                conversations.append(Conversation(index, entry.system, turns))
            else:
                turn = Turn(maker.prompt(entry), entry.output_len)
                conversations.append(Conversation(index, [], (turn,)))
        return conversations


class _TokenRng:
    """A seeded generator that knows the token id range of its workload."""

    def __init__(self, seed: int, low: int, high: int) -> None:
        self.generator = np.random.default_rng(seed)
        self.low = low
        self.high = high

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        return self.generator.integers(low, high, size=size)

    def permutation(self, n: int) -> np.ndarray:
        return self.generator.permutation(n)


def _draw_lengths(rng: _TokenRng, length: int, ratio: float, n: int) -> np.ndarray:
    low = max(1, math.ceil(length * ratio))
    return rng.integers(low, length + 1, size=n)


def _token_ids(rng: _TokenRng, n: int) -> list[int]:
    return rng.integers(rng.low, rng.high, size=n).tolist()


def read_jsonl(path: Path, default_output_len: int | None, limit: int | None) -> list[Conversation]:
    """Read a user's request file; every problem names the file, the line and what is wrong."""
    conversations: list[Conversation] = []
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read the workload file: {exc.strerror}") from None
    with handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if limit is not None and len(conversations) >= limit:
                break
            turn = _parse_jsonl_line(path, lineno, line, default_output_len)
            conversations.append(Conversation(len(conversations), [], (turn,)))
    if not conversations:
        raise UserError(f"{path}: the workload file has no requests")
    if limit is not None and len(conversations) < limit:
        raise UserError(
            f"{path}: asks for {limit} requests but the file has only {len(conversations)}"
        )
    return conversations


def _parse_jsonl_line(path: Path, lineno: int, line: str, default_output_len: int | None) -> Turn:
    where = f"{path}:{lineno}"
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(item, dict):
        raise UserError(f"{where}: each line must be a JSON object, got {type(item).__name__}")
    unknown = set(item) - {"prompt", "input_ids", "output_len"}
    if unknown:
        raise UserError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
            "allowed: prompt, input_ids, output_len"
        )
    has_prompt, has_ids = "prompt" in item, "input_ids" in item
    if has_prompt == has_ids:
        raise UserError(f"{where}: give exactly one of 'prompt' (text) or 'input_ids'")
    user: Prompt
    if has_prompt:
        user = item["prompt"]
        if not isinstance(user, str) or not user:
            raise UserError(f"{where}: 'prompt' must be a non-empty string")
    else:
        ids = item["input_ids"]
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
        ):
            raise UserError(f"{where}: 'input_ids' must be a non-empty list of integers >= 0")
        user = ids
    output_len = item.get("output_len", default_output_len)
    if output_len is None:
        raise UserError(
            f"{where}: no 'output_len' on this line and no default output_len for the workload"
        )
    if isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1:
        raise UserError(f"{where}: 'output_len' must be an integer >= 1, got {output_len!r}")
    return Turn(user, output_len)
