"""The README's GPU walkthrough, run as a user copies it, so that the guide cannot rot (issue 67).

README.md holds one fenced bash block between `<!-- walkthrough:start -->` and
`<!-- walkthrough:end -->`. The fast tests check that the block is there and that every `tuner`
command and option in it parses with the command line of tuner/cli.py (a renamed option fails
here, in seconds). The `real_sglang` test runs the block's `tuner` lines one after another in
an empty directory against real sglang on this CPU, with these substitutions only:

- `pip install ...` and `huggingface-cli download ...` are not run (the tier is installed by
  tools/install_real_sglang.sh; nothing is downloaded);
- `tuner init`: the model path becomes the tiny Llama, and `--device cpu --engine-python <the
  tier's Python>` is added: the space it writes records both, so the later lines run as written;
- `tuner optimize --trials N` runs 1 trial (a CPU launch takes 25-90 s).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from support.real_sglang import INSTALL_HINT, build_tiny_model, venv_python

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
START, END = "<!-- walkthrough:start -->", "<!-- walkthrough:end -->"
# Lines of the block the test does not run: what each installs or fetches, the tier has.
NOT_RUN = ("pip install ", "huggingface-cli download ")
# The order a user follows: write the space, check the host, see the cost, tune, deploy.
STEPS = ["init", "doctor", "optimize", "optimize", "export"]
WALKTHROUGH_TRIALS = "1"


def block_lines(readme: str) -> list[str]:
    """The shell lines of the fenced block between the markers (continuations joined)."""
    start, end = readme.find(START), readme.find(END)
    assert start >= 0 and end > start, f"README.md: no {START} ... {END} block"
    fenced = re.search(r"```(?:bash|sh|console)?\n(.*?)```", readme[start:end], re.DOTALL)
    assert fenced, "README.md: the walkthrough markers hold no fenced code block"
    text = fenced.group(1).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def tuner_commands(readme: str) -> list[list[str]]:
    """The argv (after `tuner`) of each `tuner` line; any other line must be a known one."""
    commands = []
    for line in block_lines(readme):
        argv = shlex.split(line, comments=True)
        if argv[0] == "tuner":
            commands.append(argv[1:])
        else:
            assert line.startswith(NOT_RUN), f"walkthrough line the test does not know: {line}"
    return commands


def option_value(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]


def on_cpu_tier(argv: list[str], python: Path, model: Path) -> list[str]:
    """The documented substitutions (module docstring), nothing else."""
    argv = list(argv)
    if argv[0] == "init":
        argv[argv.index("--model-path") + 1] = str(model)
        argv += ["--device", "cpu", "--engine-python", str(python)]
    if argv[0] == "optimize" and "--trials" in argv:
        argv[argv.index("--trials") + 1] = WALKTHROUGH_TRIALS
    return argv


def test_readme_has_the_walkthrough_in_order() -> None:
    commands = tuner_commands(README.read_text(encoding="utf-8"))
    assert [argv[0] for argv in commands] == STEPS
    dry_run, study = commands[2], commands[3]
    assert "--dry-run" in dry_run and "--dry-run" not in study and "--trials" in study
    # Each later line names what the earlier ones made: the space file and the study.
    space = f"{option_value(commands[0], '--name')}.yaml"
    assert [option_value(argv, "--space") for argv in commands[1:4]] == [space] * 3
    assert option_value(commands[4], "--study") == option_value(commands[0], "--name")


def test_every_command_and_option_of_the_walkthrough_exists() -> None:
    from tuner.cli import app

    group: Any = typer.main.get_command(app)
    for argv in tuner_commands(README.read_text(encoding="utf-8")):
        command = group.commands.get(argv[0])
        assert command is not None, f"walkthrough: `tuner {argv[0]}` is not a command"
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        for word in argv[1:]:
            if word.startswith("-"):
                option = word.split("=", 1)[0]
                assert option in known, f"walkthrough: `tuner {argv[0]} {option}` does not exist"
        # The values too: click parses them as `tuner` will (types, ranges, required options).
        command.make_context(f"tuner {argv[0]}", argv[1:])


def test_init_device_cpu_writes_what_the_cpu_engine_needs(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 2048,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (model / "config.json").write_text(json.dumps(config))
    init = [sys.executable, "-m", "tuner.cli", "init", "--model-path", str(model), "--device"]
    done = subprocess.run(
        [*init, "cpu", "--sglang-version", "0.5.23", "--name", "walk"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    space = yaml.safe_load((tmp_path / "walk.yaml").read_text())
    assert space["engine"]["server"] == "real"
    assert space["engine"]["env"]["SGLANG_USE_CPU_ENGINE"] == "1"
    assert space["fixed_flags"]["device"] == "cpu"
    assert space["fixed_flags"]["max_total_tokens"] == 8192
    assert "mem_fraction_static" not in space["params"]  # a GPU's question
    assert space["workload"]["conversations"] <= 8  # the chat template at a CPU's size
    for device, *given, message in [
        ("cpu", "--gpu", "H100", "--gpu: a GPU's option, not for --device cpu"),
        ("tpu", "--device 'tpu': choose gpu (the default) or cpu"),
    ]:
        refused = subprocess.run(
            [*init, device, *given, "-o", "other.yaml"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert (refused.returncode, refused.stderr.strip()) == (2, f"error: {message}")
    assert not (tmp_path / "other.yaml").exists()


@pytest.mark.real_sglang
@pytest.mark.timeout(600)
def test_walkthrough_runs_on_the_cpu_tier(tmp_path: Path) -> None:
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    model = build_tiny_model(python, tmp_path / "tiny-llama")
    work = tmp_path / "walk"
    work.mkdir()
    outputs = []
    for argv in tuner_commands(README.read_text(encoding="utf-8")):
        argv = on_cpu_tier(argv, python, model)
        done = subprocess.run(
            [sys.executable, "-m", "tuner.cli", *argv],
            cwd=work, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, f"tuner {shlex.join(argv)}:\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    doctor = [line for line in outputs[1].splitlines() if re.match(r"(ok|warn|fail) +\w", line)]
    assert len(doctor) >= 7 and not any(line.startswith("fail") for line in doctor), outputs[1]
    assert "dry run: nothing launched" in outputs[2]
    assert "engine: real sglang" in outputs[3] and "1 complete" in outputs[3]
    written = re.findall(r"^(?:script|config|docker|kubernetes): (\S+)$", outputs[4], re.M)
    assert len(written) == 4, outputs[4]
    for name in written:
        assert (work / name).stat().st_size > 0
    script = (work / written[0]).read_text()
    assert "SGLANG_USE_CPU_ENGINE" in script and "--device cpu" in script
