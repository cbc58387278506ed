r"""ScaNN against tfrs BruteForce on trained embeddings: build time, queries per second, recall@k.

For each catalog size a two-tower model is trained briefly on the synthetic
catalog of that size (mixed negatives, improved correction), so the item and
query embeddings come from a model, not a random generator. Then, in one run:

- `tfrs.layers.factorized_top_k.BruteForce` (exact) and a ScaNN index with
  `tfrs_logq.retrieval.scann_defaults` (tree of ~sqrt(N) leaves, asymmetric
  hashing, exact re-scoring) are built over every item;
- the same queries go through both, in batches; queries per second of each;
- recall@k of ScaNN = the share of BruteForce's top k it returns.

Target at 1M items: recall@100 >= 0.95 at >= 10x BruteForce's queries per second.

Usage:
  python -m pipelines.benchmarks.ann
"""

import time
from typing import Dict

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from pipelines.data import builders
from pipelines.data import splits
from pipelines.data import synthetic
from tfrs_logq import retrieval
from tfrs_logq.models import TwoTower, make_objective

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_list("catalogs", ["100000", "1000000"], "Catalog sizes.")
    flags.DEFINE_integer("users", 2000, "Synthetic users (training data).", lower_bound=10)
    flags.DEFINE_integer("train_steps", 300, "Two-tower training steps.", lower_bound=1)
    flags.DEFINE_integer("queries", 1000, "Queries timed.", lower_bound=1)
    flags.DEFINE_integer("batch", 100, "Queries per search call.", lower_bound=1)
    flags.DEFINE_integer("k", 100, "Neighbours per query.", lower_bound=1)
    flags.DEFINE_integer("dim", 32, "Embedding size.", lower_bound=2)
    flags.DEFINE_integer("seed", 0, "Seed.")


def trained_embeddings(num_items: int, num_users: int, steps: int, dim: int, seed: int):
    """(query embeddings of held-out users, [num_items + 1, dim] item embeddings)."""
    tf.keras.utils.set_random_seed(seed)
    data, _ = synthetic.make_synthetic(num_users=num_users, num_items=num_items, dim=16,
                                       min_length=10, max_length=50, seed=seed)
    split = splits.leave_one_out(data)
    counts = split.train_counts().astype(np.float64) + 1.0
    counts[0] = 0.0
    probabilities = (counts / counts.sum()).astype(np.float32)
    probabilities[0] = 1.0
    model = TwoTower(data.num_users, num_items, make_objective(
        num_items, negatives="mixed", correction="improved", num_negatives=256,
        probabilities=probabilities, seed=seed), dim=dim)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
    model.fit(builders.two_tower_dataset(split.train, 20, 512, seed=seed),
              steps_per_epoch=steps, epochs=1, verbose=0)
    padded = builders.left_pad(split.test.histories, 20)
    queries = model.query_embeddings({"user": split.test.users.astype(np.int32),
                                      "history": padded}).numpy()
    return queries, model.item_embeddings().numpy()


def compare(queries: np.ndarray, items: np.ndarray, k: int, batch: int) -> Dict[str, float]:
    """Build times, queries per second and ScaNN's recall@k against BruteForce."""
    from scann import scann_ops_pybind  # pylint: disable=import-outside-toplevel
    candidates = np.ascontiguousarray(items[1:])
    started = time.perf_counter()
    brute = tfrs.layers.factorized_top_k.BruteForce(k=k)
    brute.index(tf.constant(candidates))
    brute_build = time.perf_counter() - started
    settings = retrieval.scann_defaults(len(candidates), k)
    started = time.perf_counter()
    searcher = (scann_ops_pybind.builder(candidates, k, "dot_product")
                .tree(num_leaves=settings["num_leaves"],
                      num_leaves_to_search=settings["num_leaves_to_search"],
                      training_sample_size=min(len(candidates), 250_000))
                .score_ah(2, anisotropic_quantization_threshold=0.2)
                .reorder(settings["reorder"]).build())
    scann_build = time.perf_counter() - started
    batches = [np.ascontiguousarray(queries[i:i + batch]) for i in range(0, len(queries), batch)]
    brute(tf.constant(batches[0]))  # Warm up (traces the function).
    searcher.search_batched(batches[0])
    started = time.perf_counter()
    exact = np.concatenate([brute(tf.constant(b))[1].numpy() for b in batches])
    brute_seconds = time.perf_counter() - started
    started = time.perf_counter()
    approximate = np.concatenate([searcher.search_batched(b)[0] for b in batches])
    scann_seconds = time.perf_counter() - started
    return {"brute_force_build_s": brute_build, "scann_build_s": scann_build,
            "brute_force_qps": len(queries) / brute_seconds,
            "scann_qps": len(queries) / scann_seconds,
            "recall": retrieval.overlap_at_k(approximate, exact, k), **settings}


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    rows = []
    for num_items in (int(c) for c in FLAGS.catalogs):
        started = time.perf_counter()
        queries, items = trained_embeddings(num_items, FLAGS.users, FLAGS.train_steps,
                                            FLAGS.dim, FLAGS.seed)
        queries = np.tile(queries, (-(-FLAGS.queries // len(queries)), 1))[:FLAGS.queries]
        result = compare(queries, items, FLAGS.k, FLAGS.batch)
        result["prepare_s"] = time.perf_counter() - started
        rows.append((num_items, result))
    print(f"\n{FLAGS.queries} queries in batches of {FLAGS.batch}, k={FLAGS.k}, dim {FLAGS.dim}; "
          "two-tower embeddings trained on the synthetic catalog; one run.\n")
    print("| items | ScaNN leaves (searched) / reorder | build s: BruteForce / ScaNN | "
          "QPS: BruteForce / ScaNN | speed-up | ScaNN recall@k |")
    print("|---|---|---|---|---|---|")
    for num_items, r in rows:
        print(f"| {num_items:,} | {r['num_leaves']} ({r['num_leaves_to_search']}) / "
              f"{r['reorder']} | {r['brute_force_build_s']:.2f} / {r['scann_build_s']:.2f} | "
              f"{r['brute_force_qps']:,.0f} / {r['scann_qps']:,.0f} | "
              f"{r['scann_qps'] / r['brute_force_qps']:.1f}x | {r['recall']:.4f} |")
    largest, r = rows[-1]
    print(f"\nAt {largest:,} items: recall@{FLAGS.k} {r['recall']:.4f} at "
          f"{r['scann_qps'] / r['brute_force_qps']:.1f}x BruteForce's QPS "
          "(target >= 0.95 at >= 10x at 1M items).")


if __name__ == "__main__":
    define_flags()
    app.run(main)
