"""The command lines' named errors (issue 46): flags that used to pass validation and then
crash, non-finite hyperparameters, flags that cannot work together, one --index vocabulary
in every command, real help for every flag, and no cuInit line on a machine without a GPU.

Most probes call `configs.validate` in-process (what `pipelines.train` runs on its flags
before any data loads); two child processes check the real command lines."""

import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from absl import flags

from pipelines import configs
from pipelines import evaluate
from pipelines import export
from pipelines import train

SMOKE = configs.PRESETS["smoke"]

# (overrides of the smoke preset, the error). The first three used to pass validation and
# crash later (Keras's dropout, an empty temporal training split, numpy's seed); the
# non-finite values trained a NaN model.
PROBES = [
    (
        {"dropout": 1.0},
        "--dropout must be in [0.0, 1.0) (a rate of 1 drops everything); received --dropout=1.0.",
    ),
    (
        {"split": "temporal", "test_fraction": 0.5},
        "--test_fraction must be in (0.0, 0.5) (the test and the validation windows each take "
        "that share, and training the rest); received --test_fraction=0.5.",
    ),
    ({"seed": -1}, "--seed must be >= 0; received --seed=-1."),
    ({"seed": 2**32}, "--seed must be at most 2^32 - 1; received --seed=4294967296."),
    (
        {"learning_rate": math.nan},
        "--learning_rate must be a finite number; received --learning_rate=nan.",
    ),
    (
        {"learning_rate": math.inf},
        "--learning_rate must be a finite number; received --learning_rate=inf.",
    ),
    (
        {"adam_epsilon": math.nan},
        "--adam_epsilon must be a finite number; received --adam_epsilon=nan.",
    ),
    ({"table_learning_rate": math.inf}, "--table_learning_rate must be a finite number"),
    ({"pseudo_count": math.nan}, "--pseudo_count must be a finite number"),
    ({"gbce_t": -math.inf}, "--gbce_t must be a finite number"),
    ({"synthetic_temperature": math.inf}, "--synthetic_temperature must be a finite number"),
    ({"max_vocabulary_mb": math.nan}, "--max_vocabulary_mb must be a finite number"),
    (
        {"table_learning_rate": -0.1},
        "--table_learning_rate must be >= 0 (0: --learning_rate); "
        "received --table_learning_rate=-0.1.",
    ),
    ({"dim": 2**31}, "--dim must be at most 2^31 - 1; received --dim=2147483648."),
    (
        {"test_day": -2},
        "--test_day must be a day number >= 0, or -1 for the log's last day; "
        "received --test_day=-2.",
    ),
    (
        {"synthetic_items": 50},
        "--dataset=synthetic needs --synthetic_items >= 100 (each user "
        "draws up to 100 distinct items); received --synthetic_items=50.",
    ),
    (
        {"dataset": "web_synthetic", "split": "next_day", "synthetic_days": 2},
        "--dataset=web_synthetic needs --synthetic_days >= 3 (a training, a validation and a "
        "test day); received --synthetic_days=2.",
    ),
    (
        {
            "dataset": "web_synthetic",
            "split": "next_day",
            "model": "two_tower",
            "order": "time",
            "weight_column": "w",
        },
        "--weight_column names a column of your event log "
        "(--dataset=events); received --dataset=web_synthetic "
        "--weight_column=w.",
    ),
    (
        {"dataset": "steam"},
        "--dataset=steam needs --data_path: Steam is not bundled; give the path of its file.",
    ),
    (
        {"share_item_table": True},
        "--share_item_table shares the two-tower's history and candidate item tables: needs "
        "--model=two_tower; received --model=sasrec --share_item_table",
    ),
    # A config.json edited by hand: the field's type is named.
    ({"batch_size": 2.5}, "--batch_size must be an integer; received --batch_size=2.5."),
    ({"jit_compile": "yes"}, "--jit_compile must be true or false; received --jit_compile='yes'."),
    ({"index": "annoy"}, "--index must be one of exact, scann, both; received --index='annoy'."),
    (
        {"loss": "gbce", "mask_known_positives": True},
        "--mask_known_positives masks the negatives of the sampled softmax: needs "
        "--loss=sampled_softmax; received --loss=gbce --mask_known_positives.",
    ),
    (
        {"mask_known_positives": 1},
        "--mask_known_positives must be true or false; received --mask_known_positives=1.",
    ),
]


