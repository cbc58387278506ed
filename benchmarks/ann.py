r"""ScaNN against tfrs BruteForce: build time, queries per second, recall@k.

The item and query embeddings of each catalog size come from `--embeddings`:

- trained: a two-tower model trained briefly on the synthetic catalog of that
  size (mixed negatives, improved correction), so they come from a model. The
  synthetic catalog costs O(users x items x dim) to draw and the model trains
  with Adam over every row: up to about 1M items.
- clustered: random embeddings, not a model's: `--clusters` Gaussian centres
  of Zipf popularity (an item or a query picks its centre by it), each point
  its centre plus Gaussian noise `--spread` times the centres' scale, item
  norms growing with the log of a Zipf(1) popularity (1 for the least popular
  item, 1 + 0.05 ln N for the most popular), the popularity ranks shuffled
  against the clusters. Cheap at any size (5M items: seconds).

Then, in one run:

- `tfrs.layers.factorized_top_k.BruteForce` (exact) and a ScaNN index with
  `tfrs_logq.retrieval.scann_defaults` (tree of ~sqrt(N) leaves, asymmetric
  hashing, exact re-scoring) are built over every item;
- the same query batches go through both, interleaved batch by batch (and
  through the index once more for each `--search` setting: leaves searched
  and candidates re-scored, on the same index); queries per second of each;
- recall@k of ScaNN = the share of BruteForce's top k it returns.

Target at 5M items: recall@100 >= 0.95 at >= 10x BruteForce's queries per second.

Usage:
  python -m benchmarks.ann
  python -m benchmarks.ann --embeddings=clustered --catalogs=1000000,5000000 \
      --search=default,100:600
"""

import time
from typing import Dict, List, Tuple

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from benchmarks import catalog
from pipelines.data import builders
from pipelines.data import splits
from pipelines.data import synthetic
from tfrs_logq import retrieval
from tfrs_logq.models import TwoTower
from tfrs_logq.models import make_objective

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
    flags.DEFINE_enum(
        "embeddings",
        "trained",
        ["trained", "clustered"],
        "Where the embeddings come from: a trained two-tower model, or "
        "clustered random embeddings (see the module's docstring).",
    )
    flags.DEFINE_integer("clusters", 1000, "clustered: number of centres.", lower_bound=1)
    flags.DEFINE_float(
        "spread",
        1.0,
        "clustered: noise within a cluster, in units of the centres' scale.",
        lower_bound=0.0,
    )
    flags.DEFINE_list(
        "search",
        ["default"],
        "Search settings timed on each index: "
        "'default' (scann_defaults) or LEAVES:REORDER (leaves searched, "
        "candidates re-scored exactly).",
    )


def trained_embeddings(num_items: int, num_users: int, steps: int, dim: int, seed: int):
    """(query embeddings of held-out users, [num_items + 1, dim] item embeddings)."""
    tf.keras.utils.set_random_seed(seed)
    data, _ = synthetic.make_synthetic(
        num_users=num_users, num_items=num_items, dim=16, min_length=10, max_length=50, seed=seed
    )
    split = splits.leave_one_out(data)
    counts = split.train_counts().astype(np.float64) + 1.0
    counts[0] = 0.0
    probabilities = (counts / counts.sum()).astype(np.float32)
    probabilities[0] = 1.0
    model = TwoTower(
        data.num_users,
        num_items,
        make_objective(
            num_items,
            negatives="mixed",
            correction="improved",
            num_negatives=256,
            probabilities=probabilities,
            seed=seed,
        ),
        dim=dim,
    )
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
    model.fit(
        builders.two_tower_dataset(split.train, 20, 512, seed=seed),
        steps_per_epoch=steps,
        epochs=1,
        verbose=0,
    )
    padded = builders.left_pad(split.test.histories, 20)
    queries = model.query_embeddings(
        {"user": split.test.users.astype(np.int32), "history": padded}
    ).numpy()
    return queries, model.item_embeddings().numpy()


def clustered_embeddings(
    num_items: int, num_queries: int, dim: int, clusters: int, spread: float, seed: int
):
    """(query embeddings, [num_items + 1, dim] item embeddings, row 0 zero), random and
    clustered, not trained: see the module's docstring."""
    rng = np.random.default_rng(seed)
    scale = float(1.0 / np.sqrt(dim))
    centres = rng.normal(0.0, scale, [clusters, dim]).astype(np.float32)
    cluster_q = catalog.zipf_probabilities(clusters, 1.0)

    def points(count):
        chosen = centres[rng.choice(clusters, size=count, p=cluster_q)]
        noise = rng.standard_normal([count, dim], dtype=np.float32)
        return chosen + noise * np.float32(spread * scale)

    items = points(num_items)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    # ln(q(d) / q(least popular)) of Zipf(1) is ln(N / rank).
    log_popularity = np.log(num_items / np.arange(1, num_items + 1, dtype=np.float64))
    items *= (1.0 + 0.05 * log_popularity[rng.permutation(num_items)]).astype(np.float32)[
        :, np.newaxis
    ]
    return points(num_queries), np.vstack([np.zeros([1, dim], np.float32), items])


def search_settings(num_items: int, k: int, search: List[str]) -> List[Tuple[str, int, int]]:
    """(label, leaves searched, candidates re-scored) of each `--search` entry."""
    defaults = retrieval.scann_defaults(num_items, k)
    out = []
    for entry in search:
        if entry == "default":
            leaves, reorder = defaults["num_leaves_to_search"], defaults["reorder"]
        else:
            try:
                leaves, reorder = (int(x) for x in entry.split(":"))
            except ValueError as error:
                raise ValueError(
                    f"--search entries must be 'default' or LEAVES:REORDER; received {entry!r}."
                ) from error
        out.append((entry, min(leaves, defaults["num_leaves"]), max(reorder, k)))
    return out


