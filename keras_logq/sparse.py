"""Row-sparse embedding tables on JAX: a step reads and writes only the rows it touches.

On JAX the gradient of `keras.layers.Embedding`'s table is a dense array of the table's
shape (a scatter of the batch's row gradients into zeros), and Keras's optimizers then read
and write the whole table and every slot: a step's cost grows with the catalog (measured on
an H200: 1.3 ms a two-tower step at 10k items, 6.3 ms at 10M, batch 8192, Adam). TensorFlow
passes `IndexedSlices` and its optimizers update the rows only; PyTorch has
`nn.Embedding(sparse=True)`; keras-rs's `DistributedEmbedding` updates rows sparsely on TPU
SparseCores only (on a GPU or CPU it is a plain `Embedding`).

Two pieces, used together:

- `SparseEmbedding(input_dim, output_dim, optimizer=..., learning_rate=...)`: an embedding
  layer whose table and optimizer state are non-trainable variables (so Keras's optimizer
  never sees them and JAX never differentiates the table), with its own update rule:
  "sgd", "adagrad" (Keras's `Adagrad`, element-wise: the same values as
  `keras.optimizers.Adagrad` on a dense table, since rows without a gradient do not move
  under Adagrad), "rowwise_adagrad" (one accumulator per row: TorchRec / FBGEMM's
  `EXACT_ROWWISE_ADAGRAD`, a table's worth of state less) and "adam" (lazy Adam, as TF
  Addons' `LazyAdam`: the moments of the touched rows only, Keras's bias correction by the
  layer's own step count; equal to Keras's `Adam` on a step that touches every row).
- `SparseUpdates`, a mixin placed before `keras.Model`: its JAX `train_step` differentiates
  the loss with respect to the rows each `SparseEmbedding` call gathered (a zero added to
  the gathered rows, whose gradient is theirs), sums the gradients of repeated ids, and
  applies each layer's rule to those rows; every other variable goes through the model's
  optimizer as usual. The tables and their state are the model's weights: `model.save`,
  `save_weights` and `BackupAndRestore` keep and restore them like any weight.

For example::

    class TwoTower(keras_logq.SparseUpdates, keras.Model):
        def __init__(self):
            super().__init__()
            self.users = keras_logq.SparseEmbedding(num_users, 64, learning_rate=0.05)
            self.items = keras_logq.SparseEmbedding(num_items, 64, learning_rate=0.05)
        ...

A step's memory traffic on the tables is then the batch's rows (ids x dim), not the
catalog: `benchmarks/sparse_tables.py` measures both. The mixin's `train_step` is JAX's:
on TensorFlow and PyTorch, `fit` raises with what to use there (`keras.layers.Embedding`,
whose gradients those backends already keep sparse on TensorFlow).

Ids, as the frequency estimators take them: integers in [0, input_dim). Strings and floats
are a TypeError, and on JAX without `jax_enable_x64` an integer array of the host (numpy)
holding an id beyond int32, which JAX would cut to 32 bits (2**32 + 3 read as 3), is a
ValueError naming the id, in a call and in `fit`, `evaluate` and `predict` of a
`SparseUpdates` model given numpy arrays. Ids that a `tf.data.Dataset` or a generator
yields reach the model already cut by JAX's data adapter, where nothing can tell them
from smaller ids: map such ids to [0, input_dim) (or enable x64) in the pipeline. A host
array with an id outside [0, input_dim) is a ValueError naming it; inside a compiled step,
where nothing can raise, such an id reads a row of NaN, so the loss is NaN, and no row is
trained for it (JAX alone would read -1 as the last row).

The optimizer's own settings, as Keras applies them to a dense table:

- loss scaling (`loss_scale_factor`, `keras.optimizers.LossScaleOptimizer` and the
  `mixed_float16` policy's) is undone before the rows move;
- under a `LossScaleOptimizer`, a step with a non-finite gradient (the rows' included)
  changes neither the tables nor the other weights, as Keras skips it;
- `optimizer.iterations` counts the steps even when the tables are the only weights;
- clipping (`clipnorm`, `clipvalue`, `global_clipnorm`), weight decay, gradient
  accumulation and EMA are not applied to the tables, so a model with a `SparseEmbedding`
  refuses an optimizer that sets any of them (a `ValueError` naming the setting).
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np
from keras import ops

from keras_logq import _ops as k

OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam")

# The optimizer settings Keras applies in `apply`, which the tables' own rules do not:
# (attribute, what is refused when it holds a value other than these).
_UNSUPPORTED_SETTINGS = (
    ("clipnorm", (None,)),
    ("clipvalue", (None,)),
    ("global_clipnorm", (None,)),
    ("weight_decay", (None, 0, 0.0)),
    ("gradient_accumulation_steps", (None, 1)),
    ("use_ema", (False,)),
)


class _Tape:
    """The `SparseEmbedding` calls of one traced step: their gathered rows' shapes
    (recording) or the zeros added to them and the ids read (applying)."""

    def __init__(self, deltas: Optional[Sequence[Any]] = None):
        self.recording = deltas is None
        self.shapes: List[Tuple[Tuple[int, ...], Any]] = []
        self.deltas = list(deltas or [])
        self.calls: List[Tuple["SparseEmbedding", Any]] = []

    def read(self, layer: "SparseEmbedding", ids, rows):
        if self.recording:
            self.shapes.append((tuple(rows.shape), rows.dtype))
            self.calls.append((layer, None))
            return rows
        if len(self.calls) >= len(self.deltas):
            raise RuntimeError(
                "A SparseEmbedding was called more often in the step than when its calls were "
                "counted: its calls must not depend on the values of the data."
            )
        delta = self.deltas[len(self.calls)]
        self.calls.append((layer, ids))
        return rows + delta


_TAPE: Optional[_Tape] = None


@keras.saving.register_keras_serializable(package="keras_logq")
class SparseEmbedding(keras.layers.Layer):
    """An embedding table updated row by row by its own optimizer rule (see the module).

    Args:
      input_dim: rows of the table (ids 0 .. input_dim - 1).
      output_dim: the embedding's size.
      optimizer: one of OPTIMIZERS.
      learning_rate: the rule's step size.
      initial_accumulator_value: Adagrad's accumulators start here (Keras's default 0.1).
      beta_1, beta_2: Adam's moment decays.
      epsilon: added inside Adagrad's square root (Keras's convention), outside Adam's and
        row-wise Adagrad's.
      embeddings_initializer: the table's initializer (Keras's default "uniform").

    Called on integer ids of any shape, it returns their rows ([..., output_dim]). Outside
    a `SparseUpdates` model's training step it is a plain lookup (evaluation, serving). An
    id outside [0, input_dim) is a ValueError when the ids are a host (numpy) array, and
    reads a row of NaN otherwise (a compiled step cannot raise): never another id's row.
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        optimizer: str = "adagrad",
        learning_rate: float = 0.05,
        initial_accumulator_value: float = 0.1,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, size in (("input_dim", input_dim), ("output_dim", output_dim)):
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise ValueError(f"`{name}` must be a positive integer; received {name}={size!r}.")
        input_dim, output_dim = int(input_dim), int(output_dim)
        if optimizer not in OPTIMIZERS:
            raise ValueError(
                f"`optimizer` must be one of {', '.join(OPTIMIZERS)}; received "
                f"optimizer={optimizer!r}."
            )
        for name, rate in (("learning_rate", learning_rate), ("epsilon", epsilon)):
            if (
                not isinstance(rate, (int, float, np.floating, np.integer))
                or isinstance(rate, bool)
                or not 0 < rate < float("inf")
            ):
                raise ValueError(
                    f"`{name}` must be a positive, finite number; received {name}={rate!r}."
                )
        if not 0 <= initial_accumulator_value < float("inf"):
            raise ValueError(
                "`initial_accumulator_value` must be a finite number >= 0; received "
                f"initial_accumulator_value={initial_accumulator_value!r}."
            )
        for name, beta in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0 <= beta < 1:
                raise ValueError(f"`{name}` must lie in [0, 1); received {name}={beta!r}.")
        self.input_dim, self.output_dim = input_dim, output_dim
        self.optimizer_name = optimizer
        self.learning_rate = float(learning_rate)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.slots: Dict[str, Any] = {}

    def build(self, input_shape=None):
        del input_shape
        shape = (self.input_dim, self.output_dim)
        self.embeddings = self.add_weight(
            shape=shape,
            initializer=self.embeddings_initializer,
            trainable=False,
            name="embeddings",
        )
        accumulator = keras.initializers.Constant(self.initial_accumulator_value)
        if self.optimizer_name == "adagrad":
            self.slots = {"accumulator": self._state(shape, accumulator, "accumulator")}
        elif self.optimizer_name == "rowwise_adagrad":
            self.slots = {"accumulator": self._state((self.input_dim,), accumulator, "accumulator")}
        elif self.optimizer_name == "adam":
            self.slots = {
                "m": self._state(shape, "zeros", "m"),
                "v": self._state(shape, "zeros", "v"),
                "step": self._state((), "zeros", "step"),
            }
        self.built = True

    def _state(self, shape, initializer, name):
        return self.add_weight(
            shape=shape, initializer=initializer, name=name, trainable=False, dtype="float32"
        )

    def __call__(self, ids, *args, **kwargs):
        # Before Keras converts a host array to a tensor (JAX would cut int64 to int32).
        if isinstance(ids, (np.ndarray, np.generic, list, tuple, int)):
            _check_host_ids(ids, self.input_dim)
        return super().__call__(ids, *args, **kwargs)

    def call(self, ids):
        try:
            ids = k.ids_tensor("ids", ids, rank=None)
        except TypeError as error:
            dtype = keras.backend.standardize_dtype(ops.convert_to_tensor(ids).dtype)
            raise TypeError(
                f"SparseEmbedding takes integer ids; received dtype {dtype}."
            ) from error
        valid, rows_read = k.table_rows(ids, self.input_dim)
        rows = ops.take(self.embeddings, rows_read, axis=0)
        rows = ops.where(ops.expand_dims(valid, -1), rows, float("nan"))
        return rows if _TAPE is None else _TAPE.read(self, ids, rows)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.output_dim)

    def state_variables(self) -> List[Any]:
        """The table, then its optimizer state, in `sparse_update`'s order."""
        return [self.embeddings, *self.slots.values()]

    def sparse_update(self, values: Sequence[Any], ids, gradients, apply=True) -> List[Any]:
        """The rule applied to the rows of `ids` (flat, int) with `gradients` ([n, dim],
        repeated ids summed first): new values of `state_variables()` (JAX arrays). An id
        outside [0, input_dim) moves no row; `apply` False (a scalar bool: a skipped step)
        leaves every value as it was."""
        import jax  # pylint: disable=import-outside-toplevel
        import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

        table, *slots = values
        n = ids.shape[0]
        # Invalid ids (and all, on a skipped step) become input_dim: a row `put` drops
        # (JAX would read -1 as the last row), with a zero gradient.
        valid, _ = k.table_rows(ids, self.input_dim)
        keep = jnp.logical_and(valid, apply)
        ids = jnp.where(keep, ids, self.input_dim).astype(jnp.int32)
        gradients = jnp.where(keep[:, None], gradients, 0)
        unique, inverse = jnp.unique(ids, size=n, fill_value=self.input_dim, return_inverse=True)
        g = jax.ops.segment_sum(gradients.astype(table.dtype), inverse.reshape(-1), num_segments=n)

        def rows(array):
            return array.at[unique].get(mode="fill", fill_value=0)

        def put(array, new):
            return array.at[unique].set(new, mode="drop")

        lr = self.learning_rate
        if self.optimizer_name == "sgd":
            return [put(table, rows(table) - lr * g)]
        if self.optimizer_name == "adagrad":
            (accumulator,) = slots
            acc = rows(accumulator) + g * g
            step = lr * g / jnp.sqrt(acc + self.epsilon)
            return [put(table, rows(table) - step), put(accumulator, acc)]
        if self.optimizer_name == "rowwise_adagrad":
            (accumulator,) = slots
            acc = rows(accumulator) + jnp.mean(g * g, axis=-1)
            step = lr * g / (jnp.sqrt(acc)[:, None] + self.epsilon)
            return [put(table, rows(table) - step), put(accumulator, acc)]
        m_all, v_all, count = slots
        count = count + jnp.where(apply, 1.0, 0.0)
        m_rows, v_rows = rows(m_all), rows(v_all)
        m = m_rows + (g - m_rows) * (1 - self.beta_1)
        v = v_rows + (g * g - v_rows) * (1 - self.beta_2)
        alpha = lr * jnp.sqrt(1 - self.beta_2**count) / (1 - self.beta_1**count)
        step = alpha * m / (jnp.sqrt(v) + self.epsilon)
        return [put(table, rows(table) - step), put(m_all, m), put(v_all, v), count]

    def get_config(self):
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            optimizer=self.optimizer_name,
            learning_rate=self.learning_rate,
            initial_accumulator_value=self.initial_accumulator_value,
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


