r"""Issue 48's campaign: the paper's industrial claim (which logQ correction at millions of
items?) on the web-scale synthetic log, whose true P(d|u) is known. The entry point.

Every (experiment, row, setting, seed) is one `python -m pipelines.train --preset=industrial`
process (`paper.industrial_plan`: the rows, the experiments and why the sampled reference is
unbiased), trained one at a time by default (`paper.scheduler`), each in
OUTPUT_DIR/EXPERIMENT/ROW[-SETTING]/seedN: a run whose directory holds metrics.json is
skipped, an interrupted one resumes (`pipelines.train` restores its backup). As each
finishes, the driver writes its record (RESULTS_DIR/EXPERIMENT/ROW[-SETTING]/seedN.json: its
test metrics, baselines, KL, popularity thirds and calibration, a few kB), rewrites the report
(docs/industrial_claim.md and RESULTS_DIR/calibration_EXPERIMENT.png, `paper.industrial_report`)
and prints the `git add` / `git commit` command that keeps them, or runs it with --commit. No
checkpoint goes into git: run directories stay under runs/, which git ignores.

This is its own entry point rather than a profile of `paper.reproduce`: that one's flags
(dataset, split, profile, frequencies) and report (NDCG@20 next to the paper's Table 1) are
the ML-1M study's. It shares that campaign's machinery: `paper.plan.Run` and `command`,
`paper.records` (which runs finished, their metrics), `paper.scheduler` (training, pinned
slots) and `pipelines.significance` (paired t).

Usage (from the repository's root; a 1M-item run takes about 11 minutes on 2 cores):
  python -m paper.industrial --experiments=main              # 5 rows x 3 seeds, 1M items
  python -m paper.industrial --experiments=inbatch           # in-batch negatives, 3 rows
  python -m paper.industrial --experiments=catalog           # 100k / 1M / 5M items
  python -m paper.industrial --experiments=catalog --settings=items100000   # one cell
  python -m paper.industrial --experiments=skew              # Zipf 0.8 / 1.0 / 1.2
  python -m paper.industrial --experiments=lr                # 3 x 3 learning rates, 100k items
  python -m paper.industrial                                 # all five, in that order
  python -m paper.industrial ... --commit                    # commit each record and report
  python -m paper.industrial --report_only                   # the report from the records
  python -m paper.industrial --add_draws    # records from before web_kl's "draws": from runs/
  python -m paper.industrial --smoke --seeds=2 --rows=standard,improved   # seconds a run
"""

import json
import os
import shlex
import subprocess
import time
from typing import List, Sequence

import numpy as np
from absl import app
from absl import flags

from paper import industrial_plan as plan_lib
from paper import industrial_report
from paper.scheduler import cpu_slots
from paper.scheduler import run_all
from pipelines.run_files import RunFiles

FLAGS = flags.FLAGS

REPORT = os.path.join("docs", "industrial_claim.md")
RESULTS_DIR = os.path.join("docs", "results", "industrial_claim")
OUTPUT_DIR = os.path.join("runs", "industrial")
SMOKE_DIR = os.path.join("runs", "industrial_smoke")


def define_flags() -> None:
    flags.DEFINE_list(
        "experiments",
        list(plan_lib.EXPERIMENTS),
        f"Which experiments to train: {', '.join(plan_lib.EXPERIMENTS)}.",
    )
    flags.DEFINE_integer("seeds", plan_lib.SEEDS, "Seeds 0 .. N-1 of every row.", lower_bound=1)
    flags.DEFINE_list("rows", [], "Only these rows (default: each experiment's own).")
    flags.DEFINE_list(
        "settings",
        [],
        "Only these settings of the experiments (their cells' "
        "names: items100000, items5000000, zipf0.8, adagrad1-adam0.005, ...; "
        "default: every one).",
    )
    flags.DEFINE_bool(
        "smoke",
        False,
        "The same plan on the industrial_smoke preset (seconds a "
        f"run), its runs under {SMOKE_DIR} and its records and report under "
        f"{SMOKE_DIR}/results unless --output_dir / --results_dir / --report say "
        "otherwise.",
    )
    flags.DEFINE_string("output_dir", "", f"Where the runs go (default {OUTPUT_DIR}).")
    flags.DEFINE_string(
        "results_dir", "", f"Where the records and plots go (default {RESULTS_DIR})."
    )
    flags.DEFINE_string("report", "", f"The report's path (default {REPORT}).")
    flags.DEFINE_float(
        "max_user_scale",
        plan_lib.MAX_USER_SCALE,
        "The catalog experiment's users grow with its items up to this multiple "
        "of the preset's users (1M at full size: memory).",
    )
    flags.DEFINE_bool(
        "report_only", False, "Write the records of finished runs and the report; train nothing."
    )
    flags.DEFINE_bool(
        "add_draws",
        False,
        "Add to each record whose calibration predates "
        "them each target's expected draws under its run's sampler (what the "
        "corrections' implied P(p|u) needs), from the run's day store under "
        "--output_dir; then as --report_only.",
    )
    flags.DEFINE_bool(
        "keep_weights",
        False,
        "Keep each finished run's checkpoints, backup "
        "and SavedModels (3.6 GB a run at 1M items); by default they are deleted "
        "once the run's record is written.",
    )
    flags.DEFINE_bool(
        "commit",
        False,
        "Commit each record and the report as it is written (else print the command that would).",
    )
    flags.DEFINE_integer(
        "parallel",
        1,
        "Runs trained at once, each pinned to its share of the CPUs (paper.scheduler).",
        lower_bound=1,
    )


