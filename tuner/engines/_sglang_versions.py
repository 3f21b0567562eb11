"""Which sglang versions the tuner knows, their parser snapshots, and renamed flags."""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib import resources

from tuner.engines.snapshot import OptionSpec, ParserSnapshot
from tuner.errors import UserError

CANONICAL_VERSION = "0.5.23"  # the release whose flag names the search spaces use

# Flags renamed between releases, as (name in CANONICAL_VERSION, name in older releases). Each
# direction is tried, so a space written for either release drives both.
RENAMED_FLAGS: tuple[tuple[str, str], ...] = (
    ("mamba_radix_cache_strategy", "mamba_scheduler_strategy"),
    ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
)

_SNAPSHOT_NAME = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)\.json$")


def supported_versions() -> list[str]:
    """sglang versions with a committed parser snapshot, oldest first."""
    versions = []
    for entry in resources.files("tuner.engines").joinpath("snapshots").iterdir():
        match = _SNAPSHOT_NAME.match(entry.name)
        if match:
            versions.append(match.group(1))
    return sorted(versions, key=version_key)


def load_snapshot(version: str) -> ParserSnapshot:
    """The parser snapshot of `version`. A post release (0.5.10.post1) uses its base release's
    snapshot when it has none of its own: post releases fix bugs, not flags."""
    return _load_snapshot(str(version).strip())


@cache
def _load_snapshot(version: str) -> ParserSnapshot:
    known = supported_versions()
    chosen = version if version in known else re.sub(r"\.post\d+$", "", version)
    if chosen not in known:
        raise UserError(
            f"no flag snapshot for sglang {version}; known versions: {', '.join(known)} "
            "(tools/dump_sglang_flags.py makes one from the release's wheel)"
        )
    path = resources.files("tuner.engines").joinpath("snapshots", f"sglang-{chosen}.json")
    return ParserSnapshot.from_json(path.read_text(encoding="utf-8"))


def resolve_flag(name: str, version: str) -> OptionSpec:
    """The option that a canonical flag name means in `version`, following renames."""
    snapshot = load_snapshot(version)
    key = name.lstrip("-").replace("-", "_")
    option = snapshot.option(key)
    if option is not None:
        return option
    for new, old in RENAMED_FLAGS:
        other = old if key == new else new if key == old else None
        if other is not None and (option := snapshot.option(other)) is not None:
            return option
    close = difflib.get_close_matches(key, snapshot.flag_names(), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    spelled = "--" + key.replace("_", "-")
    raise UserError(f"sglang {snapshot.version} has no flag {key!r} ({spelled}){hint}")


def canonical_name(name: str) -> str:
    """`--mamba-scheduler-strategy` or `mamba_scheduler_strategy` -> mamba_radix_cache_strategy."""
    key = name.lstrip("-").replace("-", "_")
    return next((new for new, old in RENAMED_FLAGS if key == old), key)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))
