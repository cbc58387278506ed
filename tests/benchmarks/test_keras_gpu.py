"""benchmarks.keras_gpu's record and goals, without a GPU or a model (fast: in the default
suite, where the GPU command itself runs in the slow one, tests/benchmarks/test_benchmarks.py)."""

import json
import os
import tempfile
import unittest
from unittest import mock


class KerasGpuRecordTest(unittest.TestCase):
    """benchmarks.keras_gpu's record survives a failed cell and a run cut short: a lent GPU
    gives minutes, and what it measured before a failure or the limit is kept."""

    def setUp(self):
        super().setUp()
        with mock.patch.dict(os.environ):  # Its KERAS_BACKEND default stays in the module.
            from benchmarks import keras_gpu  # pylint: disable=import-outside-toplevel
        self.keras_gpu = keras_gpu

    def test_a_failed_cell_is_recorded_and_its_goals_left_out(self):
        def out_of_memory(*args):
            raise MemoryError(f"RESOURCE_EXHAUSTED at {args}")

        with mock.patch.object(self.keras_gpu, "_release"):
            failed = self.keras_gpu._cell(out_of_memory, 10_000_000, 8192)
        self.assertEqual(failed, {"error": "MemoryError: RESOURCE_EXHAUSTED at (10000000, 8192)"})
        cells = {"keras_rs": 2.0, "improved": 2.2, "sparse_adam": 1.0}
        two_tower = {"10000": {"8192": cells}, "10000000": {"8192": failed}}
        sasrec = {"float32": 2.0, "mixed_bfloat16": {"error": "XlaRuntimeError: ..."}}
        goals = self.keras_gpu.goals(two_tower, sasrec)
        self.assertEqual(
            goals,
            {"improved_over_keras_rs_10000_items_batch_8192": {"ratio": 1.1, "goal": "<= 1.0"}},
        )
        two_tower["10000000"]["8192"] = {"keras_rs": 6.0, "improved": 6.0, "sparse_adam": 1.1}
        sasrec["mixed_bfloat16"] = 0.9
        goals = self.keras_gpu.goals(two_tower, sasrec)
        self.assertEqual(
            goals["sparse_adam_largest_over_smallest_catalog"],
            {"ratio": 1.1, "goal": "<= 1.2", "catalogs": [10000, 10000000], "batch_size": 8192},
        )
        self.assertEqual(goals["improved_over_keras_rs_10000000_items_batch_8192"]["ratio"], 1.0)
        self.assertEqual(goals["sasrec_bfloat16_over_float32"], {"ratio": 0.45})

    def test_the_torch_goal_compares_the_cells_both_backends_measured(self):
        jax_record = {
            "device": {"backend": "jax"},
            "two_tower_ms": {"10000": {"1024": {"keras_rs": 2.0, "improved": 4.0}}},
            "sasrec_ms": {"float32": 5.0, "mixed_bfloat16": {"error": "XlaRuntimeError"}},
        }
        torch_record = {
            "device": {"backend": "torch"},
            "two_tower_ms": {
                "10000": {"1024": {"keras_rs": 3.0, "improved": 13.0}},
                "1000000": {"1024": {"improved": 20.0}},  # Not measured on JAX.
            },
            "sasrec_ms": {"float32": 35.0, "mixed_bfloat16": 30.0},
        }
        self.assertEqual(
            self.keras_gpu.against(torch_record, jax_record),
            {
                "torch_over_jax_keras_rs_10000_items_batch_1024": {"ratio": 1.5, "goal": "<= 3.0"},
                "torch_over_jax_improved_10000_items_batch_1024": {"ratio": 3.25, "goal": "<= 3.0"},
                "torch_over_jax_sasrec_float32": {"ratio": 7.0, "goal": "<= 3.0"},
            },
        )

    def test_a_record_is_replaced_whole(self):
        from benchmarks import records  # pylint: disable=import-outside-toplevel

        path = os.path.join(tempfile.mkdtemp(), "keras_gpu.json")
        records.write(path, {"complete": False}, quiet=True)
        with mock.patch.object(json, "dump", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):  # Killed while writing the next one.
                records.write(path, {"complete": True})
        with open(path) as f:
            self.assertEqual(json.load(f), {"complete": False})
        self.assertEqual(os.listdir(os.path.dirname(path)), ["keras_gpu.json"])
