"""pipelines.cluster: local clusters and TF_CONFIG."""

import json
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
        self.assertEqual(json.loads(cluster.tf_config(spec, 1)),
                         {"cluster": spec, "task": {"type": "worker", "index": 1}})

    def test_bad_size(self):
        with self.assertRaisesRegex(ValueError, r"`num_workers` must be positive; received 0"):
            cluster.local_cluster(0)


if __name__ == "__main__":
    unittest.main()
