"""Whether a space's `model_path` is something real sglang can load, checked before any launch.

    problem = model_path_problem("~/models/llama")   # None, or one line saying what is wrong

sglang takes `--model-path` as a local directory when one exists there, else as a Hugging Face
repo id (`ORG/NAME` or `NAME`) it downloads. A path that cannot be a repo id (absolute, `~`,
`./`, `../`, more than one `/`) and is not a directory would fail at every launch ("Repo id must
be in the form ..."), as would a directory without the model's config.json: both are refused
with a hint that fits a path. A well-formed repo id is left to sglang, which fetches it.
"""

from __future__ import annotations

import re
from pathlib import Path

# Hugging Face repo ids: an optional owner and a name of letters, digits, `-`, `_`, `.`, each
# at most 96 characters, neither starting nor ending with `-` or `.`, no `--` or `..`.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"(?:{_PART}/)?{_PART}")


def is_repo_id(text: str) -> bool:
    return bool(_REPO_ID.fullmatch(text)) and "--" not in text and ".." not in text


def looks_local(text: str) -> bool:
    """Written as a path on this machine, never a repo id."""
    return text.startswith(("/", "~", "./", "../")) or text.count("/") > 1


def model_path_problem(model_path: str) -> str | None:
    """What keeps real sglang from loading `model_path`, in one line; None when nothing does."""
    local = Path(model_path).expanduser()
    if local.is_dir():
        if (local / "config.json").is_file():
            return None
        return (
            f"model_path {model_path!r}: the directory has no config.json; give the directory "
            "that holds the model's config.json and weights"
        )
    if local.exists():
        return f"model_path {model_path!r} is a file; give the directory that holds the model"
    if looks_local(model_path) or not is_repo_id(model_path):
        what = (
            "no such directory on this machine"
            if looks_local(model_path)
            else "not a directory here and not a Hugging Face repo id (ORG/NAME)"
        )
        return (
            f"model_path {model_path!r}: {what}; give the directory that holds the model's "
            "config.json and weights (a path that exists: check its spelling and the working "
            "directory), or a repo id such as Qwen/Qwen3-8B"
        )
    return None
