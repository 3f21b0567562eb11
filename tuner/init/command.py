"""The `tuner init` command: gather the facts, write the space, load it back, say what is next."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.errors import UserError

if TYPE_CHECKING:  # the command line imports this module at start; the rest loads when init runs
    from tuner.init.facts import ModelFacts
    from tuner.init.write import InitRequest
    from tuner.space.model import SearchSpace


@dataclass(frozen=True)
class WrittenSpace:
    path: Path
    space: SearchSpace  # loaded back as `tuner optimize` will load it
    # the estimate's word on the SLOs' reach and on the KV pool (tuner/init/reach.py), if asked
    note: str | None
    sglang_installed: bool = True  # in the engine's Python (False: the newest snapshot named)
    found: tuple[str, ...] = ()  # what a trace file holds, for init to say


def write_space(request: InitRequest, out: Path | None, force: bool = False) -> Path:
    """Write the space for `request` (to `out`, default ./<name>.yaml) and check it loads."""
    return written_space(request, out, force, reach=False).path


def written_space(
    request: InitRequest, out: Path | None, force: bool = False, reach: bool = True
) -> WrittenSpace:
    """Write the space for `request`, load it back and (`reach`) ask the estimate whether its
    SLOs are within reach, from the facts read once.

    The space loads as `tuner optimize` will load it: the release's parser snapshot, the
    ranges, the workload; a failure there is a bug of init's, reported with the file."""
    import yaml

    from tuner.init.facts import read_gpu, read_host, read_model, sglang_version
    from tuner.init.reach import kv_pool_note, unreachable_note
    from tuner.init.write import sim_gpu_overrides, space_name, space_text, workload_template
    from tuner.space.load import load_space
    from tuner.study.run import engine_python

    if request.engine not in ("sglang", "sim"):
        raise UserError(f"--engine {request.engine!r}: choose sglang (real) or sim (the simulator)")
    if request.engine_python and request.engine == "sim":
        raise UserError("--engine-python applies to --engine sglang only: drop one of them")
    python = engine_python(request.engine_python) if request.engine_python else None
    model = read_model(request.model_path)
    if request.device != "gpu":
        return _cpu_space(request, model, python, out, force)
    gpu = read_gpu(request.gpu, request.gpu_memory_gb, request.tp_size)
    host = read_host(gpu, request.host_ram_gb)
    version, version_source = sglang_version(request.sglang_version, python)
    choice = workload_template(request.workload)
    name = request.name or space_name(model, gpu, request.workload, choice)
    path = out or Path(f"{name}.yaml")
    if path.exists() and not force:
        raise UserError(f"{path} exists: give another -o FILE, or --force to overwrite it")
    # The simulator is told this GPU's figures when it has no profile of its own for it.
    gpu_file = None
    if request.engine == "sim" and gpu.sim_hardware is None:
        gpu_file = path.with_name(f"{path.stem}.sim-gpu.yaml")
    text = space_text(request, model, gpu, host, version, version_source, gpu_file, choice)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gpu_file is not None:
        overrides = yaml.safe_dump(sim_gpu_overrides(gpu, host), sort_keys=False)
        header = f"# {gpu.spec.name} for the simulator, written by `tuner init` for {path.name}\n"
        gpu_file.write_text(header + overrides, encoding="utf-8")
    path.write_text(text, encoding="utf-8")
    space = load_space(path)  # the parser snapshot, the ranges, the workload: as optimize will
    notes = (
        [n for n in (unreachable_note(space, model.memory, gpu),
                     kv_pool_note(space, model.memory, gpu)) if n]
        if reach
        else []
    )  # fmt: skip
    installed = request.sglang_version is not None or "not installed" not in version_source
    found = choice.statement
    if choice.workload["kind"] == "trace":
        from tuner.init.trace import over_context_note

        too_long = over_context_note(choice.workload, model.context_length)
        found += (f"note: {too_long}",) if too_long else ()
    return WrittenSpace(path, space, "\n".join(notes) or None, installed, found)


