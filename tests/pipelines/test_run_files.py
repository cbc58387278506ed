"""The layout of a run's output directory (pipelines.run_files)."""

import json
import os
import tempfile
import unittest
import unittest.mock

from pipelines.run_files import RunFiles


class RunFilesTest(unittest.TestCase):
    def test_paths(self):
        files = RunFiles("/runs/a")
        self.assertEqual(files.config, "/runs/a/config.json")
        self.assertEqual(files.best, "/runs/a/checkpoints/best")
        self.assertEqual(files.export("scann"), "/runs/a/export/scann")
        self.assertEqual(files.worker(3), "/runs/a/workers/worker-3")

    def test_config_alone_is_not_progress(self):
        directory = tempfile.mkdtemp()
        files = RunFiles(directory)
        with open(files.config, "w") as f:
            json.dump({}, f)
        self.assertFalse(files.has_trained())
        self.assertFalse(files.has_best())
        os.makedirs(os.path.dirname(files.best))
        self.assertTrue(files.has_trained())
        self.assertFalse(files.has_best())
        open(files.best + ".index", "w").close()
        self.assertTrue(files.has_best())

    def test_prune_weights_keeps_the_reports_of_a_finished_run(self):
        files = RunFiles(tempfile.mkdtemp())
        for path in (
            files.best + ".index",
            os.path.join(files.backup, "chief", "ckpt-1"),
            os.path.join(files.export("scann"), "1", "saved_model.pb"),
            os.path.join(files.logs, "train", "events"),
            files.progress,
        ):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        with self.assertRaisesRegex(ValueError, r"has not finished \(no metrics.json\)"):
            files.prune_weights()
        self.assertTrue(files.has_best())  # Refused: nothing deleted.
        open(files.metrics, "w").close()
        files.prune_weights()
        self.assertEqual(
            sorted(os.listdir(files.directory)), ["logs", "metrics.json", "progress.json"]
        )
        self.assertTrue(files.has_trained())


if __name__ == "__main__":
    unittest.main()


def test_write_json_never_leaves_half_a_file(tmp_path):
    from pipelines.run_files import write_json  # pylint: disable=import-outside-toplevel

    path = str(tmp_path / "metrics.json")
    write_json(path, {"recall@10": 0.25})
    # A value that fails half way (an object JSON cannot write): the old file stays whole.
    try:
        write_json(path, {"recall@10": 0.5, "bad": object()})
    except TypeError:
        pass
    with open(path) as f:
        assert json.load(f) == {"recall@10": 0.25}
    assert os.listdir(tmp_path) == ["metrics.json"]


class CodeStateTest(unittest.TestCase):
    """A run names its commit and, from a dirty tree, the diff's hash beside the diff."""

    def _state(self, status, diff, path):
        from pipelines import provenance  # pylint: disable=import-outside-toplevel

        answers = {"rev-parse": "abc123\n", "status": status, "diff": diff}
        with unittest.mock.patch.object(provenance, "_git", lambda *args: answers[args[0]]):
            return provenance.code_state(path)

    def test_clean_dirty_and_clean_again(self):
        import hashlib  # pylint: disable=import-outside-toplevel

        path = os.path.join(tempfile.mkdtemp(), "code.diff")
        self.assertEqual(self._state("", "", path), {"git_revision": "abc123"})
        self.assertFalse(os.path.exists(path))
        diff = "diff --git a/x.py b/x.py\n-1\n+2\n"
        state = self._state(" M x.py\n", diff, path)
        self.assertEqual(state["git_revision"], "abc123+dirty")
        self.assertEqual(state["code_diff_sha256"], hashlib.sha256(diff.encode()).hexdigest())
        with open(path) as f:
            self.assertEqual(f.read(), diff)
        self.assertEqual(self._state("", "", path), {"git_revision": "abc123"})
        self.assertFalse(os.path.exists(path))  # A stale diff does not outlive a clean rerun.

    def test_outside_a_checkout(self):
        import subprocess  # pylint: disable=import-outside-toplevel

        from pipelines import provenance  # pylint: disable=import-outside-toplevel

        def fail(*args):
            raise subprocess.CalledProcessError(128, "git")

        with unittest.mock.patch.object(provenance, "_git", fail):
            self.assertEqual(provenance.code_state(), {"git_revision": "unknown"})
            with unittest.mock.patch.dict(os.environ, {"GIT_REVISION": ""}):
                self.assertEqual(provenance.revision(), "unknown")
            with unittest.mock.patch.dict(os.environ, {"GIT_REVISION": "abc123"}):
                self.assertEqual(provenance.revision(), "abc123")  # A copy without .git.

    def test_a_runs_record_reads_git_whatever_git_revision_says(self):
        from pipelines import provenance  # pylint: disable=import-outside-toplevel

        with unittest.mock.patch.dict(os.environ, {"GIT_REVISION": "elsewhere"}):
            self.assertEqual(self._state("", "", None), {"git_revision": "abc123"})
            self.assertEqual(self._state(" M x.py\n", "d", None)["git_revision"], "abc123+dirty")
            answers = {"rev-parse": "abc123\n", "status": " M x.py\n"}
            with unittest.mock.patch.object(provenance, "_git", lambda *a: answers[a[0]]):
                self.assertEqual(provenance.revision(), "elsewhere")
        with unittest.mock.patch.dict(os.environ, {"GIT_REVISION": ""}):
            with unittest.mock.patch.object(provenance, "_git", lambda *a: answers[a[0]]):
                self.assertEqual(provenance.revision(), "abc123+dirty")
