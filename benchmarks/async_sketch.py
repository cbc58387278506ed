r"""The count-min sketch under asynchronous updates from parameter-server workers.

Under --strategy=parameter_server the streaming estimator's variables live on the
parameter servers and every worker updates them from its own steps, with no
synchronisation between workers. One `CountMinSketchEstimator.update` is a sequence of
remote ops: read the lazy-decay step counter k, then (plain) one `scatter_add` of the
step's draws and one `assign_add` of the total, or (conservative) a gather of the ids'
counters, then one `scatter_max` of the targets, and finally `assign(k)`; every ~30 /
-log(decay) steps a rescale (`counts.assign(counts * f)`). `assign_add` holds the
variable's exclusive lock; TensorFlow runs a float scatter under a shared lock, so two
scatters at once may race on one counter; and the sequence is not atomic:

- plain scatter_add and assign_add commute: with decay = 1 the sketch after the stream is
  the synchronous one, whatever the interleaving, but for the rare increment lost when two
  scatter_adds hit one counter at the same instant;
- conservative updates are read-modify-write (read min, write min + c by scatter_max):
  two workers that read the same counters write the same target, and one's draws are lost;
- k is read-modify-write (`assign(k + 1)`): concurrent steps write the same k, so the
  decay runs slower than the stream (a longer window), and a step that read k before a
  rescale adds its draws in the old, e^30 times larger unit after it.

This script measures those effects on a known stream: Zipf(1) draws over `--items`
items, `--batch` per step, `--steps` steps; the same batches fed once synchronously (one
process, in order) and `--repeats` times asynchronously through a ClusterCoordinator over
`--workers` worker processes and `--ps` parameter servers on this machine. For each
variant it reports the bias and spread of the asynchronous q against the synchronous q
(relative error per item, averaged over the head, torso and tail thirds of the catalog
by true probability, and weighted by the true q), the error of both against the true q,
and the step counters.

  python -m benchmarks.async_sketch --out=docs/results/async_sketch.json
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf

from pipelines import cluster as cluster_lib
from tfrs_logq.frequency import CountMinSketchEstimator

# (name, CountMinSketchEstimator arguments) of the variants measured by default.
VARIANTS = {
    "plain_decay1": dict(decay=1.0, conservative=False),
    "conservative_decay1": dict(decay=1.0, conservative=True),
    "plain_decay0.95": dict(decay=0.95, conservative=False),
}
_SERVE = [
    sys.executable,
    "-c",
    "from pipelines import distribute; distribute.serve_parameter_server_task()",
]


def zipf_stream(items: int, batch: int, steps: int, seed: int = 0):
    """([steps, batch] int64 ids drawn from Zipf(1) over `items`, [items] true q)."""
    for name, value in (("items", items), ("batch", batch), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    q = 1.0 / np.arange(1, items + 1)
    q /= q.sum()
    rng = np.random.RandomState(seed)
    return rng.choice(items, size=[steps, batch], p=q).astype(np.int64), q


def estimator(variant: Dict, width: int, depth: int) -> CountMinSketchEstimator:
    """The sketch of one variant (seed 0: the same hashes in both runs)."""
    return CountMinSketchEstimator(width=width, depth=depth, seed=0, **variant)


def q_of(sketch: CountMinSketchEstimator, items: int) -> np.ndarray:
    """The sketch's per-draw q of items 0..items-1."""
    return np.exp(sketch.log_q(tf.range(items, dtype=tf.int64)).numpy().astype(np.float64))


def draws(sketch: CountMinSketchEstimator) -> Dict[str, float]:
    """The decayed draws the sketch holds: in its counters (summed over the rows, divided
    by the depth) and in its total, in units of one draw made now."""
    unit = float(sketch._unit(sketch.steps_since_rescale).numpy())  # pylint: disable=protected-access
    counters = float(sketch.counts.numpy().astype(np.float64).sum()) / sketch.depth
    return {"counters": counters / unit, "total": float(sketch.total.numpy()) / unit}


def synchronous(stream: np.ndarray, variant: Dict, width: int, depth: int) -> Dict:
    """The sketch after the stream fed in order in this process."""
    sketch = estimator(variant, width, depth)
    update = tf.function(sketch.update)
    for ids in stream:
        update(tf.constant(ids))
    return {
        "q": q_of(sketch, int(stream.max()) + 1),
        "step": int(sketch.step.numpy()),
        "draws": draws(sketch),
    }


def asynchronous(
    strategy, stream: np.ndarray, variant: Dict, width: int, depth: int, items: int
) -> Dict:
    """The sketch after the stream's steps scheduled on the cluster's workers (each step
    one closure, `update` under `strategy.run`, as a training step calls it)."""
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        sketch = estimator(variant, width, depth)

    @tf.function
    def step(ids):
        strategy.run(sketch.update, args=(ids,))

    for ids in stream:
        coordinator.schedule(step, args=(tf.constant(ids),))
    coordinator.join()
    return {
        "q": q_of(sketch, items),
        "step": int(sketch.step.numpy()),
        "steps_since_rescale": int(sketch.steps_since_rescale.numpy()),
        "draws": draws(sketch),
        "devices": sorted({w.device for w in sketch.weights}),
    }


