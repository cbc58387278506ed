#!/usr/bin/env bash
# The GPU measurements (issues 64 and 77) in one command, on a machine with JAX and a GPU but without
# Keras or TensorFlow (the lent H100/H200 image: Python 3.12, JAX on CUDA): installs the Keras 3
# wheels carried in build/gpu_wheels (`make gpu-wheels` downloads them on a machine with the
# package registry) into a temporary directory, then runs benchmarks.keras_gpu, whose JSON
# (naming the GPU) goes to $OUT (default /tmp/gpu). Then, where PyTorch is installed, the same
# cells on Keras's torch backend (dense variants only: SparseUpdates is JAX's) with each cell's
# ratio to JAX's ($OUT/keras_gpu_torch.json). $PHASES chooses ("jax torch" by default; torch
# alone compares against an earlier $OUT/keras_gpu.json). The phase sasrec_recall trains
# examples.keras_sasrec's mixed improved row 40 epochs on $SASREC_DATA (MovieLens-1M in SASRec's
# format; not in the repository) in float32 and in mixed bfloat16, seeds 0-2, and writes
# $OUT/keras_sasrec_float32.json and $OUT/keras_sasrec_mixed_bfloat16.json: bfloat16's Recall@10
# against float32's. The phase next_day runs examples.keras_next_day on $NEXT_DAY_FLAGS
# (pipelines.train's flags; default --preset=industrial, the 1M-item log): the synthetic log
# drawn, its day store built and the two-tower trained and tested, all without TensorFlow, into
# $TFRS_LOGQ_CACHE (default: a temporary directory, not $OUT), the record in
# $OUT/keras_next_day.json (it reads Parquet: carry pyarrow's wheel where the machine lacks it,
# see the Makefile's gpu-wheels). The phase top_k times the test's exact search on the GPU
# (benchmarks.device_top_k: JAX on the device against numpy, 20,000 queries over a 204k-item
# index and 2,000 over a 2M-item one; $TOP_K_FLAGS replaces those flags), the record in
# $OUT/device_top_k.json. The phase jobs runs the product's jobs on Keras 3 as a user runs
# them (benchmarks.jobs): `tfrs-logq train --framework=keras` on $JOBS_TRAIN_FLAGS (default
# --preset=industrial), `tfrs-logq export` of that run, and `tfrs-logq compare` with Keras rows
# on $JOBS_COMPARE_FLAGS (default Table 2's: 5M items, a 2M-item index, 3 corrections x 5
# seeds), each job's seconds and the train run's phases in $OUT/jobs.json. The phase catalog
# times the sparse two-tower step at 10k and 100M items (batch 8192, 1M users: the item table
# and its Adagrad slots, 100M x 64 x 4 B x 2 = 51 GB), $OUT/catalog.json ($CATALOG_FLAGS
# replaces its flags). Arguments go to benchmarks.keras_gpu:
#   bash benchmarks/gpu.sh                  # the GPU run: 10k/1M/10M items, SASRec fp32/bf16
#   bash benchmarks/gpu.sh --smoke          # the same code at small sizes (a CPU proves it)
#   PHASES=torch bash benchmarks/gpu.sh     # the torch backend only
#   PHASES=sasrec_recall SASREC_DATA=path/sasrec_ml-1m.txt.gz bash benchmarks/gpu.sh
#   PHASES=next_day bash benchmarks/gpu.sh  # the next-day job at 1M items
#   PHASES=top_k bash benchmarks/gpu.sh     # the test's exact search on the device
#   PHASES=jobs bash benchmarks/gpu.sh      # train, export and compare on Keras 3
#   PHASES=catalog bash benchmarks/gpu.sh   # a 100M-item catalog's step
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
# What the phases import beyond JAX (the next_day phase reads Parquet too): where one is
# missing, every wheel carried is installed.
need="import keras, keras_rs, absl, google_crc32c"
case " ${PHASES-jax torch} " in *" next_day "* | *" jobs "*) need="$need, pyarrow, h5py" ;; esac
if ! "$PYTHON" -c "$need" 2>/dev/null; then
  wheels=(build/gpu_wheels/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    echo "'$need' fails and build/gpu_wheels holds no wheel: run make gpu-wheels where the" \
      "package registry is reachable, and carry build/gpu_wheels." >&2
    exit 2
  fi
  deps="$(mktemp -d)"
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$deps" "${wheels[@]}"
  export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
fi
# The commit the records name: $GIT_REVISION where set, else the one `make gpu-wheels` wrote
# beside the wheels (a copied tree's own .git can be missing or stale: a lent machine's copy
# once carried an older commit's), else this clone's HEAD.
if [ -z "${GIT_REVISION:-}" ] && [ -f build/gpu_wheels/REVISION ]; then
  export GIT_REVISION="$(cat build/gpu_wheels/REVISION)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "The records name revision ${GIT_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}." >&2
status=0
for phase in ${PHASES-jax torch}; do
  case "$phase" in
    jax)
      KERAS_BACKEND=jax "$PYTHON" -m benchmarks.keras_gpu --output="$OUT/keras_gpu.json" "$@" \
        2>&1 | tee "$OUT/keras_gpu.log" || status=$?
      ;;
    torch)
      if ! "$PYTHON" -c "import torch" 2>/dev/null; then
        echo "PyTorch is not installed: the torch backend is not measured." >&2
        continue
      fi
      compare=()
      [ -f "$OUT/keras_gpu.json" ] && compare=(--compare_to="$OUT/keras_gpu.json")
      # Eager (Keras's default on torch; see docs/guide/keras.md), the catalogs and variants
      # a torch step can hold in a few minutes.
      KERAS_BACKEND=torch "$PYTHON" -m benchmarks.keras_gpu --output="$OUT/keras_gpu_torch.json" \
        --variants=keras_rs,standard,improved --catalogs=10000,1000000 "${compare[@]}" "$@" \
        2>&1 | tee "$OUT/keras_gpu_torch.log" || status=$?
      ;;
    sasrec_recall)
      if [ ! -f "${SASREC_DATA:-}" ]; then
        echo "PHASES=sasrec_recall needs SASREC_DATA, a SASRec-format file; received" \
          "'${SASREC_DATA:-}'." >&2
        exit 2
      fi
      for policy in ${SASREC_POLICIES:-float32 mixed_bfloat16}; do
        KERAS_BACKEND=jax "$PYTHON" -m examples.keras_sasrec --data_path="$SASREC_DATA" \
          --rows=mixed_improved --max_len=200 --epochs="${SASREC_EPOCHS:-40}" \
          --seeds="${SASREC_SEEDS:-0,1,2}" --dtype_policy="$policy" \
          --output="$OUT/keras_sasrec_$policy.json" 2>&1 | tee "$OUT/keras_sasrec_$policy.log" \
          || status=$?
      done
      ;;
    next_day)
      if ! "$PYTHON" -c "import pyarrow, google_crc32c" 2>/dev/null; then
        echo "PHASES=next_day needs pyarrow and google-crc32c: carry their wheels" \
          "(make gpu-wheels GPU_WHEELS_EXTRA='|pyarrow')." >&2
        exit 2
      fi
      cache="${TFRS_LOGQ_CACHE:-}"
      [ -n "$cache" ] || cache="$(mktemp -d)"
      TFRS_LOGQ_CACHE="$cache" KERAS_BACKEND=jax "$PYTHON" \
        -m examples.keras_next_day --build_store="${NEXT_DAY_FLAGS:---preset=industrial}" \
        --output="$OUT/keras_next_day.json" 2>&1 | tee "$OUT/keras_next_day.log" || status=$?
      [ -n "${TFRS_LOGQ_CACHE:-}" ] || rm -rf "$cache"  # A temporary log and store (GBs).
      ;;
    top_k)
      # shellcheck disable=SC2086  # The flags are words.
      KERAS_BACKEND=jax "$PYTHON" -m benchmarks.device_top_k --variants=host_numpy,device_jax \
        ${TOP_K_FLAGS:---index_sizes=204478,2000000 --queries=20000,2000} \
        --output="$OUT/device_top_k.json" 2>&1 | tee "$OUT/device_top_k.log" || status=$?
      ;;
    jobs)
      cache="${TFRS_LOGQ_CACHE:-}"
      [ -n "$cache" ] || cache="$(mktemp -d)"
      TFRS_LOGQ_CACHE="$cache" KERAS_BACKEND=jax "$PYTHON" -m benchmarks.jobs \
        --train_flags="${JOBS_TRAIN_FLAGS:---preset=industrial}" \
        ${JOBS_COMPARE_FLAGS+--compare_flags="$JOBS_COMPARE_FLAGS"} \
        --output="$OUT/jobs.json" 2>&1 | tee "$OUT/jobs.log" || status=$?
      [ -n "${TFRS_LOGQ_CACHE:-}" ] || rm -rf "$cache"  # The logs and stores (GBs).
      ;;
    catalog)
      # shellcheck disable=SC2086  # The flags are words.
      KERAS_BACKEND=jax "$PYTHON" -m benchmarks.keras_gpu --variants=sparse_adagrad \
        ${CATALOG_FLAGS:---catalogs=10000,100000000 --batch_sizes=8192 --num_users=1000000} \
        --sasrec=false --output="$OUT/catalog.json" 2>&1 | tee "$OUT/catalog.log" || status=$?
      ;;
    *)
      echo "PHASES must name jax, torch, sasrec_recall, next_day, top_k, jobs and/or catalog;" \
        "received '${PHASES}'." >&2
      exit 2
      ;;
  esac
done
exit "$status"
