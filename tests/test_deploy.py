"""tuner export's deploy files: the `docker run` script and the Kubernetes manifest.

The manifest is checked against the Kubernetes API schema by kubernetes-validate (offline: the
package ships the schemas); the docker script is run with a stand-in `docker` that prints what
it was given, and compared with what the launch script gives the server.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import optuna
import pytest
import yaml
from support.fixture_studies import build_study, sqlite_study

from tuner.results import record
from tuner.results.deploy import gpu_count, image_for, is_secret, kubernetes_name, local_paths
from tuner.results.export import ExportResult, export_trial
from tuner.results.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

K8S_VERSION = kubernetes_validate.latest_version()
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
CONTAINER_LISTEN = ["--host", "0.0.0.0", "--port", "30000"]


@pytest.fixture(scope="module")
def knee(tmp_path_factory) -> ExportResult:
    """The sample study's default pick (trial 12: NEXTN, HiCache, 0.5.23), exported."""
    studies = tmp_path_factory.mktemp("studies")
    sqlite_study(studies, "qwen-mtp")
    out = tmp_path_factory.mktemp("out")
    return export_trial(open_storage(None, "qwen-mtp", studies), "qwen-mtp", out_dir=out)


def one_trial(tmp_path: Path, name: str, args: list[str], **attrs: object) -> ExportResult:
    """Export trial 1 of a study that ran `args` with real sglang; `attrs` are study attrs."""
    url = f"sqlite:///{tmp_path / f'{name}.db'}"
    study = build_study(url, name, only=[0], engine="sglang")
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 1.0],
            params={},
            distributions={},
            user_attrs={**study.trials[0].user_attrs, "server_args": args},
            constraints={"launch": 0.0},
        )
    )
    storage = open_storage(url, name, tmp_path)
    return export_trial(storage, name, trial=1, out_dir=tmp_path / f"{name}-out")


def manifest(result: ExportResult) -> tuple[dict, dict]:
    deployment, service = yaml.safe_load_all(result.kubernetes.read_text())
    return deployment, service


def validate(document: dict) -> None:
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


# -- the Kubernetes manifest -----------------------------------------------------------------


def test_the_manifest_validates_against_the_kubernetes_schema(knee):
    deployment, service = manifest(knee)
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    for document in (deployment, service):
        validate(document)
        assert DNS_1035.match(document["metadata"]["name"]), document["metadata"]["name"]
    # The validator is strict: a misspelt field or a wrong type is refused.
    misspelt = json.loads(json.dumps(deployment))
    container(misspelt)["readinesProbe"] = container(misspelt).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        validate(misspelt)
    wrong_type = json.loads(json.dumps(service))
    wrong_type["spec"]["ports"][0]["port"] = "thirty thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(wrong_type)


def test_the_deployment_serves_the_tuned_flags_on_a_gpu(knee):
    deployment, service = manifest(knee)
    pod = deployment["spec"]["template"]
    server = container(deployment)
    assert server["image"] == "lmsysorg/sglang:v0.5.23"
    assert server["command"] == ["python3", "-m", "sglang.launch_server"]
    assert server["args"] == [*knee.argv, *CONTAINER_LISTEN]
    assert server["resources"]["limits"] == {"nvidia.com/gpu": 1}
    # Ready when /health answers, on the port the server listens on and the Service targets.
    probe = server["readinessProbe"]["httpGet"]
    (port,) = server["ports"]
    assert probe == {"path": "/health", "port": port["name"]}
    assert port["containerPort"] == 30000
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    # The Service selects the Deployment's pods, and the Deployment its own template.
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    # Shared memory backed by RAM, and the model cache as a volume.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    cache = volumes[mounts["/root/.cache/huggingface"]]
    assert cache["persistentVolumeClaim"]["claimName"] == "sglang-model-cache"
    text = knee.kubernetes.read_text()
    assert "sglang-model-cache is a placeholder" in text
    assert "HiCache keeps a host-memory pool" in text  # trial 12 runs HiCache
    # HF_TOKEN comes from a Secret, never as a value.
    (token,) = server["env"]
    assert token["name"] == "HF_TOKEN" and "value" not in token
    assert token["valueFrom"]["secretKeyRef"]["name"] == "sglang-secrets"
    assert "&id" not in text and "*id" not in text  # no YAML anchors for readers to decode