def commit(paths: Sequence[str], message: str, run_it: bool) -> None:
    """Commits `paths` alone (`git add` then `git commit -- paths`), or prints the command
    that would; a commit that fails (another holds the index lock) is tried again."""
    add = ["git", "add", "--"] + list(paths)
    keep = ["git", "commit", "-q", "-m", message, "--"] + list(paths)
    if not run_it:
        print(f"to keep them in git: {shlex.join(add)} && {shlex.join(keep)}", flush=True)
        return
    for _ in range(5):
        if (
            subprocess.run(add, check=False).returncode == 0
            and subprocess.run(keep, check=False).returncode == 0
        ):
            print(f"committed: {message}", flush=True)
            return
        time.sleep(2)
    print(f"could not commit: {message}", flush=True)


def add_draws(run: plan_lib.IndustrialRun, results_dir: str) -> bool:
    """Adds "draws" and "negatives" (`pipelines.report.expected_draws`) to the calibration of
    the run's record where it lacks them (records older than `web_kl`'s own), from the run
    directory's day store: the same fixed sample of test queries and the same targets
    (`web_kl`, `calibration_targets`). Checked against the record: as many targets, in
    the same popularity thirds. Returns whether it wrote the record."""
    # pylint: disable=import-outside-toplevel
    from pipelines import configs
    from pipelines import report as report_lib
    from pipelines.data import day_store
    from pipelines.data import splits
    from tfrs_logq import retrieval

    record = plan_lib.load_record(run, results_dir)
    calibration = (record or {}).get("calibration") or {}
    store = os.path.join(run.run.directory, "day_store")
    if (
        not calibration.get("true_log_p")
        or "draws" in calibration
        or not os.path.exists(os.path.join(store, "counts.npz"))
    ):
        return False
    with open(os.path.join(run.run.directory, "config.json")) as f:
        config = configs.Config.from_dict(json.load(f))
    with np.load(os.path.join(store, "counts.npz")) as stored:
        counts = stored["train_item"]
    sample = splits.subsample(day_store.read_eval(store, "test"), report_lib.KL_QUERIES)
    ids = np.concatenate(
        [report_lib.calibration_targets(t, h) for t, h in zip(sample.targets, sample.histories)]
    )
    bands = retrieval.popularity_bands(counts)[ids]
    if len(ids) != len(calibration["true_log_p"]) or (
        "band" in calibration and not np.array_equal(bands, calibration["band"])
    ):
        raise ValueError(
            f"{run.run.directory}: its day store's KL targets ({len(ids)}) do not "
            f"match its record's calibration ({len(calibration['true_log_p'])} "
            "targets, or other popularity thirds)."
        )
    draws, negatives = report_lib.expected_draws(config, counts)
    calibration["draws"] = [float(f"{value:.5g}") for value in draws[ids]]
    calibration["negatives"] = round(float(negatives), 3)
    path = os.path.join(results_dir, run.record)
    with open(path + ".partial", "w") as f:
        f.write(plan_lib.dumps(record))
    os.replace(path + ".partial", path)
    return True


def lost_code(run: plan_lib.IndustrialRun) -> bool:
    """Whether the run's directory holds a finished run whose code is a commit the repository
    lacks (`industrial_report.LOST_REVISIONS`): its record would be evidence nobody can
    re-run, so none is written, and it is not trained again while its directory holds it."""
    if not plan_lib.trained(run):
        return False
    with open(RunFiles(run.run.directory).metrics) as f:
        revision = str(json.load(f).get("git_revision", ""))
    return revision.split("+", 1)[0] in industrial_report.LOST_REVISIONS


