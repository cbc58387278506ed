"""logq_core: the maths of tfrs_logq, written once for every framework.

`tfrs_logq` (TensorFlow, Keras 2, for TFRS) and `keras_logq` (Keras 3, for
keras-rs on JAX, TensorFlow or PyTorch) compute the same losses and the same
log Q. The formulas live here, once, as functions whose first argument is an
array namespace with `keras.ops`'s names: `keras.ops` itself for Keras 3, and
`tfrs_logq._ops.TF` (the same names mapped to TensorFlow ops) for TFRS. So
the two libraries cannot drift apart, and this package imports neither
TensorFlow nor Keras.

Modules:
  formulas: losses (every correction, full softmax, BCE, gBCE), log Q of the
    samplers (Q' without the positive, inclusion probabilities,
    Horvitz-Thompson, the mixture), other known positives (their id mask and
    how they leave the sums), the static-shape pool helpers and the count-min
    sketch's estimate.
  samplers: the samplers' names, options and `Negatives` record, and the
    settings -> constructor arguments map behind both frameworks' `make_sampler`.
  checks: pure-Python argument checks whose messages name the argument and
    the value received.
  metrics: Recall@k and NDCG@k of retrieved ids (numpy), per query and
    their means.
  ranking: the one exact top-k search every evaluation runs (chunked, history
    excluded, ties to the lower id, NO_ITEM where a query has no candidate
    left), with the framework's matmul and top-k given as functions.
"""

__version__ = "0.2.0"  # Of the distribution: logq_core, keras_logq, tfrs_logq, pipelines.

from logq_core import checks  # noqa: E402  pylint: disable=wrong-import-position
from logq_core import formulas  # noqa: E402  pylint: disable=wrong-import-position
from logq_core import metrics  # noqa: E402  pylint: disable=wrong-import-position
from logq_core import ranking  # noqa: E402  pylint: disable=wrong-import-position
from logq_core import samplers  # noqa: E402  pylint: disable=wrong-import-position

__all__ = ["checks", "formulas", "metrics", "ranking", "samplers"]