def test_gpu_limit_follows_the_parallel_sizes_and_cpu_runs_ask_for_none(tmp_path):
    tp4 = one_trial(tmp_path, "tp4", ["--model-path", "m", "--tp-size", "4"])
    deployment, _ = manifest(tp4)
    validate(deployment)
    assert container(deployment)["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert "HiCache" not in tp4.kubernetes.read_text()
    assert "--gpus" in run_docker_script(tp4, tmp_path)

    cpu = one_trial(tmp_path, "cpu", ["--model-path", "m", "--device", "cpu"])
    deployment, _ = manifest(cpu)
    validate(deployment)
    assert "resources" not in container(deployment)
    assert "--gpus" not in run_docker_script(cpu, tmp_path)

    assert gpu_count(["--tp-size", "2", "--pp-size", "2"]) == 4
    assert gpu_count(["--tensor-parallel-size=2", "--dp-size", "2"]) == 4
    assert gpu_count(["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"]) == 4


def test_engine_variables_go_in_and_secrets_stay_out(tmp_path):
    env = {
        "SGLANG_USE_CPU_ENGINE": "1",
        "SGLANG_CPU_OMP_THREADS_BIND": "0",
        "HF_TOKEN": "hf_secret_value",
        "MY_SERVICE_API_KEY": "sk-secret-value",
    }
    result = one_trial(tmp_path, "envs", ["--model-path", "m"], **{record.STUDY_ENGINE_ENV: env})
    for path in (result.script, result.config, result.docker, result.kubernetes):
        text = path.read_text()
        assert "hf_secret_value" not in text and "sk-secret-value" not in text, path.name
    deployment, _ = manifest(result)
    validate(deployment)
    entries = {e["name"]: e for e in container(deployment)["env"]}
    assert entries["SGLANG_USE_CPU_ENGINE"] == {"name": "SGLANG_USE_CPU_ENGINE", "value": "1"}
    assert entries["SGLANG_CPU_OMP_THREADS_BIND"]["value"] == "0"
    for secret in ("HF_TOKEN", "MY_SERVICE_API_KEY"):
        assert entries[secret]["valueFrom"]["secretKeyRef"] == {
            "name": "sglang-secrets",
            "key": secret,
            **({"optional": True} if secret == "HF_TOKEN" else {}),
        }
    assert "--from-literal=MY_SERVICE_API_KEY=" in result.kubernetes.read_text()


def test_a_local_model_path_is_mounted_where_the_flags_name_it(tmp_path):
    model = "/models/tiny llama"
    result = one_trial(tmp_path, "local", ["--model-path", model, "--tokenizer-path", model])
    deployment, _ = manifest(result)
    validate(deployment)
    server = container(deployment)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == model]
    assert mount["readOnly"] is True
    assert volumes[mount["name"]]["hostPath"] == {"path": model}
    assert server["args"][:2] == ["--model-path", model]  # the flags stay as tuned
    docker = run_docker_script(result, tmp_path)
    assert docker[docker.index("-v", docker.index("-v") + 1) + 1] == f"{model}:{model}:ro"


def test_headers_name_the_study_trial_engine_and_release(knee, tmp_path):
    for path in (knee.script, knee.config, knee.docker, knee.kubernetes):
        head = path.read_text().split("\n", 12)[:12]
        text = "\n".join(head)
        assert "study qwen-mtp, trial 12" in text, path.name
        assert "engine: the simulator, speaking sglang 0.5.23's flags" in text, path.name
    real = one_trial(tmp_path, "real", ["--model-path", "m"])
    for path in (real.script, real.config, real.docker, real.kubernetes):
        assert "engine: sglang 0.5.23 (real server)" in path.read_text(), path.name
    assert "image lmsysorg/sglang:v0.5.23" in real.docker.read_text()


# -- the docker script ---------------------------------------------------------------------


