r"""Peak memory of reading an event log for the next-day protocol, against its length: the
in-memory reader (`events.load_events`, `splits.next_day`, `builders.two_tower_dataset`)
and the out-of-core one (`day_store`, `builders.day_store_dataset`).

Each cell runs alone in a process (`processes.run_alone`) on the web-scale synthetic log
(drawn once per size under $TFRS_LOGQ_CACHE): it reads the log, builds the split and the
time-ordered training stream of the industrial preset, and reads `--batches` batches from
it. It reports the process's peak resident memory, the peak while the batches were read,
and the seconds the read and split took.

  python -m benchmarks.event_memory --events_per_user=10,20,40
"""

import json
import os
import shutil
import tempfile
import time

from absl import app
from absl import flags

import tfrs_logq  # noqa: F401  pylint: disable=unused-import  (sets TF_USE_LEGACY_KERAS)
from benchmarks import processes
from pipelines import configs
from pipelines.data import logs

FLAGS = flags.FLAGS
flags.DEFINE_integer("items", 1_000_000, "Items of the synthetic catalog.")
flags.DEFINE_integer("users", 1_000_000, "Users of the synthetic log.")
flags.DEFINE_list(
    "logs",
    ["10:14", "20:14", "40:14", "20:28", "40:56"],
    "Logs to read, each EVENTS_PER_USER:DAYS (the log holds users times "
    "EVENTS_PER_USER events over DAYS days).",
)
flags.DEFINE_list("paths", ["in_memory", "out_of_core"], "Readers to measure.")
flags.DEFINE_integer("batches", 1000, "Training batches read from the stream.")
flags.DEFINE_string("output", "", "Write the results here as JSON.")
flags.DEFINE_string("cell", "", "Internal: run one cell (PATH:EVENTS_PER_USER:DAYS) and report.")


def _config(log: str) -> configs.Config:
    events_per_user, days = log.split(":")
    return configs.PRESETS["industrial"].replace(
        synthetic_items=FLAGS.items,
        synthetic_users=FLAGS.users,
        synthetic_events_per_user=float(events_per_user),
        synthetic_days=int(days),
    )


def _cell(path: str, log: str) -> None:
    """One cell, in this process: prints `processes.report`'s line (seconds: the read)."""
    # pylint: disable=import-outside-toplevel
    from pipelines.data import builders
    from pipelines.data import splits as splits_lib

    config = _config(log)
    started = time.time()
    if path == "out_of_core":
        run_dir = tempfile.mkdtemp(prefix="event_memory-")
        try:
            _, split = logs.day_store_data(config, run_dir)
            stream = builders.day_store_dataset(
                split.stream,
                config.training.batch_size,
                seed=0,
                shuffle_window=config.training.shuffle_window,
            )
            seconds = time.time() - started
            alone = _read(stream, seconds)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
    else:
        log = logs.event_log(config.data, config.model.dim)[0]
        split = splits_lib.next_day(log.interactions, config.data.test_day, config.data.day_seconds)
        stream = builders.two_tower_dataset(
            split.train,
            config.model.history_length,
            config.training.batch_size,
            seed=0,
            times=split.train_times,
            shuffle_window=config.training.shuffle_window,
        )
        alone = _read(stream, time.time() - started)
    processes.report(alone)


def _read(stream, seconds: float) -> processes.Alone:
    def batches():
        for _ in stream.take(FLAGS.batches):
            pass

    return processes.Alone(*processes.while_running(batches), seconds)


def main(argv):
    del argv
    if FLAGS.cell:
        path, log = FLAGS.cell.split(":", 1)
        _cell(path, log)
        return
    rows = []
    print("| events | days | reader | read and split (s) | peak RSS MiB | while streaming MiB |")
    print("|---|---|---|---|---|---|")
    for log in FLAGS.logs:
        config = _config(log)
        logs.event_files(config.data)  # Drawn first, in this process, if missing.
        for path in FLAGS.paths:
            alone = processes.run_alone(
                "benchmarks.event_memory",
                [
                    f"--cell={path}:{log}",
                    f"--items={FLAGS.items}",
                    f"--users={FLAGS.users}",
                    f"--batches={FLAGS.batches}",
                ],
            )
            row = {
                "events_per_user": config.data.synthetic_events_per_user,
                "days": config.data.synthetic_days,
                "reader": path,
                "read_and_split_seconds": round(alone.seconds, 1),
                "peak_rss_mib": round(alone.peak_mib),
                "streaming_peak_rss_mib": round(alone.steps_peak_mib),
            }
            rows.append(row)
            print(
                f"| {FLAGS.users * config.data.synthetic_events_per_user:,.0f} | "
                f"{config.data.synthetic_days} | {path} | {alone.seconds:.1f} | "
                f"{alone.peak_mib:.0f} | {alone.steps_peak_mib:.0f} |",
                flush=True,
            )
    if FLAGS.output:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        with open(FLAGS.output, "w") as f:
            json.dump(
                {
                    "items": FLAGS.items,
                    "users": FLAGS.users,
                    "batches": FLAGS.batches,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    app.run(main)
