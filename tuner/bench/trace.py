"""A trace file -> the requests it holds, with their arrival times.

Five public formats are read (docs/traces.md names each schema's source):

- `mooncake` JSONL: `timestamp` (ms since the first request), `input_length`, `output_length`,
  `hash_ids` (one id per `block_size`-token block; requests with equal leading ids share that
  prefix);
- `azure` CSV (Azure LLM inference traces): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`;
- `burstgpt` CSV: `Timestamp` (s), `Request tokens`, `Response tokens` (and `Model`,
  `Total tokens`, `Log Type`, not used); rows with 0 response tokens (failed requests) are skipped;
- `sharegpt` JSON (or JSONL): conversations of `{"from": "human"|"gpt"|"system", "value": text}`;
- `openai-chat` JSONL: `{"messages": [{"role", "content"}, ...]}` (or an OpenAI batch line with
  the messages under `body`), optionally `max_tokens` and `timestamp` (ms).

The length-only formats become token-id prompts made here: the block of hash id `h` is the same
`block_size` seeded tokens in every request that names it, so requests sharing leading hash ids
share the same real prefix, and tokens the trace does not tie to a block are the request's own.
Text formats are sent as text: each human / user message is a turn, the answer that follows it
in the file stands in for the server's in the next turn's history.

Example:
    >>> trace = read_trace(Path("trace.jsonl"), "auto")  # doctest: +SKIP
    >>> trace.format, len(trace.entries), trace.offsets()[-1]  # doctest: +SKIP
    ('mooncake', 300, 59.8)
"""

from __future__ import annotations

import csv
import functools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import UserError

FORMATS = ("auto", "mooncake", "azure", "burstgpt", "sharegpt", "openai-chat")
MODES = ("open-loop", "closed-loop")
MOONCAKE_BLOCK = 512

# Text formats carry no token counts: about four characters a token in English text, the rule of
# thumb OpenAI's tokenizer guide gives. Used for the answers' lengths (max_new_tokens).
_CHARS_PER_TOKEN = 4

# Stream ids of the seeded generators, so that block tokens and a request's own tokens never
# come from the same stream.
_BLOCK_STREAM = 1
_OWN_STREAM = 2


@dataclass(frozen=True)
class TraceTurn:
    """One message a text trace sends, and the answer that follows it in the file ("" when
    none does; `output_len` 0 then: the workload's output_len applies)."""

    user: str
    output_len: int
    answer: str = ""


@dataclass(frozen=True)
class TraceEntry:
    """One request (length formats) or one conversation (text formats) of a trace.

    `arrival_s`: seconds on the file's own clock (None: the format has no times; see
    `Trace.offsets` for times since the first request);
    `line`: where it is in the file; `number`: its position among the file's entries, which
    seeds its own tokens so that a window of the trace sends the prompts the whole trace would.
    """

    line: int
    number: int
    arrival_s: float | None
    input_len: int = 0
    output_len: int = 0
    hash_ids: tuple[int, ...] = ()
    system: str = ""
    turns: tuple[TraceTurn, ...] = ()

    @property
    def is_text(self) -> bool:
        return bool(self.turns)


@dataclass(frozen=True)
class Trace:
    """The entries of a trace file, in arrival order (file order for formats without times)."""

    path: Path
    format: str
    entries: tuple[TraceEntry, ...]

    @property
    def timed(self) -> bool:
        return all(e.arrival_s is not None for e in self.entries)

    def offsets(self) -> list[float] | None:
        """Seconds from the first request to each (None for a file without times)."""
        if not self.entries or not self.timed:
            return None
        first = self.entries[0].arrival_s or 0.0
        return [(e.arrival_s or 0.0) - first for e in self.entries]

    def window(
        self, start_s: float | None, duration_s: float | None, max_requests: int | None
    ) -> Trace:
        """The entries arriving in [start, start + duration) (seconds from the trace's first
        request), at most `max_requests` of them."""
        entries = self.entries
        if start_s is not None or duration_s is not None:
            if not self.timed:
                raise UserError(
                    f"{self.path}: a {self.format} file has no arrival times; 'start' and "
                    "'duration' need them (use max_requests to take the first requests)"
                )
            low = (entries[0].arrival_s or 0.0) + (start_s or 0.0)
            high = math.inf if duration_s is None else low + duration_s
            entries = tuple(e for e in entries if low <= (e.arrival_s or 0.0) < high)
        if max_requests is not None:
            entries = entries[:max_requests]
        if not entries:
            raise UserError(f"{self.path}: no request of the trace falls in the window asked for")
        return Trace(self.path, self.format, entries)


