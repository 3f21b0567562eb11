"""Request bodies for the three sglang endpoints the benchmark can drive.

The native `/generate` takes token ids, so prompt and output lengths are exact without a
tokenizer. `/v1/completions` also takes token ids. `/v1/chat/completions` takes text only: token
ids are turned into synthetic words there, and the server's own count of prompt tokens is what
the metrics use.
"""

from __future__ import annotations

from typing import Any

from tuner.bench.workload import Prompt

APIS = ("generate", "completions", "chat")
API_PATHS = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

# (role, content) pairs: "system", "user" or "assistant".
History = list[tuple[str, Prompt]]

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]


def ids_to_text(ids: list[int]) -> str:
    """Deterministic pronounceable words standing in for token ids (about one token a word)."""
    n = len(_SYLLABLES)
    return " ".join(_SYLLABLES[t % n] + _SYLLABLES[(t // n) % n] for t in ids)


def as_text(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else ids_to_text(prompt)


def flatten(history: History) -> Prompt:
    """The whole history as one prompt: token ids when every part has ids, else text."""
    parts = [content for _, content in history if content]
    if all(isinstance(p, list) for p in parts):
        ids: list[int] = []
        for p in parts:
            ids.extend(p)  # type: ignore[arg-type]
        return ids
    return "\n".join(as_text(p) for p in parts)


def prompt_length(prompt: Prompt) -> int:
    """Our own count of prompt tokens, used only when the server reports none."""
    return len(prompt) if isinstance(prompt, list) else len(prompt.split())


def build_body(
    api: str,
    history: History,
    output_len: int,
    *,
    ignore_eos: bool,
    model: str | None,
) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    if api == "generate":
        prompt = flatten(history)
        body: dict[str, Any] = (
            {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
        )
        body["sampling_params"] = {
            "max_new_tokens": output_len,
            "ignore_eos": ignore_eos,
            "temperature": 0.0,
        }
        body["stream"] = True
        return body
    body = {
        "max_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        # Usage on every chunk gives exact token counts per chunk where the server supports it;
        # the final usage chunk gives the totals either way.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": ignore_eos,
    }
    if model:
        body["model"] = model
    if api == "completions":
        body["prompt"] = flatten(history)
    elif api == "chat":
        body["messages"] = [
            {"role": role, "content": as_text(content)} for role, content in history if content
        ]
    else:
        raise ValueError(f"unknown api {api!r}")
    return body