def command_line() -> str:
    parts = ["python -m paper.industrial"]
    if FLAGS.smoke:
        parts.append("--smoke")
    if FLAGS.experiments != list(plan_lib.EXPERIMENTS):
        parts.append(f"--experiments={','.join(FLAGS.experiments)}")
    if FLAGS.seeds != plan_lib.SEEDS:
        parts.append(f"--seeds={FLAGS.seeds}")
    if FLAGS.rows:
        parts.append(f"--rows={','.join(FLAGS.rows)}")
    if FLAGS.settings:
        parts.append(f"--settings={','.join(FLAGS.settings)}")
    if FLAGS.max_user_scale != plan_lib.MAX_USER_SCALE:
        parts.append(f"--max_user_scale={FLAGS.max_user_scale:g}")
    return " ".join(parts)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    smoke = FLAGS.smoke
    output_dir = FLAGS.output_dir or (SMOKE_DIR if smoke else OUTPUT_DIR)
    results_dir = FLAGS.results_dir or (
        os.path.join(SMOKE_DIR, "results") if smoke else RESULTS_DIR
    )
    report = FLAGS.report or (os.path.join(results_dir, "industrial_claim.md") if smoke else REPORT)
    try:
        selected = plan_lib.plan(
            FLAGS.experiments,
            FLAGS.seeds,
            smoke,
            output_dir,
            FLAGS.rows,
            FLAGS.max_user_scale,
            FLAGS.settings,
        )
        # The report covers every experiment at SEEDS seeds (or more, if asked), whichever
        # this command trains.
        reported = plan_lib.plan(
            plan_lib.EXPERIMENTS,
            max(FLAGS.seeds, plan_lib.SEEDS),
            smoke,
            output_dir,
            max_user_scale=FLAGS.max_user_scale,
        )
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    line = command_line()

    def write(paths: List[str], message: str) -> None:
        paths = paths + industrial_report.write_report(reported, results_dir, report, line, smoke)
        commit(paths, message, FLAGS.commit)

    # Runs finished without a record (an earlier driver stopped before writing it).
    if FLAGS.add_draws:
        added = [run for run in plan_lib.unique(reported) if add_draws(run, results_dir)]
        print(f"Added the expected draws to {len(added)} records.", flush=True)
    lost = {
        run.run.directory
        for run in plan_lib.unique(reported)
        if plan_lib.load_record(run, results_dir) is None and lost_code(run)
    }
    if lost:
        print(
            f"{len(lost)} finished runs ran a commit the repository lacks "
            f"(industrial_report.LOST_REVISIONS): not recorded, nor trained again while "
            f"their directories hold them; remove these to train them: {' '.join(sorted(lost))}",
            flush=True,
        )
    unrecorded = [
        run
        for run in plan_lib.unique(reported)
        if plan_lib.trained(run)
        and plan_lib.load_record(run, results_dir) is None
        and run.run.directory not in lost
    ]
    if unrecorded:
        write(
            [plan_lib.write_record(run, results_dir) for run in unrecorded],
            f"industrial claim: records of {len(unrecorded)} finished runs",
        )
    todo = plan_lib.unique(selected)
    pending = [
        run
        for run in todo
        if not plan_lib.trained(run) and plan_lib.load_record(run, results_dir) is None
    ]
    print(f"{len(todo)} runs planned, {len(todo) - len(pending)} already finished.", flush=True)
    if not (FLAGS.report_only or FLAGS.add_draws) and pending:
        try:
            slots = cpu_slots(min(FLAGS.parallel, len(pending)))
        except ValueError as error:
            raise app.UsageError(str(error)) from None
        by_run = {id(run.run): run for run in pending}
        for number, run, seconds in run_all([run.run for run in pending], slots):
            done = by_run[id(run)]
            path = plan_lib.write_record(done, results_dir)
            if not FLAGS.keep_weights:
                RunFiles(done.run.directory).prune_weights()
            test = plan_lib.load_record(done, results_dir)
            print(
                f"[{number}/{len(pending)}] {done.owner}/{done.key} seed {done.seed}: "
                f"Recall@100 {test['test'].get('recall@100', float('nan')):.4f}, KL "
                f"{test.get('kl_to_truth', float('nan')):.3f} ({seconds:.0f} s)",
                flush=True,
            )
            write([path], f"industrial claim: {done.owner}/{done.key} seed {done.seed} finished")
    paths = industrial_report.write_report(reported, results_dir, report, line, smoke)
    print(f"Wrote {', '.join(paths)}.", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
