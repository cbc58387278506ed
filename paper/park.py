r"""Carries a training run in progress to another machine: `pack` and `unpack`.

A run directory (pipelines/run_files.py) resumes from its BackupAndRestore backup, but only
on the machine that holds it. `pack` writes the run as one .tar.gz that can travel (for the
paper campaign, whose sessions may each start on a new machine). Archives are binaries and stay
out of git: they go to the park directory, $TFRS_LOGQ_PARK_DIR or else ~/.cache/tfrs_logq/parked,
and a destination inside a git work tree is refused. An archive holds:

- its config, progress, TensorBoard logs and train.log, and the latest backup (weights,
  optimizer, step), checked by reading every tensor, so that a copy taken while training
  writes a new backup is refused rather than carried;
- the best weights without the optimizer's state, which the final evaluation and export do
  not read: rebuilt from the run's config with the code on the import path, reloaded and
  compared weight by weight before they replace the full checkpoint (a third of the size
  here: Adam keeps two slots per weight).

A TensorBoard event file cut in the middle of a record (by a kill, or by copying while it is
written) keeps its whole records. `unpack` extracts an archive into a run directory that does
not exist yet; `reproduce` and `pipelines.train` then resume the run from its backup. It
refuses an archive that would write outside that directory: an entry outside its one run,
a link whose target (resolved, through the archive's other links) lies outside the run,
and an entry written through a link (unpacking never follows one). `pack` writes none of
these (it copies a link's target, not the link).

Usage (the campaign runs it with its own worktree first on the path, so that the model is
built by the code that trains it; so it imports nothing from paper/, which an older worktree
lacks):
  python paper/park.py pack RUN_DIR [ARCHIVE.tar.gz]   # default: PARK_DIR/RUN_NAME.tar.gz
  python paper/park.py unpack ARCHIVE.tar.gz RUN_DIR
"""

import glob
import json
import os
import shutil
import sys
import tarfile
import tempfile
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

import pipelines
from pipelines import experiment
from pipelines.run_files import RunFiles

# What a run in progress holds that it does not need elsewhere: exports and reports come at
# its end, workers' reports from multi-worker runs.
_LEFT_BEHIND = ("export", "workers", "metrics.json")
# Where archives go when no path is given; campaign.sh has the same default.
PARK_DIR_VARIABLE = "TFRS_LOGQ_PARK_DIR"
DEFAULT_PARK_DIR = os.path.join("~", ".cache", "tfrs_logq", "parked")


def park_dir() -> str:
    """$TFRS_LOGQ_PARK_DIR, or else ~/.cache/tfrs_logq/parked."""
    return os.path.expanduser(os.environ.get(PARK_DIR_VARIABLE) or DEFAULT_PARK_DIR)


def _work_tree(path: str) -> Optional[str]:
    """The git work tree (a folder holding .git) that holds `path`, which need not exist yet;
    None outside any."""
    folder = os.path.realpath(path)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def check_outside_git(archive: str) -> str:
    """`archive`, after checking that it lies outside every git work tree."""
    tree = _work_tree(archive)
    if tree is not None:
        raise ValueError(
            f"archive={archive!r} is inside the git work tree {tree}: a parked run "
            "is a binary, kept out of git. Give a path outside it, or none for "
            f"the park directory (${PARK_DIR_VARIABLE}, by default "
            f"{DEFAULT_PARK_DIR})."
        )
    return archive


def _keep_whole_records(path: str) -> int:
    """Rewrites the TFRecord file `path` with its whole records if its end is cut; returns
    how many records it keeps."""
    records = []
    try:
        for record in tf.data.TFRecordDataset(path):
            records.append(record.numpy())
    except tf.errors.DataLossError:
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        print(f"{path}: its last record was cut; kept the {len(records)} whole ones.")
    return len(records)


def _check_backup(backup_dir: str) -> str:
    """The latest checkpoint under `backup_dir`, after reading every tensor of it."""
    if not os.path.isdir(backup_dir):
        raise FileNotFoundError(f"no backup in {backup_dir}: the run has not written one yet.")
    latest = [
        tf.train.latest_checkpoint(os.path.dirname(state))
        for state in glob.glob(os.path.join(backup_dir, "**", "checkpoint"), recursive=True)
    ]
    if not latest or None in latest:
        raise FileNotFoundError(f"no complete backup in {backup_dir}.")
    for prefix in latest:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    return latest[0]


def _slim_best(run_dir: str) -> Dict[str, int]:
    """Rewrites the run's best checkpoint with the model's weights only; returns the sizes."""
    files = RunFiles(run_dir)
    before = sum(os.path.getsize(p) for p in glob.glob(files.best + ".*"))
    config, model, split, data = experiment.load_run(run_dir)
    weights = [w.numpy() for w in model.weights]
    for path in glob.glob(files.best + ".*"):
        os.remove(path)
    model.save_weights(files.best)  # Not compiled: no optimizer to save.
    reloaded = experiment.build_model(config, data, split)
    reloaded.load_weights(files.best).expect_partial()
    if len(reloaded.weights) != len(weights) or not all(
        np.array_equal(a, b.numpy()) for a, b in zip(weights, reloaded.weights)
    ):
        raise RuntimeError(
            f"{run_dir}: the slimmed best checkpoint does not give back the "
            "best weights; nothing was packed."
        )
    after = sum(os.path.getsize(p) for p in glob.glob(files.best + ".*"))
    return {"best_bytes_before": before, "best_bytes_after": after, "weights": len(weights)}


