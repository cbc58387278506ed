r"""The Keras 3 path's accelerator goals (issue 64), measured in one run, one JSON naming the
device: run by `benchmarks/gpu.sh` on a GPU machine without TensorFlow, and at smoke size on
a CPU (`--smoke`) to prove the script before a GPU is lent.

Median milliseconds per training step inside `model.fit` (Keras's jitted step; each round
times an epoch of --steps_per_round batches and one of a tenth as many, and a step costs their
difference over the difference in steps, so fit's fixed cost per call cancels; the variants of
one cell interleaved, round after round):

- two-tower, in-batch negatives, log Q of the Zipf law the items are drawn from, for every
  catalog size and batch size:
  - `keras_rs`: keras-rs's own loss (`SamplingProbabilityCorrection`,
    `RemoveAccidentalHits`, softmax cross-entropy), dense tables, Adam;
  - `standard`, `improved`: `keras_logq.SampledSoftmax`, dense tables, Adam (the models of
    `examples/keras_rs_two_tower.py`);
  - `sparse_adam`, `sparse_adagrad`: improved with `keras_logq.SparseEmbedding` tables
    (`benchmarks/sparse_tables.py`'s model): only the batch's rows updated;
- SASRec at the paper's ML-1M configuration (sequence 200, dim 128, batch 128, 2 blocks,
  dropout 0.5; mixed improved: 128 uniform + 128 in-batch; `examples/keras_sasrec.py`'s
  model) in float32 and in mixed bfloat16.

The goals it reports (`goals` in the JSON, each with the measured ratio): the sparse step at
the largest catalog at most 1.2x the smallest's at the largest batch; keras_logq standard and
improved at most 1.0x keras-rs's loss; SASRec in bfloat16 at most 1.0 ms a step.

Usage:
  bash benchmarks/gpu.sh                       # on the GPU machine: JSON in $OUT
  python -m benchmarks.keras_gpu --smoke       # here, on CPU: the same code at small sizes
"""

import json
import os
import platform
import time
from typing import Optional

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from benchmarks import records  # noqa: E402  pylint: disable=wrong-import-position
from pipelines import provenance  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
TWO_TOWER = ("keras_rs", "standard", "improved", "sparse_adam", "sparse_adagrad")
SASREC = ("float32", "mixed_bfloat16")
SMOKE = dict(catalogs=[1000, 5000], batch_sizes=[64, 128], sasrec_items=500, sasrec_length=20)


def define_flags() -> None:
    flags.DEFINE_list("catalogs", ["10000", "1000000", "10000000"], "Two-tower catalog sizes.")
    flags.DEFINE_list("batch_sizes", ["1024", "8192"], "Two-tower batch sizes.")
    flags.DEFINE_integer("dim", 64, "Two-tower embedding dimension.", lower_bound=1)
    flags.DEFINE_integer(
        "num_users",
        0,
        "Two-tower user table rows (0: as many as the catalog's items); the catalog phase "
        "of gpu.sh holds it at 1M, so that a 100M-item cell's memory is its item table's.",
        lower_bound=0,
    )
    flags.DEFINE_list("variants", list(TWO_TOWER), f"Two-tower variants, from {TWO_TOWER}.")
    flags.DEFINE_integer("rounds", 3, "Interleaved rounds.", lower_bound=1)
    flags.DEFINE_integer(
        "steps_per_round", 100, "Steps of the long epoch per round and variant.", lower_bound=2
    )
    flags.DEFINE_bool("sasrec", True, "Also time SASRec in float32 and mixed bfloat16.")
    flags.DEFINE_integer("sasrec_items", 3416, "SASRec's catalog (ML-1M's).", lower_bound=10)
    flags.DEFINE_integer("sasrec_length", 200, "SASRec's sequence length.", lower_bound=2)
    flags.DEFINE_bool("smoke", False, f"Small sizes, for a CPU: {SMOKE}.")
    flags.DEFINE_string("output", "", "Write the results here (JSON).")
    flags.DEFINE_string(
        "compare_to",
        "",
        "Another backend's record of the same cells on this device (JSON): the goals then "
        "include this run's ratio to it, cell by cell (the torch backend's goal: <= 3x JAX).",
    )


def zipf_law(num_items: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, num_items + 1)
    return weights / weights.sum()


