"""Dump sglang releases' real launch-server parsers to tuner/engines/snapshots/sglang-<v>.json.

The tuner checks every argv it builds against these snapshots, so they must come from sglang's own
`ServerArgs.add_cli_args`, never be written by hand. tuner/engines/_parser_dump.py does the
reading (third-party modules sglang cannot import here are inert stand-ins); this script runs it
once per wheel, each in its own process, and writes the folder:

    for v in 0.5.21 0.5.22 0.5.23; do pip download --no-deps sglang==$v -d /tmp/sglang-wheels; done
    pip install --target /tmp/sglang-deps msgspec   # 0.5.2x declares ServerArgs with msgspec
    PYTHONPATH=/tmp/sglang-deps .venv/bin/python tools/dump_sglang_flags.py /tmp/sglang-wheels/*.whl

A source argument may also be an unpacked source tree (a folder holding `sglang/`), or
`--installed` for the sglang installed for this Python. Each file but the oldest holds only what
its release changed against the release before it (`"base"`: unchanged options are named by
their first flag), so the folder is rewritten as a whole after every dump. Add a flag the tuner
uses that a release renamed to RENAMED_FLAGS (tuner/engines/_sglang_versions.py), and commit the
JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tuner.engines import _parser_dump
from tuner.engines._sglang_versions import version_key
from tuner.engines.snapshot import delta_entries, expand_entries, snapshot_text

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tuner" / "engines" / "snapshots"


def dump_in_child(source: Path | None) -> dict[str, Any]:
    """The document of one wheel / source tree (None: the installed sglang), read in a child
    process so that every release gets a fresh interpreter."""
    args = ["--installed"] if source is None else [str(source)]
    script = (
        f"import runpy; runpy.run_path({str(Path(_parser_dump.__file__))!r}, run_name='__main__')"
    )
    with tempfile.TemporaryDirectory(prefix="sglang-dump-") as cwd:
        done = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{source or 'installed sglang'}: {last}")
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def full_documents(folder: Path) -> dict[str, dict[str, Any]]:
    """Every snapshot in `folder` with its options expanded (deltas resolved), by release."""
    raw = {
        json.loads(p.read_text(encoding="utf-8"))["sglang_version"]: json.loads(
            p.read_text(encoding="utf-8")
        )
        for p in folder.glob("sglang-*.json")
    }
    full: dict[str, dict[str, Any]] = {}

    def expand(version: str) -> dict[str, Any]:
        if version not in full:
            document = dict(raw[version])
            base = document.pop("base", None)
            if base is not None:
                document["options"] = expand_entries(document["options"], expand(base)["options"])
            full[version] = document
        return full[version]

    for version in raw:
        expand(version)
    return full


def write_folder(folder: Path, documents: dict[str, dict[str, Any]]) -> None:
    """Write every release as a delta against the one before it (the oldest in full)."""
    order = sorted(documents, key=version_key)
    for previous, version in zip([None, *order], order, strict=False):
        document = dict(documents[version])
        if previous is not None:
            document["base"] = previous
            document["options"] = delta_entries(
                documents[version]["options"], documents[previous]["options"]
            )
        path = folder / f"sglang-{version}.json"
        path.write_text(snapshot_text(document), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    cli.add_argument("sources", nargs="*", type=Path, help="sglang wheels or source trees")
    cli.add_argument("--installed", action="store_true", help="the installed sglang too")
    cli.add_argument("--out", type=Path, default=DEFAULT_OUT, help="snapshot folder")
    args = cli.parse_args(argv)
    if not args.sources and not args.installed:
        cli.error("give wheels / source folders, or --installed")
    args.out.mkdir(parents=True, exist_ok=True)
    documents = full_documents(args.out)
    for source in [*args.sources, *([None] if args.installed else [])]:
        document = dump_in_child(source)
        documents[document["sglang_version"]] = document
        print(f"{document['sglang_version']}: {len(document['options'])} options ({source})")
    write_folder(args.out, documents)
    print(f"wrote {len(documents)} snapshots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