def pack(run_dir: str, archive: Optional[str] = None) -> Dict:
    """Writes the run in progress at `run_dir` to `archive` (.tar.gz; by default
    PARK_DIR/RUN_NAME.tar.gz, `park_dir`), which must lie outside any git work tree; returns
    what it did."""
    if archive is None:
        archive = os.path.join(park_dir(), os.path.basename(os.path.normpath(run_dir)) + ".tar.gz")
    check_outside_git(archive)
    files = RunFiles(run_dir)
    if not os.path.exists(files.config):
        raise FileNotFoundError(f"run_dir={run_dir!r} holds no training run (no config.json).")
    if os.path.exists(files.metrics):
        raise ValueError(
            f"run_dir={run_dir!r} has finished (metrics.json): its results are "
            "its report, there is no run in progress to carry."
        )
    with tempfile.TemporaryDirectory() as scratch:
        stage = os.path.join(scratch, os.path.basename(os.path.normpath(run_dir)))
        shutil.copytree(
            run_dir,
            stage,
            ignore=lambda d, names: [n for n in names if d == run_dir and n in _LEFT_BEHIND],
        )
        staged = RunFiles(stage)
        backup = _check_backup(staged.backup)
        records = sum(
            _keep_whole_records(p) for p in glob.glob(os.path.join(staged.logs, "*", "events*"))
        )
        slim = _slim_best(stage) if staged.has_best() else {}
        progress = {}
        if os.path.exists(staged.progress):
            with open(staged.progress) as f:
                progress = json.load(f)
        os.makedirs(os.path.dirname(os.path.abspath(archive)), exist_ok=True)
        with tarfile.open(archive + ".partial", "w:gz") as tar:
            tar.add(stage, arcname=os.path.basename(stage))
        os.replace(archive + ".partial", archive)
    return {
        "archive": archive,
        "bytes": os.path.getsize(archive),
        "backup": os.path.basename(backup),
        "event_records": records,
        "progress": progress,
        **slim,
    }


def _check_links(archive: str, members) -> None:
    """Refuses an entry written through a link of the archive (or a second entry of a
    link's name): extracting it would follow the link."""
    links = {member.name.rstrip("/") for member in members if member.issym() or member.islnk()}
    seen = set()
    for member in members:
        name = member.name.rstrip("/")
        parents = [name[:i] for i, c in enumerate(name) if c == "/"]
        through = next((parent for parent in parents if parent in links), None)
        if through is not None or (name in links and name in seen):
            raise ValueError(
                f"archive={archive!r}: its entry {name!r} would be written "
                f"through the link {through or name!r}; unpacking never follows "
                "a link. The archive was not written by `pack`."
            )
        seen.add(name)


def _check_inside(archive: str, run: str) -> None:
    """Refuses a link of the extracted run `run` whose target, resolved, lies outside it."""
    root = os.path.realpath(run)
    for folder, directories, files in os.walk(run):
        for name in directories + files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                continue
            target = os.path.realpath(path)
            if os.path.commonpath([root, target]) != root:
                entry = os.path.relpath(path, os.path.dirname(run))
                raise ValueError(
                    f"archive={archive!r}: its link {entry!r} -> {os.readlink(path)!r} "
                    "points outside the run (resolved: "
                    f"{os.path.relpath(target, os.path.dirname(run))!r}); a run's files "
                    "stay inside it, and nothing was unpacked."
                )


def unpack(archive: str, run_dir: str) -> str:
    """Extracts `archive` (written by `pack`) to `run_dir`, which must not exist.

    Raises:
      ValueError: the archive holds other than one run, an entry outside it (an absolute
        or `..` path, tarfile's "data" filter), an entry written through a link, or a link
        whose resolved target lies outside the run; `run_dir` is then not created.
    """
    if os.path.exists(run_dir):
        raise FileExistsError(
            f"run_dir={run_dir!r} exists: it may hold a newer state of the "
            "run than the archive; move it away to unpack."
        )
    os.makedirs(os.path.dirname(os.path.abspath(run_dir)), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(run_dir))) as scratch:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            tops = {member.name.split("/")[0] for member in members}
            if len(tops) != 1:
                raise ValueError(f"archive={archive!r} holds {sorted(tops)}, not one run.")
            _check_links(archive, members)
            try:
                # The filter refuses absolute and `..` paths and links out of `scratch`.
                tar.extractall(scratch, members=members, filter="data")
            except tarfile.FilterError as error:
                raise ValueError(
                    f"archive={archive!r}: {error}; a run's files stay inside "
                    "it, and nothing was unpacked."
                ) from None
        run = os.path.join(scratch, tops.pop())
        if os.path.islink(run) or not os.path.isdir(run):
            raise ValueError(
                f"archive={archive!r}: its run {os.path.basename(run)!r} is not a "
                "directory; nothing was unpacked."
            )
        _check_inside(archive, run)
        os.rename(run, run_dir)
    return run_dir


def main(argv) -> int:
    usage = (
        "usage: park.py pack RUN_DIR [ARCHIVE.tar.gz] | park.py unpack ARCHIVE.tar.gz "
        f"RUN_DIR (archives by default in ${PARK_DIR_VARIABLE}, else {DEFAULT_PARK_DIR})"
    )
    if not (
        argv[1:2] == ["pack"] and len(argv) in (3, 4) or argv[1:2] == ["unpack"] and len(argv) == 4
    ):
        print(usage, file=sys.stderr)
        return 2
    print(f"model code: {os.path.dirname(pipelines.__file__)}", flush=True)
    if argv[1] == "pack":
        print(json.dumps(pack(*argv[2:])), flush=True)
    else:
        print(f"unpacked {argv[2]} to {unpack(argv[2], argv[3])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
