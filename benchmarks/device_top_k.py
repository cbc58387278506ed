"""The evaluation's exact search on the device against the searches it replaces.

Each job's test ranks every test query's top k over the index (the N most trained items plus
the day's positives), its history excluded, ties to the lower id. Before, both jobs scored
the index a block at a time and brought each block's scores (TensorFlow's job) or did all of
it (the Keras job) on the host, in numpy; now the scores, the exclusions and the running top
k stay on the device (`logq_core.ranking.device_top_k`) and only the answer comes back.

Variants, each one whole search (compilation included, as a job pays it), in one process,
interleaved round by round:
- host_numpy: `logq_core.ranking.exact_top_k` in numpy (the Keras job's search before);
- host_tf: the same with TensorFlow's matmul and top_k, each block's scores copied back to
  numpy (the TensorFlow job's search before);
- device_tf: `tfrs_logq.retrieval.exact_top_k` (TensorFlow's `device_top_k`);
- device_jax: `keras_logq.ranking.exact_top_k` on JAX (Keras 3).
Every variant must return the same ids as the first; the line says how many rows differ.
TensorFlow is imported only for the tf variants (the GPU machines have JAX without it).

Usage:
  python -m benchmarks.device_top_k --output=docs/results/device_top_k_cpu.json
  python -m benchmarks.device_top_k --index_sizes=204478,2000000 --queries=20000,2000 \\
      --variants=host_tf,device_tf,device_jax
"""

import os
import platform
import time

import numpy as np
from absl import app
from absl import flags

from benchmarks import records
from pipelines import provenance

VARIANTS = ("host_numpy", "host_tf", "device_tf", "device_jax")

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "index_sizes", ["204478", "2000000"], "Index sizes (204,478: the 1M-item industrial job's)."
)
flags.DEFINE_list(
    "queries", ["20000", "2000"], "Test queries, one number per index size (or one for all)."
)
flags.DEFINE_list("variants", list(VARIANTS), f"Any of {', '.join(VARIANTS)}.")
flags.DEFINE_integer("k", 1000, "The list's length (Recall@1000).", lower_bound=1)
flags.DEFINE_integer("history", 50, "Excluded ids per query.", lower_bound=0)
flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
flags.DEFINE_integer("rounds", 1, "Interleaved rounds; the median is reported.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the embeddings and histories.")
flags.DEFINE_string("output", None, "Write the record (JSON) here.")


def searches(variants):
    """{variant: search(queries, ids, embeddings, k, exclude) -> ids}, importing only what
    the variants need."""
    from logq_core import ranking  # pylint: disable=import-outside-toplevel

    out = {}
    if "host_numpy" in variants:
        out["host_numpy"] = lambda q, ids, e, k, x: ranking.exact_top_k(
            q, ranking.array_chunks(ids, e), k, x
        )
    if {"host_tf", "device_tf"} & set(variants):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        from tfrs_logq import retrieval  # pylint: disable=import-outside-toplevel

        def host_tf(q, ids, e, k, x):
            def matmul(a, b):
                return tf.matmul(a, b, transpose_b=True).numpy()

            def top_k(values, count):
                found, positions = tf.math.top_k(values, k=count)
                return found.numpy(), positions.numpy()

            chunks = ((part, tf.constant(rows)) for part, rows in ranking.array_chunks(ids, e))
            return ranking.exact_top_k(q, chunks, k, x, matmul=matmul, top_k=top_k)

        def device_tf(q, ids, e, k, x):
            table = np.zeros([int(ids[-1]) + 1, e.shape[1]], np.float32)
            table[ids] = e
            return retrieval.exact_top_k(q, tf.constant(table), k, x, candidates=ids)

        out.update(host_tf=host_tf, device_tf=device_tf)
    if "device_jax" in variants:
        os.environ.setdefault("KERAS_BACKEND", "jax")
        from keras_logq import ranking as keras_ranking  # pylint: disable=import-outside-toplevel

        out["device_jax"] = keras_ranking.exact_top_k
    return {name: out[name] for name in variants}


def main(argv):
    del argv
    variants = list(dict.fromkeys(FLAGS.variants))
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise app.UsageError(
            f"--variants must name some of {', '.join(VARIANTS)}; received {FLAGS.variants}."
        )
    try:
        sizes = [int(n) for n in FLAGS.index_sizes]
        counts = [int(n) for n in FLAGS.queries]
    except ValueError as error:
        raise app.UsageError(f"--index_sizes and --queries must be integers: {error}") from None
    if len(counts) == 1:
        counts *= len(sizes)
    if not sizes or min(sizes + counts) < 1 or len(counts) != len(sizes):
        raise app.UsageError(
            "--index_sizes and --queries must be positive, one query count per index size "
            f"(or one for all); received --index_sizes={FLAGS.index_sizes} "
            f"--queries={FLAGS.queries}."
        )
    run = searches(variants)
    rng = np.random.default_rng(FLAGS.seed)
    rows = []
    for size, num_queries in zip(sizes, counts):
        ids = np.sort(rng.choice(np.arange(1, 2 * size + 1), size, replace=False))
        embeddings = rng.normal(size=[size, FLAGS.dim]).astype(np.float32)
        queries = rng.normal(size=[num_queries, FLAGS.dim]).astype(np.float32)
        exclude = [
            rng.choice(ids, min(FLAGS.history, size), replace=False) for _ in range(num_queries)
        ]
        seconds = {name: [] for name in variants}
        answers = {}
        for _ in range(FLAGS.rounds):
            for name in variants:
                start = time.perf_counter()
                answers[name] = np.asarray(run[name](queries, ids, embeddings, FLAGS.k, exclude))
                seconds[name].append(time.perf_counter() - start)
        first = answers[variants[0]]
        row = {"index_size": size, "queries": num_queries, "variants": {}}
        for name in variants:
            median = float(np.median(seconds[name]))
            differing = int((answers[name] != first).any(axis=1).sum())
            row["variants"][name] = {"seconds": median, "rows_differing": differing}
            print(
                f"index {size:,}, {num_queries:,} queries, k={FLAGS.k}: {name:<10} "
                f"{median:8.2f} s   rows differing from {variants[0]}: {differing}",
                flush=True,
            )
        rows.append(row)
    print("\n| index | queries | " + " | ".join(f"{v} s" for v in variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for row in rows:
        cells = [f"{row['variants'][v]['seconds']:.2f}" for v in variants]
        print(f"| {row['index_size']:,} | {row['queries']:,} | " + " | ".join(cells) + " |")
    for base in ("host_tf", "host_numpy"):
        for new in ("device_tf", "device_jax"):
            if base in variants and new in variants:
                ratios = [
                    row["variants"][base]["seconds"] / row["variants"][new]["seconds"]
                    for row in rows
                ]
                print(
                    f"{new} is "
                    + ", ".join(f"{r:.2f}x" for r in ratios)
                    + f" faster than {base} (index sizes {', '.join(map(str, sizes))})"
                )
    if FLAGS.output:
        records.write(
            FLAGS.output,
            {
                "benchmark": "device_top_k",
                "command": "python -m benchmarks.device_top_k "
                + " ".join(
                    f"--{name}={FLAGS[name].serialize().split('=', 1)[1]}"
                    for name in (
                        "index_sizes",
                        "queries",
                        "variants",
                        "k",
                        "history",
                        "dim",
                        "rounds",
                        "seed",
                    )
                ),
                "revision": provenance.revision(),
                "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
                "rows": rows,
            },
        )


if __name__ == "__main__":
    app.run(main)