def _check_host_ids(ids, input_dim: int) -> None:
    """The named errors of ids given as a host array: strings, ids beyond int32 where the
    backend would cut them (`keras_logq._ops.check_host_ids`), and ids outside the table."""
    k.check_host_ids("ids", ids)
    array = np.asarray(ids)
    if array.dtype.kind not in "iu" or not array.size:
        return
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= input_dim:
        bad = low if low < 0 else high
        raise ValueError(
            f"`ids` must lie in [0, {input_dim}) (the table's input_dim); received the id {bad}."
        )


def _check_host_inputs(**data) -> None:
    """Integer host arrays beyond int32 in `fit`'s (or `evaluate`'s, `predict`'s) data, by
    argument (x, y), which JAX without `jax_enable_x64` would cut to 32 bits before any
    layer sees them (`keras_logq._ops.check_host_ids`)."""
    for name, value in data.items():
        for array in keras.tree.flatten(value):
            if isinstance(array, np.ndarray) and array.dtype.kind in "iu":
                k.check_host_ids(name, array, noun="value")


def _optimizer_variable(optimizer, variable) -> int:
    """The position of `variable` in `optimizer.variables`."""
    for position, other in enumerate(optimizer.variables):
        if other is variable:
            return position
    raise ValueError(f"{variable.path} is not a variable of the optimizer {optimizer.name}.")


