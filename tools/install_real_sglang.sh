#!/usr/bin/env bash
# Install real sglang 0.5.23 for a CPU in its own virtual environment, outside the repository.
#
#   tools/install_real_sglang.sh            # prints the environment's Python on its last line
#
# Where: $TUNER_REAL_SGLANG_VENV, default ~/.cache/sglang-tuner/real-sglang. An environment that
# is complete (its stamp holds the hash of the pinned list and of the stand-ins) is reused as it
# is; anything else there is replaced. What goes in: the pinned list
# tools/real_sglang_requirements.txt with --no-deps (the CPU build of torch, sglang, and what its
# CPU path imports), then the project's stand-ins for sgl_kernel and torchvision
# (tests/support/sglang_cpu/) copied into site-packages. Why each is needed:
# docs/real-sglang-cpu.md. It also builds the tiny Llama that search_spaces/tiny-llama-cpu.yaml
# serves, beside the environment (~/.cache/sglang-tuner/tiny-llama by default; 1.8 MB).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TUNER_REAL_SGLANG_VENV:-$HOME/.cache/sglang-tuner/real-sglang}"
requirements="$repo/tools/real_sglang_requirements.txt"
support="$repo/tests/support/sglang_cpu"
stamp="$venv/.sglang-tuner-stamp"
model="$(dirname "$venv")/tiny-llama"

build_model() {
    if [ ! -f "$model/config.json" ]; then
        "$venv/bin/python" "$repo/tests/support/tiny_llama.py" "$model" >/dev/null 2>&1 || {
            echo "real sglang: building the tiny model failed:" >&2
            "$venv/bin/python" "$repo/tests/support/tiny_llama.py" "$model" >&2
            exit 1
        }
        echo "real sglang: tiny model in $model" >&2
    fi
}

fingerprint() {
    {
        cat "$requirements"
        (cd "$support" && find sgl_kernel torchvision -name '*.py' | LC_ALL=C sort | xargs cat)
        python3 -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
}

wanted="$(fingerprint)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && [ -x "$venv/bin/python" ]; then
    echo "real sglang: reusing $venv" >&2
    build_model
    echo "$venv/bin/python"
    exit 0
fi

started=$(date +%s)
echo "real sglang: installing into $venv (about 2.5 GB)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv"
# pip's own noise about index locations that do not exist on this host is dropped; errors stay.
"$venv/bin/pip" install -q --no-deps --disable-pip-version-check -r "$requirements" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp -r "$support/sgl_kernel" "$support/torchvision" "$site/"
# A smoke test of the CPU import path: the module that `python -m sglang.launch_server` runs.
SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -c \
    'import sglang.srt.entrypoints.http_server, sgl_kernel, torchvision' >/dev/null 2>&1 || {
    echo "real sglang: the installed environment does not import; see:" >&2
    SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -c 'import sglang.srt.entrypoints.http_server' >&2
    exit 1
}
echo "$wanted" >"$stamp"
rm -rf "$model"  # built again by this environment's transformers and tokenizers
build_model
echo "real sglang: installed in $(($(date +%s) - started)) s" >&2
echo "$venv/bin/python"
