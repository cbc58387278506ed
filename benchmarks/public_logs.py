r"""What a public log's run needs, predicted before anyone downloads it: each phase's peak
memory from the memory model (`pipelines.memory.predict_mib`), the day store's disk, and
the time of each phase from rates measured in committed records, on 2 CPU cores and on one
H200 (the Keras job's step). Nothing is run or read but those records.

  python -m benchmarks.public_logs --output=docs/results/public_logs_predicted.json

The logs' sizes are their published statistics (Yambda's dataset card, MovieLens-32M's
README); the events a run keeps are an assumption each (Listen+ as a share of the listens):
the run prints the exact counts (`[data] read N events; kept K ...`).
"""

import json
import os

from absl import app
from absl import flags

from pipelines import configs
from pipelines import memory
from pipelines import provenance

FLAGS = flags.FLAGS
flags.DEFINE_string("output", "", "Write the predictions here (JSON).")

# (name, flags, users, items, rows read, events kept, events of the busiest day): the
# published statistics. Yambda's Listen+ (played_ratio_pct >= 50) is taken as 63% of the
# listens, its items as every published item of the size (an upper bound on the
# vocabulary), its busiest day as 1.5 times the mean of its 300 days; MovieLens-32M's
# busiest week as 5% of its ratings (1,500 weeks, 1995-2023; an assumption, loose).
LISTEN_PLUS = 0.63
LOGS = (
    (
        "yambda-50m (Listen+)",
        "--dataset=yambda --data_path=yambda/flat/50m",
        10_000,
        934_057,
        46_467_212,
        LISTEN_PLUS,
        1.5 / 300,
    ),
    (
        "yambda-500m (Listen+)",
        "--dataset=yambda --data_path=yambda/flat/500m",
        100_000,
        3_004_578,
        466_512_103,
        LISTEN_PLUS,
        1.5 / 300,
    ),
    (
        "yambda-5b (Listen+)",
        "--dataset=yambda --data_path=yambda/flat/5b",
        1_000_000,
        9_390_623,
        4_649_567_411,
        LISTEN_PLUS,
        1.5 / 300,
    ),
    (
        "ml-32m",
        "--dataset=ml-32m --data_path=ml-32m/ratings.csv",
        200_948,
        87_585,
        32_000_204,
        1.0,
        0.05,
    ),
)
# The rates: the industrial preset's TensorFlow and Keras runs on 2 cores (1M users, 890k
# trained items, 20M events read from files, batch 1024, a 200k-item index and 20k test
# queries: seed 1, as seed 0 drew the log first), and the Keras job's sparse Adagrad step on
# an H200 (batch 1024).
CPU_RECORD = "docs/results/compare/framework_industrial/{}/seed1.json"
# TensorFlow's step at a 2.73M-item catalog on 2 cores (Table 2's runs, seeds 1-4: seed 0's
# training was not timed in its record).
TABLE2_RECORD = "docs/results/compare/table2_5m/improved/seed{}.json"
GPU_RECORD = "docs/results/keras_gpu_h200.json"


def _record(path: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, path)) as f:
        return json.load(f)


def rates() -> dict:
    """Seconds per unit of each phase, from the records."""
    tf_run, keras_run = (_record(CPU_RECORD.format(name)) for name in ("tf", "keras"))
    events = tf_run["event_log"]["events_read"]
    steps = tf_run["steps"]
    searched = tf_run["num_test_queries"] * tf_run["index_items"]
    gpu = _record(GPU_RECORD)["two_tower_ms"]
    table2 = [_record(TABLE2_RECORD.format(seed)) for seed in range(1, 5)]
    return {
        "data_per_event": tf_run["phase_seconds"]["data"] / events,
        # Seconds a step, by the catalog it was measured at.
        "train_per_step": {
            "tf": {
                tf_run["num_items"]: tf_run["phase_seconds"]["train"] / steps,
                table2[0]["num_items"]: sum(r["phase_seconds"]["train"] for r in table2)
                / sum(r["steps"] for r in table2),
            },
            "keras": {keras_run["num_items"]: keras_run["phase_seconds"]["train"] / steps},
        },
        "evaluate_per_score": {
            "tf": tf_run["phase_seconds"]["evaluate"] / searched,
            "keras": keras_run["phase_seconds"]["evaluate"] / searched,
        },
        # The H200's step at the recorded catalog nearest each log's (batch 1024).
        "gpu_step_ms": {int(items): cell["1024"]["sparse_adagrad"] for items, cell in gpu.items()},
        "sources": [
            CPU_RECORD.format("tf"),
            CPU_RECORD.format("keras"),
            *(TABLE2_RECORD.format(seed) for seed in range(1, 5)),
            GPU_RECORD,
        ],
    }


