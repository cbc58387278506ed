r"""Reruns the paper's Table 1 (SASRec on MovieLens-1M) through `pipelines.train`, and the
same losses on the synthetic catalog whose true P(d | u) is known: the campaign's entry point.

Every (row, seed) is one `python -m pipelines.train` process with its own
output directory under --output_dir; a directory that already holds
metrics.json is skipped, and an interrupted run continues from its backup, so
the runner resumes where it stopped. After each run it rewrites the report:
a markdown table (mean ± std over seeds; on ML-1M next to the paper's numbers,
with the difference), the paper's orderings tested against the seed-to-seed
spread, a JSON of every run, and a PNG.

Usage:
  python -m paper.reproduce --dataset=ml-1m --split=loo --profile=cpu --seeds=3
  python -m paper.reproduce --profile=official_cpu --seeds=5 \
      --rows=mixed-standard,mixed-improved,mixed-standard_tfrs,full_softmax
  python -m paper.reproduce --dataset=ml-1m --split=temporal --seeds=5 \
      --rows=in_batch-none,in_batch-standard,in_batch-improved
  python -m paper.reproduce --dataset=synthetic --frequencies=static,count_min,hashed
  python -m paper.reproduce ... --parallel=2    # two runs at once, one core each
  python -m paper.reproduce ... --report_only   # tables from the runs so far
  python -m paper.reproduce ... --seeds=5 --include_recorded  # adds seeds 3-4 to
      # the committed report's seeds 0-2 without their run directories (e.g. in a fresh clone)
"""

import os

from absl import app
from absl import flags