@pytest.mark.parametrize(
    "overrides,message", PROBES, ids=[",".join(f"{k}={v}" for k, v in o.items()) for o, _ in PROBES]
)
def test_validation_names_the_flag_and_the_value(overrides, message):
    with pytest.raises(ValueError) as raised:
        configs.validate(SMOKE.replace(**overrides))
    assert message in str(raised.value)


def test_every_number_has_a_range():
    numeric = {name for name, field in configs.FIELDS.items() if field.type in (int, float)}
    ranged = set(configs._INTEGER_LOWS) | set(configs._FLOAT_RANGES)  # pylint: disable=protected-access
    assert numeric == ranged


def test_presets_and_edges_pass():
    for name, preset in configs.PRESETS.items():
        assert configs.validate(preset) == preset, name
    for overrides in (
        {"dropout": 0.0},
        {"dropout": 0.999},
        {"seed": 2**32 - 1},
        {"split": "temporal", "test_fraction": 0.49},
        {"gbce_t": 1.0},
        {"day_seconds": 86_400 * 10**9},
        {"learning_rate": 1},
        # The synthetic preset's SASRec step under XLA (its id mask is
        # linear in the step's negatives: logq_core.formulas).
        {
            "mask_known_positives": True,
            "jit_compile": True,
            "batch_size": 128,
            "max_length": 50,
            "num_negatives": 256,
        },
        {
            "mask_known_positives": True,
            "jit_compile": True,
            "batch_size": 128,
            "max_length": 50,
            "num_negatives": 256,
            "model": "two_tower",
        },
    ):
        configs.validate(SMOKE.replace(**overrides))


def test_one_index_vocabulary():
    assert configs.validate(SMOKE.replace(index="brute_force")).training.index == "exact"
    assert configs.indexes("both") == ("exact", "scann")
    assert configs.indexes("brute_force") == ("exact",)
    with pytest.raises(
        ValueError,
        match=r"--index must be one of exact, scann, both; received "
        r"--index='annoy'",
    ):
        configs.indexes("annoy")
    for module in (evaluate, export):
        values = flags.FlagValues()
        module.define_flags(values)
        assert values["index"].parser.enum_values == ["exact", "scann", "both", "brute_force"]
        for index in ("exact", "scann", "both", "brute_force"):
            values(["prog", f"--index={index}"])
        assert "brute_force is an old name of exact" in values["index"].help
    values = flags.FlagValues()
    train.define_flags(values)
    values(["prog", "--index=brute_force"])
    assert train.config_from_flags(values).training.index == "exact"


def test_every_flag_has_real_help():
    values = flags.FlagValues()
    train.define_flags(values)
    for name in configs.FIELDS:
        text = values[name].help
        assert "Overrides the preset" not in text, name
        assert text.startswith(f"[{configs.GROUP_OF[name]}] "), text
        help_text = configs.FIELDS[name].metadata["help"]
        assert help_text in text and help_text.endswith("."), name
        assert len(help_text) <= 300 and "\n" not in help_text, name
    assert values["split"].help == (
        "[data] How the interactions are split: loo (each user's last item is the test target), "
        "temporal (the last --test_fraction of all interactions in time), next_day (an event "
        "log's --test_day). One of loo, temporal, next_day. Unset: the preset's."
    )


