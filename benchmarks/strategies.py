r"""The same two-tower step under each tf.distribute strategy, as processes on this machine.

The industrial preset's two-tower (dim 64, mixed negatives with a count-min sketch, Adagrad
on the tables) over `--items` items and as many users, trained on a known stream (users
uniform, items and histories Zipf(1) over the catalog) for `--epochs` epochs of `--steps`
steps of `--batch` examples, under:

- default: one process;
- mirrored: one process, MirroredStrategy over 2 logical CPUs (each holds a copy);
- multi_worker: 2 worker processes (MultiWorkerMirroredStrategy);
- parameter_server: a chief, 2 workers and 2 parameter servers (tables sharded with
  MinSizePartitioner), each worker step a batch of `--batch` (as one global step of the
  others).

Every variant's processes share this machine's cores, so read the examples per second as
the overhead of each strategy, not as a speed-up. For each it reports examples per second
(epochs after the first, which traces), the loss of every epoch (the loss curve), the peak
resident memory of every process (VmHWM, the servers' read from /proc before they are
stopped), and the sketch's error against the stream's true q at the end (mean |log q -
log q_true| weighted by q, and by popularity third).

  python -m benchmarks.strategies --out=docs/results/strategies_1m.json
"""

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

VARIANTS = ("default", "mirrored", "multi_worker", "parameter_server")
_SERVE = [
    sys.executable,
    "-c",
    "from pipelines import distribute; distribute.serve_parameter_server_task()",
]


def zipf_q(items: int) -> np.ndarray:
    """[items + 1] true q of ids 0..items (0 is padding, q 0): Zipf(1) over ids 1..items."""
    q = np.zeros(items + 1)
    q[1:] = 1.0 / np.arange(1, items + 1)
    return q / q.sum()


def stream(items: int, batch: int, steps: int, history: int, seed: int = 0) -> Dict:
    """`steps` batches of {"user", "history", "item"} int32, items and histories drawn from
    Zipf(1) (by inverse transform of the cumulative q), users uniform."""
    rng = np.random.RandomState(seed)
    cumulative = np.cumsum(zipf_q(items))

    def draw(shape):
        return np.minimum(np.searchsorted(cumulative, rng.uniform(size=shape)), items)

    return {
        "user": rng.randint(1, items + 1, size=[steps, batch]).astype(np.int32),
        "history": draw([steps, batch, history]).astype(np.int32),
        "item": np.maximum(draw([steps, batch]), 1).astype(np.int32),
    }


