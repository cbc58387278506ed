"""The layout of a run's output directory (pipelines.run_files)."""

import json
import os
import tempfile
import unittest

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


if __name__ == "__main__":
    unittest.main()
