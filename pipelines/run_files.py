"""Where a training run keeps its files: the layout of an output directory, in one place.

`pipelines.train` writes these files, and `pipelines.evaluate`, `experiment.load_run`,
the export and the paper campaign (`paper/`) read them. (No TensorFlow import: the
reproduction's driver reads run directories without one.)

  OUTPUT/config.json          the run's `configs.Config`
  OUTPUT/progress.json        epochs, best validation value, seconds (`callbacks.TrainingProgress`)
  OUTPUT/backup/              `BackupAndRestore`'s latest state (resume after a kill)
  OUTPUT/checkpoints/best     the best epoch's weights
  OUTPUT/keras_backup/        the Keras job's latest state (resume after a kill)
  OUTPUT/keras_model/         the Keras job's trained towers (towers.npz), saved with its metrics
  OUTPUT/logs/                TensorBoard (train/, validation/)
  OUTPUT/vocabulary/          an event log's user and item vocabularies (raw ids, counts)
  OUTPUT/day_store/           an event log's next-day split read out of core (`day_store`;
                              its training examples are deleted once training is done)
  OUTPUT/drift.json           the streaming estimator's error against each day's Q
  OUTPUT/metrics.json         the test report, written last
  OUTPUT/per_query_test.npz   each test query's metrics (`per_query`), written with it
  OUTPUT/export/<index>/<v>/  SavedModels for serving; export/keras/<v>/ the Keras job's
  OUTPUT/workers/worker-N/    each non-chief worker's report (multi-worker runs)
  OUTPUT/wall_seconds.json    the reproduction driver's wall time of the run
  OUTPUT/train.log            the reproduction driver's log of the run's training process
  OUTPUT/run.lock             held by the process training the run (`RunLock`)
"""

import dataclasses
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from typing import Optional


def write_json(path: str, value, indent: Optional[int] = 1) -> None:
    """Writes `value` as JSON to `path` through a temporary file beside it, renamed into
    place: a process killed while writing leaves the previous file (or none), never half of
    one that a rerun would read."""
    temporary = f"{path}.partial-{os.getpid()}"
    try:
        with open(temporary, "w") as f:
            json.dump(value, f, indent=indent)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """The paths of the run in `directory`."""

    directory: str

    def _path(self, *parts: str) -> str:
        return os.path.join(self.directory, *parts)

    @property
    def config(self) -> str:
        return self._path("config.json")

    @property
    def progress(self) -> str:
        return self._path("progress.json")

    @property
    def backup(self) -> str:
        return self._path("backup")

    @property
    def keras_backup(self) -> str:
        """The Keras job's backups (`pipelines.keras_job.save_backup`)."""
        return self._path("keras_backup")

    @property
    def keras_model(self) -> str:
        """The Keras job's trained towers (`pipelines.keras_job.save_towers`)."""
        return self._path("keras_model")

    def has_keras_model(self) -> bool:
        """Whether the Keras job saved its trained model here (the two-tower's towers, or
        SASRec's best epoch)."""
        return any(
            os.path.exists(os.path.join(self.keras_model, name))
            for name in ("towers.npz", "best.npz")
        )

    @property
    def best(self) -> str:
        """The best weights' checkpoint prefix (TF adds `.index` and data files)."""
        return self._path("checkpoints", "best")

    @property
    def logs(self) -> str:
        return self._path("logs")

    @property
    def vocabulary(self) -> str:
        return self._path("vocabulary")

    @property
    def day_store(self) -> str:
        return self._path("day_store")

    @property
    def drift(self) -> str:
        return self._path("drift.json")

    @property
    def metrics(self) -> str:
        return self._path("metrics.json")

    @property
    def per_query(self) -> str:
        """Each test query's metrics by the run's first index (`per_query.save`)."""
        return self._path("per_query_test.npz")

    @property
    def code_diff(self) -> str:
        """The uncommitted changes the run's code held (`provenance.code_state`), if any."""
        return self._path("code.diff")

    @property
    def lock(self) -> str:
        return self._path("run.lock")

    @property
    def wall_seconds(self) -> str:
        return self._path("wall_seconds.json")

    @property
    def train_log(self) -> str:
        return self._path("train.log")

    def export(self, index: str) -> str:
        return self._path("export", index)

    def worker(self, task_id: int) -> str:
        return self._path("workers", f"worker-{task_id}")

    def has_best(self) -> bool:
        """Whether a best checkpoint has been written."""
        return os.path.exists(self.best + ".index")

    def prune_weights(self) -> None:
        """Deletes a finished run's weights (checkpoints/, backup/, keras_model/, export/:
        gigabytes at a million items); its reports (metrics.json, progress.json, logs/, ...)
        stay. Refuses a run without metrics.json, whose weights a resume still needs."""
        if not os.path.exists(self.metrics):
            raise ValueError(
                f"prune_weights: the run in {self.directory!r} has not finished "
                "(no metrics.json); its weights are needed to resume it."
            )
        for path in (
            os.path.dirname(self.best),
            self.backup,
            self.keras_model,
            self._path("export"),
        ):
            shutil.rmtree(path, ignore_errors=True)

    def has_trained(self) -> bool:
        """Whether a run has trained here (config.json alone is not progress)."""
        return any(
            os.path.exists(path)
            for path in (
                self.progress,
                self.backup,
                self.keras_backup,
                os.path.dirname(self.best),
                self.metrics,
            )
        )


