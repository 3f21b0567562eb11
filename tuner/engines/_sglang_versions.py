"""Which sglang releases the tuner knows, their parser snapshots, and renamed flags.

    load_snapshot("0.5.21")            # committed: tuner/engines/snapshots/sglang-0.5.21.json
    load_snapshot("0.5.24")            # read live earlier, cached (tuner/engines/_sglang_live.py)
    nearest_known_version("0.5.24")    # "0.5.23": whose start-up rules and memory plan apply
    resolve_flag("mamba_radix_cache_strategy", "0.5.10").flags   # ('--mamba-scheduler-strategy',)

Every release of the 0.5 line and the last 0.4 releases ship a snapshot. A release without one
(newer than the tuner, a git build) is read live through its own Python once and cached under
$TUNER_SGLANG_FLAGS_CACHE (default ~/.cache/sglang-tuner/flags); $TUNER_SGLANG_SNAPSHOTS replaces
the committed folder (tests hide a release with it).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

from tuner.engines.snapshot import OptionSpec, ParserSnapshot, expand_entries
from tuner.errors import UserError

CANONICAL_VERSION = "0.5.23"  # the release whose flag names the search spaces use

SNAPSHOTS_ENV = "TUNER_SGLANG_SNAPSHOTS"
FLAGS_CACHE_ENV = "TUNER_SGLANG_FLAGS_CACHE"

# Flags renamed between releases, as (newer name, older name), read from the snapshots: the old
# name disappears (or turns into sglang's deprecation action naming the new one) in the release
# RENAMED_IN gives. A name is followed through every rename in either direction, so a space
# written for any release drives all of them.
RENAMED_FLAGS: tuple[tuple[str, str], ...] = (
    ("mamba_radix_cache_strategy", "mamba_scheduler_strategy"),
    ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    ("cuda_graph_bs_decode", "cuda_graph_bs"),
    ("cuda_graph_max_bs_prefill", "piecewise_cuda_graph_max_tokens"),
    ("cuda_graph_bs_prefill", "piecewise_cuda_graph_tokens"),
    ("cuda_graph_tc_compiler", "piecewise_cuda_graph_compiler"),
    ("dsa_prefill_backend", "nsa_prefill_backend"),
    ("dsa_decode_backend", "nsa_decode_backend"),
    ("nsa_prefill_backend", "nsa_prefill"),
    ("nsa_decode_backend", "nsa_decode"),
    ("enable_prefill_cp", "enable_dsa_prefill_context_parallel"),
    ("enable_dsa_prefill_context_parallel", "enable_nsa_prefill_context_parallel"),
    ("cp_strategy", "dsa_prefill_cp_mode"),
    ("dsa_prefill_cp_mode", "nsa_prefill_cp_mode"),
    ("speculative_draft_window_size", "speculative_dflash_draft_window_size"),
    ("incremental_streaming_output", "stream_output"),
    ("enable_linear_replayssm_spec", "enable_gdn_replayssm_spec"),
    ("kt_method", "kt_amx_method"),
    ("kt_weight_path", "kt_amx_weight_path"),
    ("otlp_traces_endpoint", "oltp_traces_endpoint"),
    ("pp_max_micro_batch_size", "max_micro_batch_size"),
)
# The first release with the newer name, by older name.
RENAMED_IN: dict[str, str] = {
    "mamba_scheduler_strategy": "0.5.14",
    "cuda_graph_max_bs": "0.5.14",
    "cuda_graph_bs": "0.5.14",
    "piecewise_cuda_graph_max_tokens": "0.5.14",
    "piecewise_cuda_graph_tokens": "0.5.14",
    "piecewise_cuda_graph_compiler": "0.5.14",
    "nsa_prefill_backend": "0.5.13",
    "nsa_decode_backend": "0.5.13",
    "nsa_prefill": "0.5.4",
    "nsa_decode": "0.5.4",
    "enable_dsa_prefill_context_parallel": "0.5.14",
    "enable_nsa_prefill_context_parallel": "0.5.13",
    "dsa_prefill_cp_mode": "0.5.14",
    "nsa_prefill_cp_mode": "0.5.13",
    "speculative_dflash_draft_window_size": "0.5.12",
    "stream_output": "0.5.10",
    "enable_gdn_replayssm_spec": "0.5.17",
    "kt_amx_method": "0.5.5.post1",
    "kt_amx_weight_path": "0.5.5.post1",
    "oltp_traces_endpoint": "0.5.4.post2",
    "max_micro_batch_size": "0.5.3.post1",
}

# Parsers read live in this process (tuner/engines/_sglang_live.py), by release: found even when
# the cache folder could not be written.
LIVE_SNAPSHOTS: dict[str, ParserSnapshot] = {}

_SNAPSHOT_NAME = re.compile(r"^sglang-(.+)\.json$")


def snapshots_dir() -> Path:
    """The committed snapshots, or the folder $TUNER_SGLANG_SNAPSHOTS names."""
    override = os.environ.get(SNAPSHOTS_ENV)
    return Path(override) if override else Path(__file__).resolve().parent / "snapshots"


def flags_cache_dir() -> Path:
    """Where parsers read live are kept, one file per release."""
    override = os.environ.get(FLAGS_CACHE_ENV)
    if override:
        return Path(os.path.expanduser(override))
    return Path.home() / ".cache" / "sglang-tuner" / "flags"


def supported_versions() -> list[str]:
    """sglang releases with a committed parser snapshot, oldest first."""
    return _versions_in(snapshots_dir())


def _versions_in(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    found = (_SNAPSHOT_NAME.match(p.name) for p in folder.iterdir())
    return sorted((m.group(1) for m in found if m), key=version_key)


def committed_version(version: str) -> str | None:
    """The committed snapshot that stands for `version`: its own, or for a post release without
    one its base release's (post releases fix bugs, not flags); None when neither exists."""
    known = supported_versions()
    version = str(version).strip()
    base = re.sub(r"\.post\d+$", "", version)
    return version if version in known else base if base in known else None


