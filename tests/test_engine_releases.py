"""Any installed sglang release: its snapshot, or its parser read live and cached; a space for
another release translated in memory and shown."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.real_sglang import INSTALL_HINT, venv_python
from typer.testing import CliRunner

from tuner.cli import app
from tuner.engines import _sglang_live, _sglang_versions
from tuner.engines.sglang import check_startup_rules, load_snapshot, release_flags
from tuner.errors import UserError
from tuner.optimize import version_check
from tuner.space.load import load_space

REPO = Path(__file__).resolve().parent.parent
QWEN3_8B = REPO / "search_spaces" / "qwen3-8b-h200.yaml"
CPU_SPACE = REPO / "search_spaces" / "tiny-llama-cpu.yaml"
SNAPSHOTS = REPO / "tuner" / "engines" / "snapshots"

# A stand-in sglang with a real argparse parser: what the live read imports through `python`.
FAKE_SERVER_ARGS = """
import argparse

class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--mamba-radix-cache-strategy", choices=["auto", "no_buffer"])
        parser.add_argument("--enable-warp-drive", action="store_true")
"""


@pytest.fixture
def flags_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "flags"
    monkeypatch.setenv("TUNER_SGLANG_FLAGS_CACHE", str(cache))
    monkeypatch.setattr(_sglang_versions, "LIVE_SNAPSHOTS", {})
    monkeypatch.setattr(_sglang_live, "LIVE_SNAPSHOTS", _sglang_versions.LIVE_SNAPSHOTS)
    return cache


def fake_sglang(root: Path, version: str, server_args: str = FAKE_SERVER_ARGS) -> dict[str, str]:
    """A source tree of an sglang release the tuner does not know; the env that installs it."""
    package = root / "sglang"
    (package / "srt").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("raise RuntimeError('the runtime must not start')\n")
    (package / "version.py").write_text(f'__version__ = "{version}"\n')
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(server_args)
    return {"PYTHONPATH": str(root)}


# --------------------------------------------------------------------------- live read and cache


def test_a_release_without_a_snapshot_is_read_live_once_and_cached(tmp_path, flags_cache):
    env = fake_sglang(tmp_path / "src", "0.9.1")
    flags = release_flags(sys.executable, "0.9.1", env)
    assert flags.source.startswith("read live from its parser (cached in ")
    assert not flags.committed and flags.rules_from == "0.5.23"
    assert flags.snapshot.option("enable_warp_drive").kind == "store_true"
    cached = json.loads((flags_cache / "sglang-0.9.1.json").read_text())
    assert cached["sglang_version"] == "0.9.1" and cached["fingerprint"] != "unknown"
    # The rest of the tuner finds it by release, as a committed one.
    assert load_snapshot("0.9.1").option("--model") is not None

    def no_second_read(*args, **kwargs):
        raise AssertionError("read live again although the cache holds this release")

    original = _sglang_live.read_live
    _sglang_live.read_live = no_second_read
    try:
        again = release_flags(sys.executable, "0.9.1", env)
    finally:
        _sglang_live.read_live = original
    assert again.source.startswith("read live earlier (cached in ")
    assert again.snapshot.option("enable_warp_drive") is not None


def test_a_changed_build_of_the_same_release_is_read_again(tmp_path, flags_cache):
    env = fake_sglang(tmp_path / "src", "0.9.1.dev0")
    release_flags(sys.executable, "0.9.1.dev0", env)
    changed = FAKE_SERVER_ARGS + '        parser.add_argument("--enable-hyperdrive")\n'
    fake_sglang(tmp_path / "src", "0.9.1.dev0", changed)  # a git build, one commit later
    flags = release_flags(sys.executable, "0.9.1.dev0", env)
    assert flags.source.startswith("read live from its parser")
    assert flags.snapshot.option("enable_hyperdrive") is not None


def test_a_failed_live_read_is_one_line(tmp_path, flags_cache):
    broken = "import numpy_that_is_not_there.sub\nraise ImportError('no CUDA here')\n"
    env = fake_sglang(tmp_path / "src", "0.9.2", broken)
    with pytest.raises(UserError) as raised:
        release_flags(sys.executable, "0.9.2", env)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"could not read the flags of sglang 0.9.2 through {sys.executable}")
    assert "sglang.srt.server_args itself failed to import: ImportError: no CUDA here" in message
    assert not (flags_cache / "sglang-0.9.2.json").exists()

    with pytest.raises(UserError, match=r"through /nonexistent/python: .*No such file"):
        _sglang_live.read_live("/nonexistent/python", "0.9.2")


@pytest.mark.skipif(
    importlib.util.find_spec("msgspec") is not None, reason="msgspec is installed here"
)
def test_an_empty_parser_names_what_to_install(tmp_path, flags_cache):
    # sglang 0.5.2x declares its arguments with msgspec: without it the parser is empty.
    declared = "import msgspec\n\nclass ServerArgs(msgspec.Struct):\n    pass\n"
    env = fake_sglang(tmp_path / "src", "0.9.3", declared)
    with pytest.raises(UserError, match=r"came out empty without msgspec: .*pip install msgspec"):
        release_flags(sys.executable, "0.9.3", env)


# --------------------------------------------------------------------------- rules and translation


def test_nearest_known_release_gives_the_rules_in_one_warning_line(tmp_path, flags_cache):
    env = fake_sglang(tmp_path / "src", "0.9.1")
    space = load_space(QWEN3_8B)
    fitted, lines = version_check.fit_space(space, "0.9.1", sys.executable, env)
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings == [
        "warning: sglang 0.9.1 is not a release this tuner knows: its flags were read live from "
        f"its parser (cached in {flags_cache / 'sglang-0.9.1.json'}); start-up rules and the "
        "memory plan follow sglang 0.5.23, the nearest known release"
    ]
    assert fitted.engine_version == "0.9.1"
    assert "  mem_fraction_static" not in "\n".join(lines)  # the fake release has it
    assert any(line.startswith("  schedule_policy left out") for line in lines)
    # Start-up rules of the nearest release run for the unknown one.
    flags = {"model_path": "Qwen/Qwen3.6-27B", "mamba_radix_cache_strategy": "no_buffer"}
    assert check_startup_rules(flags, "0.9.1") == check_startup_rules(flags, "0.5.23")


def test_another_release_is_translated_in_memory_and_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(version_check, "installed_sglang", lambda python=None: "0.5.10.post1")
    result = CliRunner().invoke(
        app, ["optimize", "--engine", "sglang", "--space", str(QWEN3_8B), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        "the space names sglang 0.5.23; translated for the installed 0.5.10.post1 in memory "
        "(nothing written):"
    ) in out
    assert (
        "  cuda_graph_max_bs_decode is passed as --cuda-graph-max-bs (renamed in 0.5.14)"
    ) in out
    assert "first configurations for sglang 0.5.10.post1" in out
    assert "--cuda-graph-max-bs " in out and "--cuda-graph-max-bs-decode" not in out
    assert list(tmp_path.iterdir()) == []  # no translated file to pass back


def test_the_same_flags_say_so_in_one_line(monkeypatch):
    space = load_space(CPU_SPACE)
    fitted, lines = version_check.fit_space(space, "0.5.16")
    assert lines == ["the space names sglang 0.5.23; the installed 0.5.16 takes the same flags"]
    assert fitted.engine_version == "0.5.16"
    same, nothing = version_check.fit_space(space, "0.5.23.post1")
    assert same is space and nothing == []


def test_without_sglang_a_dry_run_goes_on_and_a_study_stops(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(version_check, "installed_sglang", lambda python=None: None)
    with pytest.raises(UserError, match=r"sglang is not installed here.*\[sglang\]"):
        version_check.check_installed_sglang(load_space(QWEN3_8B))
    dry = CliRunner().invoke(
        app, ["optimize", "--engine", "sglang", "--space", str(QWEN3_8B), "--dry-run"]
    )
    assert dry.exit_code == 0, dry.output
    assert "note: --engine sglang: sglang is not installed here" in dry.output
    assert "cost: 40 launches" in dry.output


# --------------------------------------------------------------------------- real sglang


@pytest.mark.real_sglang
@pytest.mark.timeout(600)
def test_the_real_cpu_release_is_read_live_when_its_snapshot_is_hidden(tmp_path):
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    hidden = tmp_path / "snapshots"
    hidden.mkdir()
    for path in SNAPSHOTS.glob("sglang-*.json"):
        if path.name != "sglang-0.5.23.json":
            (hidden / path.name).write_bytes(path.read_bytes())
    cache = tmp_path / "flags"
    env = {
        **_clean_env(),
        "TUNER_SGLANG_SNAPSHOTS": str(hidden),
        "TUNER_SGLANG_FLAGS_CACHE": str(cache),
    }
    args = [sys.executable, "-m", "tuner.cli", "optimize", "--engine", "sglang"]
    args += ["--engine-python", str(python), "--space", str(CPU_SPACE), "--dry-run"]
    args += ["--studies-dir", str(tmp_path / "studies")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=500, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "warning: sglang 0.5.23 is not a release this tuner knows: its flags were read live "
        "from its parser"
    ) in done.stdout
    assert "follow sglang 0.5.22, the nearest known release" in done.stdout
    assert "first configurations for sglang 0.5.23" in done.stdout
    assert "--max-total-tokens 8192" in done.stdout
    # What the live read found is what the wheel's dump holds, option for option.
    live = json.loads((cache / "sglang-0.5.23.json").read_text())["options"]
    assert live == _sglang_versions._options("0.5.23", SNAPSHOTS.resolve())


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("TUNER_SGLANG_")}


def test_a_space_for_a_newer_release_loads_against_the_nearest_known_one(tmp_path, flags_cache):
    data = yaml.safe_load(QWEN3_8B.read_text())
    data["engine"]["version"] = "0.6.0"  # newer than this tuner: read live once installed
    path = tmp_path / "newer.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_space(path).engine_version == "0.6.0"
    data["params"]["not_a_flag"] = {"choices": [1, 2]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=r"params\.not_a_flag: sglang 0\.5\.23 has no flag"):
        load_space(path)
