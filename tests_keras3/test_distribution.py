"""keras_logq's samplers under `keras.distribution` on JAX: negatives from the global batch.

Keras 3 on JAX compiles the train step once for the global batch and lets XLA's SPMD
partitioner split it over the devices: the sampler sees the global batch (its static
shape), while each device holds its shard of the rows. So in-batch and mixed negatives
are drawn from the global batch, and the gradients of every negative reach the device
holding its row, with nothing in keras_logq aware of the devices. These tests check it
against a single-device run of the same global batches, initial weights and seeds: the
same loss at every step, the same gradients of the first step, the same weights, seed
state and count-min sketch after the last. The same holds with `SparseEmbedding` tables
trained row by row by `SparseUpdates`, their optimizer state sharded with their rows.

The devices are JAX host (CPU) devices, whose number is fixed when JAX starts, so the
runs happen in a child process (`tests_keras3/distributed.py`) that sets
XLA_FLAGS=--xla_force_host_platform_device_count before importing JAX.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="keras.distribution is tested on JAX (issue 49); the child process runs JAX "
    "whatever this process's backend, so it runs once, in the JAX suite",
)


def _run(devices, samplers, tables="dense"):
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("XLA_FLAGS", None)
    # `-S` as this process (tests/keras_logq/test_backends.py runs this suite so, without
    # TensorFlow).
    python = [sys.executable] + (["-S"] if sys.flags.no_site else [])
    result = subprocess.run(
        python
        + [
            "-m",
            "tests_keras3.distributed",
            f"--devices={devices}",
            f"--samplers={','.join(samplers)}",
            f"--tables={tables}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def _check_equal_to_single_device(results, samplers, batch_sharded):
    """Every distributed run of every sampler equals its single-device run."""
    initial = {name: np.array(value) for name, value in results["initial"].items()}
    learning_rate = results["learning_rate"]
    for kind in samplers:
        single = results[kind]["single"]
        assert single["trace"]["batch"] == 64
        assert np.all(np.isfinite(single["losses"])) and len(single["losses"]) == 4
        gradient = {
            name: (initial[name] - np.array(single["after_first"][name])) / learning_rate
            for name in initial
        }
        # The negatives' rows of the item table received gradients (not only positives).
        assert np.count_nonzero(np.abs(gradient["items"]).sum(axis=1)) > 10, kind
        for setting in ("data_parallel", "model_parallel"):
            run = results[kind][setting]
            where = f"{kind}, {setting}"
            # Traced on the global batch: the sampler's pool is the single device's.
            assert run["trace"]["batch"] == 64, where
            assert run["trace"]["negatives"] == single["trace"]["negatives"], where
            np.testing.assert_allclose(run["losses"], single["losses"], rtol=2e-6, err_msg=where)
            for name in initial:
                run_gradient = (initial[name] - np.array(run["after_first"][name])) / learning_rate
                np.testing.assert_allclose(
                    run_gradient, gradient[name], rtol=1e-4, atol=1e-6, err_msg=f"{where}, d {name}"
                )
                np.testing.assert_allclose(
                    run[name], single[name], rtol=1e-5, atol=1e-6, err_msg=f"{where}, {name}"
                )
            assert run["seeds"] == single["seeds"], where
            for got, want in zip(run.get("sketch", []), single.get("sketch", [])):
                np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=where)
        data_parallel, model_parallel = (
            results[kind]["data_parallel"],
            results[kind]["model_parallel"],
        )
        # Each device holds its shard of the rows, and the item table is replicated...
        assert data_parallel["trace"]["item_ids"] == "P('batch',)", data_parallel["trace"]
        assert data_parallel["table_sharding"] == "P(None, None)"
        # ...or, under ModelParallel, the table's rows are sharded over "model".
        assert model_parallel["table_sharding"] == "P('model', None)"
        assert model_parallel["trace"]["item_table"] == "P('model',)"
        assert model_parallel["trace"]["item_ids"] == ("P('batch',)" if batch_sharded else "P()")


def test_data_parallel_and_model_parallel_on_two_devices_equal_one_device():
    samplers = ("in_batch_dedup_capped", "mixed_sketch_per_row")
    results = _run(2, samplers)
    _check_equal_to_single_device(results, samplers, batch_sharded=False)
    # The draws of the deduplicated, capped pool: 16 kept slots out of the global 64 rows.
    assert results["in_batch_dedup_capped"]["single"]["trace"]["negatives"] == [16]
    assert results["mixed_sketch_per_row"]["single"]["trace"]["negatives"] == [64, 22]


@pytest.mark.parametrize("rule", ["sgd", "rowwise_adagrad", "adam"])
def test_sparse_tables_under_data_and_model_parallel_equal_one_device(rule):
    """SparseUpdates' row-sparse step under `keras.distribution`: the gathered rows'
    gradients and the scatter of their update are split by XLA like the rest of the step,
    and the table's optimizer state is sharded with its rows by the same LayoutMap."""
    samplers = ("mixed_sketch_per_row",)
    results = _run(2, samplers, tables=rule)
    _check_equal_to_single_device(results, samplers, batch_sharded=False)
    run = results["mixed_sketch_per_row"]
    slots = {"sgd": [], "rowwise_adagrad": ["accumulator"], "adam": ["m", "v", "step"]}[rule]
    assert sorted(run["model_parallel"]["state_sharding"]) == sorted(slots)
    for name, spec in run["model_parallel"]["state_sharding"].items():
        want = {"accumulator": "P('model',)", "step": "P()"}.get(name, "P('model', None)")
        assert spec == want, (name, spec)


@pytest.mark.slow
def test_every_sampler_on_a_two_by_two_mesh_equals_one_device():
    samplers = ("in_batch", "in_batch_dedup_capped", "mixed_per_row", "mixed_sketch")
    results = _run(4, samplers)
    _check_equal_to_single_device(results, samplers, batch_sharded=True)
    assert results["in_batch"]["single"]["trace"]["negatives"] == [64]


def test_the_keras_job_asks_for_the_devices_it_can_have():
    from pipelines import keras_job  # pylint: disable=import-outside-toplevel

    seen = len(keras.distribution.list_devices())
    assert keras_job.data_parallel(1, 64) is None
    if seen == 1:  # This process's JAX: one host device.
        assert keras_job.data_parallel(0, 64) is None
    with pytest.raises(ValueError, match=rf"devices={seen + 1}: the backend sees {seen} device"):
        keras_job.data_parallel(seen + 1, 64)