def _cpu_space(
    request: InitRequest, model: ModelFacts, python: str | None, out: Path | None, force: bool
) -> WrittenSpace:
    """`--device cpu`: real sglang on its CPU engine (tuner/init/cpu.py); no GPU is read."""
    from tuner.init.cpu import cpu_space_name, cpu_space_text
    from tuner.init.facts import sglang_version
    from tuner.space.load import load_space

    if request.device != "cpu":
        raise UserError(f"--device {request.device!r}: choose gpu (the default) or cpu")
    if request.engine != "sglang":
        raise UserError("--device cpu runs real sglang's CPU engine: drop --engine sim")
    gpu_options = {
        "--gpu": request.gpu, "--gpu-memory-gb": request.gpu_memory_gb,
        "--tp-size": request.tp_size if request.tp_size != 1 else None,
        "--draft-model": request.draft_model, "--host-ram-gb": request.host_ram_gb,
        "--kv-cache-dtype": request.kv_cache_dtypes or None,
    }  # fmt: skip
    given = [option for option, value in gpu_options.items() if value is not None]
    if given:
        raise UserError(f"{', '.join(given)}: a GPU's option, not for --device cpu")
    version, version_source = sglang_version(request.sglang_version, python)
    path = out or Path(f"{request.name or cpu_space_name(model, request.workload)}.yaml")
    if path.exists() and not force:
        raise UserError(f"{path} exists: give another -o FILE, or --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cpu_space_text(request, model, version, version_source), encoding="utf-8")
    installed = request.sglang_version is not None or "not installed" not in version_source
    return WrittenSpace(path, load_space(path), None, installed)


def init_command(
    model_path: str = typer.Option(
        ..., "--model-path", help="Checkpoint directory or hub id (its config.json must be here)."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU name (default: NVML's first GPU), or a simulator hardware name."
    ),
    gpu_memory_gb: float | None = typer.Option(
        None,
        "--gpu-memory-gb",
        help="GPU memory in GB (default: the spec sheet's or NVML's); lets --gpu name a GPU "
        "the spec table lacks.",
    ),
    workload: str = typer.Option(
        "chat",
        "--workload",
        help="chat, rag, random, a trace file (mooncake, azure, burstgpt, sharegpt, openai-chat: "
        "replayed with its times and prefix reuse) or FILE.jsonl of prompts.",
    ),
    slo: list[str] | None = typer.Option(
        None, "--slo", help="Replaces the workload's default SLO, repeatable: 'p99_ttft_ms<=2000'."
    ),
    sglang_version: str | None = typer.Option(
        None, "--sglang-version", help="Flag names of this release (default: the installed one)."
    ),
    draft_model: str | None = typer.Option(
        None, "--draft-model", help="A draft model for STANDALONE speculation."
    ),
    host_ram_gb: float | None = typer.Option(
        None, "--host-ram-gb", help="Host RAM for HiCache (default: /proc/meminfo)."
    ),
    tp_size: int = typer.Option(
        1, "--tp-size", min=1, help="GPUs one server spans (tensor parallelism), e.g. 4 for a 70B."
    ),
    kv_cache_dtype: str | None = typer.Option(
        None,
        "--kv-cache-dtype",
        help="KV cache dtype, or several to choose from: 'auto,fp8_e4m3' (default: sglang's "
        "auto, the model's dtype). An 8-bit cache can cost accuracy.",
    ),
    engine: str = typer.Option(
        "sglang",
        "--engine",
        help="Where the trials will run: sglang (real, the default) or sim (the simulator).",
    ),
    engine_python: str | None = typer.Option(
        None,
        "--engine-python",
        help="The Python that runs sglang: its release names the flags, and the space keeps it.",
    ),
    device: str = typer.Option(
        "gpu",
        "--device",
        help="gpu, or cpu: sglang's CPU engine on a machine without a GPU (a small study).",
    ),
    name: str | None = typer.Option(None, "--name", help="Space (and study) name."),
    out: Path | None = typer.Option(None, "-o", "--out", help="File to write (./<name>.yaml)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the file."),
) -> None:
    """Write a commented search space for your model and GPU (no download, no launch)."""
    from tuner.init.write import InitRequest

    request = InitRequest(
        model_path=model_path,
        gpu=gpu,
        gpu_memory_gb=gpu_memory_gb,
        workload=workload,
        slos=list(slo or []),
        sglang_version=sglang_version,
        draft_model=draft_model,
        host_ram_gb=host_ram_gb,
        name=name,
        tp_size=tp_size,
        engine=engine,
        engine_python=engine_python,
        device=device,
        kv_cache_dtypes=tuple(
            dict.fromkeys(
                part.strip() for part in (kv_cache_dtype or "").split(",") if part.strip()
            )
        ),
    )
    written = written_space(request, out, force)
    for line in written.found:
        typer.echo(line)
    typer.echo(f"wrote {written.path}")
    if written.note:
        typer.echo(written.note)
    typer.echo(f"tuning: {', '.join(written.space.params)} (each commented in the file)")
    if engine == "sglang" and not written.sglang_installed:
        typer.echo(
            "note: the trials run real sglang, which this Python lacks: install it here "
            "(pip install -e '.[sglang]'), or give the Python that has it (--engine-python, or "
            "python: in the space's engine); `tuner init --engine sim` writes a simulator space"
        )
    typer.echo(
        f"next: tuner optimize --space {written.path} --dry-run   (the cost, nothing launched)"
    )
