"""Tests of paper/park.py: a run in progress carried to another directory, outside git."""

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from unittest import mock

import pytest
import tensorflow as tf

from paper import park
from tests.pipelines.test_train import _finish_as_uninterrupted


@pytest.mark.integration
class ParkTest(tf.test.TestCase):
    def test_packed_run_resumes_elsewhere_to_the_bit(self):
        # A smoke run is killed once its first best checkpoint is written, packed, its
        # directory deleted (the machine is gone) and unpacked under another path. Resumed
        # there, it ends as the uninterrupted run does: same test metrics, best validation
        # value and best epoch, 2 x 100 steps. Its best checkpoint travelled without the
        # optimizer's state, a third of its size.
        root = tempfile.mkdtemp()
        out, moved, uninterrupted = (os.path.join(root, n) for n in ("run", "moved", "ref"))
        args = ["--preset=smoke", "--epochs=2", "--steps_per_epoch=100", "--patience=5"]
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.train", *args, f"--output_dir={out}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 300
        while time.time() < deadline and process.poll() is None:
            # As soon as the first best checkpoint and a backup are on disk.
            if os.path.exists(
                os.path.join(out, "checkpoints", "best.index")
            ) and tf.train.latest_checkpoint(os.path.join(out, "backup", "chief")):
                break
            time.sleep(0.2)
        self.assertIsNone(process.poll(), "the run ended before the kill")
        process.send_signal(signal.SIGKILL)
        process.wait()
        archive = os.path.join(root, "parked", "run.tar.gz")
        packed = park.pack(out, archive)
        self.assertEqual(packed["bytes"], os.path.getsize(archive))
        self.assertLess(packed["best_bytes_after"], packed["best_bytes_before"] / 2)
        with tarfile.open(archive) as tar:
            names = tar.getnames()
        self.assertIn("run/config.json", names)
        self.assertTrue(any(n.startswith("run/backup/chief/ckpt-") for n in names))
        shutil.rmtree(out)
        self.assertEqual(park.unpack(archive, moved), moved)
        with self.assertRaisesRegex(FileExistsError, "run_dir=.*moved.* exists"):
            park.unpack(archive, moved)

        metrics, reference = _finish_as_uninterrupted(self, args, moved, uninterrupted)
        self.assertEqual(metrics["best_epoch"], reference["best_epoch"])
        self.assertGreater(metrics["resumed_from_step"], 0)
        self.assertEqual(metrics["steps"], 200)
        self.assertEqual(metrics["epochs_run"], 2)
        # A finished run has nothing in progress to carry.
        with self.assertRaisesRegex(ValueError, "run_dir=.*moved.* has finished"):
            park.pack(moved, os.path.join(root, "again.tar.gz"))

    def test_bad_input(self):
        empty = tempfile.mkdtemp()
        with self.assertRaisesRegex(FileNotFoundError, "run_dir=.* holds no training run"):
            park.pack(empty, os.path.join(empty, "a.tar.gz"))
        with open(os.path.join(empty, "config.json"), "w") as f:
            f.write("{}")
        with self.assertRaisesRegex(FileNotFoundError, "no backup in"):
            park.pack(empty, os.path.join(empty, "a.tar.gz"))
        self.assertEqual(park.main(["park.py", "carry", "a", "b"]), 2)
        self.assertEqual(park.main(["park.py", "unpack", "a.tar.gz"]), 2)

    def test_links_stay_inside_the_unpacked_run(self):
        # Issue 46: a relative link inside the run (`logs -> ../sibling`) passed tarfile's
        # "data" filter (it stays inside the scratch directory), and training the unpacked
        # run then wrote into the sibling directory. Every link is resolved (through the
        # archive's other links) and must stay inside the run; no entry is written through a
        # link; a refused archive leaves nothing behind.
        root = tempfile.mkdtemp()

        def archive(name, entries):
            """A .tar.gz of `entries`: (path, link target or None for a file)."""
            path = os.path.join(root, name + ".tar.gz")
            with tarfile.open(path, "w:gz") as tar:
                for entry, target in entries:
                    info = tarfile.TarInfo(entry)
                    if target is None:
                        info.size = 2
                        tar.addfile(info, io.BytesIO(b"{}"))
                    else:
                        info.type, info.linkname = tarfile.SYMTYPE, target
                        tar.addfile(info)
            return path

        config = ("run/config.json", None)
        refused = {
            "sibling": (
                [config, ("run/logs", "../sibling")],
                "its link 'run/logs' -> '../sibling' points outside the run (resolved: 'sibling')",
            ),
            # Lexically inside (run/d/.. is run), but d is a link to the run itself.
            "chain": (
                [config, ("run/d", "."), ("run/a", "d/..")],
                "its link 'run/a' -> 'd/..' points outside the run (resolved: '.')",
            ),
            "through": (
                [config, ("run/logs", "sub"), ("run/logs/x", None)],
                "its entry 'run/logs/x' would be written through the link 'run/logs'",
            ),
            "twice": (
                [config, ("run/logs", "sub"), ("run/logs", None)],
                "its entry 'run/logs' would be written through the link 'run/logs'",
            ),
            "top": ([("run", ".")], "its run 'run' is not a directory"),
            "absolute": ([config, ("run/logs", "/tmp")], "is a link to an absolute path"),
            "parent": ([config, ("run/logs", "../../..")], "which is outside the destination"),
        }
        for name, (entries, message) in refused.items():
            path = archive(name, entries)
            target = os.path.join(root, "unpacked", name)
            with self.assertRaisesRegex(
                ValueError, re.escape(f"archive={path!r}: ") + ".*" + re.escape(message)
            ):
                park.unpack(path, target)
            self.assertFalse(os.path.lexists(target), name)
        self.assertEqual(
            sorted(os.listdir(root)), sorted(f"{n}.tar.gz" for n in refused) + ["unpacked"]
        )
        self.assertEqual(os.listdir(os.path.join(root, "unpacked")), [])
        # A link that stays inside the run is kept as a link.
        path = archive(
            "inside",
            [
                config,
                ("run/train_logs/a", None),
                ("run/logs", "train_logs"),
                ("run/up", "train_logs/.."),
            ],
        )
        moved = park.unpack(path, os.path.join(root, "unpacked", "inside"))
        self.assertEqual(os.readlink(os.path.join(moved, "logs")), "train_logs")
        self.assertTrue(os.path.isfile(os.path.join(moved, "logs", "a")))

    def test_archives_stay_out_of_git_work_trees(self):
        tree = tempfile.mkdtemp()
        os.mkdir(os.path.join(tree, ".git"))
        inside = os.path.join(tree, "docs", "parked", "seed0.tar.gz")
        # Refused before anything is read or written.
        with self.assertRaisesRegex(
            ValueError,
            re.escape(
                f"archive={inside!r} is inside the git work tree {os.path.realpath(tree)}: a "
                "parked run is a binary, kept out of git."
            ),
        ):
            park.pack(os.path.join(tree, "no_run"), inside)
        self.assertFalse(os.path.exists(os.path.join(tree, "docs")))
        with mock.patch.dict(os.environ, {"TFRS_LOGQ_PARK_DIR": os.path.join(tree, "parked")}):
            self.assertEqual(park.park_dir(), os.path.join(tree, "parked"))
            with self.assertRaisesRegex(
                ValueError,
                re.escape(f"archive={os.path.join(tree, 'parked', 'seed3.tar.gz')!r} is inside"),
            ):
                park.pack(os.path.join(tree, "runs", "seed3"))  # The default name.
        with mock.patch.dict(os.environ, {"TFRS_LOGQ_PARK_DIR": ""}):
            self.assertEqual(
                park.park_dir(),
                os.path.expanduser(os.path.join("~", ".cache", "tfrs_logq", "parked")),
            )
        outside = os.path.join(tempfile.mkdtemp(), "new", "a.tar.gz")
        self.assertEqual(park.check_outside_git(outside), outside)

    def test_event_file_cut_mid_record_keeps_its_whole_records(self):
        path = os.path.join(tempfile.mkdtemp(), "events.out.tfevents.1")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(3):
                writer.write(b"record %d" % i)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - 5)  # The third record loses its end.
        self.assertEqual(park._keep_whole_records(path), 2)  # pylint: disable=protected-access
        self.assertEqual(
            [r.numpy() for r in tf.data.TFRecordDataset(path)], [b"record 0", b"record 1"]
        )
        self.assertEqual(park._keep_whole_records(path), 2)  # pylint: disable=protected-access


if __name__ == "__main__":
    tf.test.main()