def read_trace(path: Path, format: str = "auto") -> Trace:
    """Read and check a trace file; every problem names the file, the line and the field."""
    return _read_cached(*_file_key(path), format)


def read_window(
    path: Path,
    format: str,
    start_s: float | None,
    duration_s: float | None,
    max_requests: int | None,
) -> Trace:
    """`read_trace(path, format).window(...)`, kept for the next call with the same window (a
    workload asks for it several times)."""
    return _window_cached(*_file_key(path), format, start_s, duration_s, max_requests)


def _file_key(path: Path) -> tuple[Path, int, int]:
    # Size and mtime in the key: a trace rewritten in place is read again.
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the trace file: {exc.strerror}") from None
    return path.resolve(), stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _window_cached(
    path: Path,
    size: int,
    mtime_ns: int,
    format: str,
    start_s: float | None,
    duration_s: float | None,
    max_requests: int | None,
) -> Trace:
    return _read_cached(path, size, mtime_ns, format).window(start_s, duration_s, max_requests)


@functools.lru_cache(maxsize=4)
def _read_cached(path: Path, _size: int, _mtime_ns: int, format: str) -> Trace:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UserError(f"{path}: cannot read the trace file: {reason}") from None
    if format not in FORMATS:
        raise UserError(f"trace format {format!r} is not known; allowed: {', '.join(FORMATS)}")
    name = detect_format(path, text) if format == "auto" else format
    readers = {
        "mooncake": _read_mooncake,
        "azure": _read_azure,
        "burstgpt": _read_burstgpt,
        "sharegpt": _read_sharegpt,
        "openai-chat": _read_openai_chat,
    }
    entries = readers[name](path, text)
    if not entries:
        raise UserError(f"{path}: the trace file has no requests")
    if all(e.arrival_s is not None for e in entries):
        # Stable: requests of the same moment keep the file's order.
        entries = sorted(entries, key=lambda e: e.arrival_s or 0.0)
    return Trace(path, name, tuple(entries))


def detect_format(path: Path, text: str) -> str:
    """The format a file is in, from its header (CSV) or its first record (JSON)."""
    head = text.lstrip()
    first_line = head.split("\n", 1)[0]
    if head.startswith("["):
        return "sharegpt"
    if head.startswith("{"):
        try:
            item = json.loads(first_line)
        except json.JSONDecodeError:
            item = {}
        if isinstance(item, dict):
            if "hash_ids" in item or "input_length" in item:
                return "mooncake"
            if "conversations" in item:
                return "sharegpt"
            if "messages" in item or "body" in item:
                return "openai-chat"
    columns = {c.strip() for c in first_line.split(",")}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= columns:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= columns:
        return "burstgpt"
    raise UserError(
        f"{path}:1: cannot tell the trace's format from its first line; name it with 'format' "
        f"({', '.join(FORMATS[1:])})"
    )


def _int_field(where: str, item: dict[str, Any], key: str, minimum: int) -> int:
    value = item.get(key)
    if value is None:
        raise UserError(f"{where}: field '{key}' is missing")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{where}: field '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _number_field(where: str, item: dict[str, Any], key: str) -> float:
    value = item.get(key)
    if value is None:
        raise UserError(f"{where}: field '{key}' is missing")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise UserError(f"{where}: field '{key}' must be a number >= 0, got {value!r}")
    return float(value)


def _json_lines(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(item, dict):
            raise UserError(
                f"{path}:{lineno}: each line must be a JSON object, got {type(item).__name__}"
            )
        yield lineno, item


def _read_mooncake(path: Path, text: str) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for lineno, item in _json_lines(path, text):
        where = f"{path}:{lineno}"
        ids = item.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
        ):
            raise UserError(f"{where}: field 'hash_ids' must be a list of integers >= 0")
        entries.append(
            TraceEntry(
                line=lineno,
                number=len(entries),
                arrival_s=_number_field(where, item, "timestamp") / 1000.0,
                input_len=_int_field(where, item, "input_length", 1),
                output_len=_int_field(where, item, "output_length", 1),
                hash_ids=tuple(ids),
            )
        )
    return entries


