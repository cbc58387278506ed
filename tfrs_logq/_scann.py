"""ScaNN on any supported TensorFlow: its own index everywhere, its TensorFlow ops where built.

scann 1.4.2 ships two parts: its Python index (`scann_ops_pybind`, no TensorFlow), which
`tfrs_logq.retrieval.scann_top_k` evaluates with, and TensorFlow custom ops (`_scann_ops.so`),
which `tfrs.layers.factorized_top_k.ScaNN` and hence the ScaNN SavedModel export need. The ops
are built against TensorFlow 2.20's libraries: on TensorFlow 2.21 loading them fails with
`NotFoundError: ..._scann_ops.so: undefined symbol ...`, raised by `import scann` itself (and
so by `import tensorflow_recommenders`, whose `except ImportError` does not catch it).

`import_scann`, run by `import tfrs_logq` before TFRS loads, imports ScaNN's Python index
without the ops where they do not load, and tells TFRS that its ScaNN layer is unavailable;
`TF_OPS_ERROR` then says why, and `tfrs_logq.export` refuses `index="scann"` naming the fix
(`export.ScannOpsUnavailable`).
"""

import sys
from typing import Optional

# Why ScaNN's TensorFlow ops did not load (None: they did, or ScaNN is not installed).
TF_OPS_ERROR: Optional[str] = None


def import_scann() -> None:
    """Imports scann (when installed) before TFRS does; without its TensorFlow ops where
    they were built for another TensorFlow."""
    global TF_OPS_ERROR
    try:
        import scann  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return  # Not installed: TFRS's ScaNN layer says so itself when it is used.
    except Exception as error:  # pylint: disable=broad-except  tf.errors.NotFoundError
        if "_scann_ops" not in str(error):
            raise
        TF_OPS_ERROR = f"{type(error).__name__}: {str(error).strip()}"
        # scann's __init__ imports its ops only when `import tensorflow` succeeds: hidden,
        # it imports the Python index alone.
        tensorflow = sys.modules.get("tensorflow")
        sys.modules["tensorflow"] = None  # type: ignore[assignment]  # Makes the import fail.
        try:
            import scann  # noqa: F401,F811  pylint: disable=import-outside-toplevel,reimported
        finally:
            if tensorflow is None:
                del sys.modules["tensorflow"]
            else:
                sys.modules["tensorflow"] = tensorflow


def mark_tfrs_layer() -> None:
    """Without the ops, TFRS's `ScaNN` layer raises its own "not present" ImportError when
    built, rather than an AttributeError when indexing (`scann.scann_ops` is then the
    subpackage, which TFRS mistakes for the ops)."""
    if TF_OPS_ERROR is not None:
        from tensorflow_recommenders.layers import factorized_top_k  # pylint: disable=import-outside-toplevel

        factorized_top_k._HAVE_SCANN = False  # pylint: disable=protected-access