def predict(name, flag_line, users, items, rows, kept_share, busiest_share, measured) -> dict:
    """One log's predicted memory (MB, each phase), disk (GB) and hours."""
    kept = int(kept_share * rows)
    config = configs.PRESETS["industrial"].replace(
        dataset=flag_line.split()[0].split("=")[1], data_path="x"
    )
    # Every training example, one epoch; the index: the preset's 200k most trained items
    # (all of a smaller catalog); 20k test queries (or every test user of a smaller log).
    steps = kept // config.training.batch_size
    index = min(config.training.index_size, items)
    queries = min(config.training.test_queries, users)
    peaks = memory.predict_mib(
        config,
        users,
        items,
        index_items=index,
        num_events=kept,
        events_per_day=int(busiest_share * kept),
    )
    nearest = min(measured["gpu_step_ms"], key=lambda size: abs(size - items))
    hours, lower_bound = {}, {}
    for job in ("tf", "keras"):
        # The step measured at the nearest catalog at or above the log's (the largest
        # measured below it: then a lower bound, said).
        sizes = sorted(measured["train_per_step"][job])
        size = next((s for s in sizes if s >= items), sizes[-1])
        lower_bound[f"cpu_{job}"] = size < items
        hours[f"cpu_{job}"] = round(
            (
                measured["data_per_event"] * rows
                + measured["train_per_step"][job][size] * steps
                + measured["evaluate_per_score"][job] * queries * index
            )
            / 3600,
            1,
        )
    hours["gpu_keras_train_only"] = round(measured["gpu_step_ms"][nearest] * steps / 3.6e6, 2)
    hours["host_data"] = round(measured["data_per_event"] * rows / 3600, 2)
    return {
        "log": name,
        "command_flags": flag_line,
        "users": users,
        "items": items,
        "rows_read": rows,
        "events_kept": kept,
        "busiest_day_events": int(busiest_share * kept),
        "steps_batch_1024": steps,
        "index_items": index,
        "test_queries": queries,
        "predicted_peak_mb": peaks,
        # The day store's examples: 4 x (history_length + 3) bytes each.
        "day_store_gb": round(4 * (config.model.history_length + 3) * kept / 1e9, 1),
        "hours": hours,
        "hours_lower_bound": lower_bound,
        "gpu_step_catalog": nearest,
    }


def _hours(row: dict, key: str) -> str:
    return ("≥ " if row["hours_lower_bound"][key] else "") + str(row["hours"][key])


def main(argv):
    del argv
    measured = rates()
    rows = [predict(*log, measured) for log in LOGS]
    print(
        "| log | events kept | peak MB (phase) | day store GB | 2 cores TF h | 2 cores Keras h | "
        "H200 train h | host data h |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        peaks = {k: v for k, v in row["predicted_peak_mb"].items() if k != "tables"}
        phase = max(peaks, key=peaks.get)
        print(
            f"| {row['log']} | {row['events_kept']:,} | {peaks[phase]:,} ({phase}) | "
            f"{row['day_store_gb']} | {_hours(row, 'cpu_tf')} | {_hours(row, 'cpu_keras')} | "
            f"{row['hours']['gpu_keras_train_only']} | {row['hours']['host_data']} |"
        )
    if FLAGS.output:
        from benchmarks import records  # pylint: disable=import-outside-toplevel

        records.write(
            FLAGS.output,
            {
                "benchmark": "public_logs",
                "revision": provenance.revision(),
                "command": f"python -m benchmarks.public_logs --output={FLAGS.output}",
                "note": "Predicted, not measured: nothing was downloaded or run.",
                "rates": measured,
                "logs": rows,
            },
        )


if __name__ == "__main__":
    app.run(main)
