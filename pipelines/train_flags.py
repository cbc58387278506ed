"""The flags of `pipelines.train` (`--preset`, `--output_dir`, one flag per config field)
and the config they describe, without TensorFlow: a process that only builds or reads a
run's data (`examples.keras_next_day --build_store`) parses the same flags."""

import sys
from typing import Any, Callable, Dict, Mapping, Optional

from absl import flags

from pipelines import configs
from pipelines import errors

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """--preset, --output_dir, and one override flag per config field (the renamed fields'
    old names too, as aliases)."""
    define: Dict[str, Any] = dict(flag_values=flag_values)
    flags.DEFINE_string("preset", "synthetic", f"One of {', '.join(configs.PRESETS)}.", **define)
    flags.DEFINE_string("output_dir", None, "Where the run writes everything (required).", **define)
    errors.define_debug_flag(flag_values)
    flags.DEFINE_string(
        "config_file",
        None,
        "A JSON file of config fields applied over --preset (flat, or a run's "
        "config.json); the flags given override it.",
        **define,
    )
    flags.DEFINE_enum(
        "strategy",
        "default",
        list(configs.STRATEGIES),
        "tf.distribute strategy: default (one device), mirrored (this machine's "
        "GPUs), multi_worker (workers from TF_CONFIG), parameter_server (the "
        'tables sharded over the "ps" tasks of TF_CONFIG, steps run '
        "asynchronously by its workers; in-batch negatives come from each "
        "worker's own batch), tpu (unverified here).",
        **define,
    )
    flags.DEFINE_enum(
        "partitioner",
        "min_size",
        list(configs.PARTITIONERS),
        "--strategy=parameter_server: how the embedding tables (and their "
        "optimizer slots) are sharded over the parameter servers: min_size "
        "(MinSizePartitioner: shards of at least --min_shard_bytes, at most one "
        "per server) or fixed_shards (FixedShardsPartitioner: one per server).",
        **define,
    )
    flags.DEFINE_integer(
        "min_shard_bytes",
        256 << 10,
        "--partitioner=min_size: the smallest shard, in bytes.",
        **define,
    )
    definers: Dict[type, Callable[..., Any]] = {
        str: flags.DEFINE_string,
        int: flags.DEFINE_integer,
        float: flags.DEFINE_float,
        bool: flags.DEFINE_bool,
    }
    for name, field in configs.FIELDS.items():
        kind = field.type if isinstance(field.type, type) else eval(field.type)  # pylint: disable=eval-used
        definers[kind](name, None, configs.flag_help(name), **define)
    for old, new in configs.RENAMED.items():
        flags.DEFINE_alias(old, new, **define)


def config_from_flags(
    flag_values: flags.FlagValues = FLAGS, defaults: Optional[Mapping[str, Any]] = None
) -> configs.Config:
    """The preset, with `defaults` (a job's own: the Keras job's framework), --config_file's
    fields, then every flag that was given, applied; validated."""
    if flag_values.preset not in configs.PRESETS:
        raise ValueError(
            f"--preset must be one of {', '.join(configs.PRESETS)}; received "
            f"--preset={flag_values.preset!r}."
        )
    config = configs.PRESETS[flag_values.preset].replace(**(defaults or {}))
    from_file: Dict[str, Any] = {}
    if flag_values.config_file:
        from_file = configs.read_config_file(flag_values.config_file)
        config = config.replace(**from_file)
    overrides = {
        name: flag_values[name].value
        for name in configs.FIELDS
        if flag_values[name].value is not None
    }
    config = configs.with_dataset_defaults(config.replace(**overrides), {*from_file, *overrides})
    config = configs.validate(config)
    for warning in configs.unused_flags(config, list(overrides)):
        print(warning, file=sys.stderr, flush=True)
    return config
