r"""Filtered serving: requests restricted to an allowed set, with extra exclusions.

Trains the `smoke` preset (a small SASRec on the synthetic catalog; about 10 seconds on 2
cores) into a temporary directory, or takes a finished run (`--run`), and sends its exports
(brute force and ScaNN, the latest version of each) one filtered request for a few test users:
an allowed set shared by all of them (say, the items in stock), the two best allowed items of
each user excluded (say, already shown), and the user's history excluded as always. It prints
the request as TF Serving's REST body and as the matching Python call, the answer, how it
compares with exact search restricted to the set (minus history and exclusions), and the median
time of the plain and the filtered request over all test users.

Exits with status 1 when an answer holds an id outside the allowed set, an excluded id or a
history id, or when the brute-force answer differs from exact search.

Usage:
  python -m examples.filtered_serving [--run=OUTPUT_DIR] [--users=2] [--allowed=40]
"""

import json
import os
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines import experiment
from pipelines import train
from pipelines.run_files import RunFiles
from tfrs_logq import retrieval

FLAGS = flags.FLAGS
INDEXES = ("brute_force", "scann")

if __name__ == "__main__":
    flags.DEFINE_string(
        "run",
        None,
        "A finished run's OUTPUT_DIR (default: train the smoke preset into a temporary directory).",
    )
    flags.DEFINE_integer("users", 2, "Test users in the request shown.", lower_bound=1)
    flags.DEFINE_integer("allowed", 40, "Items in the allowed set.", lower_bound=1)
    flags.DEFINE_integer("excluded", 2, "Best allowed items excluded per user.", lower_bound=0)
    flags.DEFINE_integer(
        "repeats", 20, "Timed requests per signature (the first is warm-up).", lower_bound=1
    )
    flags.DEFINE_integer("seed", 0, "Seed of the allowed set.")


def latest_export(run_dir: str, index: str) -> str:
    """The highest version directory of the run's `index` export."""
    base = RunFiles(run_dir).export(index)
    versions = (
        [int(name) for name in os.listdir(base) if name.isdigit()] if os.path.isdir(base) else []
    )
    if not versions:
        raise app.UsageError(
            f"{run_dir} has no {index} export: run `python -m pipelines.export {run_dir}`."
        )
    return os.path.join(base, str(max(versions)))


def raw_ids(raw_of: np.ndarray, dense, width: int, dtype: tf.DType) -> np.ndarray:
    """Dense item ids (lists, 0: padding) -> [len(dense), width] raw ids, left-padded with ""
    (strings) or -1 (int64): the padding of a raw request."""
    padding = "" if dtype == tf.string else -1
    rows = np.full([len(dense), width], padding, object)
    for row, ids in enumerate(dense):
        if len(ids):
            rows[row, width - len(ids) :] = [raw_of[i] if i else padding for i in ids]
    return rows.astype(str) if dtype == tf.string else rows.astype(np.int64)


def filtered_request(run_dir: str, allowed: int, excluded: int, seed: int):
    """(the run's data, its test set, the allowed set and each test user's exclusions (dense
    ids), and the exact restricted answer: [users, k] dense ids, 0 in empty slots)."""
    config, model, data_split, data = experiment.load_run(run_dir)
    test = data_split.test
    rng = np.random.default_rng(seed)
    stock = np.sort(rng.choice(np.arange(1, data.num_items + 1), allowed, replace=False))
    queries = experiment.query_embeddings(model, config, test)
    table = model.item_embeddings().numpy()
    k = min(100, data.num_items)  # pipelines.export's default --k.

    def restricted(exclude):
        blocked = [
            np.union1d(
                np.setdiff1d(np.arange(1, data.num_items + 1), stock), np.union1d(history, dropped)
            )
            for history, dropped in zip(test.histories, exclude)
        ]
        ids = retrieval.exact_top_k(queries, table, k, exclude=blocked)
        found = [min(k, data.num_items - len(b)) for b in blocked]
        return np.where(np.arange(k) < np.array(found)[:, None], ids, 0)

    exclude = restricted([np.zeros(0, np.int64)] * len(test.users))[:, :excluded]
    return data, test, stock, exclude, restricted(exclude)


