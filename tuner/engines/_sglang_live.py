"""The flags of an installed sglang release: its committed snapshot, or its parser read live.

    flags = release_flags("/venv/bin/python", "0.5.24")
    flags.snapshot      # the parser sglang 0.5.24 builds, read through that Python
    flags.source        # "read live from its parser (cached in ~/.cache/sglang-tuner/flags/...)"
    flags.rules_from    # "0.5.23": the known release whose start-up rules and memory plan apply

A release without a committed snapshot (newer than the tuner, a git build) is read by running
tuner/engines/_parser_dump.py under the engine's own interpreter, which has sglang but not the
tuner. The result is cached per release with a fingerprint of sglang's argument files, so a
git build whose flags changed is read again while an unchanged one costs one quick probe.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engines import _parser_dump
from tuner.engines._sglang_versions import (
    LIVE_SNAPSHOTS,
    committed_version,
    flags_cache_dir,
    forget_cached_snapshots,
    load_snapshot,
    nearest_known_version,
)
from tuner.engines.snapshot import ParserSnapshot, snapshot_text
from tuner.errors import UserError

# Importing sglang's argument module with torch installed takes 10-60 s on a loaded host.
LIVE_READ_TIMEOUT_S = 300.0
PROBE_TIMEOUT_S = 60.0

# Prints a fingerprint of the files that define sglang's flags, without importing sglang.
_PROBE = """
import hashlib, importlib.util, json, pathlib
spec = importlib.util.find_spec("sglang")
root = pathlib.Path(next(iter(spec.submodule_search_locations)))
digest = hashlib.sha256()
for path in [root / "srt" / "server_args.py", *sorted((root / "srt").glob("arg_groups/*.py"))]:
    if path.is_file():
        digest.update(path.name.encode() + path.read_bytes())
print(json.dumps({"fingerprint": digest.hexdigest()[:16]}))
"""


@dataclass(frozen=True)
class ReleaseFlags:
    """Where an installed release's flags come from, and which known release stands for it."""

    version: str
    snapshot: ParserSnapshot
    source: str
    rules_from: str

    @property
    def committed(self) -> bool:
        return self.rules_from == committed_version(self.version)


def release_flags(python: str, version: str, env: Mapping[str, str] | None = None) -> ReleaseFlags:
    """The flags of sglang `version` as installed for `python` (`env`: the server's extra
    environment, which sglang may read while importing). UserError (one line) when a release
    with no snapshot cannot be read."""
    committed = committed_version(version)
    if committed is not None:
        source = f"committed snapshot sglang-{committed}.json"
        return ReleaseFlags(version, load_snapshot(version), source, committed)
    fingerprint = _fingerprint(python, version, env)
    path = flags_cache_dir() / f"sglang-{version}.json"
    document = _cached(path, fingerprint)
    if document is not None:
        source = f"read live earlier (cached in {path})"
    else:
        document = read_live(python, version, env)
        document["fingerprint"] = fingerprint
        source = f"read live from its parser (cached in {path})"
        if not _write(path, document):
            source = f"read live from its parser (not cached: {path.parent} is not writable)"
    snapshot = ParserSnapshot.from_document(document, [])
    LIVE_SNAPSHOTS[snapshot.version] = snapshot  # also when the cache could not be written
    return ReleaseFlags(version, snapshot, source, nearest_known_version(version))


def read_live(python: str, version: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The snapshot document of the sglang installed for `python`, read by its own parser."""
    script = f"import runpy; runpy.run_path({_parser_dump.__file__!r}, run_name='__main__')"
    what = f"could not read the flags of sglang {version} through {python}"
    # A fresh working directory: a `sglang/` folder in the user's would shadow the install.
    with tempfile.TemporaryDirectory(prefix="sglang-flags-") as cwd:
        try:
            done = subprocess.run(
                [python, "-c", script, "--installed"],
                capture_output=True,
                text=True,
                timeout=LIVE_READ_TIMEOUT_S,
                cwd=cwd,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"{what}: no answer in {LIVE_READ_TIMEOUT_S:.0f} s") from None
        except OSError as exc:
            raise UserError(f"{what}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise UserError(f"{what}: {lines[-1].strip()}")
    try:
        document: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        found = str(document["sglang_version"])
        if _usable(document) is None:
            raise ValueError("no --model-path")
    except (ValueError, KeyError, IndexError, TypeError):
        raise UserError(f"{what}: it printed no flag snapshot") from None
    if found != version:
        raise UserError(f"{what}: its parser says it is sglang {found}")
    return document


def _fingerprint(python: str, version: str, env: Mapping[str, str] | None) -> str:
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **(env or {})},
        )
        return str(json.loads(done.stdout)["fingerprint"])
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        # No fingerprint: the cache is keyed by the release alone.
        return "unknown"


def _cached(path: Path, fingerprint: str) -> dict[str, Any] | None:
    try:
        document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if document.get("fingerprint") != fingerprint or _usable(document) is None:
        return None
    return document


def _usable(document: dict[str, Any]) -> ParserSnapshot | None:
    """The snapshot of a document that describes a whole launch parser, else None."""
    try:
        snapshot = ParserSnapshot.from_document(document, [])
    except (ValueError, KeyError, TypeError):
        return None
    return snapshot if snapshot.option("model_path") is not None else None


def _write(path: Path, document: dict[str, Any]) -> bool:
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(snapshot_text(document), encoding="utf-8")
        partial.replace(path)  # whole or absent, also for a second tuner reading at once
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()
        return False
    forget_cached_snapshots()
    return True
