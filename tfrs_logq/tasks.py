"""LogQRetrieval: a drop-in for `tfrs.tasks.Retrieval` with the improved logQ correction."""

from typing import List, Optional, Sequence, Union

import tensorflow as tf
from tensorflow_recommenders import metrics as tfrs_metrics
from tensorflow_recommenders.tasks import base

from logq_core import formulas
from tfrs_logq import _task_inputs as task_inputs
from tfrs_logq import _validation as v
from tfrs_logq import frequency as frequency_lib
from tfrs_logq import losses as losses_lib
from tfrs_logq import negatives as negatives_lib
from tfrs_logq import scoring

TASK_CORRECTIONS = (None,) + losses_lib.CORRECTIONS


def _metric_list(name: str, value) -> List[tfrs_metrics.Factorized]:
    """`value` (None, one `tfrs.metrics.Factorized` or a sequence of them) as a list.

    Raises:
      TypeError: anything else, named.
    """
    if value is None:
        return []
    metrics = [value] if isinstance(value, tfrs_metrics.Factorized) else value
    if not isinstance(metrics, Sequence) or not all(
        isinstance(metric, tfrs_metrics.Factorized) for metric in metrics
    ):
        raise TypeError(
            f"`{name}` must be a tfrs.metrics.Factorized metric (such as FactorizedTopK) or a "
            f"list of them; received {name}={value!r}."
        )
    return list(metrics)


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class LogQRetrieval(tf.keras.layers.Layer, base.Task):
    """Factorized retrieval task: sampled softmax with a logQ correction (`losses.CORRECTIONS`).

    A drop-in for `tfrs.tasks.Retrieval` (tensorflow-recommenders 0.7.7): it
    takes the same constructor and `call` arguments and, for the "none" and
    "standard" corrections, returns the same loss (a sum over the batch of
    sample-weighted per-example losses) and the same metric values.

    Differences, all opt-in or fixes:

    - `correction="improved"` (Khrylchenko et al., RecSys 2025): the positive
      leaves the denominator, negatives are corrected with Q' = Q / (1 - Q(p)),
      and each example is weighted by stop_gradient(1 - P_hat). Columns that
      carry the row's positive id are then always accidental hits (when
      `candidate_ids` are given), since Q' assumes negatives differ from p.
    - `sampler=`: negatives from an `InBatchSampler` (e.g. deduplicated),
      `UniformSampler` or `MixedSampler` instead of the raw candidate columns;
      its probabilities supply log Q.
    - `frequency=`: log Q of the candidate columns read from a frequency
      source (e.g. a streaming `CountMinSketchEstimator`) by `candidate_ids`,
      instead of `candidate_sampling_probability`.
    - Streaming estimators (given as `frequency` or as the sampler's
      `probabilities`) are updated with the step's positives at the start of
      every training call, before log Q is read (Yi et al. 2019). Pass
      `training=False` from `compute_loss` so that evaluation does not feed
      them; a call without `training` counts as a training step.
    - Q is not clipped at 1e-6 (TFRS clips, which biases catalogs of more than
      about a million items).
    - Ids (`candidate_ids`, `query_ids`) may be [batch] or [batch, 1], as TFRS
      takes them (its tutorials' labels are [batch, 1]); other shapes are refused.
    - With extra candidates (num_candidates > num_queries), the factorized
      metrics get the positives' ids only (TFRS passes all ids and crashes).
    - Cost: on the candidate columns every correction is one softmax
      cross-entropy kernel, as TFRS's loss is (`tfrs_logq.losses.column_softmax_terms`).
      Its masks and shifts ("improved", "standard_negatives", accidental hits,
      `score_mask`; "none" and "standard" above 2M logits) are fused with it by XLA,
      which compiles once per batch shape (a run with a last, smaller batch
      compiles twice; called eagerly, every new batch shape retraces): these
      paths need TensorFlow's XLA JIT on the device (its CPU, GPU and TPU builds
      have it). Ids are compared as integer codes; with integer ids a step
      compiled whole (`jit_compile=True`) keeps its accidental hits.
    - `query_ids`, `known_positive_ids` and `known_positives` (`call`): a
      row's other known positives (the user's other targets in the batch, its
      history) are masked rather than pushed down as negatives, with log Q
      and "improved"'s n kept so that the correction stays unbiased
      (`logq_core.formulas.mask_known_positives`).

    Args:
      loss: Optional custom Keras loss called as `loss(labels, logits,
        sample_weight)` on a [batch, 1 + num_negatives] logits matrix whose
        first column is the positive. Not with "improved"; the
        default is the library's sampled softmax with SUM reduction, which
        equals TFRS's default `CategoricalCrossentropy(from_logits=True,
        reduction=SUM)`.
      metrics: `tfrs.metrics.Factorized` metrics over the whole catalog.
      batch_metrics: Keras metrics called as `metric(labels, logits,
        sample_weight)` on the same logits matrix as `loss`.
      loss_metrics: Keras metrics of the loss value.
      temperature: divides every logit (before the correction), as in TFRS.
      num_hard_negatives: keep only this many negatives per row, those with
        the largest corrected logits (each correction's own: s - lambda log Q,
        s - lambda log Q' for "improved"). The loss is then the one of the kept
        negatives, with "improved"'s n still counting the row's valid negatives
        before mining: Z_hat_k = (1/n) sum_{top k} e^{c'_i} is Z_hat without its
        n - k smallest terms, a lower bound of it that is tight when the kept
        terms hold most of its mass, so P_hat and w are those of the full
        estimate up to the mass left out (`logq_core.formulas.improved`).
      remove_accidental_hits: as in TFRS, mask candidate columns that carry the
        row's positive id (needs `candidate_ids`). Samplers always do this.
      name: layer name.
      correction: None (the TFRS behaviour: "standard" when
        `candidate_sampling_probability` or the sampler's probabilities are
        available, else "none"), "none", "standard", "standard_negatives"
        (log Q subtracted from the negatives only; see
        `tfrs_logq.losses.sampled_softmax_loss`) or "improved".
      log_q_scale: lambda >= 0, the weight of the correction (Merlin's
        `reg_factor`): every log Q the correction subtracts becomes lambda
        log Q. 1 (default) is the correction, 0 subtracts nothing (the
        correction's form stays: "improved" still leaves the positive out of
        the denominator and weights rows by w); only 1 makes Z_hat unbiased.
      sampler: optional `tfrs_logq.negatives.NegativeSampler`.
      diagnostics: track, as Keras metrics of the task (so `fit` logs them and
        TensorBoard plots them), the mean weight w = 1 - P_hat ("mean_w",
        "improved" only), the mean P_hat of the positive under the corrected
        sampled softmax ("mean_p_hat"), the share of negative slots
        masked as accidental hits or padding ("masked_negatives"), and the
        number of valid negatives per example ("valid_negatives"; with
        global-batch negatives under tf.distribute, counted in the global pool).
      frequency: optional source of per-draw probabilities for the candidate
        columns when no sampler is used: a `tfrs_logq.frequency`
        estimator, an array of probabilities indexed by id, or a callable.
        Not with a sampler (give the sampler `probabilities` instead).
      **kwargs: standard Keras layer arguments.
    """

    def __init__(
        self,
        loss: Optional[tf.keras.losses.Loss] = None,
        metrics: Optional[Union[Sequence[tfrs_metrics.Factorized], tfrs_metrics.Factorized]] = None,
        batch_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
        loss_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
        temperature: Optional[float] = None,
        num_hard_negatives: Optional[int] = None,
        remove_accidental_hits: bool = False,
        name: Optional[str] = None,
        *,
        correction: Optional[str] = None,
        sampler: Optional[negatives_lib.NegativeSampler] = None,
        frequency: frequency_lib.FrequencyLike = None,
        diagnostics: bool = False,
        log_q_scale: float = 1.0,
        **kwargs,
    ) -> None:
        # Logits are always float32, also under a mixed-precision policy.
        kwargs.setdefault("dtype", "float32")
        super().__init__(name=name, **kwargs)
        self.correction = v.check_choice("correction", correction, TASK_CORRECTIONS)
        self.temperature = v.check_positive_float("temperature", temperature, allow_none=True)
        self.num_hard_negatives = v.check_positive_int(
            "num_hard_negatives", num_hard_negatives, allow_none=True
        )
        self.remove_accidental_hits = v.check_bool("remove_accidental_hits", remove_accidental_hits)
        self.log_q_scale = formulas.check_log_q_scale(log_q_scale)
        if correction == "improved" and loss is not None:
            raise ValueError(
                "correction='improved' computes its own weighted loss and cannot use a custom "
                f"`loss`; received loss={loss!r}. Drop `loss`, or use correction='standard'."
            )
        if sampler is not None and not isinstance(sampler, negatives_lib.NegativeSampler):
            raise TypeError(
                "`sampler` must be a tfrs_logq.negatives.NegativeSampler (InBatchSampler, "
                f"UniformSampler, MixedSampler); received sampler={sampler!r}."
            )
        self.frequency = frequency_lib.as_frequency(frequency)
        if sampler is not None and self.frequency is not None:
            raise ValueError(
                "Pass the probability source to the sampler (its `probabilities`), not to the "
                f"task, when a sampler is used; received frequency={frequency!r} and "
                f"sampler={sampler!r}."
            )
        if sampler is not None and self.correction not in (None, "none") and not sampler.has_log_q:
            raise formulas.missing_log_q(
                self.correction,
                "the sampler's `probabilities`",
                f"{type(sampler).__name__} without them",
            )
        self.diagnostics = v.check_bool("diagnostics", diagnostics)
        if diagnostics and correction == "improved":
            self.mean_w = tf.keras.metrics.Mean(name="mean_w")
        if diagnostics:
            self.mean_p_hat = tf.keras.metrics.Mean(name="mean_p_hat")
            self.masked_negatives = tf.keras.metrics.Mean(name="masked_negatives")
            self.valid_negatives = tf.keras.metrics.Mean(name="valid_negatives")
        self._loss = loss
        self._factorized_metrics = _metric_list("metrics", metrics)
        self._batch_metrics = batch_metrics or []
        self._loss_metrics = loss_metrics or []
        self.sampler = sampler

    @property
    def factorized_metrics(self) -> Optional[Sequence[tfrs_metrics.Factorized]]:
        """The metrics object used to compute retrieval metrics (as in TFRS)."""
        return self._factorized_metrics

    @factorized_metrics.setter
    def factorized_metrics(self, value) -> None:
        # One metric or a list, as the constructor's `metrics` (TFRS 0.7.7 turned one metric
        # into an empty list here, so that its efficient-serving tutorial lost its metric).
        self._factorized_metrics = _metric_list("factorized_metrics", value)

    def call(
        self,
        query_embeddings: tf.Tensor,
        candidate_embeddings: tf.Tensor,
        sample_weight: Optional[tf.Tensor] = None,
        candidate_sampling_probability: Optional[tf.Tensor] = None,
        candidate_ids: Optional[tf.Tensor] = None,
        compute_metrics: bool = True,
        compute_batch_metrics: bool = True,
        score_mask: Optional[tf.Tensor] = None,
        *,
        training: Optional[bool] = None,
        # What a sampler reads besides the batch:
        candidate_embedding_fn: Optional[negatives_lib.EmbeddingFn] = None,
        candidate_table: Optional[tf.Tensor] = None,
        candidate_mask: Optional[tf.Tensor] = None,
        # Other known positives of each query, masked out of its negatives:
        query_ids: Optional[tf.Tensor] = None,
        known_positive_ids: Optional[tf.Tensor] = None,
        known_positives: Optional[tf.Tensor] = None,
    ) -> tf.Tensor:
        """Computes the task loss and updates the metrics.

        Row i of `query_embeddings` chose the candidate in row i of
        `candidate_embeddings`. The first eight arguments are TFRS's
        `Retrieval.call`'s, in its order; the rest are keyword-only: `training`,
        the sampler's inputs (`candidate_embedding_fn`, `candidate_table`,
        `candidate_mask`) and each query's other known positives (`query_ids`,
        `known_positive_ids`, `known_positives`).

        Known positives leave the loss's sums but stay draws: log Q and
        "improved"'s n are unchanged, so Z_hat stays an unbiased estimate of the
        partition function without them, for every correction and sampler
        (`logq_core.formulas.mask_known_positives`). `score_mask` instead also
        removes the columns from "improved"'s n (for columns that are not draws,
        such as padding). Hard negatives are mined among the remaining columns.

        Args:
          query_embeddings: [num_queries, dim] query representations, or
            [num_queries, num_heads, dim] for "maxsim" scoring (as TFRS).
          candidate_embeddings: [num_candidates, dim], num_candidates >=
            num_queries; the first num_queries rows are the positives, any
            extra rows are extra negatives for every query.
          sample_weight: [num_queries] sample weights.
          candidate_sampling_probability: [num_candidates] per-draw sampling
            probability of each candidate column, in (0, 1]. Not with a
            sampler (give the sampler `probabilities` instead).
          candidate_ids: [num_candidates] integer or string candidate ids, or
            [num_candidates, 1] (the labels of TFRS's tutorials; as TFRS, taken as
            the same ids): for accidental-hit removal, id-based top-K metrics,
            frequency sources and samplers. Any other shape raises ValueError.
          compute_metrics: whether to update the factorized metrics.
          compute_batch_metrics: whether to update the batch metrics.
          score_mask: [num_queries, num_candidates] bool, False for candidate
            columns a query must not see as negatives. Not with a sampler.
          training: whether this is a training step. Unless it is False, a
            streaming frequency estimator is first updated with the positives'
            ids (`candidate_ids[:num_queries]`): the rows `candidate_mask` keeps in
            the pool when it is given (a zero-weight row of the pool is still drawn
            as a negative, so it is counted), else the rows with a nonzero sample
            weight.
          candidate_embedding_fn: maps ids to candidate embeddings (the item
            tower), for samplers that draw ids outside the batch (uniform, mixed).
            A sampler over a vocabulary draws ids in the tower's own id space
            (strings for a string vocabulary): this is the item tower as it is.
          candidate_table: with a sampler and integer ids, optional [num_ids,
            dim] embeddings of every id (row i = id i). The sampler's negatives
            are then scored by one [num_queries, num_ids] matmul against it and
            a gather of their columns, instead of embedding each draw: on a small
            catalog with per-row negatives this costs less (no [num_queries,
            num_negatives, dim] gather, nor its scattered gradient). Same values
            and gradients.
          candidate_mask: with a sampler, optional [num_candidates] bool, False
            for padding candidates: they never enter the in-batch pool. Give
            their rows a zero `sample_weight`. Shapes stay static (padding
            becomes masked slots), so that XLA compiles the step once.
          query_ids: optional [num_queries] (or [num_queries, 1]) integer or string
            id of the query each row belongs to (the user; in SASRec, the sequence
            whose positions are the rows). A candidate or sampled negative whose id
            is the positive of any row with the same query id is a known positive of
            the row: every other target of the user in the batch, and the row's own
            positive (accidental hits, then always removed). Needs `candidate_ids`.
          known_positive_ids: optional [num_queries, k] ids of each row's other known
            positives (a two-tower user's history), shared by the rows of its query;
            pad with an id that is never a valid negative. Needs `candidate_ids`.
          known_positives: without a sampler, optional [num_queries, num_candidates]
            bool, True where candidate column j is a known positive of query i (the
            explicit form of the two above, combined with them).

        Returns:
          Scalar loss: the sum over queries of sample-weighted per-example losses.
        """
        query_embeddings, candidate_embeddings, sample_weight = task_inputs.checked_embeddings(
            query_embeddings, candidate_embeddings, sample_weight
        )
        candidate_ids, score_mask, checked_mask = task_inputs.checked_columns(
            query_embeddings,
            candidate_embeddings,
            candidate_ids,
            score_mask,
            None if self.sampler is None else candidate_mask,
        )
        query_ids, known_positive_ids, known_positives = task_inputs.checked_known_positives(
            query_embeddings,
            candidate_embeddings,
            candidate_ids,
            query_ids,
            known_positive_ids,
            known_positives,
            self.sampler is not None,
        )
        candidate_mask = candidate_mask if self.sampler is None else checked_mask
        num_queries = tf.shape(query_embeddings)[0]
        self._update_frequency(candidate_ids, num_queries, sample_weight, training, candidate_mask)
        if self.sampler is None:
            if candidate_mask is not None:
                raise ValueError(
                    "`candidate_mask` masks a sampler's pool; without a sampler, mask "
                    "candidate columns with `score_mask`. Received candidate_mask that is not "
                    "None."
                )
            scored = scoring.candidate_columns(
                query_embeddings,
                candidate_embeddings,
                candidate_sampling_probability,
                candidate_ids,
                score_mask,
                temperature=self.temperature,
                frequency=self.frequency,
                correction=self.correction,
                remove_accidental_hits=self.remove_accidental_hits,
            )
        else:
            scored = scoring.sampled_columns(
                query_embeddings,
                candidate_embeddings,
                candidate_sampling_probability,
                candidate_ids,
                score_mask,
                candidate_embedding_fn,
                candidate_table,
                candidate_mask,
                sampler=self.sampler,
                temperature=self.temperature,
            )
        if query_ids is not None or known_positive_ids is not None or (known_positives is not None):
            scored = scoring.without_known_positives(
                scored,
                candidate_ids,
                query_ids,
                known_positive_ids,
                known_positives,
                None if candidate_mask is None else candidate_mask[:num_queries],
                sampler=self.sampler,
            )
        correction = self._resolve_correction(scored.log_q)
        if self.num_hard_negatives is not None:
            scored = scoring.hard_negatives(
                scored, correction, self.num_hard_negatives, self.log_q_scale
            )
        loss, update_ops = self._total_loss(
            scored, correction, sample_weight, compute_batch_metrics
        )
        if compute_metrics and query_embeddings.shape.rank == 2:
            for metric in self._factorized_metrics:
                # TFRS slices the embeddings but not the ids, and crashes with
                # extra candidates; both are sliced here.
                update_ops.append(
                    metric.update_state(
                        query_embeddings,
                        candidate_embeddings[:num_queries],
                        true_candidate_ids=(
                            None if candidate_ids is None else candidate_ids[:num_queries]
                        ),
                        sample_weight=sample_weight,
                    )
                )
        with tf.control_dependencies([op for op in update_ops if op is not None]):
            return tf.identity(loss)

    def _total_loss(
        self, scored: scoring.Scored, correction: str, sample_weight, compute_batch_metrics
    ):
        """(the summed loss, the metric updates of the loss, the batch metrics and the
        diagnostics)."""
        update_ops = []
        if self._loss is None:
            if scored.diagonal_positive:
                # TFRS's own computation: one fused kernel over the [batch, candidates]
                # logits, forward and gradient, "improved" read off it (the separate
                # masking, log-sum-exp and weight passes cost 1.29-1.35x TFRS's step in its
                # basic-retrieval tutorial at batch 8192).
                needs_count = correction == "improved" and scored.num_valid is None
                valid = scoring.valid_counts(scored) if needs_count or self.diagnostics else None
                per_example, weight = losses_lib.column_softmax_terms(
                    scored.negative_logits,
                    correction,
                    scored.log_q,
                    scored.mask,
                    scored.hits,
                    log_q_scale=self.log_q_scale,
                    num_valid=valid if needs_count else scored.num_valid,
                )
            else:
                valid = None
                per_example, weight = losses_lib.sampled_softmax_terms(
                    scored.positive_logits,
                    scored.negative_logits,
                    correction,
                    scored.log_q,
                    scored.positive_log_q,
                    scored.mask,
                    scored.log_q_excludes_positive,
                    check_log_q=not scored.log_q_checked,
                    log_q_scale=self.log_q_scale,
                    num_valid=scored.num_valid,
                )
            if self.diagnostics:
                if valid is None:
                    valid = scoring.valid_counts(scored)
                update_ops += self._update_diagnostics(
                    per_example,
                    weight,
                    valid,
                    tf.cast(tf.shape(scored.negative_logits)[1], tf.float32),
                    sample_weight,
                )
            if sample_weight is not None:
                per_example = per_example * sample_weight
            loss = tf.reduce_sum(per_example)
        labels = logits = None
        if self._loss is not None or (compute_batch_metrics and self._batch_metrics):
            labels, logits = scoring.logits_matrix(scored, correction, self.log_q_scale)
        if self._loss is not None:
            loss = self._loss(y_true=labels, y_pred=logits, sample_weight=sample_weight)
        update_ops += [metric.update_state(loss) for metric in self._loss_metrics]
        if compute_batch_metrics:
            update_ops += [
                metric.update_state(labels, logits, sample_weight=sample_weight)
                for metric in self._batch_metrics
            ]
        return loss, update_ops

    def _update_diagnostics(self, per_example, weight, valid, num_slots, sample_weight):
        """Updates mean w, mean P_hat, the masked share of the `num_slots` negative slots
        and the `valid` count (`diagnostics`)."""
        # P_hat: with "improved", 1 - w (the positive's share with itself in the
        # denominator); otherwise the positive's probability exp(-loss).
        p_hat = tf.exp(-per_example) if weight is None else 1.0 - weight
        masked = 1.0 - valid / num_slots
        ops = [
            self.mean_p_hat.update_state(p_hat, sample_weight=sample_weight),
            self.masked_negatives.update_state(masked, sample_weight=sample_weight),
            self.valid_negatives.update_state(valid, sample_weight=sample_weight),
        ]
        if weight is not None:
            ops.append(self.mean_w.update_state(weight, sample_weight=sample_weight))
        return ops

    def _update_frequency(
        self, candidate_ids, num_queries, sample_weight, training, candidate_mask=None
    ) -> None:
        """Feeds the step's positives to a streaming estimator (update, then read): the rows
        of the pool (`candidate_mask`), else those with a nonzero weight."""
        source = self.frequency if self.sampler is None else self.sampler.frequency
        if source is None or not source.streaming or training is False:
            return
        if candidate_ids is None:
            raise ValueError(
                f"A streaming estimator ({type(source).__name__}) is updated with the "
                "positives' ids; received candidate_ids=None."
            )
        positive_ids = v.ids_tensor("candidate_ids", candidate_ids)[:num_queries]
        if candidate_mask is not None:
            mask = tf.cast(candidate_mask, tf.bool)[:num_queries]
        else:
            mask = None if sample_weight is None else sample_weight > 0.0
        if training is None or training is True:
            source.update(positive_ids, mask=mask)
        else:  # A boolean tensor.

            def update():
                source.update(positive_ids, mask=mask)
                return tf.constant(True)

            tf.cond(tf.cast(training, tf.bool), update, lambda: tf.constant(False))

    def _resolve_correction(self, log_q: Optional[tf.Tensor]) -> str:
        if self.correction is None:
            return "none" if log_q is None else "standard"
        if self.correction != "none" and log_q is None:
            raise formulas.missing_log_q(
                self.correction,
                "`candidate_sampling_probability` or the task's `frequency`",
                "neither",
            )
        return self.correction

    def get_config(self):
        """Config of every argument except `metrics` (factorized metrics hold a candidate index)."""
        config = super().get_config()
        config.update(
            loss=None if self._loss is None else tf.keras.losses.serialize(self._loss),
            batch_metrics=[tf.keras.metrics.serialize(m) for m in self._batch_metrics],
            loss_metrics=[tf.keras.metrics.serialize(m) for m in self._loss_metrics],
            temperature=self.temperature,
            num_hard_negatives=self.num_hard_negatives,
            remove_accidental_hits=self.remove_accidental_hits,
            correction=self.correction,
            sampler=None if self.sampler is None else tf.keras.layers.serialize(self.sampler),
            frequency=(
                None if self.frequency is None else tf.keras.layers.serialize(self.frequency)
            ),
            diagnostics=self.diagnostics,
            log_q_scale=self.log_q_scale,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("loss") is not None:
            config["loss"] = tf.keras.losses.deserialize(config["loss"])
        for key in ("batch_metrics", "loss_metrics"):
            config[key] = [tf.keras.metrics.deserialize(m) for m in config.get(key) or []]
        if config.get("sampler") is not None:
            config["sampler"] = tf.keras.layers.deserialize(config["sampler"])
        return cls(**config)
