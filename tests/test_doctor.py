"""`tuner doctor`: one line per check, ok / warn / fail, exit 2 on a fail.

NVML is the only part replaced (tuner.host.NVML, the seam): processes, ports, /proc, the
engine's Python and the model directory are this host's. The test marked `real_sglang` runs the
doctor against the CPU tier's real sglang 0.5.23.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.fake_nvml import FakePynvml
from support.real_sglang import INSTALL_HINT, build_tiny_model, venv_python
from typer.testing import CliRunner

from tuner import host
from tuner.cli import app
from tuner.doctor import FAIL, OK, WARN, DoctorSetting
from tuner.doctor.engine import flags_check
from tuner.doctor.gpus import gpus_check
from tuner.doctor.host_ram import device_pool_gb, host_ram_check, largest_hicache
from tuner.doctor.ports import ports_check
from tuner.engines.model_config import ModelMemory, read_config
from tuner.errors import UserError
from tuner.optimize import version_check
from tuner.optimize.command import run_optimize
from tuner.space.load import load_space
from tuner.study.options import StudyOptions

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(__file__).parent / "data" / "models"
CPU_SPACE = REPO / "search_spaces" / "tiny-llama-cpu.yaml"
HICACHE_SPACE = REPO / "search_spaces" / "qwen3.6-27b-mtp-hicache.yaml"
LLAMA_8B = REPO / "tests" / "data" / "models" / "llama-3.1-8b"
STATUSES = (f"{OK} ", f"{WARN} ", f"{FAIL} ")


class FakeNvml:
    """NVML as a GPU host would answer it: the GPUs, who holds their memory, the driver."""

    def __init__(self, gpus: list[host.Gpu], processes: list[host.GpuProcess]) -> None:
        self._gpus, self._processes = gpus, processes

    def gpus(self) -> list[host.Gpu]:
        return self._gpus

    def processes(self) -> list[host.GpuProcess]:
        return self._processes

    def driver(self) -> str:
        return "550.54.15"


def check_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(STATUSES)]


def fake_sglang(tmp_path: Path) -> Path:
    """An importable `sglang` with package metadata (release 0.5.23) whose launch_server only
    sleeps: a stale server's command line, without a server."""
    root = tmp_path / "fake-sglang"
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "launch_server.py").write_text("import time\ntime.sleep(120)\n")
    info = root / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    return root


def test_a_gpu_held_by_a_stale_sglang_server_is_named_with_its_pid(tmp_path, monkeypatch):
    root = fake_sglang(tmp_path)
    stale = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--port", "31999"],
        env={**os.environ, "PYTHONPATH": str(root)},
        start_new_session=True,  # its own group, as the tuner and sglang users start servers
    )
    try:
        deadline = time.monotonic() + 30
        while "sglang.launch_server" not in (host.process_command(stale.pid) or ""):
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.05)
        gpu = host.Gpu(0, "NVIDIA H100 80GB HBM3", 79.6, 39.2)
        monkeypatch.setattr(host, "NVML", FakeNvml([gpu], [host.GpuProcess(stale.pid, 0, 40.0)]))
        result = CliRunner().invoke(
            app,
            [
                "doctor",
                "--engine-python",
                sys.executable,
                "--engine-env",
                f"PYTHONPATH={root}",
                "--studies-dir",
                str(tmp_path / "studies"),
            ],
        )
    finally:
        os.killpg(stale.pid, signal.SIGKILL)
        stale.wait(timeout=10)
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0].split(maxsplit=1)[1]: line for line in check_lines(result.output)}
    held = lines["gpu processes"]
    assert held.startswith("warn gpu processes: ")
    assert f"pid {stale.pid} holds 40.0 GB on GPU 0" in held
    assert "-m sglang.launch_server --port 31999" in held
    assert f"a stale sglang server? stop it: kill -- -{stale.pid}" in held
    assert lines["gpus"].startswith("warn gpus: 0 NVIDIA H100 80GB HBM3 39.2 of 79.6 GB free")
    # The same server seen from /proc alone, as on a host without NVML.
    assert f"pid {stale.pid} (port 31999)" in lines["sglang servers"]
    assert lines["engine"].startswith(f"{WARN} engine: {sys.executable}")  # no CUDA torch here
    assert "imports sglang 0.5.23" in lines["engine"]
    assert len(lines) >= 7