# The note `tfrs-logq compare` leaves in a run whose weights it removed once recorded.
WEIGHTS_REMOVED = "weights_removed.json"


def removed_weights(directory: str) -> Optional[str]:
    """Why `directory` has no weights when compare removed them (its note is there and no
    best checkpoint): a message naming --keep_weights; else None."""
    path = os.path.join(directory, WEIGHTS_REMOVED)
    files = RunFiles(directory)
    if not os.path.exists(path) or files.has_best() or files.has_keras_model():
        return None
    try:
        with open(path, encoding="utf-8") as f:
            note = json.load(f)
    except (OSError, ValueError):
        note = {}
    if not isinstance(note, dict):
        note = {}
    return (
        f"{directory} holds no weights to export: tfrs-logq compare removed them once it "
        f"had recorded the run ({note.get('record', 'its record')}), as it does without "
        "--keep_weights. To export such a run, train it with --keep_weights: the comparison "
        "again into another --output_dir, or the run alone with its command into a new "
        f"--output_dir ({note.get('command', 'in its record')})."
    )


def framework_of(directory: str) -> Optional[str]:
    """The framework that trained the run in `directory` (config.json's
    training.framework, "tf" where the config predates the field), or None: no readable
    config there."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    training = config.get("training") if isinstance(config, dict) else None
    return training.get("framework", "tf") if isinstance(training, dict) else None


def keras_framework_refusal(directory: str, job: str) -> str:
    """Why `python -m pipelines.JOB --framework=keras` (the TensorFlow job) does not run:
    the module that does it, or that the run is TensorFlow's."""
    if framework_of(directory) == "keras":
        return (
            f"--framework=keras: the Keras job's {job} is `tfrs-logq {job} {directory}` "
            f"(python -m pipelines.keras_{job}); this module {job}s with TensorFlow."
        )
    return (
        f"--framework=keras: {directory} was trained by the TensorFlow job, whose checkpoint "
        "Keras 3 does not read; give --framework=tf (or none)."
    )


class RunInUse(RuntimeError):
    """Another process holds the run directory's lock."""


class RunNotFound(ValueError):
    """A directory that holds no training run, or no checkpoint of one yet."""


class OutputDirError(ValueError):
    """--output_dir cannot hold a run (a file, not writable, another run's config)."""


class RunLock:
    """One writer per run directory: `with RunLock(directory):` holds an exclusive lock on
    OUTPUT/run.lock (flock) while the body runs, and removes the file at the end.

    The kernel drops the lock with the process, however it ends (a SIGKILL included), so
    a lock is never stale: a file left by a killed process is taken over. The file names
    the holder (pid, host, start, command) for the error a second process gets.
    """

    def __init__(self, directory: str):
        self.path = RunFiles(directory).lock
        self.directory = directory
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 4096).decode(errors="replace").strip() or "unknown process"
                os.close(fd)
                raise RunInUse(
                    f"{self.directory} is in use by another run ({holder}); wait for it to "
                    "end, or give this one another --output_dir."
                ) from None
            # The holder may have removed the file between our open and our lock: then
            # the lock is on a file nobody else will see, and we open the path again.
            try:
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(
            fd,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "command": " ".join(sys.argv),
                }
            ).encode(),
        )
        self._fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            os.remove(self.path)  # While still locked: a waiting process opens it anew.
        except FileNotFoundError:
            pass
        assert self._fd is not None  # Set by `__enter__`.
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def check_output_dir(config, output_dir: str) -> None:
    """A directory holds one configuration: reusing one that has trained with another
    config is refused. A directory whose run failed before training (bad data, say) is
    reused: its config.json is replaced."""
    from pipelines import configs  # pylint: disable=import-outside-toplevel  (it imports this)

    files = RunFiles(output_dir)
    if os.path.exists(files.config) and files.has_trained():
        with open(files.config) as f:
            stored = json.load(f)
        # Fields added since that run was made are not in its file: they take this
        # command's values; the job is compared even where the file predates the field.
        changed = configs.changed_fields(stored, config)
        if changed:
            raise OutputDirError(
                f"{output_dir} holds a run with another config (differs in "
                f"{', '.join(changed)}); use another --output_dir."
            )


def prepare_output_dir(output_dir: str) -> None:
    """Creates `output_dir`, or says why it cannot hold a run."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputDirError(
            f"--output_dir={output_dir} is a file; give a directory (it is created when missing)."
        )
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise OutputDirError(
            f"--output_dir={output_dir} cannot be written ({error.strerror}); "
            "give a directory this user can write to."
        ) from None


def write_config(config, output_dir: str) -> None:
    """config.json, written once the data has loaded and the model is built."""
    os.makedirs(output_dir, exist_ok=True)
    with open(RunFiles(output_dir).config, "w") as f:
        json.dump(config.as_dict(), f, indent=1)
