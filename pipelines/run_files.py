"""Where a training run keeps its files: the layout of an output directory, in one place.

`pipelines.train` writes these files, and `pipelines.evaluate`, `experiment.load_run`,
the export and the paper campaign (`paper/`) read them. (No TensorFlow import: the
reproduction's driver reads run directories without one.)

  OUTPUT/config.json          the run's `configs.Config`
  OUTPUT/progress.json        epochs, best validation value, seconds (`callbacks.TrainingProgress`)
  OUTPUT/backup/              `BackupAndRestore`'s latest state (resume after a kill)
  OUTPUT/checkpoints/best     the best epoch's weights
  OUTPUT/logs/                TensorBoard (train/, validation/)
  OUTPUT/vocabulary/          an event log's user and item vocabularies (raw ids, counts)
  OUTPUT/drift.json           the streaming estimator's error against each day's Q
  OUTPUT/metrics.json         the test report, written last
  OUTPUT/export/<index>/<v>/  SavedModels for serving
  OUTPUT/workers/worker-N/    each non-chief worker's report (multi-worker runs)
  OUTPUT/wall_seconds.json    the reproduction driver's wall time of the run
  OUTPUT/train.log            the reproduction driver's log of the run's training process
"""

import dataclasses
import os


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
    def drift(self) -> str:
        return self._path("drift.json")

    @property
    def metrics(self) -> str:
        return self._path("metrics.json")

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

    def has_trained(self) -> bool:
        """Whether a run has trained here (config.json alone is not progress)."""
        return any(os.path.exists(path) for path in (
            self.progress, self.backup, os.path.dirname(self.best), self.metrics))