def test_a_fail_exits_2_with_one_error_line(tmp_path):
    missing = tmp_path / "nowhere" / "python"
    result = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "doctor", "--engine-python", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: 1 check(s) failed (engine): see the fail lines above"
    ]
    fails = [line for line in check_lines(result.stdout) if line.startswith("fail ")]
    assert fails == [
        f"fail engine: {missing} (--engine-python): no executable file there; on a GPU host "
        "pip install 'sglang-tuner[sglang]' there, on a CPU tools/install_real_sglang.sh; or "
        "give --engine-python"
    ]
    assert len(check_lines(result.stdout)) >= 7  # the other checks still ran


def test_weights_larger_than_the_free_memory_fail_the_gpu_check(monkeypatch):
    model = ModelMemory.from_hf_config(read_config(LLAMA_8B))  # ~16 GB of bf16 weights
    busy = host.Gpu(0, "NVIDIA L4", 24.0, 9.5)
    monkeypatch.setattr(host, "NVML", FakeNvml([busy, host.Gpu(1, "NVIDIA L4", 24.0, 23.6)], []))
    setting = DoctorSetting.resolve(space_path=HICACHE_SPACE, gpus="0")
    check = gpus_check(setting, model)
    assert check.status == FAIL
    assert check.reason.startswith("0 NVIDIA L4 9.5 of 24.0 GB free: the model's weights need 16.")
    assert check.reason.endswith("GB per GPU (tp 1); free GPU 0 first")
    # The other GPU is free enough.
    assert gpus_check(DoctorSetting.resolve(space_path=HICACHE_SPACE, gpus="1"), model).status == OK


def test_host_ram_is_set_against_the_largest_hicache_host_pool(monkeypatch):
    space = load_space(HICACHE_SPACE)
    ratio, size = largest_hicache(space)
    assert (ratio, size) == (8.0, None)  # the space samples hicache_ratio up to 8
    model = ModelMemory.from_hf_config(read_config(LLAMA_8B))
    pool = device_pool_gb(space, model, 80.0)
    assert 20 < pool < 80  # the KV pool of an 8B model on an 80 GB GPU at the largest fraction
    setting = DoctorSetting.resolve(space_path=HICACHE_SPACE)
    monkeypatch.setattr("tuner.doctor.host_ram.meminfo_available_gb", lambda: 8 * pool + 11)
    enough = host_ram_check(setting, model, 80.0)
    assert enough.status == OK and f"hicache_ratio 8 x a {pool:.1f} GB KV pool" in enough.reason
    # sglang keeps 10 GB of the free RAM: what is left holds a host pool of twice the KV pool.
    monkeypatch.setattr("tuner.doctor.host_ram.meminfo_available_gb", lambda: 2 * pool + 10)
    short = host_ram_check(setting, model, 80.0)
    assert short.status == WARN
    assert f"needs ~{8 * pool:.0f} GB" in short.reason
    assert short.reason.endswith("ratios above 2.0 will not start")


def test_flags_come_from_the_release_snapshot_or_the_check_fails(tmp_path):
    setting = DoctorSetting.resolve(space_path=CPU_SPACE, engine_python=str(tmp_path / "py"))
    ok = flags_check(setting, host.EngineProbe("py", sglang_version="0.5.23"))
    assert ok.line() == (
        "ok   flags: sglang 0.5.23: flags from committed snapshot sglang-0.5.23.json"
    )
    other = flags_check(setting, host.EngineProbe("py", sglang_version="0.5.10.post1"))
    assert other.status == WARN  # another release than the space's: translated
    assert "sglang-0.5.10.post1.json" in other.reason and "written for 0.5.23" in other.reason
    # No snapshot, and no Python to read the parser through: the check fails in one line.
    unknown = flags_check(setting, host.EngineProbe("py", sglang_version="9.1.0"))
    assert unknown.status == FAIL and "\n" not in unknown.reason
    assert "sglang 9.1.0" in unknown.reason


