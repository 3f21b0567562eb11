"""`tuner init` for an installed sglang release with no committed snapshot: its flags are read
from its own parser (as `tuner optimize` reads them), not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.engines import _sglang_live, _sglang_versions
from tuner.init import facts
from tuner.init.command import written_space
from tuner.init.write import InitRequest

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "tests" / "data" / "models" / "llama-3.1-8b"

# A stand-in release with a real argparse parser holding the flags a random workload's space
# uses; the live read imports it through the interpreter's PYTHONPATH.
SERVER_ARGS = """
import argparse

class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--chunked-prefill-size", type=int)
        parser.add_argument("--enable-metrics", action="store_true")
"""


def test_init_reads_an_installed_release_without_a_snapshot_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "src" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the runtime must not start')\n")
    (package / "version.py").write_text('__version__ = "0.9.7"\n')
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(SERVER_ARGS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "src"))
    monkeypatch.setenv("TUNER_SGLANG_FLAGS_CACHE", str(tmp_path / "flags"))
    monkeypatch.setattr(_sglang_versions, "LIVE_SNAPSHOTS", {})
    monkeypatch.setattr(_sglang_live, "LIVE_SNAPSHOTS", _sglang_versions.LIVE_SNAPSHOTS)
    monkeypatch.setattr(facts, "installed_sglang", lambda python=None: "0.9.7")

    request = InitRequest(model_path=str(LLAMA), gpu="h200", workload="random")
    written = written_space(request, tmp_path / "space.yaml", reach=False)
    assert written.space.engine_version == "0.9.7"
    assert set(written.space.params) == {
        "mem_fraction_static",
        "max_running_requests",
        "chunked_prefill_size",
    }
    text = written.path.read_text()
    assert "sglang 0.9.7 (the installed sglang, its flags read live from its parser" in " ".join(
        line.removeprefix("# ") for line in text.splitlines()
    )
    assert yaml.safe_load(text)["engine"]["version"] == "0.9.7"
    assert (tmp_path / "flags" / "sglang-0.9.7.json").is_file()  # `tuner optimize` reads it

    # A flag the release lacks is left out and said so, as for a committed release.
    request = InitRequest(model_path=str(LLAMA), gpu="h200", workload="rag")
    written = written_space(request, tmp_path / "rag.yaml", reach=False)
    assert "schedule_policy" not in written.space.params
    assert "sglang 0.9.7 has no --schedule-policy: left out." in " ".join(
        line.removeprefix("# ") for line in written.path.read_text().splitlines()
    )
