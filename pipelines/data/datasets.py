"""The datasets of the pipelines' configs and their splits, without TensorFlow: what
`pipelines.train` (through `experiment`) and the Keras job read."""

import functools
from typing import Optional

import numpy as np

from pipelines import configs
from pipelines.data import loaders
from pipelines.data import logs
from pipelines.data import splits as splits_lib
from pipelines.data import synthetic
from pipelines.data.interactions import DataError
from pipelines.data.interactions import Interactions


def load_data(config: configs.Config, run_dir: Optional[str] = None) -> Interactions:
    """The interactions of `config.data.dataset` (MovieLens: --data_path, else the file under
    $TFRS_LOGQ_DATA). An event log is encoded with the vocabularies of the run in `run_dir`
    when it has saved them (`save_vocabularies`)."""
    if logs.out_of_core(config):
        return logs.day_store_data(config, run_dir)[0]
    if config.data.dataset in configs.EVENT_LOGS:
        return logs.event_log(config.data, config.model.dim, run_dir)[0].interactions
    if config.data.dataset == "synthetic":
        return synthetic_data(config)[0]
    if config.data.dataset == "ml-1m":
        return loaders.load_sasrec(config.data.data_path or loaders.ML_1M_SASREC)
    if config.data.dataset == "ml-1m-ratings":
        return loaders.load_grouplens(config.data.data_path or loaders.ML_1M_RATINGS)
    if config.data.dataset == "ml-1m-tfds":
        return loaders.load_tfds(data_dir=config.data.data_path or None)
    if not config.data.data_path:
        raise ValueError(
            f"--dataset={config.data.dataset} needs --data_path (Steam is not bundled)."
        )
    if config.data.dataset == "steam":
        return loaders.load_sasrec(config.data.data_path)
    return loaders.load_steam_reviews(config.data.data_path)


@functools.lru_cache(maxsize=2)
def synthetic_data(config: configs.Config):
    """(Interactions, SyntheticCatalog) of the synthetic dataset of `config`."""
    return synthetic.make_synthetic(
        num_users=config.data.synthetic_users,
        num_items=config.data.synthetic_items,
        temperature=config.data.synthetic_temperature,
        seed=config.training.seed,
    )


def make_split(
    config: configs.Config, data: Interactions, run_dir: Optional[str] = None
) -> splits_lib.Split:
    """The split of `config`; its validation set holds at most `validation_queries` queries
    (an event log's weights: from the log read with `run_dir`'s vocabularies, as `data`)."""
    if logs.out_of_core(config):
        return logs.day_store_data(config, run_dir)[1]  # Subsampled as below when it was built.
    source = config.data.data_path or config.data.dataset
    if config.data.split == "loo":
        split = splits_lib.leave_one_out(data, train_gap=config.data.loo_train_gap)
    elif config.data.split == "next_day":
        weights, span = None, None
        if config.data.dataset in configs.EVENT_LOGS:
            log = logs.event_log(config.data, config.model.dim, run_dir)[0]
            weights = log.weights if config.data.weight_column else None
            if "first_time" in log.stats:
                span = (int(log.stats["first_time"]), int(log.stats["last_time"]))
        split = splits_lib.next_day(
            data,
            config.data.test_day,
            config.data.day_seconds,
            source=source,
            weights=weights,
            span=span,
        )
    else:
        split = splits_lib.temporal(
            data,
            test_fraction=config.data.test_fraction,
            validation_fraction=config.data.test_fraction,
            targets=config.data.temporal_targets,
        )
    for name, eval_set in (("validation", split.validation), ("test", split.test)):
        if len(eval_set.users) == 0:
            raise DataError(
                source,
                None,
                f"the {config.data.split} split leaves no {name} queries "
                f"({data.num_users} users, {len(data.user)} interactions): "
                + (
                    "leave-one-out validates on gSASRec's draw of users, which "
                    "needs users with at least 3 items."
                    if config.data.split == "loo"
                    else "the temporal windows hold no interactions."
                ),
            )
    test = split.test
    if config.training.test_queries:
        test = splits_lib.subsample(test, config.training.test_queries)
    return split._replace(
        validation=splits_lib.subsample(split.validation, config.data.validation_queries), test=test
    )


def static_frequencies(counts: np.ndarray, pseudo_count: float) -> np.ndarray:
    """[num_items + 1] float32 per-draw probabilities from training counts: `pseudo_count`
    added to every item (so that unseen items have Q > 0); with 0, Q = max(count / total,
    1e-10), the released code's `torch.clamp(count / total, min=1e-10)`. Row 0 (padding,
    never a positive or a negative) is 1."""
    counts = np.asarray(counts, np.float64) + pseudo_count
    counts[0] = 0.0
    probabilities = np.maximum(counts / counts.sum(), 1e-10)
    probabilities[0] = 1.0
    return probabilities.astype(np.float32)