class SparseUpdates:
    """A `keras.Model` mixin (`class M(SparseUpdates, keras.Model)`) whose JAX training step
    updates its `SparseEmbedding` tables row by row (see the module); the rest of the
    model trains through its optimizer as with `keras.Model`."""

    def _sparse_layers(self) -> List[SparseEmbedding]:
        return [
            layer
            for layer in self._flatten_layers(include_self=False)  # type: ignore[attr-defined]
            if isinstance(layer, SparseEmbedding)
        ]

    def _check_optimizer(self, optimizer) -> None:
        """Refuses optimizer settings that the tables' rules would not apply (the module)."""
        if optimizer is None or not self._sparse_layers():
            return
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        for name, neutral in _UNSUPPORTED_SETTINGS:
            value = getattr(inner, name, None)
            if not any(value is n or (value == n and n is not None) for n in neutral):
                raise ValueError(
                    f"The optimizer's `{name}` is not applied to SparseEmbedding tables, whose "
                    f"rows move by their own rule; received {name}={value!r}. Leave it unset, or "
                    "train the tables as keras.layers.Embedding."
                )

    def compile(self, *args, **kwargs):
        """`keras.Model.compile`, refusing optimizer settings the tables would miss."""
        super().compile(*args, **kwargs)
        self._check_optimizer(self.optimizer)

    def fit(self, x=None, y=None, *args, **kwargs):
        """`keras.Model.fit`, after the host ids check (the module)."""
        _check_host_inputs(x=x, y=y)
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """`keras.Model.evaluate`, after the host ids check (the module)."""
        _check_host_inputs(x=x, y=y)
        return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        """`keras.Model.predict`, after the host ids check (the module)."""
        _check_host_inputs(x=x)
        return super().predict(x, *args, **kwargs)

    def train_step(self, *args):
        if keras.backend.backend() != "jax":
            raise NotImplementedError(
                "SparseUpdates trains on JAX; received backend "
                f"{keras.backend.backend()!r}. On TensorFlow use keras.layers.Embedding (its "
                "gradients are IndexedSlices: the optimizers update the rows only)."
            )
        self._check_optimizer(self.optimizer)
        return self._jax_sparse_train_step(*args)

    def _jax_sparse_train_step(self, state, data):
        # pylint: disable=import-outside-toplevel
        import jax
        import jax.numpy as jnp
        from keras.src.trainers import data_adapters

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = data_adapters.data_adapter_utils.unpack_x_y_sample_weight(data)

        def loss(trainable, tape):
            global _TAPE  # pylint: disable=global-statement
            _TAPE = tape
            try:
                value, aux = self.compute_loss_and_updates(
                    trainable,
                    non_trainable,
                    metrics_variables,
                    x,
                    y,
                    sample_weight,
                    training=True,
                    optimizer_variables=optimizer_variables,
                )
            finally:
                _TAPE = None
            return value, (aux, [ids for _, ids in tape.calls])

        # The calls' shapes first, from a trace that computes nothing (jax.eval_shape).
        counting = _Tape()
        jax.eval_shape(lambda t: loss(t, counting)[0], trainable)
        applied: List[_Tape] = []

        def loss_of_rows(trainable, deltas):
            applied.append(_Tape(deltas))
            return loss(trainable, applied[-1])

        deltas = [jnp.zeros(shape, dtype) for shape, dtype in counting.shapes]
        (_, (aux, ids)), (grads, row_grads) = jax.value_and_grad(
            loss_of_rows, argnums=(0, 1), has_aux=True
        )(trainable, deltas)
        layers = [layer for layer, _ in applied[-1].calls]
        unscaled_loss, y_pred, non_trainable, metrics_variables = aux
        optimizer = self.optimizer
        dynamic = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        # The loss the gradients are of was scaled by the optimizer (`scale_loss`): its
        # factor, or a LossScaleOptimizer's scale as it was in this step.
        if dynamic:
            scale = optimizer_variables[_optimizer_variable(optimizer, optimizer.dynamic_scale)]
        else:
            scale = optimizer.loss_scale_factor
        if scale is not None:
            row_grads = [g.astype(jnp.float32) / scale for g in row_grads]
        finite = True
        if dynamic:  # A non-finite step moves nothing (as Keras skips it), the rows included.
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in [*grads, *row_grads]]))
            if trainable and row_grads:  # The optimizer sees the rows' verdict too.
                grads = [grads[0] * jnp.where(finite, 1.0, jnp.nan).astype(grads[0].dtype)] + list(
                    grads[1:]
                )
        if trainable:
            trainable, optimizer_variables = optimizer.stateless_apply(
                optimizer_variables, grads, trainable
            )
        else:
            optimizer_variables = list(optimizer_variables)
            if dynamic:  # The scale grows or shrinks as after a step of dense weights.
                # pylint: disable=protected-access
                optimizer_variables = jax.lax.cond(
                    finite,
                    lambda v: list(optimizer._stateless_handle_finite_grads(v, [], [])[1]),
                    lambda v: list(optimizer._stateless_handle_non_finite_grads(v, [])[1]),
                    optimizer_variables,
                )
            # Keras's `apply` returns before counting a step without gradients.
            count = _optimizer_variable(optimizer, optimizer.iterations)
            optimizer_variables[count] = optimizer_variables[count] + jnp.where(
                finite, 1, 0
            ).astype(optimizer_variables[count].dtype)
        non_trainable = list(non_trainable)
        position = {id(v): i for i, v in enumerate(self.non_trainable_variables)}
        for layer in dict.fromkeys(layers):  # Each table once, its calls' rows together.
            mine = [i for i, other in enumerate(layers) if other is layer]
            flat_ids = jnp.concatenate([ids[i].reshape(-1) for i in mine])
            flat_grads = jnp.concatenate([row_grads[i].reshape(-1, layer.output_dim) for i in mine])
            slots = [position[id(v)] for v in layer.state_variables()]
            updated = layer.sparse_update(
                [non_trainable[i] for i in slots], flat_ids, flat_grads, apply=finite
            )
            for i, value in zip(slots, updated):
                non_trainable[i] = value
        logs, metrics_variables = self._update_metrics_variables(
            metrics_variables, unscaled_loss, x, y, y_pred, sample_weight
        )
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)


__all__ = ["OPTIMIZERS", "SparseEmbedding", "SparseUpdates"]
