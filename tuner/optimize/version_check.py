"""`--engine sglang`: the space in the flag names of the sglang release that is installed.

    run = for_installed_release(run, dry_run=False, say=print)   # UserError (one line) if none

A space names the sglang release whose parser checks its flags (`engine.version`). Any installed
release works: its flags come from its committed snapshot, or for a release the tuner does not
know (newer, a git build) from its own parser, read live once and cached
(tuner/engines/_sglang_live.py; start-up rules and the memory plan then follow the nearest known
release, said in one warning line). When the installed release differs from the space's, the
space is translated in memory and the translation is shown, a line per change: a renamed flag is
passed under the release's name (`cuda_graph_max_bs_decode` as `--cuda-graph-max-bs` to 0.5.10),
a flag or choice the release lacks is left out. Nothing is written for the user to pass back.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tuner.engines.sglang import (
    RENAMED_IN,
    build_server_args,
    release_flags,
    resolve_flag,
)
from tuner.errors import UserError
from tuner.host import installed_sglang
from tuner.space.load import space_from_dict
from tuner.space.model import SearchSpace
from tuner.study.run import Run


def for_installed_release(run: Run, dry_run: bool, say: Callable[[str], None]) -> Run:
    """`run` with its space in the installed release's flag names (`--engine sglang` only).

    Without sglang a dry run goes on with a note (the cost can be read on a laptop before the
    GPU host); a study stops with one line saying how to install it."""
    if run.options.engine != "sglang":
        return run
    python = run.target.python
    installed = installed_sglang(python)
    if installed is None:
        if dry_run:
            say("note: --engine sglang: sglang is not installed here; a dry run goes on")
            return run
        raise UserError(_not_installed(python))
    space, lines = fit_space(run.space, installed, python, dict(run.target.env))
    for line in lines:
        say(line)
    return replace(run, space=space)


def check_installed_sglang(
    space: SearchSpace, python: str | None = None, env: dict[str, str] | None = None
) -> tuple[SearchSpace, list[str]]:
    """The space for the sglang installed for `python` (None: the tuner's own interpreter), and
    the lines that say what changed; UserError when sglang is not installed or unreadable."""
    installed = installed_sglang(python)
    if installed is None:
        raise UserError(_not_installed(python))
    return fit_space(space, installed, python, env)


def fit_space(
    space: SearchSpace,
    installed: str,
    python: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[SearchSpace, list[str]]:
    """`space` for sglang `installed`, and the lines to show (none when nothing changes)."""
    flags = release_flags(python or sys.executable, installed, env)
    lines = []
    if not flags.committed:
        lines.append(
            f"warning: sglang {installed} is not a release this tuner knows: its flags were "
            f"{flags.source}; start-up rules and the memory plan follow sglang "
            f"{flags.rules_from}, the nearest known release"
        )
    same = _base(installed) == _base(space.engine_version)
    if same and flags.committed:
        return space, lines
    # A release read live is checked against its own parser (the space was loaded against the
    # nearest known one) the way a translation is.
    translated, changes = translated_space(space, installed)
    if same and not changes:
        return translated, lines
    if changes:
        lines.append(
            f"the space names sglang {space.engine_version}; translated for the installed "
            f"{installed} in memory (nothing written):"
        )
        lines += [f"  {change}" for change in changes]
    else:
        lines.append(
            f"the space names sglang {space.engine_version}; the installed {installed} "
            "takes the same flags"
        )
    return translated, lines


def translated_space(space: SearchSpace, version: str) -> tuple[SearchSpace, list[str]]:
    """The space for sglang `version`, loaded as any space is, and what changed."""
    data, changes = translate_space(space, version)
    return space_from_dict(data, f"{space.name} for sglang {version}"), changes


def translate_space(space: SearchSpace, version: str) -> tuple[dict[str, Any], list[str]]:
    """The space for sglang `version` as a YAML-ready dict, and what changed (one line each)."""
    data = space.to_dict()
    data["engine"] = {**data["engine"], "version": version}
    changes: list[str] = []
    for section in ("fixed_flags", "params"):
        kept: dict[str, Any] = {}
        for name, value in data[section].items():
            try:
                option = resolve_flag(name, version)
            except UserError:
                changes.append(f"{name} left out (sglang {version} has no such flag)")
                continue
            spelled = next((f for f in option.flags if f.startswith("--")), "")
            if spelled != "--" + name.replace("_", "-"):
                old = spelled[2:].replace("-", "_")
                when = RENAMED_IN.get(old) or RENAMED_IN.get(name)
                renamed = f" (renamed in {when})" if when else ""
                changes.append(f"{name} is passed as {spelled}{renamed}")
            if section == "params" and "choices" in value:
                accepted = [c for c in value["choices"] if _accepts(name, c, version)]
                if not accepted:
                    changes.append(
                        f"{name} left out (sglang {version} accepts none of its choices)"
                    )
                    continue
                if len(accepted) < len(value["choices"]):
                    dropped = [c for c in value["choices"] if c not in accepted]
                    changes.append(f"{name} without {dropped}")
                value = {**value, "choices": accepted}
            kept[name] = value
        data[section] = kept
    # A param conditional on one that was left out could never be sampled.
    params = data["params"]
    for name in [n for n, v in params.items() if any(k not in params for k in v.get("when", {}))]:
        changes.append(f"{name} left out (its condition's param is gone)")
        del params[name]
    return data, changes


def _not_installed(python: str | None) -> str:
    where = f"for {python}" if python else "here"
    return (
        f"real sglang: sglang is not installed {where}; on a GPU host run "
        "pip install -e '.[sglang]', on a CPU tools/install_real_sglang.sh with "
        "--engine-python, or --engine sim for the simulator"
    )


def _accepts(name: str, value: Any, version: str) -> bool:
    try:
        build_server_args({name: value}, version)
    except UserError:
        return False
    return True


def _base(version: str) -> str:
    return re.sub(r"\.post\d+$", "", version.strip())
