"""Provenance: each study records once where its numbers came from; `tuner studies` and the
report show it; a study resumed on another release or GPU says so in one line.

The real CPU tier's study (sglang 0.5.23, torch) is checked in tests/test_real_sglang.py, on the
study its module fixture already runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path

import optuna
import pytest
from support.sim_spaces import small_space, tuner_cli

from tuner import host
from tuner.host import HostFacts, install_commit
from tuner.results import record
from tuner.results.provenance import (
    MASK,
    Provenance,
    collect_provenance,
    mask_secrets,
    model_facts,
    read_provenance,
    record_provenance,
    resume_warning,
)

REPO = Path(__file__).resolve().parents[1]
LLAMA_8B = REPO / "tests" / "data" / "models" / "llama-3.1-8b"
SIM_GPU = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def load(studies: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{studies / name}.db")


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-trial study on the simulator, with a secret and a GPU choice in the environment."""
    work = tmp_path_factory.mktemp("provenance")
    space = small_space(work, "prov")
    os.environ["SGLANG_API_KEY"] = "hunter2-secret"
    try:
        result = tuner_cli(
            *("optimize", "--space", str(space), "--trials", "2", "--seed", "3"),
            *("--studies-dir", "studies"),
            cwd=work,
        )
    finally:
        del os.environ["SGLANG_API_KEY"]
    assert result.returncode == 0, result.stdout + result.stderr
    return work


def test_a_simulator_study_records_where_it_ran(sim_study):
    study = load(sim_study / "studies", "prov")
    facts = read_provenance(study.user_attrs)
    assert facts is not None
    assert facts.engine == "sim" and facts.sglang_version == "0.5.23"
    assert facts.gpu_name == SIM_GPU and facts.gpu_driver == "simulated"
    assert facts.gpu_memory_gb and facts.gpu_memory_gb > 90
    assert facts.torch_version is None and facts.cuda_version is None  # nothing ran torch
    assert facts.hostname == socket.gethostname() and facts.seed == 3
    assert facts.server_env["SGLANG_API_KEY"] == MASK
    assert facts.model_path == "Qwen/Qwen3.6-27B"
    # Not on this host: the simulator served its own copy of the model's config.json.
    config = Path(str(facts.model_config_path))
    assert config.name == "config.json" and "tuner" in config.parts and "sim" in config.parts
    assert facts.model_config_sha256 == hashlib.sha256(config.read_bytes()).hexdigest()
    # The secret reached the server through the environment, never the study's storage.
    assert b"hunter2-secret" not in (sim_study / "studies" / "prov.db").read_bytes()


def test_tuner_studies_and_the_report_show_the_provenance(sim_study):
    listing = tuner_cli("studies", "--studies-dir", "studies", cwd=sim_study)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert "  engine: simulated sglang 0.5.23; tuner 0.1.0" in lines
    assert any(line.startswith(f"  hardware: {SIM_GPU}, ") for line in lines), listing.stdout
    assert "  server environment: SGLANG_API_KEY=***" in lines
    assert any(line.startswith(f"  host {socket.gethostname()}, seed 3, ") for line in lines)
    page = (sim_study / "studies" / "prov" / "report.html").read_text()
    table = page[page.index('<table id="provenance">') :]
    table = table[: table.index("</table>")]
    assert "<th>engine</th><td>simulated server</td>" in table
    assert f"<th>hardware</th><td>{SIM_GPU}, " in table
    assert "<th>seed</th><td>3</td>" in table