def compare(
    queries: np.ndarray, items: np.ndarray, k: int, batch: int, search: List[str] = ("default",)
) -> List[Dict[str, float]]:
    """Build times, queries per second and ScaNN's recall@k against BruteForce: one dict
    per `search` setting, all searched on one index, interleaved batch by batch."""
    from scann import scann_ops_pybind  # pylint: disable=import-outside-toplevel

    candidates = np.ascontiguousarray(items[1:])
    started = time.perf_counter()
    brute = tfrs.layers.factorized_top_k.BruteForce(k=k)
    brute.index(tf.constant(candidates))
    brute_build = time.perf_counter() - started
    settings = retrieval.scann_defaults(len(candidates), k)
    started = time.perf_counter()
    searcher = (
        scann_ops_pybind.builder(candidates, k, "dot_product")
        .tree(
            num_leaves=settings["num_leaves"],
            num_leaves_to_search=settings["num_leaves_to_search"],
            training_sample_size=min(len(candidates), 250_000),
        )
        .score_ah(2, anisotropic_quantization_threshold=0.2)
        .reorder(settings["reorder"])
        .build()
    )
    scann_build = time.perf_counter() - started
    batches = [np.ascontiguousarray(queries[i : i + batch]) for i in range(0, len(queries), batch)]
    settings_list = search_settings(len(candidates), k, list(search))
    brute(tf.constant(batches[0]))  # Warm up (traces the function).
    searcher.search_batched(batches[0])
    exact, brute_seconds = [], 0.0
    found = {label: [] for label, _, _ in settings_list}
    seconds = dict.fromkeys(found, 0.0)
    for queries_batch in batches:
        started = time.perf_counter()
        exact.append(brute(tf.constant(queries_batch))[1].numpy())
        brute_seconds += time.perf_counter() - started
        for label, leaves, reorder in settings_list:
            started = time.perf_counter()
            found[label].append(
                searcher.search_batched(
                    queries_batch,
                    final_num_neighbors=k,
                    pre_reorder_num_neighbors=reorder,
                    leaves_to_search=leaves,
                )[0]
            )
            seconds[label] += time.perf_counter() - started
    exact = np.concatenate(exact)
    return [
        {
            "brute_force_build_s": brute_build,
            "scann_build_s": scann_build,
            "brute_force_qps": len(queries) / brute_seconds,
            "scann_qps": len(queries) / seconds[label],
            "recall": retrieval.overlap_at_k(np.concatenate(found[label]), exact, k),
            "num_leaves": settings["num_leaves"],
            "num_leaves_to_search": leaves,
            "reorder": reorder,
            "search": label,
        }
        for label, leaves, reorder in settings_list
    ]


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    search_settings(1, FLAGS.k, FLAGS.search)  # Bad entries fail before any work.
    rows = []
    for num_items in (int(c) for c in FLAGS.catalogs):
        started = time.perf_counter()
        if FLAGS.embeddings == "trained":
            queries, items = trained_embeddings(
                num_items, FLAGS.users, FLAGS.train_steps, FLAGS.dim, FLAGS.seed
            )
            queries = np.tile(queries, (-(-FLAGS.queries // len(queries)), 1))[: FLAGS.queries]
        else:
            queries, items = clustered_embeddings(
                num_items, FLAGS.queries, FLAGS.dim, FLAGS.clusters, FLAGS.spread, FLAGS.seed
            )
        prepare_s = time.perf_counter() - started
        rows += [
            (num_items, dict(result, prepare_s=prepare_s))
            for result in compare(queries, items, FLAGS.k, FLAGS.batch, FLAGS.search)
        ]
    source = (
        "two-tower embeddings trained on the synthetic catalog"
        if FLAGS.embeddings == "trained"
        else f"clustered random embeddings ({FLAGS.clusters} centres, spread {FLAGS.spread})"
    )
    print(
        f"\n{FLAGS.queries} queries in batches of {FLAGS.batch}, k={FLAGS.k}, dim {FLAGS.dim}; "
        f"{source}; BruteForce and each ScaNN search interleaved batch by batch; one run.\n"
    )
    print(
        "| items | embeddings | search | ScaNN leaves (searched) / reorder | build s: "
        "BruteForce / ScaNN | QPS: BruteForce / ScaNN | speed-up | ScaNN recall@k |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for num_items, r in rows:
        print(
            f"| {num_items:,} | {FLAGS.embeddings} | {r['search']} | {r['num_leaves']} "
            f"({r['num_leaves_to_search']}) / {r['reorder']} | "
            f"{r['brute_force_build_s']:.2f} / {r['scann_build_s']:.2f} | "
            f"{r['brute_force_qps']:,.0f} / {r['scann_qps']:,.0f} | "
            f"{r['scann_qps'] / r['brute_force_qps']:.1f}x | {r['recall']:.4f} |"
        )
    largest = max(num_items for num_items, _ in rows)
    for num_items, r in rows:
        if num_items == largest:
            print(
                f"At {largest:,} items, search {r['search']}: recall@{FLAGS.k} "
                f"{r['recall']:.4f} at {r['scann_qps'] / r['brute_force_qps']:.1f}x "
                "BruteForce's QPS (target >= 0.95 at >= 10x at 5M items)."
            )


if __name__ == "__main__":
    define_flags()
    app.run(main)
