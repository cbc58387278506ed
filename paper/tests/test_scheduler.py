"""The campaigns' scheduler: their runs, trained by `pipelines.schedule`."""

import tempfile
from unittest import mock

import tensorflow as tf

from paper import plan
from paper import scheduler
from pipelines import schedule


class SchedulerTest(tf.test.TestCase):
    def test_the_campaign_adapter_yields_its_runs(self):
        runs = plan.plan(
            "synthetic",
            "loo",
            "cpu",
            2,
            ["in_batch-none"],
            ["static"],
            tempfile.mkdtemp(),
            "",
            "smoke",
        )
        with mock.patch.object(schedule, "execute", lambda job, cpus=None: 2.0):
            done = sorted(scheduler.run_all(runs, [None]), key=lambda d: d[0])
        self.assertEqual([(n, r.seed, s) for n, r, s in done], [(1, 0, 2.0), (2, 1, 2.0)])


if __name__ == "__main__":
    tf.test.main()