def run_docker_script(result: ExportResult, tmp_path: Path, **env: str) -> list[str]:
    """The argv the docker script gives `docker`, with a stand-in `docker` that prints it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    docker.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    environ.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HOME=str(tmp_path), **env)
    environ.pop("HF_HOME", None)
    out = subprocess.run(
        [str(result.docker)], env=environ, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_docker_script_runs_the_release_image_with_the_launch_script_flags(knee, tmp_path):
    docker = run_docker_script(knee, tmp_path, SGLANG_PORT="31007", HF_TOKEN="hf_from_env")
    assert docker[:2] == ["run", "--rm"]
    image = docker.index("lmsysorg/sglang:v0.5.23")
    command = docker[image + 1 :]
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    in_container = command[3:]
    assert in_container[-4:] == CONTAINER_LISTEN

    # The launch script, run with a stand-in server, passes the same tuned flags.
    (tmp_path / "fake_launch.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))")
    port = free_port()
    launched = subprocess.run(
        [str(knee.script)],
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "SGLANG_PYTHON": sys.executable,
            "SGLANG_LAUNCH_MODULE": "fake_launch",
            "SGLANG_HOST": "127.0.0.1",
            "SGLANG_PORT": str(port),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launched.returncode == 0, launched.stderr
    on_host = json.loads(launched.stdout)
    assert on_host[-4:] == ["--host", "127.0.0.1", "--port", str(port)]
    assert in_container[:-4] == on_host[:-4] == list(knee.argv)

    options = docker[2:image]
    assert options[options.index("-p") + 1] == "127.0.0.1:31007:30000"
    assert options[options.index("--ipc") + 1] == "host"
    assert options[options.index("--gpus") + 1] == "all"
    assert f"{tmp_path}/.cache/huggingface:/root/.cache/huggingface" in options
    # The token is passed by name: docker reads its value from the environment.
    assert options[options.index("--env") + 1] == "HF_TOKEN"
    assert "hf_from_env" not in docker


def test_the_docker_script_takes_the_key_and_image_from_the_environment(knee, tmp_path):
    docker = run_docker_script(
        knee,
        tmp_path,
        SGLANG_API_KEY="k e'y",
        SGLANG_IMAGE="lmsysorg/sglang:v0.5.19-cu129",
        SGLANG_HOST="0.0.0.0",
    )
    image = docker.index("lmsysorg/sglang:v0.5.19-cu129")
    assert docker[image + 4 :][-6:] == [*CONTAINER_LISTEN, "--api-key", "k e'y"]
    assert docker[docker.index("-p") + 1] == "0.0.0.0:30000:30000"
    assert "k e'y" not in knee.docker.read_text()


# -- the pieces ------------------------------------------------------------------------------


def test_image_tags_follow_the_release():
    assert image_for("0.5.23") == "lmsysorg/sglang:v0.5.23"
    assert image_for("0.5.10.post1") == "lmsysorg/sglang:v0.5.10.post1"
    assert image_for("0.5.24.dev3+gabc1234") == "lmsysorg/sglang:latest"  # a git build
    assert image_for(None) == "lmsysorg/sglang:latest"


def test_a_release_without_an_image_is_a_warning(tmp_path):
    result = one_trial(
        tmp_path, "nover", ["--model-path", "./models/m"], **{record.STUDY_SGLANG_VERSION: None}
    )
    assert any("lmsysorg/sglang:latest" in w for w in result.warnings)
    assert "image lmsysorg/sglang:latest (no image is published for release (not recorded)" in (
        result.kubernetes.read_text()
    )
    assert any("./models/m" in w and "absolute paths" in w for w in result.warnings)


def test_names_secrets_and_paths():
    assert kubernetes_name("Qwen_3.6 MTP_trial12") == "sglang-qwen-3-6-mtp-trial12"
    assert kubernetes_name("9" * 80).startswith("sglang-") and len(kubernetes_name("9" * 80)) == 63
    assert DNS_1035.match(kubernetes_name("--x--"))
    assert [is_secret(n) for n in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY")] == [
        True,
        True,
        True,
    ]
    assert not any(is_secret(n) for n in ("TOKENIZERS_PARALLELISM", "SGLANG_USE_CPU_ENGINE"))
    argv = ["--model", "/m", "--speculative-draft-model-path=/d", "--tokenizer-path", "org/t"]
    assert local_paths([*argv, "--lora-paths", "../l"]) == (["/d", "/m"], ["../l"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