def test_a_busy_port_names_the_process_listening_on_it(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        check = ports_check(DoctorSetting.resolve(port=port, studies_dir=tmp_path))
    assert check.status == WARN
    assert f"--port {port} on 127.0.0.1 is in use by pid {os.getpid()}" in check.reason
    free = ports_check(DoctorSetting.resolve(port=port, studies_dir=tmp_path))
    assert free.status == OK


def test_optimize_on_sglang_stops_at_a_failed_check_before_any_study(tmp_path, monkeypatch):
    # The release check passes (as on a host with sglang 0.5.23); the host check then finds
    # that this Python cannot import sglang, and nothing is created.
    monkeypatch.setattr(version_check, "installed_sglang", lambda python=None: "0.5.23")
    space = yaml.safe_load(CPU_SPACE.read_text())
    # A model directory with a config.json, so that the model path passes the run's own check
    # (a directory without one is refused before the host check, tests/test_cpu_tier_edges.py).
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(MODELS / "llama-3.1-8b" / "config.json", model / "config.json")
    space["model_path"] = str(model)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    options = StudyOptions(
        trials=1,
        space_path=path,
        engine="sglang",
        engine_python=sys.executable,
        studies_dir=tmp_path / "studies",
    )
    with pytest.raises(UserError) as failed:
        run_optimize(options, workers=1, report=False)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"host check failed: engine: {sys.executable}")
    assert message.endswith("tuner doctor --space FILE shows every check")
    assert not (tmp_path / "studies").exists()


@pytest.mark.real_sglang
@pytest.mark.timeout(600)
def test_doctor_passes_with_the_real_cpu_tier(tmp_path):
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    model = build_tiny_model(python, tmp_path / "tiny-llama")
    space = yaml.safe_load(CPU_SPACE.read_text())
    space["model_path"] = str(model)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tuner.cli", "doctor", "--engine-python", str(python)),
            *("--space", str(path), "--studies-dir", str(tmp_path / "studies")),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=500,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = check_lines(result.stdout)
    assert len(lines) >= 7, result.stdout
    assert not [line for line in lines if line.startswith("fail ")]
    by_name = {line.split(":")[0].split(maxsplit=1)[1]: line for line in lines}
    assert by_name["engine"].startswith(f"ok   engine: {python} (Python 3.")
    assert "imports sglang 0.5.23" in by_name["engine"] and "torch 2." in by_name["engine"]
    assert by_name["flags"] == (
        "ok   flags: sglang 0.5.23: flags from committed snapshot sglang-0.5.23.json"
    )
    assert by_name["model"].startswith(f"ok   model: {model}: config.json found")
    # No GPU on the CPU tier, and none needed: the space runs sglang with device cpu.
    assert by_name["gpus"].startswith("ok   gpus: ")
    assert by_name["host ram"].startswith("ok   host ram: ") and "no HiCache" not in by_name
    print(result.stdout)


def test_the_real_nvml_reader_turns_nvidia_ml_py_answers_into_gpus_and_holders(monkeypatch):
    # Two L40S, the first holding a server's memory; the same pid again as a graphics context
    # (its memory not reported); a driver that does not say its version.
    two = FakePynvml(
        name=b"NVIDIA L40S",
        gpus=2,
        total=48.3e9,
        free=lambda handle: 47.7e9 if handle else 12.0e9,
        compute=lambda handle: [] if handle else [(4242, 36_000_000_000)],
        graphics=lambda handle: [] if handle else [(4242, None)],
        driver=None,
    )
    monkeypatch.setitem(sys.modules, "pynvml", two)
    reader = host.Nvml()
    assert reader.gpus() == [
        host.Gpu(0, "NVIDIA L40S", 48.3, 12.0),
        host.Gpu(1, "NVIDIA L40S", 48.3, 47.7),
    ]
    assert reader.processes() == [host.GpuProcess(4242, 0, 36.0)]  # one entry per pid and GPU
    with pytest.raises(host.NvmlUnavailable, match="NVML: Not Supported"):
        reader.driver()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: the import fails
    with pytest.raises(host.NvmlUnavailable, match="nvidia-ml-py is not installed"):
        reader.gpus()
    assert host.nvml_gpu() is None and host.nvml_compute_processes([0]) is None