def nearest_known_version(version: str) -> str:
    """The committed release whose start-up rules and memory plan stand for `version`: itself
    when committed, else the newest one not newer than it (the oldest for anything older)."""
    committed = committed_version(version)
    if committed is not None:
        return committed
    known = supported_versions()
    if not known:
        raise UserError(f"no sglang flag snapshots in {snapshots_dir()}")
    older = [v for v in known if version_key(v) <= version_key(version)]
    return older[-1] if older else known[0]


def older_than_all_known(version: str) -> bool:
    """True for a release before the oldest snapshot (0.4.9): one the tuner does not drive."""
    known = supported_versions()
    return bool(known) and version_key(version) < version_key(known[0])


def load_snapshot(version: str) -> ParserSnapshot:
    """The parser snapshot of `version`: committed, else read live earlier and cached."""
    version = str(version).strip()
    if version in LIVE_SNAPSHOTS and committed_version(version) is None:
        return LIVE_SNAPSHOTS[version]
    return _load_snapshot(version, snapshots_dir(), flags_cache_dir())


@cache
def _load_snapshot(version: str, committed: Path, cached: Path) -> ParserSnapshot:
    chosen = committed_version(version)
    if chosen is not None:
        return _committed_snapshot(chosen, committed)
    path = cached / f"sglang-{version}.json"
    if path.is_file():
        try:
            snapshot = ParserSnapshot.from_json(path.read_text(encoding="utf-8"))
        except (ValueError, KeyError):
            snapshot = None  # a damaged cache file is read live again
        if snapshot is not None and snapshot.option("model_path") is not None:
            return snapshot
    raise UserError(
        f"no flag snapshot for sglang {version}; known versions: "
        f"{', '.join(supported_versions())} (`tuner optimize --engine sglang` reads an installed "
        "release's flags from its parser)"
    )


def _committed_snapshot(version: str, folder: Path) -> ParserSnapshot:
    document = _document(version, folder)
    base = document.get("base")
    base_options = _options(str(base), folder) if base else []
    return ParserSnapshot.from_document(document, base_options)


@cache
def _document(version: str, folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / f"sglang-{version}.json").read_text("utf-8"))
    return data


@cache
def _options(version: str, folder: Path) -> list[dict[str, Any]]:
    """A committed release's options as data, its base releases' entries resolved."""
    document = _document(version, folder)
    base = document.get("base")
    return expand_entries(document["options"], _options(str(base), folder) if base else [])


def forget_cached_snapshots() -> None:
    """Read snapshots again on the next use (a cache file was just rewritten)."""
    _load_snapshot.cache_clear()


def renamed_names(key: str) -> list[str]:
    """Every other name `key` had across releases, nearest rename first."""
    seen, queue = [key], [key]
    while queue:
        current = queue.pop(0)
        for new, old in RENAMED_FLAGS:
            other = old if current == new else new if current == old else None
            if other is not None and other not in seen:
                seen.append(other)
                queue.append(other)
    return seen[1:]


def resolve_flag(name: str, version: str) -> OptionSpec:
    """The option that a flag name (of any release) means in `version`, following renames."""
    snapshot = load_snapshot(version)
    key = name.lstrip("-").replace("-", "_")
    for candidate in [key, *renamed_names(key)]:
        option = snapshot.option(candidate)
        if option is not None:
            return _current(option, snapshot)
    close = difflib.get_close_matches(key, snapshot.flag_names(), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    spelled = "--" + key.replace("_", "-")
    raise UserError(f"sglang {snapshot.version} has no flag {key!r} ({spelled}){hint}")


def _current(option: OptionSpec, snapshot: ParserSnapshot) -> OptionSpec:
    # A name sglang kept only to point at its successor (a deprecation action): use the successor.
    if option.new_flag and option.new_flag.startswith("--"):
        successor = snapshot.option(option.new_flag)
        if successor is not None:
            return successor
    return option


def canonical_name(name: str) -> str:
    """`--mamba-scheduler-strategy` or `mamba_scheduler_strategy` -> mamba_radix_cache_strategy:
    the newest name a flag has had."""
    key = name.lstrip("-").replace("-", "_")
    newer = {old: new for new, old in RENAMED_FLAGS}
    while key in newer:
        key = newer[key]
    return key


def version_key(version: str) -> tuple[int, ...]:
    """Orders releases: 0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.11 (a dev or rc build sorts with
    the release it leads to, after the one before it)."""
    return tuple(int(part) for part in re.findall(r"\d+", str(version)))
