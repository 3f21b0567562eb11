"""Deploy files for an exported trial: a `docker run` script and a Kubernetes manifest.

The script runs sglang's image for the study's release; the manifest is a Deployment + Service.
Both start `python3 -m sglang.launch_server` with the launch script's tuned flags, listening on
0.0.0.0:30000 inside the container. No secret is written: HF_TOKEN, the API key and any
secret-looking variable of the study's `--engine-env` come from the environment (docker) or a
Kubernetes Secret. The study's other engine variables are set as they were.

Example:
    >>> spec = DeploySpec.of(argv, meta, header, stem="launch_qwen_trial12")  # doctest: +SKIP
    >>> spec.image  # doctest: +SKIP
    'lmsysorg/sglang:v0.5.23'
    >>> Path("x.docker.sh").write_text(render_docker_run(spec))  # doctest: +SKIP
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tuner.engines.sglang import LAUNCH_MODULE
from tuner.results.study_records import StudyMeta

IMAGE_REPOSITORY = "lmsysorg/sglang"
# sglang's install docs: images ship CUDA 13; this is the last tag built for CUDA 12.
LAST_CUDA12_IMAGE = f"{IMAGE_REPOSITORY}:v0.5.19-cu129"
CONTAINER_PORT = 30000  # sglang's default port, as in its docs' `docker run`
# The images run as root; the HF cache mounted here holds the weights between restarts.
CONTAINER_HF_HOME = "/root/.cache/huggingface"
SECRET_NAME = "sglang-secrets"  # the Kubernetes Secret the manifest reads tokens from
MODEL_CACHE_CLAIM = "sglang-model-cache"  # placeholder PVC name, written in the manifest
SHM_SIZE = "32Gi"  # sglang's docs run the image with --shm-size 32g (or --ipc host)

_RELEASE = re.compile(r"^\d+\.\d+\.\d+(\.post\d+)?$")
# Words of a variable name that mark it as a credential (HF_TOKEN, OPENAI_API_KEY, ...).
_SECRET_WORDS = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)
_DNS_LABEL_MAX = 63
_NOTE_WIDTH = 96


def is_secret(name: str) -> bool:
    """True for a variable whose value must not be written into a file (HF_TOKEN, *_API_KEY)."""
    return any(word in _SECRET_WORDS for word in name.upper().split("_"))


def image_for(release: str | None) -> str:
    """sglang's image for `release`; `latest` when the release has no image of its own (not
    recorded, or a git build such as 0.5.24.dev3+gabc)."""
    if release and _RELEASE.match(release):
        return f"{IMAGE_REPOSITORY}:v{release}"
    return f"{IMAGE_REPOSITORY}:latest"


def gpu_count(argv: Sequence[str]) -> int:
    """GPUs one server takes: tensor x pipeline parallel, times the data-parallel replicas
    unless DP attention runs them inside the tensor-parallel group; 0 with `--device cpu`."""
    values = dict(_flag_pairs(argv))
    if values.get("--device") == "cpu":
        return 0

    def size(*names: str) -> int:
        found = next((value for n in names if (value := values.get(n))), "1")
        return int(found) if found.isdigit() else 1

    tp = size("--tp-size", "--tensor-parallel-size")
    pp = size("--pp-size", "--pipeline-parallel-size")
    dp = size("--dp-size", "--data-parallel-size")
    return tp * pp * (1 if "--enable-dp-attention" in values else dp)


def local_paths(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(absolute, relative) local paths given to `--*-path` flags (`--model` too). Absolute
    ones are mounted at the same place in the container, so the flags stay as they are; a
    Hugging Face repo id (`Qwen/Qwen3-8B`) is neither and comes through the HF cache."""
    absolute: list[str] = []
    relative: list[str] = []
    for flag, value in _flag_pairs(argv):
        if not value or not (flag.endswith(("-path", "-paths")) or flag == "--model"):
            continue
        if value.startswith("/"):
            absolute.append(value)
        elif value.startswith(("./", "../", "~")):
            relative.append(value)
    return sorted(set(absolute)), sorted(set(relative))


def _flag_pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for token in argv:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            pairs.append((flag, value if eq else None))
        elif pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], token)
    return pairs