from paper.plan import PROFILES
from paper.plan import ROWS_BY_NAME
from paper.plan import SYNTHETIC_PRESET
from paper.plan import experiment_name
from paper.plan import label
from paper.plan import plan
from paper.records import finished
from paper.records import load
from paper.records import load_recorded
from paper.records import with_finished_runs
from paper.report import write_report
from paper.scheduler import cpu_slots
from paper.scheduler import run_all
from pipelines import configs

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum(
        "dataset",
        "ml-1m",
        ["ml-1m", "synthetic"],
        "ml-1m: the paper's Table 1 (the temporal split reads the GroupLens "
        "ratings with timestamps); synthetic: the catalog with a known truth "
        f"(preset {SYNTHETIC_PRESET} unless --preset says otherwise).",
    )
    flags.DEFINE_enum("split", "loo", list(configs.SPLITS), "Leave-one-out or global temporal.")
    flags.DEFINE_enum(
        "temporal_targets",
        "first",
        list(configs.TEMPORAL_TARGETS),
        "Temporal split: which items of the test window are targets (see "
        "pipelines.data.splits.temporal); other than 'first', the experiment "
        "is named after it.",
    )
    flags.DEFINE_enum(
        "profile",
        "cpu",
        list(PROFILES),
        "Preset of pipelines/configs.py (ml-1m); synthetic uses its own preset.",
    )
    flags.DEFINE_integer("seeds", 3, "Seeds 0 .. N-1 of every row.", lower_bound=1)
    flags.DEFINE_list(
        "rows", [], f"Rows to run (default: all of the split). Known: {', '.join(ROWS_BY_NAME)}."
    )
    flags.DEFINE_list(
        "frequencies",
        ["static"],
        f"Where log Q comes from: {', '.join(configs.FREQUENCIES)} (rows without log Q run once).",
    )
    flags.DEFINE_string(
        "data_path", "", "Overrides the ML-1M file (default: the file under $TFRS_LOGQ_DATA)."
    )
    flags.DEFINE_string("output_dir", "runs/reproduce", "Where the runs go.")
    flags.DEFINE_string("results_dir", "docs/results", "Where the table, JSON and PNG go.")
    flags.DEFINE_bool("report_only", False, "Write the report from finished runs; train nothing.")
    flags.DEFINE_bool(
        "include_recorded",
        False,
        "Count the runs that RESULTS_DIR/NAME.json (the report's JSON) records as "
        "finished when their directory is gone, e.g. to add seeds in a fresh "
        "clone, instead of training them again; the report keeps their numbers.",
    )
    flags.DEFINE_string(
        "preset",
        "",
        "Overrides the preset the profile picks (e.g. smoke, for a quick check of the runner).",
    )
    flags.DEFINE_integer(
        "parallel",
        1,
        "Runs trained at once. Above 1, the machine's CPUs are "
        "split evenly between them: each run is pinned to its own CPUs and "
        "uses that many TensorFlow threads. On 2 cores, two 1-thread runs "
        "train about 1.15x as many epochs per hour as one 2-thread run.",
        lower_bound=1,
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        runs = plan(
            FLAGS.dataset,
            FLAGS.split,
            FLAGS.profile,
            FLAGS.seeds,
            FLAGS.rows,
            FLAGS.frequencies,
            FLAGS.output_dir,
            FLAGS.data_path,
            FLAGS.preset,
            FLAGS.temporal_targets,
        )
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    command_line = (
        "python -m paper.reproduce "
        + " ".join(
            f"--{name}={','.join(value) if isinstance(value, list) else value}"
            for name, value in (
                ("dataset", FLAGS.dataset),
                ("split", FLAGS.split),
                ("profile", FLAGS.profile),
                ("seeds", FLAGS.seeds),
                ("rows", FLAGS.rows),
                ("frequencies", FLAGS.frequencies),
                ("preset", FLAGS.preset),
                (
                    "temporal_targets",
                    "" if FLAGS.temporal_targets == "first" else FLAGS.temporal_targets,
                ),
            )
            if value not in ([], None, "")
        )
        + (" --include_recorded" if FLAGS.include_recorded else "")
    )
    name = experiment_name(
        FLAGS.dataset,
        FLAGS.split,
        FLAGS.profile,
        runs[0].preset if runs else "",
        FLAGS.temporal_targets,
    )
    recorded = (
        load_recorded(os.path.join(FLAGS.results_dir, name + ".json"))
        if FLAGS.include_recorded
        else None
    )
    pending = [run for run in runs if not finished(run, recorded)]
    reported = with_finished_runs(
        runs,
        FLAGS.dataset,
        FLAGS.split,
        FLAGS.profile,
        FLAGS.frequencies,
        FLAGS.output_dir,
        FLAGS.data_path,
        FLAGS.preset,
        FLAGS.temporal_targets,
        recorded=recorded,
    )
    from_record = sum(1 for run in runs if finished(run, recorded) and not finished(run))
    print(
        f"{len(runs)} runs planned, {len(runs) - len(pending)} already finished"
        + (
            f" ({from_record} of them recorded in {FLAGS.results_dir}/{name}.json)."
            if from_record
            else "."
        ),
        flush=True,
    )
    if not FLAGS.report_only:
        try:
            slots = cpu_slots(min(FLAGS.parallel, max(len(pending), 1)))
        except ValueError as error:
            raise app.UsageError(str(error)) from None
        for number, run, seconds in run_all(pending, slots):
            test = load(run)["test"]
            print(
                f"[{number}/{len(pending)}] {label(run)}: NDCG@20 {test['ndcg@20']:.4f} "
                f"Recall@20 {test['recall@20']:.4f} ({seconds:.0f} s)",
                flush=True,
            )
            write_report(
                reported,
                FLAGS.dataset,
                FLAGS.split,
                FLAGS.profile,
                FLAGS.results_dir,
                command_line,
                FLAGS.temporal_targets,
                recorded,
            )
    print(
        write_report(
            reported,
            FLAGS.dataset,
            FLAGS.split,
            FLAGS.profile,
            FLAGS.results_dir,
            command_line,
            FLAGS.temporal_targets,
            recorded,
        )
    )


if __name__ == "__main__":
    define_flags()
    app.run(main)