def _csv_rows(path: Path, text: str, needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """The `needed` columns of each row, by name, with the row's line number."""
    reader = csv.reader(text.splitlines())
    columns = [c.strip() for c in next(reader, [])]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise UserError(f"{path}:1: the header has no column {', '.join(map(repr, missing))}")
    indices = [(name, columns.index(name)) for name in needed]
    for row in reader:
        if not row:
            continue
        # The reader's line number is that of the row's last line (a quoted field may span lines).
        yield reader.line_num, {k: row[i].strip() if i < len(row) else "" for k, i in indices}


def _csv_int(where: str, row: dict[str, str], key: str) -> int:
    raw = row.get(key, "")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0 or not value.is_integer():
        raise UserError(f"{where}: field '{key}' must be an integer >= 0, got {raw!r}")
    return int(value)


def _read_azure(path: Path, text: str) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    first: datetime | None = None
    for lineno, row in _csv_rows(path, text, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        where = f"{path}:{lineno}"
        raw = row["TIMESTAMP"]
        try:
            # The published traces write 7 fractional digits; datetime takes at most 6.
            stamp = datetime.fromisoformat(_trim_fraction(raw))
        except ValueError:
            raise UserError(
                f"{where}: field 'TIMESTAMP' must be a date and time "
                f"(2023-11-16 18:15:46.680590), got {raw!r}"
            ) from None
        first = first or stamp
        entries.append(
            TraceEntry(
                line=lineno,
                number=len(entries),
                arrival_s=(stamp - first).total_seconds(),
                input_len=max(1, _csv_int(where, row, "ContextTokens")),
                output_len=max(1, _csv_int(where, row, "GeneratedTokens")),
            )
        )
    return entries


def _trim_fraction(stamp: str) -> str:
    head, dot, fraction = stamp.partition(".")
    return f"{head}.{fraction[:6]}" if dot and len(fraction) > 6 and fraction.isdigit() else stamp


def _read_burstgpt(path: Path, text: str) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for lineno, row in _csv_rows(path, text, ("Timestamp", "Request tokens", "Response tokens")):
        where = f"{path}:{lineno}"
        raw = row["Timestamp"]
        try:
            arrival = float(raw)
        except ValueError:
            arrival = math.nan
        if not arrival >= 0:
            raise UserError(f"{where}: field 'Timestamp' must be seconds >= 0, got {raw!r}")
        request_tokens = _csv_int(where, row, "Request tokens")
        response_tokens = _csv_int(where, row, "Response tokens")
        if response_tokens == 0:
            continue  # a failed request in BurstGPT's log: nothing was generated
        entries.append(
            TraceEntry(
                line=lineno,
                number=len(entries),
                arrival_s=arrival,
                input_len=max(1, request_tokens),
                output_len=response_tokens,
            )
        )
    return entries


def text_tokens(text: str) -> int:
    """An estimate of a text's tokens without a tokenizer (at least 1)."""
    return max(1, round(len(text) / _CHARS_PER_TOKEN))


def _conversation_turns(
    where: str, messages: list[tuple[str, str]], field_name: str, last_output: int | None
) -> tuple[str, tuple[TraceTurn, ...]]:
    """(system text, turns) from (role, text) pairs with roles system / user / assistant."""
    system = "\n".join(t for r, t in messages if r == "system")
    turns: list[TraceTurn] = []
    pending: str | None = None
    for role, content in messages:
        if role == "user":
            if pending is not None:
                turns.append(TraceTurn(pending, 0))
            pending = content
        elif role == "assistant" and pending is not None:
            turns.append(TraceTurn(pending, text_tokens(content), content))
            pending = None
    if pending is not None:
        # No answer in the file: 0 lets the workload's output_len decide.
        turns.append(TraceTurn(pending, last_output or 0))
    elif turns and last_output is not None:
        last = turns[-1]
        turns[-1] = TraceTurn(last.user, last_output, last.answer)
    if not turns:
        raise UserError(f"{where}: field '{field_name}' has no user message")
    return system, tuple(turns)


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant"}
_SHAREGPT_ROLES |= {"assistant": "assistant", "system": "system", "bing": "assistant"}


def _read_sharegpt(path: Path, text: str) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for lineno, item in _sharegpt_items(path, text):
        where = f"{path}:{lineno}"
        conversation = item.get("conversations")
        if not isinstance(conversation, list):
            raise UserError(f"{where}: field 'conversations' must be a list of messages")
        messages = []
        for message in conversation:
            role = message.get("from") if isinstance(message, dict) else None
            value = message.get("value") if isinstance(message, dict) else None
            if role not in _SHAREGPT_ROLES or not isinstance(value, str):
                raise UserError(
                    f"{where}: field 'conversations' must hold objects with 'from' "
                    f"({', '.join(_SHAREGPT_ROLES)}) and 'value' (text), got {message!r:.80}"
                )
            messages.append((_SHAREGPT_ROLES[role], value))
        if not any(r == "user" and t for r, t in messages):
            continue  # ShareGPT dumps hold conversations with no human turn: nothing to send
        system, turns = _conversation_turns(where, messages, "conversations", None)
        entries.append(
            TraceEntry(line=lineno, number=len(entries), arrival_s=None, system=system, turns=turns)
        )
    return entries


def _sharegpt_items(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The conversations of a JSON array (each with the line it starts on), or of JSONL."""
    if not text.lstrip().startswith("["):
        yield from _json_lines(path, text)
        return
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    while True:
        position = _skip_space(text, position)
        if position < len(text) and text[position] == "]":
            return
        line = text.count("\n", 0, position) + 1
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(item, dict):
            raise UserError(f"{path}:{line}: each conversation must be a JSON object")
        yield line, item
        position = _skip_space(text, position)
        if position < len(text) and text[position] == ",":
            position += 1
        elif position >= len(text) or text[position] != "]":
            line = text.count("\n", 0, position) + 1
            raise UserError(f"{path}:{line}: not valid JSON (expected ',' or ']')")


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _read_openai_chat(path: Path, text: str) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for lineno, item in _json_lines(path, text):
        where = f"{path}:{lineno}"
        nested = item.get("body")
        body: dict[str, Any] = nested if isinstance(nested, dict) else item
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise UserError(f"{where}: field 'messages' must be a non-empty list")
        messages = []
        for message in raw_messages:
            role = message.get("role") if isinstance(message, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant") or not isinstance(content, str):
                raise UserError(
                    f"{where}: field 'messages' must hold objects with 'role' (system, user, "
                    f"assistant) and 'content' (text), got {message!r:.80}"
                )
            messages.append((role, content))
        limit = None
        for key in ("max_completion_tokens", "max_tokens"):
            if key in body:
                limit = _int_field(where, body, key, 1)
                break
        arrival = _number_field(where, item, "timestamp") / 1000.0 if "timestamp" in item else None
        system, turns = _conversation_turns(where, messages, "messages", limit)
        entries.append(
            TraceEntry(
                line=lineno, number=len(entries), arrival_s=arrival, system=system, turns=turns
            )
        )
    if any(e.arrival_s is not None for e in entries) and not all(
        e.arrival_s is not None for e in entries
    ):
        missing = next(e for e in entries if e.arrival_s is None)
        raise UserError(
            f"{path}:{missing.line}: field 'timestamp' is missing (other lines have one: "
            "give it on every line or on none)"
        )
    return entries


class PromptMaker:
    """Token-id prompts for length-only trace entries, seeded and shared by hash id."""

    def __init__(self, seed: int, low: int, high: int, block_size: int) -> None:
        self._seed = seed & 0xFFFF_FFFF_FFFF_FFFF  # numpy seeds are integers >= 0
        self._low = low
        self._high = high
        self._block_size = block_size
        self._blocks: dict[int, list[int]] = {}

    def prompt(self, entry: TraceEntry) -> list[int]:
        """`entry.input_len` tokens: its hash ids' blocks, then tokens of its own."""
        tokens: list[int] = []
        for block_id in entry.hash_ids:
            if len(tokens) >= entry.input_len:
                break
            tokens.extend(self._block(block_id))
        del tokens[entry.input_len :]
        missing = entry.input_len - len(tokens)
        if missing > 0:
            own = np.random.default_rng([self._seed, _OWN_STREAM, entry.number])
            tokens.extend(own.integers(self._low, self._high, size=missing).tolist())
        return tokens

    def _block(self, block_id: int) -> list[int]:
        block = self._blocks.get(block_id)
        if block is None:
            rng = np.random.default_rng([self._seed, _BLOCK_STREAM, block_id])
            block = rng.integers(self._low, self._high, size=self._block_size).tolist()
            self._blocks[block_id] = block
        return block


def block_reuse(entries: Sequence[TraceEntry], block_size: int) -> float:
    """The share of prompt tokens a prefix cache with room for everything could reuse: each
    request's leading blocks whose whole prefix an earlier request had, over all prompt tokens.

    A block counts only when every block before it matched too, as in a radix tree; a prompt is
    never reused whole (its last token must be computed), as in sglang.
    """
    seen: set[tuple[int, ...]] = set()
    reused = total = 0
    for entry in entries:
        ids = entry.hash_ids
        depth = 0
        while depth < len(ids) and ids[: depth + 1] in seen:
            depth += 1
        reused += min(depth * block_size, entry.input_len - 1)
        total += entry.input_len
        seen.update(ids[: k + 1] for k in range(len(ids)))
    return reused / total if total else 0.0