def _has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_only_the_no_driver_line_is_dropped(capfd, monkeypatch):
    # Without a driver, TensorFlow's CUDA build logs "failed call to cuInit" as an error when
    # devices are first listed; importing tfrs_logq lists them with that one line dropped.
    # Every other line written meanwhile still reaches stderr.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import tfrs_logq  # pylint: disable=import-outside-toplevel

    if _has_nvidia_driver() or not tf.test.is_built_with_cuda():
        pytest.skip("a driver is installed, or TensorFlow has no CUDA: nothing is dropped")

    def list_devices():
        os.write(
            2,
            b"E0000 cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: "
            b"Failed call to cuInit: UNKNOWN ERROR (303)\n"
            b"E0000 other.cc:1] a real error\n",
        )
        return []

    monkeypatch.setattr(tf.config, "list_physical_devices", list_devices)
    capfd.readouterr()
    tfrs_logq._list_devices_without_the_no_driver_line()  # pylint: disable=protected-access
    assert capfd.readouterr().err == "E0000 other.cc:1] a real error\n"


def _child(*args):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )


@pytest.mark.integration
def test_command_lines():
    # pipelines.train refuses --learning_rate=nan before it writes anything; TensorFlow's
    # device set-up (which logged "failed call to cuInit" on every CPU run) prints no error.
    out = os.path.join(tempfile.mkdtemp(), "run")
    script = textwrap.dedent(f"""
        import runpy, sys
        import pipelines.train  # Its imports (tfrs_logq) list the devices quietly.
        import tensorflow as tf
        print("devices", [d.device_type for d in tf.config.list_physical_devices()])
        sys.argv = ["train", "--preset=smoke", "--learning_rate=nan", "--output_dir={out}"]
        runpy.run_module("pipelines.train", run_name="__main__")
    """)
    result = _child("-c", script)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "devices ['CPU'" in result.stdout
    assert (
        "--learning_rate must be a finite number; received --learning_rate=nan." in result.stderr
    ), result.stderr[-3000:]
    assert not os.path.exists(out)
    if not _has_nvidia_driver():
        assert "cuInit" not in result.stderr, result.stderr[-3000:]
    # pipelines.evaluate takes --index=both, and refuses it where one search is needed.
    result = _child("-m", "pipelines.evaluate", out, "--index=both", "--against=/tmp/other")
    assert result.returncode == 1
    assert (
        "--against takes one search; received --index=both. Give --index=exact or "
        "--index=scann." in result.stderr
    ), result.stderr[-3000:]


@pytest.mark.integration
def test_named_errors_print_one_line_and_a_traceback_only_with_debug():
    empty = tempfile.mkdtemp()
    runs = [
        (["-m", "pipelines.evaluate", empty], f"error: {empty} holds no training run"),
        (["-m", "pipelines.export", empty], f"error: {empty} holds no training run"),
        (
            [
                "-m",
                "pipelines.train",
                "--preset=industrial_smoke",
                "--dataset=events",
                f"--data_path={empty}/none-*.csv",
                f"--output_dir={empty}/run",
            ],
            f"error: {empty}/none-*.csv: matches no event log file",
        ),
    ]
    for args, message in runs:
        result = _child(*args)
        assert result.returncode == 1, result.stderr[-3000:]
        assert message in result.stderr, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
    result = _child(*runs[0][0], "--debug")
    assert result.returncode == 1 and "Traceback" in result.stderr, result.stderr[-3000:]
    assert "RunNotFound" in result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("jit_compile", [False, True])
def test_mask_known_positives_trains(jit_compile):
    # The flag reaches the objective through the loss group (config.json), and the smoke run
    # (SASRec) trains, tests and exports with it, its step compiled with XLA or not.
    out = os.path.join(tempfile.mkdtemp(), "run")
    result = _child(
        "-m",
        "pipelines.train",
        "--preset=smoke",
        "--mask_known_positives",
        "--jit_compile" if jit_compile else "--nojit_compile",
        "--epochs=1",
        "--steps_per_epoch=5",
        "--index=exact",
        f"--output_dir={out}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["loss"]["mask_known_positives"] is True
    assert config["model"]["model"] == "sasrec"
    assert config["training"]["jit_compile"] is jit_compile
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f)["test"]["recall@100"] > 0.0
    assert configs.PRESETS["smoke"].loss.objective_settings()["mask_known_positives"] is False
    if not jit_compile:  # serving.md's table: a dataset's export, raw ids at serving_raw.
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        from tests.test_guide_examples import _documented_signatures  # pylint: disable=import-outside-toplevel

        exported = tf.saved_model.load(os.path.join(out, "export", "brute_force", "1"))
        assert sorted(exported.signatures) == _documented_signatures("a dataset")


