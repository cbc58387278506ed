"""Backend-specific helpers for the tests: numpy conversion and gradients."""

import keras
import numpy as np
from keras import ops


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def gradients(fn, *arrays):
    """Gradients of the scalar fn(*tensors) with respect to each input, as numpy arrays."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        grads = jax.grad(lambda *xs: fn(*xs), argnums=tuple(range(len(arrays))))(
            *[jax.numpy.asarray(a) for a in arrays]
        )
        return [np.asarray(g) for g in grads]
    if backend == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        tensors = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = fn(*tensors)
        return [g.numpy() for g in tape.gradient(value, tensors)]
    if backend == "torch":
        import torch  # pylint: disable=import-outside-toplevel

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        fn(*tensors).backward()
        return [t.grad.numpy() for t in tensors]
    raise NotImplementedError(backend)


def compiled(fn):
    """`fn` compiled as a training step would be: jax.jit, or tf.function with XLA."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return tf.function(fn, jit_compile=True)
    return fn  # torch: eager (torch.compile is not what Keras 3 runs by default).