def kubernetes_name(stem: str) -> str:
    """A DNS-1035 label (what a Service name must be) from a file stem: lower case letters,
    digits and '-', a letter first, at most 63 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    name = f"sglang-{slug}" if not slug.startswith("sglang") else slug
    return name[:_DNS_LABEL_MAX].rstrip("-")


@dataclass(frozen=True)
class DeploySpec:
    """What both deploy files are made from."""

    argv: tuple[str, ...]  # the tuned flags, as in the launch script (no host, port, key)
    header: tuple[str, ...]  # the launch script's header lines (study, trial, engine, ...)
    release: str | None
    engine_env: tuple[tuple[str, str], ...]
    stem: str  # the launch script's file name without .sh; the deploy files' names start so

    @classmethod
    def of(
        cls, argv: Sequence[str], meta: StudyMeta, header: Sequence[str], *, stem: str
    ) -> DeploySpec:
        return cls(
            argv=tuple(argv),
            header=tuple(header),
            release=meta.sglang_version,
            engine_env=meta.engine_env,
            stem=stem,
        )

    @property
    def script_name(self) -> str:
        return f"{self.stem}.sh"

    @property
    def docker_name(self) -> str:
        return f"{self.stem}.docker.sh"

    @property
    def kubernetes_file_name(self) -> str:
        return f"{self.stem}.k8s.yaml"

    @property
    def name(self) -> str:
        """The Kubernetes objects' name."""
        return kubernetes_name(self.stem.removeprefix("launch_"))

    @property
    def image(self) -> str:
        return image_for(self.release)

    @property
    def gpus(self) -> int:
        return gpu_count(self.argv)

    @property
    def plain_env(self) -> list[tuple[str, str]]:
        return [(k, v) for k, v in self.engine_env if not is_secret(k)]

    @property
    def secret_env(self) -> list[str]:
        """HF_TOKEN (for gated models) and the study's secret-looking engine variables."""
        names = [k for k, _ in self.engine_env if is_secret(k)]
        return ["HF_TOKEN", *(n for n in names if n != "HF_TOKEN")]

    def warnings(self) -> list[str]:
        found: list[str] = []
        if image_for(self.release).endswith(":latest"):
            found.append(
                f"the deploy files use {self.image}: sglang publishes no image for release "
                f"{self.release or '(not recorded)'}; set the image to the release you tuned"
            )
        _, relative = local_paths(self.argv)
        if relative:
            found.append(
                "relative paths in the flags (" + ", ".join(relative) + ") mean nothing in a "
                "container: give absolute paths to mount them in the deploy files"
            )
        return found

    def image_lines(self) -> list[str]:
        # The release comes from the storage: keep it on its comment line.
        release = re.sub(r"[\x00-\x1f]+", " ", self.release or "(not recorded)")
        whose = (
            f"no image is published for release {release}: set the one you tuned"
            if self.image.endswith(":latest")
            else f"sglang's image for release {release}"
        )
        return [
            f"image {self.image} ({whose})",
            f"sglang's images ship CUDA 13; the last CUDA 12 image is {LAST_CUDA12_IMAGE}",
        ]


# -- docker ----------------------------------------------------------------------------------


def render_docker_run(spec: DeploySpec) -> str:
    """A bash script that runs the server in sglang's image with the tuned flags."""
    header = "\n".join(f"#   {line}" for line in [*spec.header, *spec.image_lines()])
    absolute, _ = local_paths(spec.argv)
    options: list[list[str]] = []
    if spec.gpus:
        options.append(["--gpus", '"${SGLANG_GPUS:-all}"'])
    options += [
        ["--ipc", "host"],
        ["-p", f'"$host:$port":{CONTAINER_PORT}'],
        ["-v", f'"$hf_home":{CONTAINER_HF_HOME}'],
        *(["-v", shlex.quote(f"{path}:{path}:ro")] for path in absolute),
        *(["--env", name] for name in spec.secret_env),
        *(["--env", shlex.quote(f"{key}={value}")] for key, value in spec.plain_env),
    ]
    docker_options = "\n".join(f"    {' '.join(option)}" for option in options)
    flags = "\n".join(f"    {' '.join(shlex.quote(t) for t in g)}" for g in flag_groups(spec.argv))
    secrets = " ".join(spec.secret_env)
    gpus_setting = "#   SGLANG_GPUS     docker's --gpus value (default all)\n" if spec.gpus else ""
    return f"""#!/usr/bin/env bash
# `docker run` of the SGLang server, exported by sglang-tuner (same flags as {spec.script_name}).
{header}
#
# Settings from the environment (no secret is written into this file):
#   SGLANG_IMAGE    image (default {spec.image})
#   SGLANG_HOST     host address the port is published on (default 127.0.0.1; 0.0.0.0: all)
#   SGLANG_PORT     host port (default {CONTAINER_PORT}), published to the server's {CONTAINER_PORT}
#   SGLANG_API_KEY  API key clients must send (default: none)
{gpus_setting}#   HF_HOME         host folder mounted as the container's Hugging Face cache
#                   (default ~/.cache/huggingface)
#   {secrets:<14}  passed through from this environment when set
# Arguments given to this script are passed on to the server after the tuned flags.
set -euo pipefail

image="${{SGLANG_IMAGE:-{spec.image}}}"
hf_home="${{HF_HOME:-$HOME/.cache/huggingface}}"
host="${{SGLANG_HOST:-127.0.0.1}}"
port="${{SGLANG_PORT:-{CONTAINER_PORT}}}"
docker_options=(
{docker_options}
)
args=(
{flags}
)
args+=(--host 0.0.0.0 --port {CONTAINER_PORT})
if [[ -n "${{SGLANG_API_KEY:-}}" ]]; then
    args+=(--api-key "$SGLANG_API_KEY")
fi

exec docker run --rm "${{docker_options[@]}}" "$image" \\
    python3 -m {LAUNCH_MODULE} "${{args[@]}}" "$@"
"""


