"""The scheduler: runs share the CPUs, never one CPU; a failure stops the queue, or with
keep_going is reported and the others go on."""

import os
import sys
import tempfile
import threading
import time
from unittest import mock

import tensorflow as tf

from pipelines import schedule


def _jobs(n):
    out = tempfile.mkdtemp()
    return [
        schedule.Job(f"run {i}", [sys.executable, "-c", "pass"], os.path.join(out, str(i)))
        for i in range(n)
    ]


class ScheduleTest(tf.test.TestCase):
    def test_cpu_slots_split_the_cpus_evenly(self):
        self.assertEqual(schedule.cpu_slots(1, [0, 1]), [None])
        self.assertEqual(schedule.cpu_slots(2, [0, 1]), [[0], [1]])
        self.assertEqual(schedule.cpu_slots(2, [0, 1, 2, 3, 4]), [[0, 1, 2], [3, 4]])
        with self.assertRaisesRegex(ValueError, "--parallel=3 is more than the 2 CPUs"):
            schedule.cpu_slots(3, [0, 1])
        with self.assertRaisesRegex(ValueError, "received --parallel=0"):
            schedule.cpu_slots(0, [0, 1])

    def test_runs_share_the_slots_and_never_a_cpu(self):
        jobs = _jobs(5)
        lock, active, seen = threading.Lock(), set(), []

        def fake_execute(job, cpus=None):
            with lock:
                self.assertNotIn(tuple(cpus), active)  # No two running runs share CPUs.
                active.add(tuple(cpus))
                seen.append(len(active))
            time.sleep(0.05)
            with lock:
                active.remove(tuple(cpus))
            return 1.0

        with mock.patch.object(schedule, "execute", fake_execute):
            done = list(schedule.run_all(jobs, [[0], [1]]))
        self.assertCountEqual([d.number for d in done], [1, 2, 3, 4, 5])
        self.assertEqual(max(seen), 2)

    def test_a_failed_run_stops_the_ones_not_started(self):
        jobs = _jobs(4)
        started = []

        def fake_execute(job, cpus=None):
            started.append(job.label)
            if job.label == "run 0":
                raise schedule.RunFailed("run 0 failed")
            time.sleep(0.2)
            return 1.0

        with mock.patch.object(schedule, "execute", fake_execute):
            with self.assertRaisesRegex(schedule.RunFailed, "run 0 failed"):
                list(schedule.run_all(jobs, [None]))
        self.assertEqual(started, ["run 0"])

    def test_keep_going_reports_the_failure_and_runs_the_rest(self):
        jobs = _jobs(3)
        jobs[1] = jobs[1]._replace(command=[sys.executable, "-c", "raise SystemExit(3)"])
        done = sorted(schedule.run_all(jobs, [None], keep_going=True))
        self.assertEqual([d.number for d in done], [1, 2, 3])
        self.assertIsNone(done[0].error)
        self.assertRegex(done[1].error, r"exited with 3; see .*1/train\.log")
        self.assertIsNone(done[2].error)
        self.assertTrue(os.path.exists(os.path.join(jobs[0].directory, "wall_seconds.json")))
        self.assertFalse(os.path.exists(os.path.join(jobs[1].directory, "wall_seconds.json")))


if __name__ == "__main__":
    tf.test.main()
