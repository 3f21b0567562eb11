"""Where a study runs is part of its space, said first wherever the study is shown.

A space without `engine.server` runs real sglang; the shipped demo spaces say `simulated`;
`--engine` overrides either. `tuner init` writes real sglang (the release of the engine's Python)
and a `sim:` block only when asked; asked, it passes the GPU on to the simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from support.fake_nvml import FakePynvml
from support.sim_spaces import ROOT, small_space

from tuner.engines.sglang import CANONICAL_VERSION
from tuner.errors import UserError
from tuner.init.command import write_space
from tuner.init.write import InitRequest
from tuner.optimize.command import run_optimize
from tuner.optimize.cost import study_cost
from tuner.results.report import write_report
from tuner.space.load import load_space
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run

LLAMA_8B = ROOT / "tests" / "data" / "models" / "llama-3.1-8b"


def _space_file(tmp_path: Path, name: str, engine: dict[str, object]) -> Path:
    """The Qwen3-8B demo space with another `engine:` mapping and a local model directory."""
    data = yaml.safe_load((ROOT / "search_spaces" / "qwen3-8b-h200.yaml").read_text())
    data.update(name=name, engine=engine, model_path=str(LLAMA_8B))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _python_with_sglang(tmp_path: Path, release: str) -> Path:
    """An interpreter that answers the tuner's release question (`python -c ...`) as a Python
    with sglang `release` installed does."""
    script = tmp_path / "bin" / "python"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/sh\necho {release}\n")
    script.chmod(0o755)
    return script


def test_the_space_says_where_it_runs_and_engine_overrides_it(tmp_path):
    studies = tmp_path / "studies"
    unsaid = _space_file(tmp_path, "unsaid", {"name": "sglang", "version": "0.5.23"})
    simulated = _space_file(
        tmp_path, "simulated", {"name": "sglang", "version": "0.5.23", "server": "simulated"}
    )

    def engine(space: Path, **kw: object) -> str:
        run = resolve_run(StudyOptions(space_path=space, studies_dir=studies, **kw))
        assert run.options.engine is not None
        return run.options.engine

    assert load_space(unsaid).engine.server == "real"
    assert engine(unsaid) == "sglang"  # never the simulator unless asked
    assert engine(simulated) == "sim"
    assert engine(unsaid, engine="sim") == "sim"
    label = resolve_run(StudyOptions(space_path=unsaid, studies_dir=studies)).engine_label
    assert label == f"real sglang 0.5.23 (python {sys.executable})"
    assert engine(simulated, engine="sglang") == "sglang"
    for shipped in ("qwen3.6-27b-mtp-hicache", "qwen3-8b-h200", "qwen3.6-27b-capacity"):
        assert load_space(shipped).engine.server == "simulated", shipped
    assert load_space(ROOT / "search_spaces" / "tiny-llama-cpu.yaml").engine.server == "real"
    # An option of the other engine names the space's setting that decided it.
    with pytest.raises(UserError) as wrong:
        resolve_run(StudyOptions(space_path=simulated, engine_python=sys.executable))
    assert "engine.server: simulated" in str(wrong.value) and "--engine sglang" in str(wrong.value)
    with pytest.raises(UserError, match=r"engine\.server: real"):
        resolve_run(StudyOptions(space_path=unsaid, time_scale=10.0))
    with pytest.raises(UserError, match=r"engine\.server = 'gpu'"):
        load_space(_space_file(tmp_path, "bad", {"name": "sglang", "server": "gpu"}))


def test_a_study_names_its_engine_first_in_the_summary_and_in_the_report(tmp_path, capsys):
    space = small_space(tmp_path, name="named")
    options = StudyOptions(trials=2, space_path=space, studies_dir=tmp_path / "studies", seed=0)
    assert run_optimize(options, workers=1, report=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "engine: simulated sglang 0.5.23"
    study = next(i for i, line in enumerate(lines) if line.startswith("study named:"))
    assert lines[study - 1] == "engine: simulated sglang 0.5.23"  # the summary's first line
    html = write_report(None, "named", studies_dir=tmp_path / "studies").read_text()
    assert "Engine: simulated sglang 0.5.23 ·" in html
    # Measured trials never join modelled ones in one study.
    real = StudyOptions(
        trials=3, space_path=space, studies_dir=tmp_path / "studies", engine="sglang"
    )
    with pytest.raises(UserError) as mixed:
        run_optimize(real, workers=1, report=False, dry_run=True)
    assert str(mixed.value) == (
        "study 'named' ran on simulated sglang 0.5.23, this run on real sglang 0.5.23: give "
        "--study NEW for a new study, or --engine sim to go on with this one"
    )
    # The live panel's first line too.
    from rich.console import Console

    from tuner.optimize.progress import OptimizeDisplay

    panel = OptimizeDisplay(Console(), 2, "a", "b", engine="real sglang 0.5.21 (python py)")
    console = Console(record=True, width=200)
    console.print(panel.render())
    assert console.export_text().splitlines()[0] == "engine: real sglang 0.5.21 (python py)"


def test_the_simulator_on_a_host_with_a_gpu_and_sglang_says_so(tmp_path, monkeypatch, capsys):
    python = _python_with_sglang(tmp_path, "0.5.23")
    engine = {"name": "sglang", "version": "0.5.23", "server": "simulated", "python": str(python)}
    space = small_space(tmp_path, name="beside", engine=engine)
    options = StudyOptions(trials=2, space_path=space, studies_dir=tmp_path / "studies")
    assert run_optimize(options, workers=1, report=False, dry_run=True) == 0
    quiet = capsys.readouterr().out.splitlines()
    assert quiet[0] == "engine: simulated sglang 0.5.23" and quiet[1].startswith("cost:")

    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml())
    assert run_optimize(options, workers=1, report=False, dry_run=True) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "engine: simulated sglang 0.5.23"
    assert lines[1] == (
        "note: this host has a GPU (NVIDIA H100 80GB HBM3) and sglang 0.5.23, but the study runs "
        f"on the simulator ({space} says engine.server: simulated): its figures are modelled; "
        "--engine sglang measures the GPU"
    )
    assert (
        run_optimize(
            StudyOptions(trials=2, space_path=space, studies_dir=tmp_path / "s", engine="sim"),
            workers=1,
            report=False,
            dry_run=True,
        )
        == 0
    )
    assert "(--engine sim)" in capsys.readouterr().out.splitlines()[1]


def test_init_writes_real_sglang_of_the_engines_python_and_no_sim_block(tmp_path, capsys):
    python = _python_with_sglang(tmp_path, "0.5.11")
    request = InitRequest(model_path=str(LLAMA_8B), gpu="h100", engine_python=str(python))
    path = write_space(request, tmp_path / "real.yaml")
    space = load_space(path)
    assert space.engine.server == "real" and space.engine.version == "0.5.11"
    assert space.engine.python == str(python) and space.sim == {}
    assert "# sglang 0.5.11 (the sglang of " in path.read_text()
    # Run on the simulator anyway, it says which GPU it models instead.
    run = StudyOptions(space_path=path, studies_dir=tmp_path / "studies", engine="sim")
    assert run_optimize(run, workers=1, report=False, dry_run=True) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "note: the space has no sim: block, so the simulator models its default GPU (NVIDIA RTX "
        "PRO 6000 Blackwell Workstation Edition), not yours: `tuner init --engine sim --gpu NAME` "
        "writes a space whose simulator models your GPU"
    )
    # A Python without sglang: the newest release the tuner knows.
    bare = write_space(
        InitRequest(model_path=str(LLAMA_8B), gpu="h100", engine_python=sys.executable),
        tmp_path / "bare.yaml",
    )
    assert load_space(bare).engine.version == CANONICAL_VERSION
    with pytest.raises(UserError, match="--engine-python applies to --engine sglang only"):
        write_space(
            InitRequest(model_path=str(LLAMA_8B), gpu="h100", engine="sim", engine_python="x"),
            tmp_path / "both.yaml",
        )


def test_a_space_for_an_l40s_is_priced_on_an_l40s_never_on_the_simulators_default(tmp_path):
    studies = tmp_path / "studies"
    real = write_space(
        InitRequest(model_path=str(LLAMA_8B), gpu="NVIDIA L40S"), tmp_path / "r.yaml"
    )
    run = resolve_run(StudyOptions(space_path=real, studies_dir=studies))
    assert run.options.engine == "sglang"
    cost = " ".join(study_cost(run).lines())
    assert "RTX PRO 6000" not in cost and "simulator" not in cost
    # Asked for the simulator, which has no L40S profile: it is given the L40S's figures.
    request = InitRequest(model_path=str(LLAMA_8B), gpu="NVIDIA L40S", engine="sim")
    simulated = write_space(request, tmp_path / "s.yaml")
    assert (tmp_path / "s.sim-gpu.yaml").is_file()
    run = resolve_run(StudyOptions(space_path=simulated, studies_dir=studies))
    assert run.options.engine == "sim"
    assert run.host.gpu_name == "L40S" and run.host.gpu_memory_gb == pytest.approx(48.0, abs=0.1)
    cost = " ".join(study_cost(run).lines())
    assert "the estimate for sglang's defaults on L40S" in cost and "RTX PRO 6000" not in cost
