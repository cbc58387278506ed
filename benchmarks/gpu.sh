#!/usr/bin/env bash
# Issue 64's GPU measurements in one command, on a machine with JAX and a GPU but without
# Keras or TensorFlow (the lent H100/H200 image: Python 3.12, JAX on CUDA): installs the Keras 3
# wheels carried in build/gpu_wheels (`make gpu-wheels` downloads them on a machine with the
# package registry) into a temporary directory, then runs benchmarks.keras_gpu, whose JSON
# (naming the GPU) goes to $OUT (default /tmp/gpu). Arguments go to benchmarks.keras_gpu:
#   bash benchmarks/gpu.sh                  # the GPU run: 10k/1M/10M items, SASRec fp32/bf16
#   bash benchmarks/gpu.sh --smoke          # the same code at small sizes (a CPU proves it)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import keras, keras_rs" 2>/dev/null; then
  wheels=(build/gpu_wheels/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    echo "Keras 3 and keras-rs are not installed and build/gpu_wheels holds no wheel:" \
      "run make gpu-wheels where the package registry is reachable, and carry build/gpu_wheels." >&2
    exit 2
  fi
  deps="$(mktemp -d)"
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$deps" "${wheels[@]}"
  export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -z "${GIT_REVISION:-}" ] && ! git rev-parse HEAD >/dev/null 2>&1 \
    && [ -f build/gpu_wheels/REVISION ]; then
  export GIT_REVISION="$(cat build/gpu_wheels/REVISION)"  # A copy of the tree without .git.
fi
export KERAS_BACKEND="${KERAS_BACKEND:-jax}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -m benchmarks.keras_gpu --output="$OUT/keras_gpu.json" "$@" 2>&1 | tee "$OUT/keras_gpu.log"