def thirds(q_true: np.ndarray) -> Dict[str, np.ndarray]:
    """Item ids of the head, torso and tail thirds of the catalog by true q."""
    order = np.argsort(-q_true)
    return dict(zip(("head", "torso", "tail"), np.array_split(order, 3)))


def compare(q_async: np.ndarray, q_sync: np.ndarray, q_true: np.ndarray) -> Dict:
    """Bias and spread of the asynchronous estimates against the synchronous one.

    q_async: [repeats, items]. Per item, r = q_async / q_sync - 1. "bias": r averaged over
    repeats then over the items of a third (and weighted by the true q: "weighted");
    "sd": the standard deviation of r over repeats, averaged likewise; "log_error_*": mean
    |log q - log q_true| weighted by the true q, synchronous and asynchronous.
    """
    r = q_async / q_sync[np.newaxis, :] - 1.0
    mean, sd = r.mean(axis=0), r.std(axis=0, ddof=1) if len(r) > 1 else np.zeros(r.shape[1])
    out = {"bias": {}, "sd": {}}
    for name, ids in thirds(q_true).items():
        out["bias"][name] = float(mean[ids].mean())
        out["sd"][name] = float(sd[ids].mean())
    out["bias"]["weighted"] = float((mean * q_true).sum())
    out["sd"]["weighted"] = float((sd * q_true).sum())
    out["max_abs_relative_error"] = float(np.abs(r).max())
    out["log_error_sync"] = float((np.abs(np.log(q_sync / q_true)) * q_true).sum())
    out["log_error_async"] = float(
        (np.abs(np.log(q_async / q_true[np.newaxis, :])) * q_true).sum(axis=1).mean()
    )
    return out


def _exit_if_a_server_dies(servers, server_log, finished: threading.Event, say) -> None:
    """Ends this process (status 1) with the servers' output when one of them exits before
    `finished` is set: a coordinator would wait for its workers for ever."""
    processes = [p for group in servers.values() for p in group]
    while all(p.poll() is None for p in processes):
        if finished.wait(0.5):
            return
    server_log.seek(0)
    say("A server exited; their output:\n" + server_log.read()[-5000:])
    os._exit(1)  # pylint: disable=protected-access


def measure(
    variants: Dict[str, Dict],
    items: int,
    batch: int,
    steps: int,
    repeats: int,
    workers: int,
    ps: int,
    width: int,
    depth: int,
    say=print,
) -> Dict:
    """Starts a local cluster (`workers` workers and `ps` parameter servers as processes,
    this process its chief), runs every variant synchronously once and asynchronously
    `repeats` times, stops the cluster and returns the comparison of each variant."""
    stream, q_true = zipf_stream(items, batch, steps)
    cluster = cluster_lib.local_cluster(workers, ps, chief=True)
    server_log = tempfile.TemporaryFile("w+")  # The servers' output, shown if they fail.
    servers = cluster_lib.start_cluster(
        _SERVE, {k: v for k, v in cluster.items() if k != "chief"}, output=server_log
    )
    finished = threading.Event()
    watchdog = threading.Thread(
        target=_exit_if_a_server_dies, args=(servers, server_log, finished, say), daemon=True
    )
    watchdog.start()
    os.environ["TF_CONFIG"] = cluster_lib.tf_config(cluster, 0, "chief")
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    results = {}
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        for name, variant in variants.items():
            started = time.time()
            sync = synchronous(stream, variant, width, depth)
            runs = [
                asynchronous(strategy, stream, variant, width, depth, items) for _ in range(repeats)
            ]
            results[name] = {
                "variant": variant,
                **compare(np.stack([run["q"] for run in runs]), sync["q"], q_true),
                "sync_step": sync["step"],
                "async_steps": [run["step"] for run in runs],
                "async_steps_since_rescale": [run["steps_since_rescale"] for run in runs],
                "state_devices": runs[0]["devices"],
                "sync_draws": sync["draws"],
                "async_draws": [run["draws"] for run in runs],
                "seconds": round(time.time() - started, 1),
            }
            say(f"{name}: {json.dumps({k: results[name][k] for k in ('bias', 'sd')})}")
    except BaseException:
        server_log.seek(0)
        say("The servers' output:\n" + server_log.read()[-5000:])
        raise
    finally:
        finished.set()
        os.environ.pop("TF_CONFIG", None)
        for processes in servers.values():
            cluster_lib.stop(processes)
    return {
        "items": items,
        "batch": batch,
        "steps": steps,
        "repeats": repeats,
        "workers": workers,
        "ps": ps,
        "width": width,
        "depth": depth,
        "stream": "Zipf(1), seed 0",
        "variants": results,
    }


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.async_sketch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"Comma-separated, of {', '.join(VARIANTS)}."
    )
    parser.add_argument("--out", default=None, help="Where the JSON goes (else stdout only).")
    args = parser.parse_args(argv)
    names: List[str] = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(
            f"--variants must name some of {', '.join(VARIANTS)}; received "
            f"--variants={args.variants!r}."
        )
    result = measure(
        {n: VARIANTS[n] for n in names},
        args.items,
        args.batch,
        args.steps,
        args.repeats,
        args.workers,
        args.ps,
        args.width,
        args.depth,
    )
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
