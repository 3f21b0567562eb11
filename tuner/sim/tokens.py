"""A synthetic tokenizer: one token per whitespace-separated word, ids stable across processes.

Text is synthetic but token counts are exact: a prompt of N words is N tokens, and the text the
simulator generates is one word per token, so re-sending a generated answer (a multi-turn chat)
tokenizes back to the very ids that were generated and hits the prefix cache as in sglang.
Chat messages are wrapped in a fixed template (5 tokens per message, 3 for the assistant turn
that the generation prompt opens), the way Qwen's ChatML template adds special tokens.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

# Special-token ids sit above the word ids' range so a word never collides with one.
IM_START, IM_END, NEWLINE = 1_000_001, 1_000_002, 1_000_003
ROLE_IDS = {"system": 1_000_010, "user": 1_000_011, "assistant": 1_000_012, "tool": 1_000_013}
TOKENS_PER_MESSAGE = 5  # <|im_start|> role \n ... <|im_end|> \n
GENERATION_PROMPT_TOKENS = 3  # <|im_start|> assistant \n

_WORD_TEXT = (
    "the of and to in is that for it as with was on be by at this are from or have an they "
    "which one you were all we when there can more has been if some will would their time "
    "into two these may see could first other than then now only its new about way many "
    "also after where most made over did down such what like just long any through each "
    "model token cache batch memory server request state layer value query graph prefix "
    "decode kernel stream tensor vector weight chunk speed queue worker engine"
)
_WORDS = tuple(_WORD_TEXT.split())
_WORD_IDS = tuple(zlib.crc32(w.encode()) % 1_000_000 for w in _WORDS)


def word_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 1_000_000


def encode(text: str) -> list[int]:
    return [word_id(w) for w in text.split()]


def count(text: str) -> int:
    return len(text.split())


def output_text(start: int, stop: int, seed: int) -> str:
    return "".join(" " + _WORDS[(p * 7 + seed * 13) % len(_WORDS)] for p in range(start, stop))


def output_ids(start: int, stop: int, seed: int) -> list[int]:
    return [_WORD_IDS[(p * 7 + seed * 13) % len(_WORDS)] for p in range(start, stop)]


def content_text(content: object) -> str:
    """OpenAI message content: a string or a list of parts; text parts are joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(parts)
    return ""


def encode_chat(messages: Iterable[dict[str, object]]) -> list[int]:
    ids: list[int] = []
    for message in messages:
        role = str(message.get("role", "user"))
        ids += [IM_START, ROLE_IDS.get(role, ROLE_IDS["user"]), NEWLINE]
        ids += encode(content_text(message.get("content", "")))
        ids += [IM_END, NEWLINE]
    ids += [IM_START, ROLE_IDS["assistant"], NEWLINE]
    return ids