def test_a_flag_given_where_it_does_not_apply_is_warned():
    config = configs.PRESETS["industrial"]
    assert configs.unused_flags(config, ["test_fraction", "dim", "min_item_count", "gbce_t"]) == [
        "warning: --test_fraction applies with --split=temporal; this run has "
        "--split=next_day, so it is ignored.",
        "warning: --gbce_t applies with --loss=gbce; this run has --loss=sampled_softmax, so it "
        "is ignored.",
    ]
    # The vocabulary's counts apply to every event log, the columns to --dataset=events;
    # SASRec's fields to SASRec.
    assert configs.unused_flags(config, ["min_user_count", "time_unit"]) == [
        "warning: --time_unit applies with --dataset=events; this run has "
        "--dataset=web_synthetic, so it is ignored."
    ]
    assert configs.unused_flags(SMOKE, ["max_length", "loo_train_gap"]) == []
    train_flags = flags.FlagValues()
    train.define_flags(train_flags)
    train_flags(["train", "--preset=industrial", "--test_fraction=0.2", "--output_dir=x"])
    assert train.config_from_flags(train_flags).data.test_fraction == 0.2
    # The synthetic preset compiles SASRec's step: its two-tower is just not compiled; a
    # --jit_compile given with the two-tower is refused.
    train_flags = flags.FlagValues()
    train.define_flags(train_flags)
    train_flags(["train", "--preset=synthetic", "--model=two_tower", "--output_dir=x"])
    assert train.config_from_flags(train_flags).training.jit_compile is True
    train_flags = flags.FlagValues()
    train.define_flags(train_flags)
    train_flags(["train", "--model=two_tower", "--jit_compile", "--output_dir=x"])
    with pytest.raises(ValueError, match=r"received --model=two_tower --jit_compile\.$"):
        train.config_from_flags(train_flags)


def test_a_small_test_set_is_warned():
    """Fewer than 1,000 test queries: one line saying how many, that the metrics' standard
    error is large, and how to test on more (by the split)."""
    industrial = configs.PRESETS["industrial"]
    assert train.few_test_queries_warning(industrial, 4) == (
        "warning: the test set holds 4 queries (fewer than 1,000), so its metrics' standard "
        "error is large; test on a longer window (--day_seconds=604800 makes a day a week; now "
        "86400) or a busier --test_day (now -1), or use --split=temporal."
    )
    assert train.few_test_queries_warning(SMOKE, 300) == (
        "warning: the test set holds 300 queries (fewer than 1,000), so its metrics' standard "
        "error is large; use a log with more users (leave-one-out tests one query per user)."
    )
    temporal = SMOKE.replace(split="temporal", test_fraction=0.1)
    assert train.few_test_queries_warning(temporal, 999).endswith(
        "; raise --test_fraction (now 0.1) or use --split=loo."
    )
    sampled = SMOKE.replace(test_queries=500)
    assert train.few_test_queries_warning(sampled, 500).endswith(
        "; raise --test_queries (now 500; 0: all)."
    )
    assert train.few_test_queries_warning(industrial, 1000) is None
    # A sample larger than the day's users: more of it would not help.
    assert train.few_test_queries_warning(configs.PRESETS["industrial_smoke"], 200).endswith(
        "or use --split=temporal."
    )


def test_one_epoch_is_one_epoch():
    assert [train._count(n, "epoch") for n in (0, 1, 2, 1000)] == [  # pylint: disable=protected-access
        "0 epochs",
        "1 epoch",
        "2 epochs",
        "1,000 epochs",
    ]