def test_every_exported_file_says_where_the_study_ran(sim_study):
    export = tuner_cli(
        "export", "--study", "prov", "--pick", "max-throughput", "--studies-dir", "studies",
        "--out-dir", "exported", cwd=sim_study,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr
    files = sorted((sim_study / "exported").iterdir())
    assert len(files) == 4, files  # launch script, --config YAML, docker script, manifest
    for path in files:
        text = path.read_text()
        assert "study ran on: engine: simulated sglang 0.5.23; tuner " in text, path.name
        assert f"study ran on: hardware: {SIM_GPU}, " in text, path.name
        assert "hunter2-secret" not in text


def test_a_study_resumed_on_another_gpu_warns_in_one_line(sim_study):
    study = load(sim_study / "studies", "prov")
    recorded = study.user_attrs[record.STUDY_PROVENANCE]
    study.set_user_attr(record.STUDY_PROVENANCE, {**recorded, "gpu_name": "NVIDIA H100"})
    space = sim_study / "prov.yaml"
    try:
        dry = tuner_cli(
            *("optimize", "--space", str(space), "--trials", "2", "--dry-run"),
            *("--studies-dir", "studies"),
            cwd=sim_study,
        )
    finally:
        study.set_user_attr(record.STUDY_PROVENANCE, recorded)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    warnings = [line for line in dry.stdout.splitlines() if "not comparable" in line]
    assert warnings == [
        f"warning: this study was made with GPU NVIDIA H100 and resumes with GPU {SIM_GPU}: "
        "its earlier trials are not comparable with new ones (--study NAME starts a new study)"
    ]
    again = tuner_cli(
        *("optimize", "--space", str(space), "--trials", "2", "--dry-run"),
        *("--studies-dir", "studies"),
        cwd=sim_study,
    )
    assert "not comparable" not in again.stdout  # the same GPU: nothing to say


def test_provenance_is_recorded_once():
    study = optuna.create_study(directions=["maximize", "minimize"])
    first = Provenance(tuner_version="0.1.0", engine="sim", sglang_version="0.5.23")
    record_provenance(study, lambda: first)

    def must_not_run() -> Provenance:
        raise AssertionError("a study with provenance keeps it; nothing is read again")

    record_provenance(study, must_not_run)
    assert read_provenance(study.user_attrs) == first


def test_resume_warning_names_what_changed():
    made = Provenance(
        tuner_version="0.1.0", engine="sglang", sglang_version="0.5.21", gpu_name="NVIDIA L40S"
    )
    assert resume_warning(made, "sglang", "0.5.21", "NVIDIA L40S") is None
    assert resume_warning(None, "sglang", "0.5.23", "NVIDIA H100") is None  # nothing recorded
    line = resume_warning(made, "sglang", "0.5.23", None)  # no NVML now: the GPU is unknown
    assert line is not None and "\n" not in line
    assert line.startswith("warning: this study was made with sglang 0.5.21 and resumes with ")
    both = resume_warning(made, "sglang", "0.5.23", "NVIDIA H100")
    assert both is not None
    assert "made with sglang 0.5.21, GPU NVIDIA L40S and resumes with sglang 0.5.23, GPU " in both


def test_secrets_are_masked_and_the_rest_kept():
    env = {"SGLANG_API_KEY": "k", "HF_TOKEN": "t", "SGLANG_USE_CPU_ENGINE": "1", "MY_SECRET": ""}
    assert mask_secrets(env) == {
        "HF_TOKEN": MASK,
        "MY_SECRET": "",  # empty: nothing to hide
        "SGLANG_API_KEY": MASK,
        "SGLANG_USE_CPU_ENGINE": "1",
    }


def test_the_model_revision_is_the_hugging_face_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    revision = "0e9e39f249a16976918f6564b8830bc894c89659"
    snapshot = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    config = (LLAMA_8B / "config.json").read_bytes()
    (snapshot / "config.json").write_bytes(config)
    facts = model_facts("meta-llama/Llama-3.1-8B")
    assert facts == {
        "model_config_sha256": hashlib.sha256(config).hexdigest(),
        "model_revision": revision,
        "model_config_path": str(snapshot / "config.json"),
    }
    local = model_facts(str(LLAMA_8B))  # a plain directory: a hash, no revision
    assert local["model_revision"] is None and local["model_config_sha256"]
    assert model_facts("nobody/nothing") == {}


def test_an_sglang_built_from_git_records_its_commit(tmp_path):
    assert install_commit({"url": "https://github.com/sgl-project/sglang", "vcs_info": {
        "vcs": "git", "commit_id": "a" * 40}}) == "a" * 40  # fmt: skip
    checkout = tmp_path / "sglang" / "python"  # sglang's package lives in python/ of the repo
    checkout.mkdir(parents=True)
    git = tmp_path / "sglang" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs\n{'b' * 40} refs/heads/main\n")
    editable = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    assert install_commit(editable) == "b" * 40
    (git / "refs" / "heads" / "main").write_text("c" * 40 + "\n")  # a loose ref wins
    assert install_commit(editable) == "c" * 40
    assert install_commit({"url": "https://example.org/sglang.whl", "archive_info": {}}) is None


class FakeNvml:
    def gpus(self) -> list[host.Gpu]:
        return [host.Gpu(i, "NVIDIA H100 80GB HBM3", 79.6, 79.1) for i in range(4)]

    def processes(self) -> list[host.GpuProcess]:
        return []

    def driver(self) -> str:
        return "550.54.15"


def test_an_sglang_study_asks_the_engine_python_and_nvml(tmp_path, monkeypatch):
    # An sglang installed from git (PEP 610 direct_url.json) in the engine's environment.
    root = tmp_path / "site"
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    info = root / "sglang-0.5.24.dev0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.24.dev0\n")
    direct = {"url": "https://github.com/sgl-project/sglang", "vcs_info": {"vcs": "git"}}
    direct["vcs_info"]["commit_id"] = "d" * 40  # type: ignore[index]
    (info / "direct_url.json").write_text(json.dumps(direct))
    monkeypatch.setattr(host, "NVML", FakeNvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    facts = collect_provenance(
        engine="sglang",
        python=sys.executable,
        server_env={"PYTHONPATH": str(root), "HF_TOKEN": "hf_abc"},
        gpus="2,3",
        model_path=str(LLAMA_8B),
        seed=None,
        host_facts=HostFacts(gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_gb=79.6),
        spoken_version="0.5.23",
    )
    assert facts.sglang_version == "0.5.24.dev0" and facts.sglang_commit == "d" * 40
    assert facts.python_version == sys.version.split()[0]
    assert (facts.gpu_name, facts.gpu_count) == ("NVIDIA H100 80GB HBM3", 2)  # --gpus 2,3
    assert facts.gpu_driver == "550.54.15"
    assert facts.server_env["CUDA_VISIBLE_DEVICES"] == "2,3"  # --gpus, over the tuner's own
    assert facts.server_env["HF_TOKEN"] == MASK
    assert facts.lines()[0].startswith("engine: sglang 0.5.24.dev0 (commit dddddddddddd), torch ")