def two_tower_model(
    variant: str, num_items: int, dim: int, law: np.ndarray, num_users: Optional[int] = None
):
    """A compiled two-tower keras.Model of `variant` (TWO_TOWER), `num_users` user rows
    (default: as many as the items)."""
    import keras  # pylint: disable=import-outside-toplevel

    from benchmarks import sparse_tables  # pylint: disable=import-outside-toplevel
    from examples import keras_rs_two_tower  # pylint: disable=import-outside-toplevel

    if variant.startswith("sparse_"):
        return sparse_tables.make_model(variant, num_items, dim, np.log(law), num_users)
    loss = "keras_rs_standard" if variant == "keras_rs" else variant
    # The example's ids are 1-based (row 0 pads, never drawn: the law's smallest value, as
    # StaticFrequency takes values in (0, 1]); item i of the law is id i + 1.
    probabilities = np.concatenate([[law.min()], law]).astype(np.float32)
    model = keras_rs_two_tower.make_model(
        loss, num_users or num_items, num_items, dim, 1.0, probabilities, seed=0
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


def _timed(models, batches, rounds: int, steps_per_round: int):
    """{name: median seconds per step} of `models` ({name: keras.Model}) on their `batches`
    ({name: [batch, ...]}), interleaved round after round.

    A step's cost is measured inside `model.fit`, as users train: each round fits one epoch of
    `steps_per_round` batches and one of `steps_per_round // 10` (at least 1), and the step is
    their difference over the difference in steps, so fit's fixed cost per call (callbacks,
    the data adapter, the final sync) cancels. (A `train_on_batch` call adds a host sync and
    its own dispatch to every step: about 3-5 ms on an H200, more than a two-tower step.)"""
    short = max(1, steps_per_round // 10)
    long = max(short + 1, steps_per_round)

    def epoch(model, batch_list, steps):
        chosen = [batch_list[s % len(batch_list)] for s in range(steps)]
        x = {key: np.concatenate([b[key] for b in chosen]) for key in chosen[0]}
        size = len(next(iter(chosen[0].values())))
        return lambda: model.fit(x, batch_size=size, epochs=1, shuffle=False, verbose=0)

    runs = {
        name: (epoch(model, batches[name], short), epoch(model, batches[name], long))
        for name, model in models.items()
    }
    for short_fit, _ in runs.values():
        short_fit()  # Compiles.
    times = {name: [] for name in models}
    for _ in range(rounds):
        for name, (short_fit, long_fit) in runs.items():
            started = time.perf_counter()
            short_fit()
            middle = time.perf_counter()
            long_fit()
            ended = time.perf_counter()
            times[name].append(((ended - middle) - (middle - started)) / (long - short))
    return {name: float(np.median(t)) for name, t in times.items()}


def two_tower_cell(num_items: int, batch_size: int) -> dict:
    """{variant: median ms per step} at one catalog and batch size."""
    rng = np.random.default_rng(0)
    law = zipf_law(num_items)
    num_users = FLAGS.num_users or num_items
    draws = [
        (rng.integers(0, num_users, batch_size), rng.choice(num_items, batch_size, p=law))
        for _ in range(4)
    ]
    models, batches = {}, {}
    for variant in FLAGS.variants:
        models[variant] = two_tower_model(variant, num_items, FLAGS.dim, law, num_users)
        first = 0 if variant.startswith("sparse_") else 1  # The example's ids are 1-based.
        batches[variant] = [
            {"user": (u + first).astype("int32"), "item": (i + first).astype("int32")}
            for u, i in draws
        ]
    seconds = _timed(models, batches, FLAGS.rounds, FLAGS.steps_per_round)
    del models
    _release()
    return {variant: round(1000 * value, 3) for variant, value in seconds.items()}


def _release() -> None:
    """Frees a cell's models before the next is built (Keras models hold reference cycles:
    their device buffers, 70 GB at 10M items with Adam, go only when the collector runs)."""
    import gc  # pylint: disable=import-outside-toplevel

    import keras  # pylint: disable=import-outside-toplevel

    keras.backend.clear_session()
    gc.collect()


def sasrec_cell(policy: str) -> float:
    """Median ms per SASRec step under the dtype `policy`."""
    import keras  # pylint: disable=import-outside-toplevel

    from examples import keras_sasrec  # pylint: disable=import-outside-toplevel

    items, length, batch = FLAGS.sasrec_items, FLAGS.sasrec_length, 128
    rng = np.random.default_rng(0)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = keras_sasrec.make_model(
            "mixed_improved",
            items,
            np.full(items + 1, 1.0 / items, np.float32),
            length,
            128,
            2,
            1,
            0.5,
            128,
            128,
            seed=0,
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        batches = [
            {
                "inputs": rng.integers(1, items + 1, (batch, length)).astype("int32"),
                "targets": rng.integers(1, items + 1, (batch, length)).astype("int32"),
            }
            for _ in range(4)
        ]
        seconds = _timed({"m": model}, {"m": batches}, FLAGS.rounds, FLAGS.steps_per_round)
        seconds = seconds["m"]
        del model
    finally:
        keras.config.set_dtype_policy(previous)
        _release()
    return round(1000 * seconds, 3)


def _cell(function, *args):
    """`function(*args)`, or {"error": its exception} when it raises: the run goes on to the
    other cells (a lent GPU's minutes are few, and a cell out of memory says something)."""
    import traceback  # pylint: disable=import-outside-toplevel

    try:
        return function(*args)
    except Exception as error:  # pylint: disable=broad-except
        traceback.print_exc()
        message = f"{type(error).__name__}: {error}"[:1000]
    _release()  # After the except block: its traceback held the failed cell's models.
    return {"error": message}


def _ms(value):
    """A cell's milliseconds, or None for a cell that failed."""
    return value if isinstance(value, (int, float)) else None


def _two_tower_ms(two_tower: dict, catalog, batch, variant: str):
    """A two-tower variant's milliseconds at (catalog, batch) in a record's `two_tower_ms`, or
    None where that cell failed or was not measured."""
    cell = two_tower.get(str(catalog), {}).get(str(batch), {})
    return _ms(cell.get(variant)) if isinstance(cell, dict) else None


def device() -> dict:
    """The accelerator the backend runs on (its name, as the backend reports it) and the
    versions."""
    import keras  # pylint: disable=import-outside-toplevel

    about = {"keras": keras.__version__, "backend": keras.backend.backend()}
    if about["backend"] == "torch":
        import torch  # pylint: disable=import-outside-toplevel

        cuda = torch.cuda.is_available()
        about.update(
            platform="gpu" if cuda else "cpu",
            device_kind=torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
            devices=torch.cuda.device_count() if cuda else 1,
            torch=torch.__version__,
        )
    else:
        import jax  # pylint: disable=import-outside-toplevel

        first = jax.devices()[0]
        about.update(
            platform=first.platform,
            device_kind=first.device_kind,
            devices=len(jax.devices()),
            jax=jax.__version__,
        )
    about.update(host=platform.node(), cpus=os.cpu_count())
    return about


def against(record: dict, other: dict) -> dict:
    """`record`'s ms over `other`'s (another backend's record of the same settings on the same
    device) for every cell both measured: {"torch_over_jax_...": {"ratio": ...}}."""
    name = f"{record['device']['backend']}_over_{other['device']['backend']}"
    result = {}
    for catalog, cells in record["two_tower_ms"].items():
        for batch, variants in cells.items():
            for variant in variants if isinstance(variants, dict) else ():
                ours = _two_tower_ms(record["two_tower_ms"], catalog, batch, variant)
                theirs = _two_tower_ms(other.get("two_tower_ms", {}), catalog, batch, variant)
                if ours and theirs:
                    key = f"{name}_{variant}_{catalog}_items_batch_{batch}"
                    result[key] = {"ratio": round(ours / theirs, 3), "goal": "<= 3.0"}
    for policy, ms in record["sasrec_ms"].items():
        theirs = other.get("sasrec_ms", {}).get(policy)
        if _ms(ms) and _ms(theirs):
            result[f"{name}_sasrec_{policy}"] = {"ratio": round(ms / theirs, 3), "goal": "<= 3.0"}
    return result


def goals(two_tower: dict, sasrec: dict) -> dict:
    """Issue 64's goals, each with its measured ratio; a goal whose cells failed or were not
    run is left out."""
    catalogs = sorted(int(c) for c in two_tower)
    batches = sorted({int(b) for cells in two_tower.values() for b in cells})

    def ms(catalog, batch, variant):
        return _two_tower_ms(two_tower, catalog, batch, variant)

    result = {}
    if catalogs and batches:
        small, large, batch = catalogs[0], catalogs[-1], batches[-1]
        for variant in ("sparse_adam", "sparse_adagrad", "improved"):
            if ms(small, batch, variant) and ms(large, batch, variant) and large != small:
                result[f"{variant}_largest_over_smallest_catalog"] = {
                    "ratio": round(ms(large, batch, variant) / ms(small, batch, variant), 3),
                    "goal": "<= 1.2" if variant.startswith("sparse") else "(dense: grows)",
                    # Which cells: in a record cut short, the largest catalog measured so far.
                    "catalogs": [small, large],
                    "batch_size": batch,
                }
        for catalog in catalogs:
            for b in batches:
                for variant in ("standard", "improved"):
                    if ms(catalog, b, variant) and ms(catalog, b, "keras_rs"):
                        result[f"{variant}_over_keras_rs_{catalog}_items_batch_{b}"] = {
                            "ratio": round(ms(catalog, b, variant) / ms(catalog, b, "keras_rs"), 3),
                            "goal": "<= 1.0",
                        }
    bf16, fp32 = _ms(sasrec.get("mixed_bfloat16")), _ms(sasrec.get("float32"))
    if bf16:
        result["sasrec_bfloat16_ms"] = {"ms": bf16, "goal": "<= 1.0"}
        if fp32:
            result["sasrec_bfloat16_over_float32"] = {"ratio": round(bf16 / fp32, 3)}
    return result


def main(argv) -> None:
    del argv
    if FLAGS.smoke:
        FLAGS.catalogs = [str(c) for c in SMOKE["catalogs"]]
        FLAGS.batch_sizes = [str(b) for b in SMOKE["batch_sizes"]]
        FLAGS.sasrec_items, FLAGS.sasrec_length = SMOKE["sasrec_items"], SMOKE["sasrec_length"]
        FLAGS.rounds, FLAGS.steps_per_round = 1, 4
    bad = [v for v in FLAGS.variants if v not in TWO_TOWER]
    if bad:
        raise app.UsageError(f"--variants must be from {TWO_TOWER}; received {bad}.")
    other = None
    if FLAGS.compare_to:
        try:
            with open(FLAGS.compare_to, encoding="utf-8") as file:
                other = json.load(file)
        except (OSError, ValueError) as error:
            raise app.UsageError(
                f"--compare_to must be a keras_gpu record (JSON); received "
                f"{FLAGS.compare_to!r}: {error}"
            ) from error
    about = device()
    print(
        f"{about['device_kind']} ({about['platform']}), Keras {about['keras']} on "
        f"{about['backend']} {about.get('jax') or about.get('torch')}; median ms a step, one run.",
        flush=True,
    )
    two_tower: dict = {}
    sasrec: dict = {}
    record = {
        "benchmark": "keras_gpu",
        "git_revision": provenance.revision(),
        "device": about,
        "settings": {
            "dim": FLAGS.dim,
            "num_users": FLAGS.num_users,
            "rounds": FLAGS.rounds,
            "steps_per_round": FLAGS.steps_per_round,
            "sasrec_items": FLAGS.sasrec_items,
            "sasrec_length": FLAGS.sasrec_length,
            "smoke": FLAGS.smoke,
        },
        "complete": False,
        "two_tower_ms": two_tower,
        "sasrec_ms": sasrec,
        "goals": {},
    }

    def save(complete=False):
        # After every cell: a run cut short by the machine's limit keeps what it measured.
        record["complete"] = complete
        record["goals"] = goals(two_tower, sasrec)
        if other is not None:
            record["compared_to"] = {
                "output": FLAGS.compare_to,
                "device": other.get("device"),
                "git_revision": other.get("git_revision"),
            }
            record["goals"].update(against(record, other))
        if FLAGS.output:
            records.write(FLAGS.output, record, quiet=not complete)

    for catalog in (int(c) for c in FLAGS.catalogs):
        two_tower[str(catalog)] = {}
        for batch in (int(b) for b in FLAGS.batch_sizes):
            cell = _cell(two_tower_cell, catalog, batch)
            two_tower[str(catalog)][str(batch)] = cell
            print(
                f"two-tower {catalog:,} items, batch {batch}: "
                + ", ".join(f"{v} {ms:.2f}" for v, ms in cell.items() if _ms(ms))
                + (f" FAILED ({cell['error']})" if "error" in cell else ""),
                flush=True,
            )
            save()
    if FLAGS.sasrec:
        for policy in SASREC:
            sasrec[policy] = _cell(sasrec_cell, policy)
            ms = _ms(sasrec[policy])
            print(
                f"SASRec ({policy}): "
                + (f"{ms:.2f} ms" if ms else f"FAILED ({sasrec[policy]['error']})"),
                flush=True,
            )
            save()
    save(complete=True)
    print(json.dumps(record["goals"], indent=1))
    failed = [c for cells in two_tower.values() for c in cells.values() if "error" in c]
    failed += [p for p, v in sasrec.items() if _ms(v) is None]
    if failed:
        raise SystemExit(f"{len(failed)} cell(s) failed; their errors are in the record.")


if __name__ == "__main__":
    define_flags()
    app.run(main)
