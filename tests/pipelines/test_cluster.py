"""pipelines.cluster: local clusters and TF_CONFIG."""

import json
import subprocess
import sys
import unittest

from pipelines import cluster


class ClusterTest(unittest.TestCase):
    def test_local_cluster_has_distinct_localhost_ports(self):
        workers = cluster.local_cluster(3)["worker"]
        self.assertEqual(len(workers), 3)
        self.assertTrue(all(w.startswith("127.0.0.1:") for w in workers))
        self.assertEqual(len(set(workers)), 3)

    def test_tf_config(self):
        spec = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
        self.assertEqual(
            json.loads(cluster.tf_config(spec, 1)),
            {"cluster": spec, "task": {"type": "worker", "index": 1}},
        )

    def test_workers_get_their_tf_config_and_are_waited_for(self):
        spec = cluster.local_cluster(2)
        command = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]
        outputs = cluster.wait_workers(cluster.start_workers(command, spec), timeout=60)
        self.assertEqual(
            [json.loads(o) for o in outputs],
            [json.loads(cluster.tf_config(spec, i)) for i in range(2)],
        )

    def test_a_worker_past_the_timeout_is_killed(self):
        spec = cluster.local_cluster(1)
        workers = cluster.start_workers([sys.executable, "-c", "import time; time.sleep(60)"], spec)
        with self.assertRaises(subprocess.TimeoutExpired):
            cluster.wait_workers(workers, timeout=0.5)
        self.assertIsNotNone(workers[0].wait(timeout=10))

    def test_bad_size(self):
        with self.assertRaisesRegex(ValueError, r"`num_workers` must be positive; received 0"):
            cluster.local_cluster(0)


if __name__ == "__main__":
    unittest.main()
