r"""Serving cost of an exported SASRec: peak memory and ms per request by catalog size.

Exports an untrained SASRec (weights do not change the cost) with the brute-force index,
loads it in a fresh process that imports only TensorFlow, and serves batches whose every
user carries a history of --history items (all excluded from the answer). Prints, per
catalog size, the process's peak resident memory before and after serving and the median
ms per request. Exclusion costs one [batch, catalog] mask, so memory grows with
batch x catalog, not with the history's length.

Usage:
  python -m benchmarks.serving --catalogs=100000,1000000 --batch_size=256
"""

import json
import os
import subprocess
import sys
import tempfile

import tensorflow as tf
from absl import app
from absl import flags

from tfrs_logq import export
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec

FLAGS = flags.FLAGS

# Runs in a fresh interpreter, as a server would: TensorFlow only.
_SERVE = r"""
import json, resource, sys, time
import numpy as np
import tensorflow as tf
path, batch, history, catalog, repeats = sys.argv[1], *map(int, sys.argv[2:6])
serve = tf.saved_model.load(path).signatures["serving_default"]
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
rng = np.random.default_rng(0)
request = tf.constant(rng.integers(1, catalog + 1, size=(batch, history)), tf.int64)
times = []
for _ in range(repeats):
    start = time.perf_counter()
    serve(history=request)["ids"].numpy()
    times.append(time.perf_counter() - start)
print(json.dumps({"loaded_mib": loaded,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "ms": 1000 * float(np.median(times[1:] or times))}))
"""


def define_flags() -> None:
    flags.DEFINE_list("catalogs", ["100000", "1000000"], "Catalog sizes.")
    flags.DEFINE_integer("batch_size", 256, "Users per request.", lower_bound=1)
    flags.DEFINE_list("histories", ["200", "2000"], "History lengths per user.")
    flags.DEFINE_integer("max_length", 200, "The query model's sequence length.", lower_bound=1)
    flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
    flags.DEFINE_integer("repeats", 5, "Requests timed (the first is warm-up).", lower_bound=1)


def measure(
    num_items: int,
    batch_size: int,
    history: int,
    max_length: int,
    dim: int,
    repeats: int,
    directory: str,
) -> dict:
    """Exports a SASRec over `num_items` (once per size) and serves it in a subprocess."""
    path = os.path.join(directory, str(num_items))
    if not os.path.exists(path):
        model = SASRec(
            num_items,
            RetrievalObjective(num_items, loss="full_softmax"),
            max_length=max_length,
            dim=dim,
            num_blocks=2,
        )
        model(tf.zeros([1, max_length], tf.int32))
        export.export(model, path, k=100, index="brute_force", version=1)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _SERVE,
            os.path.join(path, "1"),
            str(batch_size),
            str(history),
            str(num_items),
            str(repeats),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    print(
        f"brute-force export, batch {FLAGS.batch_size}, max_length {FLAGS.max_length}, "
        f"dim {FLAGS.dim}; peak resident memory of the serving process\n"
    )
    print("| catalog | history per user | loaded (MiB) | peak after serving (MiB) | ms/request |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for catalog in map(int, FLAGS.catalogs):
            for history in map(int, FLAGS.histories):
                row = measure(
                    catalog,
                    FLAGS.batch_size,
                    history,
                    FLAGS.max_length,
                    FLAGS.dim,
                    FLAGS.repeats,
                    directory,
                )
                print(
                    f"| {catalog:,} | {history:,} | {row['loaded_mib']:,.0f} | "
                    f"{row['peak_mib']:,.0f} | {row['ms']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    define_flags()
    app.run(main)
