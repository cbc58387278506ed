"""keras_logq: the logQ corrections, samplers and frequency estimators for Keras 3 / keras-rs.

The Keras 3 side of tfrs_logq, for users of keras-rs (Keras 3 on JAX,
TensorFlow or PyTorch). Written with `keras.ops` only, so one code path runs
on every backend; the maths is `logq_core.formulas`, the same functions
`tfrs_logq` runs on TensorFlow.

Why a sibling package and not `tfrs_logq.keras3`: importing any submodule of
`tfrs_logq` runs `tfrs_logq/__init__`, which imports TensorFlow and routes
`tf.keras` to Keras 2 (TFRS needs it). A Keras 3 user on JAX must get neither.
`import keras_logq` imports Keras 3 and nothing of TFRS.

The same numbers on either side: the maths (losses, log Q, the static-shape pool,
the sketch's estimate) is `logq_core`'s, which keras_logq and tfrs_logq both call;
they differ only in the framework's glue (tensor checks, state, random draws,
`get_config`). Both are tested against the same numpy references, so a loss or
an estimator here computes what its tfrs_logq namesake computes.

- losses: `sampled_softmax_loss` (none, standard, standard_negatives,
  improved), `full_softmax_loss`, `bce_loss`, `gbce_loss`, `negatives_loss`,
  `masked_mean`, and the `SampledSoftmax` layer for the scores of a
  `keras_rs.layers.Retrieval`; each takes per-position (sequence) scores with a position
  mask too.
- negatives: `InBatchSampler`, `UniformSampler`, `MixedSampler`, `make_sampler`; the
  uniform draws over ids [first_id, first_id + num_items) or a sparse integer `vocabulary`
  (`from_lookup`: a `StringLookup`'s item indices); in-batch pools from the global batch
  under `keras.distribution` on JAX.
- frequency: `StaticFrequency`, `CountMinSketchEstimator`, `HashedFrequencyEstimator`.
- ranking: `exact_top_k`, the evaluation's exact search (history excluded, ties to the
  lower id) on the backend's device, with `recall_ndcg`.
- sparse: `SparseEmbedding` and the `SparseUpdates` model mixin: tables whose training
  step on JAX reads and writes only the rows it touches (SGD, Adagrad, row-wise Adagrad,
  lazy Adam).
"""

from keras_logq import frequency
from keras_logq import losses
from keras_logq import negatives
from keras_logq import ranking
from keras_logq import serving
from keras_logq import sparse
from keras_logq.frequency import CountMinSketchEstimator
from keras_logq.frequency import HashedFrequencyEstimator
from keras_logq.frequency import StaticFrequency
from keras_logq.losses import SampledSoftmax
from keras_logq.losses import bce_loss
from keras_logq.losses import full_softmax_loss
from keras_logq.losses import gbce_loss
from keras_logq.losses import improved_weight
from keras_logq.losses import masked_mean
from keras_logq.losses import negatives_loss
from keras_logq.losses import sampled_softmax_loss
from keras_logq.negatives import InBatchSampler
from keras_logq.negatives import MixedSampler
from keras_logq.negatives import Negatives
from keras_logq.negatives import UniformSampler
from keras_logq.negatives import make_sampler
from keras_logq.sparse import SparseEmbedding
from keras_logq.sparse import SparseUpdates
from logq_core import __version__  # noqa: F401  pylint: disable=unused-import

__all__ = [
    "CountMinSketchEstimator",
    "HashedFrequencyEstimator",
    "InBatchSampler",
    "MixedSampler",
    "Negatives",
    "SampledSoftmax",
    "SparseEmbedding",
    "SparseUpdates",
    "StaticFrequency",
    "UniformSampler",
    "bce_loss",
    "frequency",
    "full_softmax_loss",
    "gbce_loss",
    "improved_weight",
    "losses",
    "make_sampler",
    "masked_mean",
    "negatives",
    "negatives_loss",
    "ranking",
    "serving",
    "sparse",
    "sampled_softmax_loss",
]
