"""`--engine sglang`: the installed sglang must be the release the space names, or be offered one.

    check_installed_sglang(space, out_dir=Path("."))   # UserError (one line) on a mismatch

A space names the sglang release whose parser checks its flags (`engine.version`). When the
installed release differs, the space is translated for it: the same params under that release
(renamed flags follow tuner/engines/_sglang_versions.py: `cuda_graph_max_bs_decode` is passed as
`--cuda-graph-max-bs` to 0.5.10), a flag or choice the release lacks left out, and the result
loaded back as any space is. The translation is written beside the working directory and the
message says how to run it; nothing is launched against the wrong release.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tuner.engines.sglang import build_server_args, load_snapshot, resolve_flag
from tuner.errors import UserError
from tuner.host import installed_sglang
from tuner.space.load import space_from_dict
from tuner.space.model import SearchSpace


def check_installed_sglang(
    space: SearchSpace, out_dir: Path = Path(), python: str | None = None
) -> None:
    """`python`: the interpreter that runs sglang (None: the tuner's own)."""
    installed = installed_sglang(python)
    if installed is None:
        where = f"for {python}" if python else "here"
        raise UserError(
            f"real sglang: sglang is not installed {where}; on a GPU host run "
            "pip install -e '.[sglang]', on a CPU tools/install_real_sglang.sh with "
            "--engine-python, or --engine sim for the simulator"
        )
    if _base(installed) == _base(space.engine_version):
        return
    try:
        load_snapshot(installed)
    except UserError as exc:
        raise UserError(
            f"the space names sglang {space.engine_version} but {installed} is installed, and "
            f"{exc}; install a known release (pip install 'sglang=={space.engine_version}')"
        ) from None
    data, changes = translate_space(space, installed)
    path = out_dir / f"{space.name}.sglang-{installed}.yaml"
    header = (
        f"# {space.name} translated by `tuner optimize` for sglang {installed} "
        f"(written for {space.engine_version}): {'; '.join(changes) or 'same flags'}.\n"
    )
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    raise UserError(
        f"the space names sglang {space.engine_version} but {installed} is installed: wrote "
        f"{path} for {installed} ({'; '.join(changes) or 'same flags'}); run with --space {path}"
    )


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
                changes.append(f"{name} is passed as {spelled}")
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
    space_from_dict(data, f"{space.name} for sglang {version}")  # loads as any space
    return data, changes


def _accepts(name: str, value: Any, version: str) -> bool:
    try:
        build_server_args({name: value}, version)
    except UserError:
        return False
    return True


def _base(version: str) -> str:
    return re.sub(r"\.post\d+$", "", version.strip())
