"""--strategy=parameter_server: the partitioner, the local cluster, a training run that
loses a worker, and the count-min sketch under asynchronous updates."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import pytest
import tensorflow as tf

from pipelines import cluster as cluster_lib
from pipelines import configs
from pipelines import distribute

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class PartitionerTest(tf.test.TestCase):
    def test_tables_are_sharded_and_one_dimensional_state_is_not(self):
        fixed = distribute.variable_partitioner("fixed_shards", 2)
        self.assertEqual(fixed(tf.TensorShape([1000, 64]), tf.float32), [2, 1])
        self.assertEqual(fixed(tf.TensorShape([4 * 2**18]), tf.float32), [1])  # A sketch.
        self.assertEqual(fixed(tf.TensorShape([]), tf.int64), [])  # A step counter.
        minimum = distribute.variable_partitioner("min_size", 2)
        # 1,000 x 64 float32 = 256,000 bytes, under the 256 KiB minimum: one shard.
        self.assertEqual(minimum(tf.TensorShape([1000, 64]), tf.float32), [1, 1])
        # 10,000 rows: 2.4 MiB, at most one shard per server.
        self.assertEqual(minimum(tf.TensorShape([10000, 64]), tf.float32), [2, 1])
        small = distribute.variable_partitioner("min_size", 4, min_shard_bytes=1000 * 64)
        self.assertEqual(small(tf.TensorShape([3000, 16]), tf.float32), [3, 1])

    def test_bad_arguments_name_the_flag_and_the_value(self):
        with self.assertRaisesRegex(
            ValueError,
            "--partitioner must be one of min_size, fixed_shards; received --partitioner='even'",
        ):
            distribute.variable_partitioner("even", 2)
        with self.assertRaisesRegex(ValueError, "received num_ps=0"):
            distribute.variable_partitioner("min_size", 0)
        with self.assertRaisesRegex(ValueError, "received --min_shard_bytes=0"):
            distribute.variable_partitioner("min_size", 2, min_shard_bytes=0)
        with self.assertRaisesRegex(ValueError, "parameter_server, tpu; received --strategy='ps'"):
            distribute.make_strategy("ps")
        self.assertIn("parameter_server", configs.STRATEGIES)


class LocalClusterTest(tf.test.TestCase):
    def test_chief_workers_and_parameter_servers_on_distinct_ports(self):
        cluster = cluster_lib.local_cluster(2, num_ps=2, chief=True)
        self.assertEqual(
            {k: len(v) for k, v in cluster.items()}, {"chief": 1, "worker": 2, "ps": 2}
        )
        self.assertLen({a for addresses in cluster.values() for a in addresses}, 5)
        config = json.loads(cluster_lib.tf_config(cluster, 1, "ps"))
        self.assertEqual(config["task"], {"type": "ps", "index": 1})
        self.assertEqual(list(cluster_lib.local_cluster(2)), ["worker"])  # As before.
        with self.assertRaisesRegex(ValueError, "`num_ps` must be non-negative; received -1"):
            cluster_lib.local_cluster(2, num_ps=-1)
        with self.assertRaisesRegex(ValueError, "received task_type='chief'"):
            cluster_lib.tf_config(cluster_lib.local_cluster(1), 0, "chief")

    def test_which_processes_serve(self):
        cluster = cluster_lib.local_cluster(2, num_ps=1, chief=True)
        old = os.environ.get("TF_CONFIG")
        try:
            for task_type, index, expected in (
                ("worker", 1, ("worker", 1)),
                ("ps", 0, ("ps", 0)),
                ("chief", 0, None),
            ):
                os.environ["TF_CONFIG"] = cluster_lib.tf_config(cluster, index, task_type)
                self.assertEqual(distribute.parameter_server_task(), expected)
            # A MultiWorkerMirroredStrategy cluster has no servers.
            os.environ["TF_CONFIG"] = cluster_lib.tf_config(cluster_lib.local_cluster(2), 1)
            self.assertIsNone(distribute.parameter_server_task())
        finally:
            if old is None:
                os.environ.pop("TF_CONFIG", None)
            else:
                os.environ["TF_CONFIG"] = old

    def test_command_line_refuses_a_cluster_without_workers(self):
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.cluster", "--workers=0", "--", "true"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(result.returncode, 2)
        self.assertIn("--workers must be an integer >= 1; received --workers=0", result.stderr)


class CommandLineTest(tf.test.TestCase):
    def test_a_chief_without_servers_says_so(self):
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.train",
                "--strategy=parameter_server",
                "--preset=industrial_smoke",
                f"--output_dir={tempfile.mkdtemp()}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        self.assertEqual(result.returncode, 1)
        self.assertIn(
            '--strategy=parameter_server needs at least one "ps" task in '
            "TF_CONFIG's cluster; received num_ps=0.",
            result.stderr,
        )


def _wait_for(path, processes, timeout):
    """Waits until `path` exists; fails early when a process has exited."""
    deadline = time.time() + timeout
    while not os.path.exists(path):
        for p in processes:
            if p.poll() is not None:
                raise AssertionError(
                    f"exited ({p.returncode}) before {path} appeared:\n"
                    + p.communicate()[0][-3000:]
                )
        if time.time() > deadline:
            raise AssertionError(f"no {path} in {timeout} s")
        time.sleep(0.2)


def _run_to_the_chiefs_end(test, command, workers: int, timeout: float) -> str:
    """Runs `command` as a chief, `workers` workers and 2 parameter servers until the chief
    exits (then stops the servers); asserts it succeeded and returns its output."""
    tasks = cluster_lib.start_cluster(
        command, cluster_lib.local_cluster(workers, num_ps=2, chief=True)
    )
    chief = tasks["chief"][0]
    try:
        output = chief.communicate(timeout=timeout)[0]
    finally:
        chief.kill()
        cluster_lib.stop(tasks["ps"] + tasks["worker"])
    test.assertEqual(chief.returncode, 0, output[-3000:])
    return output


class TrainingTest(tf.test.TestCase):
    """A chief, 2 workers and 2 parameter servers as processes: 200 steps, a worker killed
    after the first epoch; the coordinator moves its steps to the other worker."""

    def test_a_killed_worker_does_not_stop_training(self):
        out = tempfile.mkdtemp()
        cluster = cluster_lib.local_cluster(2, num_ps=2, chief=True)
        command = [
            sys.executable,
            "-m",
            "pipelines.train",
            "--strategy=parameter_server",
            "--partitioner=fixed_shards",
            "--preset=smoke",
            "--model=two_tower",
            "--history_length=8",
            "--frequency=count_min",
            "--epochs=2",
            "--steps_per_epoch=100",
            "--patience=5",
            "--index=exact",
            f"--output_dir={out}",
        ]
        tasks = cluster_lib.start_cluster(command, cluster)
        servers = tasks["ps"] + tasks["worker"]
        chief = tasks["chief"][0]
        try:
            # progress.json is written at the end of the first epoch.
            _wait_for(os.path.join(out, "progress.json"), [chief], timeout=300)
            tasks["worker"][1].send_signal(signal.SIGKILL)
            tasks["worker"][1].wait()
            output = chief.communicate(timeout=300)[0]
        finally:
            chief.kill()
            cluster_lib.stop(servers)
        self.assertEqual(chief.returncode, 0, output[-3000:])
        # The coordinator saw the worker fail and ran its steps elsewhere.
        self.assertIn("Worker /job:worker/replica:0/task:1 failed", output)
        with open(os.path.join(out, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertEqual(metrics["strategy"], "ParameterServerStrategyV2")
        self.assertEqual((metrics["num_workers"], metrics["num_ps"]), (2, 2))
        # The coordinator runs each of the 200 scheduled steps at least once: a step the
        # killed worker had applied on the servers before dying, but not reported, is run
        # again on the other worker and counts twice (201 in one of our runs). The sketch
        # counts updates the same way (its step counter is an atomic add on its server).
        self.assertBetween(metrics["steps"], 200, 202)
        self.assertBetween(metrics["estimator_steps"], 200, 202)
        self.assertEqual(metrics["epochs_run"], 2)
        # fixed_shards: each table in 2 shards, one per server; the sketch whole on one.
        tables = metrics["placement"]["tables"]
        self.assertEqual(
            sorted(tables),
            ["items/embeddings", "two_tower/history/embeddings", "two_tower/users/embeddings"],
        )
        for devices in tables.values():
            self.assertEqual(
                sorted(d.split("/device")[0] for d in devices),
                ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"],
            )
        for devices in metrics["placement"]["estimator"].values():
            self.assertLen(devices, 1)
            self.assertStartsWith(devices[0], "/job:ps/")
        # Negatives from each worker's own batch of 32 rows (mixed: 32 in-batch + 32
        # uniform): at most 31 in-batch negatives, as on one process.
        self.assertBetween(metrics["last_epoch"]["valid_negatives"], 25.0, 63.0)
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoints", "best.index")))
        # Trained: above the 100 / 400 = 0.25 of a random ranking (0.43-0.45 in our runs).
        self.assertGreater(metrics["test"]["recall@100"], 0.3)


@pytest.mark.slow
class ResumeTest(tf.test.TestCase):
    """The whole cluster killed after the first epoch and started again: the chief resumes
    from the epoch's backup (weights, optimizer, estimator, progress)."""

    def test_a_killed_cluster_resumes_from_the_epoch_backup(self):
        out = tempfile.mkdtemp()
        command = [
            sys.executable,
            "-m",
            "pipelines.train",
            "--strategy=parameter_server",
            "--preset=smoke",
            "--model=two_tower",
            "--history_length=8",
            "--frequency=count_min",
            "--epochs=3",
            "--steps_per_epoch=100",
            "--patience=5",
            "--index=exact",
            f"--output_dir={out}",
        ]
        tasks = cluster_lib.start_cluster(
            command, cluster_lib.local_cluster(2, num_ps=2, chief=True)
        )
        chief = tasks["chief"][0]
        try:
            _wait_for(os.path.join(out, "progress.json"), [chief], timeout=300)
            deadline = time.time() + 60  # The backup follows progress.json.
            while tf.train.latest_checkpoint(os.path.join(out, "backup", "chief")) is None:
                self.assertLess(time.time(), deadline, "no backup after the first epoch")
                time.sleep(0.2)
        finally:
            chief.kill()
            chief.wait()
            cluster_lib.stop(tasks["ps"] + tasks["worker"])
        output = _run_to_the_chiefs_end(self, command, workers=2, timeout=400)
        self.assertNotIn("Epoch 1/3", output)  # The first epoch came from the backup.
        with open(os.path.join(out, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertEqual((metrics["resumed_from_step"], metrics["steps"]), (100, 300))
        self.assertEqual(metrics["estimator_steps"], 300)  # Restored with the backup.
        self.assertEqual(metrics["epochs_run"], 3)


class AsyncSketchTest(tf.test.TestCase):
    """benchmarks.async_sketch at a small size (its own process: it becomes a
    cluster's chief)."""

    def test_plain_updates_commute_and_conservative_ones_lose_draws(self):
        path = os.path.join(tempfile.mkdtemp(), "async.json")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.async_sketch",
                "--items=500",
                "--batch=128",
                "--steps=200",
                "--repeats=2",
                "--width=2048",
                "--variants=plain_decay1,conservative_decay1",
                f"--out={path}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(path) as f:
            variants = json.load(f)["variants"]
        plain, conservative = variants["plain_decay1"], variants["conservative_decay1"]
        # scatter_add and assign_add on the server commute, so the asynchronous sketch is
        # the synchronous one but for the rare increments lost to two scatter_adds on one
        # counter at once (TensorFlow runs them under a shared lock): at most a few of the
        # 25,600 draws; the total (assign_add, exclusive lock) loses none.
        self.assertEqual(plain["async_steps"], [200, 200])
        for held in plain["async_draws"]:
            self.assertEqual(held["total"], 25600.0)
            self.assertBetween(held["counters"], 25595.0, 25600.0)
        self.assertLess(abs(plain["bias"]["weighted"]), 1e-3)
        self.assertTrue(all(d.startswith("/job:ps/") for d in plain["state_devices"]))
        # Conservative updates read then write: concurrent ones lose draws, so the
        # asynchronous sketch reads less than the synchronous one, most on the head.
        self.assertLess(conservative["bias"]["weighted"], -0.005)
        self.assertLess(
            sum(h["counters"] for h in conservative["async_draws"]) / 2,
            conservative["sync_draws"]["counters"] - 100,
        )
        self.assertLess(conservative["bias"]["head"], conservative["bias"]["tail"])
        self.assertGreater(conservative["bias"]["weighted"], -0.2)


# Runs a module as `python -m` would, then prints the process's peak resident memory.
_WITH_PEAK = """
import re, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
finally:
    status = open("/proc/self/status").read()
    print("VmHWM_MB", int(re.search(r"VmHWM:\\s+(\\d+)", status).group(1)) // 1024, flush=True)
"""


class ChiefMemoryTest(tf.test.TestCase):
    """Item tables the chief does not hold while it evaluates or exports: it reads them from
    the servers a chunk at a time, and the servers write their own shards into the
    SavedModel; each phase stays below what one process evaluating or exporting the same
    checkpoint needs by more than a table, with that process's test metrics; its export
    serves that process's answers, rows past the first shard and a sharded dense kernel
    included."""

    ITEMS, DIM = 2_000_000, 64  # Catalog items without an event: 489 MB a table.

    def test_the_chief_evaluates_without_the_tables_and_answers_as_one_process(self):
        out, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
        for directory in (out, cache):  # About 5 GB of runs and logs.
            self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        catalog = os.path.join(cache, "catalog.txt")
        with open(catalog, "w") as f:
            f.write("".join(f"new{i:07d}\n" for i in range(self.ITEMS)))
        env = dict(os.environ, TFRS_LOGQ_CACHE=cache, PYTHONPATH=ROOT)
        train = [
            sys.executable,
            "-m",
            "pipelines.train",
            "--strategy=parameter_server",
            "--partitioner=fixed_shards",
            "--preset=industrial_smoke",
            f"--item_catalog={catalog}",
            f"--dim={self.DIM}",
            "--epochs=1",
            "--steps_per_epoch=10",
            "--index=exact",
            f"--output_dir={out}",
        ]
        with mock.patch.dict(os.environ, env):  # The tasks inherit it.
            _run_to_the_chiefs_end(self, train, workers=1, timeout=900)
        with open(os.path.join(out, "metrics.json")) as f:
            metrics = json.load(f)
        num_items = metrics["num_items"]
        self.assertGreater(num_items, self.ITEMS)  # The catalog's items and the log's.
        table_mb = (num_items + 1) * self.DIM * 4 / 2**20
        chief_test = metrics["test_exact"]

        # One process evaluates and exports the same checkpoint.
        peaks = {}
        for command in (
            ["pipelines.evaluate", out, "--index=exact"],
            ["pipelines.export", out, "--index=exact"],
        ):
            done = subprocess.run(
                [sys.executable, "-c", _WITH_PEAK, *command],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            self.assertEqual(done.returncode, 0, done.stdout[-2000:] + done.stderr[-3000:])
            peaks[command[0].split(".")[1]] = int(done.stdout.split("VmHWM_MB")[-1])
        # The single process holds the tables (items, history: 2 x 489 MB) beside what the
        # chief holds: its data and vocabularies, a chunk and its scores, the served index:
        # below the single process by more than a table.
        for phase in ("evaluate", "export"):
            chief_peak = metrics["phase_peak_rss_mb"][phase]
            print(f"{phase}: the chief's peak {chief_peak} MB, one process's {peaks[phase]} MB")
            self.assertLess(
                chief_peak + table_mb,
                peaks[phase],
                f"{phase}: the chief's peak {chief_peak} MB, one process's {peaks[phase]} MB",
            )
        with open(os.path.join(out, "metrics.json")) as f:
            single_test = json.load(f)["test_exact"]
        self.assertEqual(sorted(single_test), sorted(chief_test))
        for name, value in chief_test.items():
            self.assertAllClose(single_test[name], value, atol=1e-6, msg=name)
        chief_export, single_export = (
            tf.saved_model.load(os.path.join(out, "export", "brute_force", str(v))).signatures
            for v in (1, 2)
        )
        # Items of the first and the last shard (the fixed partitioner's two), users too.
        history = tf.constant(
            [[1, 2, 3], [5, 0, 0], [num_items, 7, 9], [num_items // 2, num_items // 2 + 1, 4]],
            tf.int64,
        )
        user = tf.constant([1, 2, 3, 1_500], tf.int64)
        answers = [
            export["serving_dense"](user=user, history=history)
            for export in (chief_export, single_export)
        ]
        self.assertAllEqual(answers[0]["ids"], answers[1]["ids"])
        self.assertAllClose(answers[0]["scores"], answers[1]["scores"], atol=1e-5)
        rows = [
            export["item_embeddings"](
                item_ids=tf.constant([1, num_items // 2 + 1, num_items], tf.int64)
            )["embeddings"]
            for export in (chief_export, single_export)
        ]
        self.assertAllClose(rows[0], rows[1], atol=1e-6)