def flag_groups(argv: Sequence[str]) -> list[list[str]]:
    """argv as one flag and its values per group: a script keeps one per line, readable and
    with small diffs."""
    groups: list[list[str]] = []
    for token in argv:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


# -- Kubernetes ------------------------------------------------------------------------------


def kubernetes_objects(spec: DeploySpec) -> list[dict[str, Any]]:
    """The Deployment and the Service, as the manifest holds them."""

    def labels() -> dict[str, str]:
        # A new mapping each time: YAML would write one shared object as an anchor and aliases.
        return {"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": spec.name}

    absolute, _ = local_paths(spec.argv)
    env: list[dict[str, Any]] = [
        {
            "name": name,
            "valueFrom": {
                "secretKeyRef": {
                    "name": SECRET_NAME,
                    "key": name,
                    # A public model needs no token; a variable the study's server had does.
                    **({"optional": True} if name == "HF_TOKEN" else {}),
                }
            },
        }
        for name in spec.secret_env
    ]
    env += [{"name": key, "value": value} for key, value in spec.plain_env]
    mounts: list[dict[str, Any]] = [
        {"mountPath": "/dev/shm", "name": "shm"},
        {"mountPath": CONTAINER_HF_HOME, "name": "model-cache"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": MODEL_CACHE_CLAIM}},
    ]
    for number, path in enumerate(absolute):
        mounts.append({"mountPath": path, "name": f"local-path-{number}", "readOnly": True})
        volumes.append({"name": f"local-path-{number}", "hostPath": {"path": path}})
    container: dict[str, Any] = {
        "name": "sglang",
        "image": spec.image,
        "command": ["python3", "-m", LAUNCH_MODULE],
        "args": [*spec.argv, "--host", "0.0.0.0", "--port", str(CONTAINER_PORT)],
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT, "protocol": "TCP"}],
        "env": env,
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "volumeMounts": mounts,
    }
    if spec.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": spec.gpus}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "labels": labels()},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels()},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": labels()},
        "spec": {
            "selector": labels(),
            "ports": [{"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}],
        },
    }
    return [deployment, service]


def render_kubernetes(spec: DeploySpec) -> str:
    """The manifest: a header, then the Deployment and the Service with comments where the
    reader has to decide something (the cache volume, local paths, the GPU count)."""
    header = "\n".join(f"#   {line}" for line in [*spec.header, *spec.image_lines()])
    secrets = " ".join(f'--from-literal={n}="${n}"' for n in spec.secret_env)
    body = yaml.safe_dump_all(kubernetes_objects(spec), sort_keys=False, default_flow_style=False)
    notes = {
        "args:": f"the tuned flags of {spec.script_name}, then where to listen",
        "strategy:": "a rolling update would need a second set of GPUs while both pods run",
        f"nvidia.com/gpu: {spec.gpus}": "tensor x pipeline (x data) parallel size",
        "- name: model-cache": (
            f"Hugging Face cache, filled on first start: {MODEL_CACHE_CLAIM} is a placeholder "
            "for a PersistentVolumeClaim you create (room for the weights), or replace it with "
            "hostPath: {path: <a folder on the node>}"
        ),
        "resources:": (
            "HiCache keeps a host-memory pool (--hicache-ratio x the GPU KV pool, or "
            "--hicache-size GB): request that memory for the pod too"
            if _uses_hicache(spec.argv)
            else ""
        ),
        "- name: local-path-0": (
            "a local path the study's flags name: the node must hold it at the same path "
            "(or mount a volume there)"
        ),
    }
    from_secret = "HF_TOKEN comes" if len(spec.secret_env) == 1 else "the tokens come"
    return (
        "# Kubernetes Deployment + Service of the SGLang server, exported by sglang-tuner.\n"
        f"{header}\n"
        "#\n"
        f"# No secret is written here: {from_secret} from the Secret {SECRET_NAME}:\n"
        f"#   kubectl create secret generic {SECRET_NAME} {secrets}\n"
        "# To require an API key, add `--api-key $(SGLANG_API_KEY)` to args and SGLANG_API_KEY\n"
        "# to env from that Secret.\n"
        f"# Apply: kubectl apply -f {spec.kubernetes_file_name}; then reach the server with\n"
        f"#   kubectl port-forward service/{spec.name} {CONTAINER_PORT}:{CONTAINER_PORT}\n"
        f"{_with_notes(body, notes)}"
    )


def _uses_hicache(argv: Sequence[str]) -> bool:
    switches = ("--enable-hierarchical-cache", "--enable-hicache")
    return any(flag in switches for flag, _ in _flag_pairs(argv))


def _with_notes(text: str, notes: dict[str, str]) -> str:
    """`text` with each (non-empty) note as a comment above the first line that reads as its
    key."""
    lines: list[str] = []
    pending = {key: note for key, note in notes.items() if note}
    for line in text.splitlines():
        key = line.strip()
        if key in pending:
            indent = line[: len(line) - len(line.lstrip())]
            for part in textwrap.wrap(pending.pop(key), width=_NOTE_WIDTH - len(indent)):
                lines.append(f"{indent}# {part}")
        lines.append(line)
    return "\n".join(lines) + "\n"