def _train(args) -> Dict:
    """One training process of `args.run` (the chief, or a MultiWorkerMirroredStrategy
    worker): builds the model in the strategy's scope, fits, and returns its measures."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import tfrs_logq  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from logq_core import formulas  # pylint: disable=import-outside-toplevel
    from pipelines import configs  # pylint: disable=import-outside-toplevel
    from pipelines import distribute  # pylint: disable=import-outside-toplevel
    from pipelines import experiment  # pylint: disable=import-outside-toplevel
    from pipelines import memory  # pylint: disable=import-outside-toplevel
    from tfrs_logq.frequency import CountMinSketchEstimator  # pylint: disable=import-outside-toplevel
    from tfrs_logq.models import TwoTower  # pylint: disable=import-outside-toplevel
    from tfrs_logq.models import make_objective  # pylint: disable=import-outside-toplevel

    if args.run == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        strategy = tf.distribute.MirroredStrategy(
            [d.name for d in tf.config.list_logical_devices("CPU")]
        )
    else:
        strategy = distribute.make_strategy(args.run)
    config = configs.PRESETS["industrial"].replace(
        batch_size=args.batch, **json.loads(args.overrides)
    )
    data = stream(args.items, args.batch, args.steps, config.model.history_length)
    tf.keras.utils.set_random_seed(0)
    with strategy.scope():
        sketch = CountMinSketchEstimator(width=formulas.count_min_width(args.items), seed=0)
        objective = make_objective(
            args.items, seed=0, probabilities=sketch, **config.loss.objective_settings()
        )
        model = TwoTower(args.items, args.items, objective, dim=config.model.dim)
        model(
            {
                "user": tf.zeros([1], tf.int32),
                "history": tf.zeros([1, config.model.history_length], tf.int32),
            }
        )
        model.compile(
            optimizer=experiment.make_optimizer(
                config.training, model, distribute.is_parameter_server(strategy)
            )
        )

    def dataset(context=None):
        """The global batches; with several replicas, this pipeline's replicas' shares of
        each, one per-replica batch after the other."""
        ds = tf.data.Dataset.from_tensor_slices(data).repeat()
        if context is not None and context.num_replicas_in_sync > 1:
            pipelines, replicas = context.num_input_pipelines, context.num_replicas_in_sync
            share = args.batch // pipelines
            start = context.input_pipeline_id * share

            def split(b):
                return tf.data.Dataset.from_tensor_slices(
                    {
                        k: tf.reshape(
                            v[start : start + share],
                            [replicas // pipelines, args.batch // replicas] + v.shape[1:].as_list(),
                        )
                        for k, v in b.items()
                    }
                )

            ds = ds.flat_map(split)
        return ds.prefetch(2)

    if distribute.is_parameter_server(strategy):
        # Each worker from its own position, as pipelines.experiment.worker_stream.
        inputs = tf.keras.utils.experimental.DatasetCreator(
            lambda context: dataset().skip(
                tf.math.floormod(tf.cast(tf.timestamp() * 1e6, tf.int64), args.steps)
            )
        )
    elif args.run == "default":
        inputs = dataset()
    else:
        inputs = strategy.distribute_datasets_from_function(dataset)

    ends = []
    timer = tf.keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: ends.append(time.time())
    )
    started = time.time()
    history = model.fit(
        inputs, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0, callbacks=[timer]
    )
    q_true = zipf_q(args.items)
    ids = np.arange(1, args.items + 1)
    q = np.exp(sketch.log_q(tf.constant(ids, tf.int64)).numpy().astype(np.float64))
    error = np.abs(np.log(q / q_true[1:]))
    thirds = np.array_split(np.arange(args.items), 3)
    seconds = ends[-1] - ends[0]
    return {
        "variant": args.run,
        "loss": [round(float(v), 4) for v in history.history["loss"]],
        "examples_per_second": round(args.batch * args.steps * (args.epochs - 1) / seconds, 1),
        "first_epoch_seconds": round(ends[0] - started, 1),
        "steps": int(model.optimizer.iterations.numpy()),
        "estimator_steps": int(sketch.step.numpy()),
        "estimator_log_error": {
            "weighted": round(float((error * q_true[1:]).sum()), 4),
            **{
                name: round(float(error[ids_].mean()), 4)
                for name, ids_ in zip(("head", "torso", "tail"), thirds)
            },
        },
        "peak_rss_mib": round(memory.peak_rss_mib()),
    }


def _peak_of(pid: int) -> Optional[int]:
    """VmHWM of a running process, MiB (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        return None
    return None


def _last_json(output: str) -> Dict:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no result in the output:\n" + output[-3000:])


def run_variant(variant: str, flags: List[str], workers: int = 2) -> Dict:
    """Starts `variant`'s processes, waits for them and returns the chief's measures with
    every process's peak memory."""
    from pipelines import cluster as cluster_lib  # pylint: disable=import-outside-toplevel

    command = [sys.executable, "-m", "benchmarks.strategies", "--run", variant] + flags
    if variant in ("default", "mirrored"):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode:
            raise RuntimeError(result.stdout[-2000:] + result.stderr[-3000:])
        measures = _last_json(result.stdout)
        measures["process_peak_rss_mib"] = {"chief": measures["peak_rss_mib"]}
        return measures
    if variant == "multi_worker":
        workers = cluster_lib.start_workers(command, cluster_lib.local_cluster(workers))
        outputs = cluster_lib.wait_workers(workers, timeout=3000)
        results = [_last_json(o) for o in outputs]
        measures = results[0]
        measures["process_peak_rss_mib"] = {
            f"worker {i}": r["peak_rss_mib"] for i, r in enumerate(results)
        }
        return measures
    cluster = cluster_lib.local_cluster(workers, 2, chief=True)
    servers = cluster_lib.start_cluster(_SERVE, {k: v for k, v in cluster.items() if k != "chief"})
    chief = cluster_lib.start_task(command, cluster, "chief", 0)
    try:
        output = chief.communicate(timeout=3000)[0]
        peaks = {
            f"{kind} {i}": _peak_of(p.pid)
            for kind in ("worker", "ps")
            for i, p in enumerate(servers[kind])
        }
    finally:
        chief.kill()
        for group in servers.values():
            cluster_lib.stop(group)
    measures = _last_json(output)
    measures["process_peak_rss_mib"] = {"chief": measures["peak_rss_mib"], **peaks}
    return measures


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.strategies", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="Steps per epoch.")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--overrides",
        default="{}",
        help="JSON of config fields to change in the industrial preset.",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="Workers of multi_worker and parameter_server."
    )
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)  # One process's part.
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    for name in ("items", "batch", "steps", "epochs"):
        if getattr(args, name) < (2 if name == "epochs" else 1):
            parser.error(
                f"--{name} must be at least {2 if name == 'epochs' else 1}; received "
                f"--{name}={getattr(args, name)}."
            )
    if args.run:
        print(json.dumps(_train(args)), flush=True)
        return
    variants = [v for v in args.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(
            f"--variants must name some of {', '.join(VARIANTS)}; received "
            f"--variants={args.variants!r}."
        )
    flags = [
        f"--items={args.items}",
        f"--batch={args.batch}",
        f"--steps={args.steps}",
        f"--epochs={args.epochs}",
        f"--overrides={args.overrides}",
    ]
    results = {
        "items": args.items,
        "batch": args.batch,
        "steps": args.steps,
        "epochs": args.epochs,
        "workers": args.workers,
        "overrides": json.loads(args.overrides),
        "cpu_cores": os.cpu_count(),
        "variants": {},
    }
    for variant in variants:
        started = time.time()
        results["variants"][variant] = run_variant(variant, flags, args.workers)
        results["variants"][variant]["wall_seconds"] = round(time.time() - started, 1)
        print(variant, json.dumps(results["variants"][variant]), flush=True)
        if args.out:  # Written after each variant: a cut-off run keeps what it measured.
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