def build_request(data, test, rows, stock, exclude, specs) -> dict:
    """The raw request of the test users `rows` (their whole histories, the allowed set, their
    exclusions) for a signature whose inputs are `specs`."""
    histories = [test.histories[row] for row in rows]
    dtype = specs["history"].dtype
    request = {
        "history": raw_ids(data.item_ids, histories, max(map(len, histories)), dtype),
        "allowed": raw_ids(data.item_ids, [stock] * len(rows), len(stock), dtype),
        "exclude": raw_ids(data.item_ids, exclude[rows], exclude.shape[1], dtype),
    }
    if "user" in specs:  # A two-tower model's raw user ids.
        request["user"] = data.user_ids[test.users[rows]].astype(
            np.int64 if specs["user"].dtype == tf.int64 else str
        )
    return request


def median_ms(signature, request: dict, repeats: int) -> float:
    """The median time of `repeats` requests (the first, a warm-up, left out)."""
    elapsed = []
    for _ in range(repeats):
        start = time.perf_counter()
        signature(**request)["ids"].numpy()
        elapsed.append(time.perf_counter() - start)
    return 1000 * float(np.median(elapsed[1:] or elapsed))


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.ERROR)
    run_dir = FLAGS.run
    if run_dir is None:
        run_dir = tempfile.mkdtemp(prefix="filtered-serving-")
        print(f"Training the smoke preset into {run_dir} ...", flush=True)
        train.run(configs.PRESETS["smoke"], run_dir, verbose=0)
    data, test, stock, exclude, want = filtered_request(
        run_dir, FLAGS.allowed, FLAGS.excluded, FLAGS.seed
    )
    dense_of = {raw: dense for dense, raw in enumerate(data.item_ids.astype(str)) if dense}
    everyone, shown = np.arange(len(test.users)), np.arange(min(FLAGS.users, len(test.users)))
    failed = False
    for index in INDEXES:
        path = latest_export(run_dir, index)
        if index == "scann":
            import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
        signatures = tf.saved_model.load(path).signatures
        name, plain_name = (
            ("serving_raw_filtered", "serving_raw")
            if "serving_raw" in signatures
            else ("serving_filtered", "serving_default")
        )
        if name not in signatures:
            raise app.UsageError(
                f"{path} was exported before filtered serving: re-export it "
                f"with `python -m pipelines.export {run_dir}`."
            )
        specs = signatures[name].structured_input_signature[1]
        if index == INDEXES[0]:
            request = build_request(data, test, shown, stock, exclude, specs)
            body = {
                "signature_name": name,
                "inputs": {key: value.tolist() for key, value in request.items()},
            }
            print(
                f"\nREST (TF Serving, --model_base_path={os.path.dirname(path)}): POST "
                "http://localhost:8501/v1/models/<model_name>:predict with the body\n"
                f"{json.dumps(body)}\n"
            )
            print(
                f"Python, the same request:\n  signatures = tf.saved_model.load({path!r})"
                f".signatures\n  signatures[{name!r}]("
                + ", ".join(
                    f"{key}=tf.constant({value.tolist()!r})" for key, value in request.items()
                )
                + ")\n"
            )
        request = {
            key: tf.constant(value)
            for key, value in build_request(data, test, everyone, stock, exclude, specs).items()
        }
        answer = signatures[name](**request)
        got = answer["ids"].numpy().astype(str)
        found = answer["num_found"].numpy()
        # Raw -> dense through the vocabulary (the answer's empty slots, "" or -1: dense 0).
        served = np.vectorize(lambda raw: dense_of.get(raw, 0))(got)
        wrong = sum(
            np.setdiff1d(row[:n], stock).size
            + np.intersect1d(row[:n], np.union1d(history, dropped)).size
            for row, n, history, dropped in zip(served, found, test.histories, exclude)
        )
        shared = sum(np.intersect1d(a[:n], b[:n]).size for a, b, n in zip(served, want, found))
        print(
            f"{index} ({path}, {name}): top 5 of the first {len(shown)} users "
            f"{got[shown, :5].tolist()}, num_found {found[shown].tolist()}. Over the "
            f"{len(everyone)} test users: ids outside the allowed set or excluded {wrong}; "
            f"equal to exact restricted search: {bool(np.array_equal(served, want))} "
            f"(share of its found ids: {shared / max(found.sum(), 1):.3f})"
        )
        failed |= wrong > 0 or (index == "brute_force" and not np.array_equal(served, want))
        plain = {key: value for key, value in request.items() if key in ("user", "history")}
        print(
            f"  {len(everyone)} users per request, median of {FLAGS.repeats}: {plain_name} "
            f"{median_ms(signatures[plain_name], plain, FLAGS.repeats):.1f} ms, {name} "
            f"{median_ms(signatures[name], request, FLAGS.repeats):.1f} ms"
        )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    app.run(main)
