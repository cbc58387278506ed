r"""Is the input pipeline ever the bottleneck? tf.data throughput of each builder against the
consumption of a training step at the `cpu` preset.

For each builder (SASRec windows, two-tower examples) it times iterating the
training stream alone (examples per second), then compiled training steps of
the matching model fed from memory (examples per second consumed), and prints
the ratio (target >= 5x). Examples are SASRec windows (one user sequence) or
two-tower interactions. Timings from one run, on ML-1M when $TFRS_LOGQ_DATA
holds it, else on the synthetic catalog.

Usage:
  python -m benchmarks.input_pipeline
"""

import os
import time

import tensorflow as tf
from absl import app
from absl import flags

from pipelines import configs
from pipelines import experiment
from pipelines.data import loaders

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_integer("batches", 200, "Batches timed per measurement.", lower_bound=10)
    flags.DEFINE_integer("train_steps", 30, "Training steps timed per model.", lower_bound=5)
    flags.DEFINE_string("dataset", None, "Dataset (default: ml-1m if present, else synthetic).")


def pipeline_rate(dataset: tf.data.Dataset, batches: int) -> float:
    """Examples per second of iterating `dataset` (after a warm-up)."""
    iterator = iter(dataset)
    for _ in range(10):
        next(iterator)
    started = time.perf_counter()
    examples = 0
    for _ in range(batches):
        batch = next(iterator)
        examples += int(tf.nest.flatten(batch)[0].shape[0])
    return examples / (time.perf_counter() - started)


def step_rate(model, batch, steps: int) -> float:
    """Examples per second consumed by compiled training steps on one in-memory batch."""
    train_step = tf.function(model.train_step)
    for _ in range(3):
        train_step(batch)
    started = time.perf_counter()
    for _ in range(steps):
        logs = train_step(batch)
    float(logs["loss"])
    return steps * int(tf.nest.flatten(batch)[0].shape[0]) / (time.perf_counter() - started)


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    dataset = FLAGS.dataset or ("ml-1m" if os.path.exists(loaders.ML_1M_SASREC) else "synthetic")
    print(
        f"Dataset {dataset}, preset cpu; one run, {FLAGS.batches} batches / "
        f"{FLAGS.train_steps} steps per figure.\n"
    )
    print("| builder | pipeline examples/s | training step examples/s | ratio (target >= 5x) |")
    print("|---|---|---|---|")
    for model_name in ("sasrec", "two_tower"):
        config = configs.PRESETS["cpu"].replace(
            dataset=dataset, model=model_name, history_length=50
        )
        data = experiment.load_data(config)
        split = experiment.make_split(config, data)
        stream, _ = experiment.training_stream(config, split)
        produced = pipeline_rate(stream, FLAGS.batches)
        model = experiment.build_model(config, data, split)
        model.compile(optimizer=tf.keras.optimizers.Adam(config.training.learning_rate))
        consumed = step_rate(model, next(iter(stream)), FLAGS.train_steps)
        print(f"| {model_name} | {produced:,.0f} | {consumed:,.0f} | {produced / consumed:.1f}x |")


if __name__ == "__main__":
    define_flags()
    app.run(main)
