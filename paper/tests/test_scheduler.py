"""The runner's scheduler: runs share the CPUs, never one CPU, and a failure stops the queue."""

import tempfile
import threading
import time
from unittest import mock

import tensorflow as tf

from paper import plan
from paper import scheduler


class SchedulerTest(tf.test.TestCase):
    def test_cpu_slots_split_the_cpus_evenly(self):
        self.assertEqual(scheduler.cpu_slots(1, [0, 1]), [None])
        self.assertEqual(scheduler.cpu_slots(2, [0, 1]), [[0], [1]])
        self.assertEqual(scheduler.cpu_slots(2, [0, 1, 2, 3, 4]), [[0, 1, 2], [3, 4]])
        with self.assertRaisesRegex(ValueError, "--parallel=3 is more than the 2 CPUs"):
            scheduler.cpu_slots(3, [0, 1])

    def _runs(self, n):
        out = tempfile.mkdtemp()
        return plan.plan(
            "synthetic", "loo", "cpu", n, ["in_batch-none"], ["static"], out, "", "smoke"
        )

    def test_runs_share_the_slots_and_never_a_cpu(self):
        runs = self._runs(5)
        lock, active, seen = threading.Lock(), set(), []

        def fake_execute(run, cpus=None):
            with lock:
                self.assertNotIn(tuple(cpus), active)  # No two running runs share CPUs.
                active.add(tuple(cpus))
                seen.append(len(active))
            time.sleep(0.05)
            with lock:
                active.remove(tuple(cpus))
            return 1.0

        with mock.patch.object(scheduler, "execute", fake_execute):
            done = list(scheduler.run_all(runs, [[0], [1]]))
        self.assertCountEqual([number for number, _, _ in done], [1, 2, 3, 4, 5])
        self.assertEqual(max(seen), 2)

    def test_a_failed_run_stops_the_ones_not_started(self):
        runs = self._runs(4)
        started = []

        def fake_execute(run, cpus=None):
            started.append(run.seed)
            if run.seed == 0:
                raise RuntimeError("run 0 failed")
            time.sleep(0.2)
            return 1.0

        with mock.patch.object(scheduler, "execute", fake_execute):
            with self.assertRaisesRegex(RuntimeError, "run 0 failed"):
                list(scheduler.run_all(runs, [None]))
        self.assertEqual(started, [0])


if __name__ == "__main__":
    tf.test.main()
