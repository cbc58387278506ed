r"""Milliseconds per SASRec training step for every row of the reproduction, with and without XLA.

For each preset and each row of the paper's Table 1 (`benchmarks.rows`,
as that preset's profile runs it: under `official` / `official_cpu` the rows are
the released scripts'), it builds the model and the training stream exactly as
`pipelines.train` does, and times compiled training steps (forward, loss,
gradients, Adam update) on batches of the real stream, the variants
interleaved round by round. It prints ms per step, training examples (valid
positions) per second, and the XLA / no-XLA ratio. Timings from one run on a
shared machine: compare within a run only.

Usage:
  python -m benchmarks.train_step                        # cpu and official_cpu
  python -m benchmarks.train_step --presets=paper,official --rounds=2
  python -m benchmarks.train_step --rows=in_batch-improved --xla=false
"""

import os
import time
from typing import Dict, List

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

from benchmarks import rows as table
from pipelines import configs
from pipelines import experiment
from pipelines.data import loaders

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_list("presets", ["cpu", "official_cpu"], "Presets to time (their profiles' rows).")
    flags.DEFINE_list(
        "rows", [], "Rows of benchmarks.rows (default: Table 1's, not the official-only ones)."
    )
    flags.DEFINE_list("xla", ["false", "true"], "jit_compile settings to time.")
    flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median is reported.", lower_bound=1)
    flags.DEFINE_integer("steps_per_round", 5, "Steps per variant and round.", lower_bound=1)
    flags.DEFINE_string("dataset", None, "Dataset (default: ml-1m if present, else synthetic).")


def row_config(preset: str, row: table.Row, dataset: str) -> configs.Config:
    """The config `pipelines.train` runs for `row` under `preset` (as the paper campaign's)."""
    if preset in table.OFFICIAL_PROFILES:
        row = table.as_released(row)
    return configs.validate(configs.PRESETS[preset].replace(dataset=dataset, **row.overrides))


def make_step(config: configs.Config, xla: bool):
    """(a compiled train step on one batch, the stream's first batches)."""
    data = experiment.load_data(config)
    split = experiment.make_split(config, data)
    stream, _ = experiment.training_stream(config, split)
    model = experiment.build_model(config, data, split)
    model.compile(optimizer=experiment.make_optimizer(config.training, model), jit_compile=xla)
    step = tf.function(model.train_step, jit_compile=xla, reduce_retracing=True)
    batches = [batch for batch in stream.take(8)]
    return step, batches


def time_steps(steps: Dict[str, tuple], rounds: int, steps_per_round: int) -> Dict[str, float]:
    """Median seconds per step of each variant, interleaved round by round; NaN for a
    variant that does not compile (e.g. XLA on data-dependent shapes)."""
    failed = set()
    for name, (step, batches) in steps.items():  # Compile (every batch shape) and warm up.
        try:
            for batch in batches:
                float(step(batch)["loss"])
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
            print(f"{name}: does not compile ({str(error).splitlines()[0][:120]})")
            failed.add(name)
    steps = {name: value for name, value in steps.items() if name not in failed}
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, (step, batches) in steps.items():
            started = time.perf_counter()
            for i in range(steps_per_round):
                logs = step(batches[i % len(batches)])
            float(logs["loss"])
            times[name].append((time.perf_counter() - started) / steps_per_round)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    medians.update({name: float("nan") for name in failed})
    return medians


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    dataset = FLAGS.dataset or ("ml-1m" if os.path.exists(loaders.ML_1M_SASREC) else "synthetic")
    rows: List[str] = FLAGS.rows or [r.name for r in table.ROWS if not r.official_only]
    xla_settings = [value.lower() in ("true", "1", "yes") for value in FLAGS.xla]
    print(
        f"SASRec training step on {dataset}; {FLAGS.rounds} interleaved rounds of "
        f"{FLAGS.steps_per_round} steps per variant, one run.\n"
    )
    for preset in FLAGS.presets:
        steps, positions = {}, {}
        for name in rows:
            row = table.ROWS_BY_NAME[name]
            if row.official_only and preset not in table.OFFICIAL_PROFILES:
                continue
            config = row_config(preset, row, dataset)
            for xla in xla_settings:
                steps[(name, xla)] = make_step(config, xla)
            batches = steps[(name, xla_settings[0])][1]
            positions[name] = np.mean(
                [int(tf.reduce_sum(tf.cast(b["targets"] > 0, tf.int32))) for b in batches]
            )
        medians = time_steps(steps, FLAGS.rounds, FLAGS.steps_per_round)
        config = configs.PRESETS[preset]
        print(
            f"Preset {preset} (sequence {config.model.max_length}, dim {config.model.dim}, "
            f"batch {config.training.batch_size}):\n"
        )
        header = " | ".join(f"ms/step ({'XLA' if x else 'no XLA'})" for x in xla_settings)
        print(
            f"| row | {header} | examples/s (best) |"
            + (" XLA / no XLA |" if len(xla_settings) == 2 else "")
        )
        print("|---|" + "---|" * (len(xla_settings) + 1 + (len(xla_settings) == 2)))
        for name in positions:
            ms = [medians[(name, x)] * 1e3 for x in xla_settings]
            line = f"| {name} | " + " | ".join(f"{m:.1f}" for m in ms)
            line += f" | {positions[name] / (np.nanmin(ms) / 1e3):,.0f} |"
            if len(xla_settings) == 2:
                line += f" {ms[1] / ms[0]:.2f}x |"
            print(line)
        print()


if __name__ == "__main__":
    define_flags()
    app.run(main)
