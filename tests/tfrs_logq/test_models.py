"""Tests of tfrs_logq.models: SASRec's causality, and a short training per loss family."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from pipelines import configs
from pipelines.data import builders
from pipelines.data import splits
from pipelines.data import synthetic
from tests import conftest
from tests import reference
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq import retrieval
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec
from tfrs_logq.models import TwoTower
from tfrs_logq.models import make_objective
from tfrs_logq.tasks import LogQRetrieval

NUM_ITEMS = 200


def _data():
    data, _ = synthetic.make_synthetic(
        num_users=300, num_items=NUM_ITEMS, min_length=10, max_length=30, temperature=0.1, seed=0
    )
    split = splits.leave_one_out(data)
    counts = split.train_counts() + 1.0
    probabilities = counts / counts[1:].sum()
    probabilities[0] = 1.0
    return data, split, probabilities.astype(np.float32)


class SASRecTest(tf.test.TestCase):
    def test_is_causal_and_ignores_padding(self):
        for architecture in ("sasrec", "gsasrec"):
            self._check_causal_and_padding(architecture)

    def _check_causal_and_padding(self, architecture):
        model = SASRec(
            NUM_ITEMS,
            RetrievalObjective(NUM_ITEMS, loss="full_softmax"),
            max_length=6,
            dim=8,
            dropout=0.0,
            architecture=architecture,
        )
        a = tf.constant([[0, 0, 3, 4, 5, 6]])
        b = tf.constant([[0, 0, 3, 4, 9, 1]])  # Differs from position 4 on.
        out_a, out_b = model(a).numpy(), model(b).numpy()
        self.assertAllClose(out_a[:, :4], out_b[:, :4], atol=1e-6)
        self.assertNotAllClose(out_a[:, 4:], out_b[:, 4:])
        if architecture == "sasrec":  # gSASRec's final LayerNorm maps padding to its bias.
            self.assertAllEqual(out_a[:, :2], np.zeros([1, 2, 8]))  # Padding is zeroed.
        self.assertEqual(model.query_embeddings(a).shape, (1, 8))
        self.assertEqual(model.item_embeddings().shape, (NUM_ITEMS + 1, 8))

    def test_untied_output_table_scores_and_trains(self):
        model = SASRec(
            NUM_ITEMS,
            make_objective(NUM_ITEMS, loss="gbce", num_negatives=8, seed=1),
            max_length=6,
            dim=8,
            dropout=0.0,
            tie_embeddings=False,
        )
        inputs = tf.constant([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
        features = {
            "inputs": inputs,
            "targets": tf.constant([[0, 0, 4, 5, 6, 7], [2, 3, 4, 5, 6, 7]]),
        }
        model(inputs)  # As pipelines.train builds it: the output table is built with it,
        before = model.output_embedding.get_weights()  # so a fit step's optimizer moves it.
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
        model.fit(tf.data.Dataset.from_tensors(features), epochs=1, verbose=0)
        table = model.item_embeddings()
        self.assertNotAllClose(before[0], table)
        self.assertEqual(table.shape, (NUM_ITEMS + 1, 8))
        self.assertIn("output_items", table.name)
        self.assertIsNot(table, model.item_embedding.embeddings)
        with tf.GradientTape() as tape:
            loss = model.compute_loss(features, training=True)
        gradients = tape.gradient(loss, [model.item_embedding.embeddings, table])
        # The loss reaches the input table through the sequence, the output table directly.
        for gradient in gradients:
            self.assertGreater(float(tf.norm(tf.convert_to_tensor(gradient))), 0.0)
        tied = SASRec(
            NUM_ITEMS, RetrievalObjective(NUM_ITEMS, loss="full_softmax"), max_length=6, dim=8
        )
        tied(inputs)
        self.assertIs(tied.item_embeddings(), tied.item_embedding.embeddings)

    def test_gsasrec_parameter_count_is_the_released_models(self):
        # The released ML-1M model (configs/ml1m_other.py: 3,416 items, sequence 200, dim
        # 128, 2 blocks, 1 head; separate output table), counted from gsasrec.py and
        # transformer_decoder.py: item and output tables 2 x 3,418 x 128 = 875,008;
        # positions 200 x 128 = 25,600; per block two LayerNorms (2 x 256), Q/K/V
        # (3 x 16,512) and two dense layers (2 x 16,512) = 83,072, two blocks 166,144;
        # the final LayerNorm 256. Total 1,067,008.
        model = SASRec(
            3416,
            RetrievalObjective(3416, loss="full_softmax"),
            max_length=200,
            dim=128,
            num_blocks=2,
            num_heads=1,
            architecture="gsasrec",
        )
        model(tf.zeros([1, 200], tf.int32))
        count = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        self.assertEqual(count, 1_067_008)
        self.assertEqual(model.item_embeddings().shape, (3417, 128))

    def test_attention_dropout_is_its_own_rate(self):
        """`attention_dropout` sets the attention weights' rate alone (None: `dropout`)."""
        objective = RetrievalObjective(20, loss="full_softmax")
        for architecture, rate_of in (
            ("sasrec", lambda block: block.attention._dropout),  # pylint: disable=protected-access
            ("gsasrec", lambda block: block.attention.dropout.rate),
        ):
            model = SASRec(
                20, objective, max_length=6, dim=8, dropout=0.3, architecture=architecture
            )
            self.assertEqual([rate_of(b) for b in model.blocks], [0.3, 0.3])
            model = SASRec(
                20,
                objective,
                max_length=6,
                dim=8,
                dropout=0.3,
                architecture=architecture,
                attention_dropout=0.0,
            )
            self.assertEqual([rate_of(b) for b in model.blocks], [0.0, 0.0])
            self.assertEqual(model.input_dropout.rate, 0.3)
        with self.assertRaisesRegex(ValueError, r"attention_dropout=1\.0"):
            SASRec(20, objective, attention_dropout=1.0)

    def test_gsasrec_forward_is_the_released_computation(self):
        model = SASRec(
            20,
            RetrievalObjective(20, loss="full_softmax"),
            max_length=6,
            dim=8,
            num_blocks=2,
            num_heads=2,
            dropout=0.3,
            architecture="gsasrec",
        )
        inputs = np.array([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 7]])
        model(inputs)
        rng = np.random.default_rng(0)
        for weight in model.weights:  # Away from the initialisation (unit gains, zero biases).
            weight.assign(weight + 0.3 * rng.normal(size=weight.shape))
        weights = {
            "items": model.item_embedding.embeddings.numpy(),
            "positions": model.position_embedding.embeddings.numpy(),
            "final_norm": [w.numpy() for w in model.final_norm.weights],
            "blocks": [],
        }
        for block in model.blocks:
            layers = dict(
                first_norm=block.first_norm,
                second_norm=block.second_norm,
                query=block.attention.query,
                key=block.attention.key,
                value=block.attention.value,
                dense1=block.dense1,
                dense2=block.dense2,
            )
            weights["blocks"].append(
                {
                    name: [w.numpy().astype(np.float64) for w in layer.weights]
                    for name, layer in layers.items()
                }
            )
        want = reference.gsasrec_forward(inputs, weights, num_heads=2)
        self.assertAllClose(model(inputs, training=False), want, atol=1e-5)

    def test_gsasrec_initialisation(self):
        model = SASRec(
            300,
            RetrievalObjective(300, loss="full_softmax"),
            max_length=50,
            dim=32,
            architecture="gsasrec",
        )
        model(tf.zeros([1, 50], tf.int32))
        kernels = [
            w.numpy()
            for w in model.trainable_weights
            if "kernel" in w.name or "embeddings" in w.name
        ]
        for kernel in kernels:  # trunc_normal_(std=0.02, a=-0.04, b=0.04).
            self.assertLessEqual(np.abs(kernel).max(), 0.04)
            self.assertBetween(kernel.std(), 0.015, 0.02)
        self.assertNotAllClose(kernels[0][:32], kernels[1][:32])  # Each variable its own draw.
        for weight in model.trainable_weights:
            if "bias" in weight.name or "beta" in weight.name:
                self.assertAllEqual(weight, np.zeros(weight.shape))
            if "gamma" in weight.name:
                self.assertAllEqual(weight, np.ones(weight.shape))
        self.assertFalse(model.tie_embeddings)

    def test_bad_arguments(self):
        objective = RetrievalObjective(NUM_ITEMS, loss="full_softmax")
        with self.assertRaisesRegex(
            ValueError,
            r"`dim` must be a multiple of `num_heads`; "
            r"received dim=10, num_heads=4",
        ):
            SASRec(NUM_ITEMS, objective, dim=10, num_heads=4)
        with self.assertRaisesRegex(
            TypeError,
            r"`tie_embeddings` must be a bool; received "
            r"tie_embeddings='no'",
        ):
            SASRec(NUM_ITEMS, objective, dim=8, tie_embeddings="no")
        with self.assertRaisesRegex(
            ValueError,
            r"`architecture` must be one of 'sasrec', "
            r"'gsasrec'; received architecture='bert4rec'",
        ):
            SASRec(NUM_ITEMS, objective, dim=8, architecture="bert4rec")
        with self.assertRaisesRegex(
            ValueError,
            r"`loss` must be one of 'sampled_softmax', "
            r"'full_softmax', 'bce', 'gbce'; received loss='hinge'",
        ):
            make_objective(NUM_ITEMS, loss="hinge")
        with self.assertRaisesRegex(
            ValueError,
            r"correction='improved' needs sampling "
            r"probabilities: pass the sampler's `probabilities`; "
            r"received InBatchSampler without them",
        ):
            make_objective(NUM_ITEMS, negatives="in_batch", correction="improved")


class StaticShapesTest(tf.test.TestCase, parameterized.TestCase):
    """SASRec's loss keeps every position as a row, padding masked (XLA compiles it once);
    where no draw is random it equals the old computation on the packed valid rows."""

    @parameterized.named_parameters(
        ("full_softmax", dict(loss="full_softmax")),
        ("in_batch_none", dict(negatives="in_batch", correction="none")),
        ("in_batch_standard", dict(negatives="in_batch", correction="standard")),
        ("in_batch_improved", dict(negatives="in_batch", correction="improved")),
        (
            "dedup_horvitz_thompson",
            dict(negatives="in_batch", correction="improved", deduplicate=True),
        ),
        (
            "released_pool",
            dict(
                negatives="in_batch",
                correction="standard_negatives",
                deduplicate=True,
                log_q="unigram",
            ),
        ),
    )
    def test_equals_the_packed_computation(self, kwargs):
        _, split, probabilities = _data()
        # A pool cap above the batch's positions: every valid target is a negative.
        objective = make_objective(
            NUM_ITEMS, num_negatives=10_000, probabilities=probabilities, seed=1, **kwargs
        )
        model = SASRec(NUM_ITEMS, objective, max_length=20, dim=16, num_blocks=1, dropout=0.0)
        batch = next(iter(builders.sasrec_dataset(split.train, 20, 16, seed=0)))
        model(batch["inputs"])
        self.assertGreater(int(tf.reduce_sum(tf.cast(batch["targets"] == 0, tf.int32))), 0)

        def packed():
            sequence = model(batch["inputs"], training=True)
            valid = tf.not_equal(batch["targets"], 0)
            return model.objective(
                tf.boolean_mask(sequence, valid),
                tf.boolean_mask(batch["targets"], valid),
                model.output_embedding,
                all_item_embeddings=model.item_embeddings,
                training=True,
            )

        results = []
        for compute in (lambda: model.compute_loss(batch, training=True), packed):
            with tf.GradientTape() as tape:
                loss = compute()
            gradients = tape.gradient(loss, model.trainable_variables)
            results.append([loss] + [tf.convert_to_tensor(g) for g in gradients])
        for static, old in zip(*results):
            self.assertAllClose(static, old, rtol=1e-4, atol=1e-6)


class ObjectiveOptionsTest(tf.test.TestCase):
    """The released protocol's options (tests/tfrs_logq/test_parity.py checks their values)."""

    def test_config_round_trip_with_released_options(self):
        objective = make_objective(
            NUM_ITEMS,
            negatives="mixed",
            correction="none",
            num_negatives=16,
            mixture="paper",
            deduplicate=True,
            per_row=True,
            binary_reduction="mean",
            binary_accidental_hits=False,
            gbce_alpha="released",
            log_q="unigram",
            seed=2,
        )
        restored = RetrievalObjective.from_config(objective.get_config())
        self.assertEqual(restored.get_config(), objective.get_config())
        sampler = restored.task.sampler
        self.assertTrue(sampler.in_batch.deduplicate and sampler.uniform.per_row)

    def test_objectives_saved_before_the_sampler_argument_load(self):
        # A get_config of the old 17-argument objective: from_config builds its sampler.
        older = dict(
            name="retrieval_objective",
            trainable=True,
            dtype="float32",
            num_items=NUM_ITEMS,
            loss="sampled_softmax",
            negatives="mixed",
            correction="none",
            num_negatives=16,
            gbce_t=0.75,
            mixture="paper",
            global_batch=False,
            temperature=None,
            seed=2,
            deduplicate=True,
            in_batch_log_q="unigram",
            per_row=True,
            binary_reduction="sum",
            binary_accidental_hits=True,
            gbce_alpha="paper",
        )
        restored = RetrievalObjective.from_config(older)
        sampler = restored.task.sampler
        self.assertEqual(
            (
                type(sampler).__name__,
                sampler.uniform.num_negatives,
                sampler.in_batch.max_pool_size,
                sampler.in_batch.deduplicate,
                sampler.mixture,
                sampler.per_row,
                sampler.seed,
            ),
            ("MixedSampler", 8, 8, True, "paper", True, 2),
        )
        with self.assertRaisesRegex(
            TypeError,
            r"RetrievalObjective takes a built `sampler`; "
            r"the sampler's settings \(negatives, num_negatives\) go "
            r"to negatives.make_sampler",
        ):
            RetrievalObjective(NUM_ITEMS, negatives="mixed", num_negatives=8)

    def test_unused_settings_are_still_checked(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`negatives` must be one of 'in_batch', "
            r"'uniform', 'mixed'; received negatives='bogus'",
        ):
            make_objective(NUM_ITEMS, loss="bce", negatives="bogus")
        with self.assertRaisesRegex(
            ValueError,
            r"`correction` must be one of 'none', "
            r"'standard', 'standard_negatives', 'improved'; received "
            r"correction='bogus'",
        ):
            make_objective(NUM_ITEMS, loss="full_softmax", correction="bogus")
        with self.assertRaisesRegex(
            ValueError,
            r"`log_q` must be one of 'horvitz_thompson', "
            r"'unigram'; received log_q='raw'",
        ):
            make_objective(NUM_ITEMS, negatives="uniform", correction="none", log_q="raw")
        with self.assertRaisesRegex(
            TypeError,
            r"`deduplicate` must be a bool; received "
            r"deduplicate='yes'",
        ):
            make_objective(NUM_ITEMS, negatives="uniform", correction="none", deduplicate="yes")
        with self.assertRaisesRegex(
            ValueError,
            r"loss='full_softmax' scores the whole catalog "
            r"and takes no sampler; received sampler=UniformSampler\("
            r"seed=None, num_items=5, num_negatives=2, first_id=0, "
            r"per_row=False, vocabulary=None\)",
        ):
            RetrievalObjective(
                NUM_ITEMS, loss="full_softmax", sampler=negatives.UniformSampler(5, 2)
            )

    def test_bad_options(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`binary_reduction` must be one of 'sum', "
            r"'mean'; received binary_reduction='max'",
        ):
            make_objective(NUM_ITEMS, loss="bce", binary_reduction="max")
        with self.assertRaisesRegex(
            ValueError,
            r"`gbce_alpha` must be one of 'paper', "
            r"'released'; received gbce_alpha='gsasrec'",
        ):
            make_objective(NUM_ITEMS, loss="gbce", gbce_alpha="gsasrec")
        with self.assertRaisesRegex(
            ValueError,
            r"`log_q` must be one of "
            r"'horvitz_thompson', 'unigram'",
        ):
            make_objective(NUM_ITEMS, correction="none", log_q="raw")
        with self.assertRaisesRegex(
            ValueError,
            r"MixedSampler\(deduplicate=True\) needs "
            r"mixture='paper'",
        ):
            make_objective(NUM_ITEMS, negatives="mixed", correction="none", deduplicate=True)


class ExampleWeightTest(tf.test.TestCase):
    """Reward weights: each example's loss scaled, the pool and Q left as drawn."""

    def _objective(self, estimator):
        return make_objective(
            NUM_ITEMS, negatives="in_batch", correction="improved", probabilities=estimator, seed=0
        )

    def test_weights_scale_each_example_and_zero_weights_stay_in_q(self):
        rng = np.random.default_rng(0)
        queries = tf.constant(rng.normal(size=[6, 8]), tf.float32)
        table = tf.constant(rng.normal(size=[NUM_ITEMS + 1, 8]), tf.float32)
        ids = tf.constant([3, 9, 3, 40, 7, 9], tf.int64)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        weight = tf.constant([1.0, 0.0, 2.0, 1.0, 0.5, 0.0])
        probabilities = np.full(NUM_ITEMS + 1, 1.0 / NUM_ITEMS, np.float32)
        plain = self._objective(probabilities)
        # Per-example losses: the unweighted mean over one-hot weights, times the count.
        per_example = np.array(
            [
                6 * float(plain(queries, ids, embed, example_weight=tf.one_hot(row, 6)))
                for row in range(6)
            ]
        )
        weighted = float(plain(queries, ids, embed, example_weight=weight))
        self.assertAllClose(weighted, (per_example * weight.numpy()).sum() / 6, rtol=1e-5)
        self.assertAllClose(
            float(plain(queries, ids, embed, example_weight=tf.ones([6]))),
            float(plain(queries, ids, embed)),
            rtol=1e-6,
        )
        # A streaming estimator counts every drawn row, zero-weight ones too.
        counted = {}
        for name, kwargs in (("weighted", dict(example_weight=weight)), ("plain", {})):
            estimator = frequency.CountMinSketchEstimator(width=1024, seed=0)
            self._objective(estimator)(queries, ids, embed, training=True, **kwargs)
            counted[name] = estimator.log_q(tf.constant([3, 9, 40, 7], tf.int64)).numpy()
        self.assertAllClose(counted["weighted"], counted["plain"])

    def test_a_weight_of_two_equals_the_example_seen_twice(self):
        # The full softmax (no pool to change): weights [2, 1, 1] give the summed loss of
        # the examples [a, a, b, c]; the objective divides by the examples' number.
        rng = np.random.default_rng(1)
        queries = tf.constant(rng.normal(size=[3, 8]), tf.float32)
        table = tf.constant(rng.normal(size=[NUM_ITEMS + 1, 8]), tf.float32)
        ids = tf.constant([3, 9, 40], tf.int64)
        objective = make_objective(NUM_ITEMS, loss="full_softmax")
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        weighted = objective(
            queries,
            ids,
            embed,
            all_item_embeddings=lambda: table,
            example_weight=tf.constant([2.0, 1.0, 1.0]),
        )
        twice = objective(
            tf.gather(queries, [0, 0, 1, 2]),
            tf.gather(ids, [0, 0, 1, 2]),
            embed,
            all_item_embeddings=lambda: table,
        )
        self.assertAllClose(3 * float(weighted), 4 * float(twice), rtol=1e-6)


class CosineAndScaleTest(tf.test.TestCase):
    """--l2_normalize, --temperature and --log_q_scale reach the objective and the models."""

    def test_cosine_two_tower_scores_unit_embeddings_everywhere(self):
        objective = make_objective(
            NUM_ITEMS,
            negatives="in_batch",
            correction="improved",
            probabilities=np.full(NUM_ITEMS + 1, 1 / NUM_ITEMS, np.float32),
            temperature=0.1,
            l2_normalize=True,
            log_q_scale=0.5,
        )
        model = TwoTower(20, NUM_ITEMS, objective, dim=8)
        features = {
            "user": tf.constant([1, 2, 3]),
            "history": tf.constant([[1, 2], [3, 0], [4, 5]]),
            "item": tf.constant([7, 8, 9]),
        }
        for embeddings in (model.query_embeddings(features), model.item_embeddings()[1:]):
            self.assertAllClose(tf.norm(embeddings, axis=-1), tf.ones(len(embeddings)), rtol=1e-5)
        self.assertEqual((objective.task.temperature, objective.task.log_q_scale), (0.1, 0.5))
        # The loss equals the task's on the unit embeddings (what evaluation ranks by).
        query = model.query_embeddings(features)
        items = model.candidate_embeddings(features["item"])
        want = LogQRetrieval(
            correction="improved",
            temperature=0.1,
            log_q_scale=0.5,
            sampler=negatives.InBatchSampler(
                probabilities=np.full(NUM_ITEMS + 1, 1 / NUM_ITEMS, np.float32)
            ),
        )(query, items, candidate_ids=tf.constant([7, 8, 9], tf.int64), training=False)
        self.assertAllClose(model.compute_loss(features, training=False), want / 3, rtol=1e-5)
        restored = type(objective).from_config(objective.get_config())
        self.assertEqual((restored.l2_normalize, restored.log_q_scale), (True, 0.5))

    def test_a_shared_item_table_is_one_table_read_by_both_towers(self):
        objective = make_objective(
            NUM_ITEMS,
            negatives="in_batch",
            correction="improved",
            probabilities=np.full(NUM_ITEMS + 1, 1 / NUM_ITEMS, np.float32),
        )
        shared = TwoTower(20, NUM_ITEMS, objective, dim=8, share_item_table=True)
        own = TwoTower(20, NUM_ITEMS, objective, dim=8)
        features = {
            "user": tf.constant([1, 2, 3]),
            "history": tf.constant([[1, 2], [3, 0], [4, 5]]),
            "item": tf.constant([7, 8, 9]),
        }
        for model in (shared, own):
            model.compute_loss(features)
        table_rows = lambda m: sorted(  # noqa: E731
            w.shape[0] for w in m.trainable_weights if w.shape[0] == NUM_ITEMS + 1
        )
        self.assertEqual(table_rows(shared), [NUM_ITEMS + 1])
        self.assertEqual(table_rows(own), [NUM_ITEMS + 1, NUM_ITEMS + 1])
        # The history's pooled rows are the candidate table's: a history item's gradient
        # reaches the one table.
        with tf.GradientTape() as tape:
            loss = shared.compute_loss(features, training=True)
        gradient = tape.gradient(loss, shared.item_embedding.embeddings)
        rows = tf.convert_to_tensor(gradient)
        self.assertGreater(float(tf.reduce_sum(tf.abs(rows[1]))), 0.0)  # History only.
        with self.assertRaisesRegex(TypeError, "share_item_table.*received"):
            TwoTower(20, NUM_ITEMS, objective, dim=8, share_item_table="yes")
        with self.assertRaisesRegex(ValueError, "needs --model=two_tower; received --model=sasrec"):
            configs.validate(configs.PRESETS["smoke"].replace(share_item_table=True))

    def test_pipeline_flags(self):
        config = configs.validate(
            configs.PRESETS["smoke"].replace(l2_normalize=True, temperature=0.1, log_q_scale=0.5)
        )
        settings = config.loss.objective_settings()
        self.assertEqual(
            (settings["l2_normalize"], settings["temperature"], settings["log_q_scale"]),
            (True, 0.1, 0.5),
        )
        self.assertIsNone(configs.PRESETS["smoke"].loss.objective_settings()["temperature"])
        for name, value, message in (
            ("temperature", 0.0, "must be positive"),
            ("log_q_scale", -1.0, "must be >= 0"),
            ("log_q_scale", float("inf"), "must be a finite number"),
        ):
            with self.assertRaisesRegex(ValueError, rf"--{name} {message}"):
                configs.validate(configs.PRESETS["smoke"].replace(**{name: value}))


class BinaryLossTest(tf.test.TestCase, parameterized.TestCase):
    """bce / gbce draw each example's own negatives (SASRec, gSASRec), scored either against
    the whole table (small catalogs) or by gathering them; both equal numpy."""

    NUM_ITEMS, K = 40, 8  # 40 <= 16 * 8: the whole-table path when the table is given.

    def _fixture(self):
        """(table, query, positives) for 5 examples over NUM_ITEMS items, dimension 4."""
        return (
            tf.random.normal([self.NUM_ITEMS + 1, 4], seed=1),
            tf.random.normal([5, 4], seed=2),
            tf.constant([3, 7, 3, 9, 40], tf.int64),
        )

    @parameterized.parameters(("bce", True), ("bce", False), ("gbce", True), ("gbce", False))
    def test_loss_matches_numpy(self, loss, whole_table):
        num_items, k = self.NUM_ITEMS, self.K
        table, query, positives = self._fixture()
        objective = make_objective(num_items, loss=loss, num_negatives=k, seed=4)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        got = objective(
            query, positives, embed, all_item_embeddings=(lambda: table) if whole_table else None
        )
        conftest.reset_draws(objective)  # The same draws again.
        neg = objective.uniform(positives)
        ids = neg.ids.numpy()
        self.assertEqual(ids.shape, (5, k))
        self.assertGreater(len({tuple(row) for row in ids}), 1)  # Not one draw for all rows.
        q, t = query.numpy(), table.numpy()
        beta = 1.0 if loss == "bce" else losses.gbce_beta(k, num_items, 0.75)
        want = reference.bce(
            np.sum(q * t[positives.numpy()], axis=1),
            np.einsum("qd,qkd->qk", q, t[ids]),
            neg.mask.numpy(),
            beta=beta,
        )
        self.assertAllClose(got, want.mean(), rtol=1e-5)

    @parameterized.parameters(
        ("uniform", "none"), ("mixed", "improved"), ("mixed", "standard_negatives")
    )
    def test_per_row_sampled_softmax_paths_agree(self, negatives, correction):
        # Per-row draws scored as columns of one matmul against the table equal the same
        # draws embedded one by one, in value and in gradients.
        num_items, k = self.NUM_ITEMS, self.K
        table, query, positives = self._fixture()
        table = tf.Variable(table)
        probabilities = np.full(num_items + 1, 1.0 / num_items, np.float32)
        results = []
        for whole_table in (True, False):
            objective = make_objective(
                num_items,
                negatives=negatives,
                correction=correction,
                num_negatives=k,
                probabilities=probabilities,
                per_row=True,
                mixture="paper",
                seed=4,
            )
            tf.random.set_seed(0)  # The same negatives on both paths.
            with tf.GradientTape() as tape:
                tape.watch(query)
                value = objective(
                    query,
                    positives,
                    lambda i: tf.gather(table, i),
                    all_item_embeddings=(lambda: table) if whole_table else None,
                )
            results.append(
                [value] + [tf.convert_to_tensor(g) for g in tape.gradient(value, [query, table])]
            )
        for whole, gathered in zip(*results):
            self.assertAllClose(whole, gathered, rtol=1e-5, atol=1e-6)
        self.assertGreater(float(tf.norm(results[0][2])), 0.0)

    @parameterized.parameters("bce", "gbce")
    def test_both_paths_have_the_same_gradients(self, loss):
        num_items, k = self.NUM_ITEMS, self.K
        table, query, positives = self._fixture()
        table = tf.Variable(table)
        gradients = []
        for whole_table in (True, False):
            objective = make_objective(num_items, loss=loss, num_negatives=k, seed=4)
            tf.random.set_seed(0)  # The same negatives on both paths.
            with tf.GradientTape() as tape:
                tape.watch(query)
                value = objective(
                    query,
                    positives,
                    lambda i: tf.gather(table, i),
                    all_item_embeddings=(lambda: table) if whole_table else None,
                )
            gradients.append(
                [tf.convert_to_tensor(g) for g in tape.gradient(value, [query, table])]
            )
        (query_whole, table_whole), (query_gathered, table_gathered) = gradients
        self.assertGreater(float(tf.norm(table_whole)), 0.0)
        self.assertAllClose(query_whole, query_gathered, rtol=1e-5, atol=1e-6)
        self.assertAllClose(table_whole, table_gathered, rtol=1e-5, atol=1e-6)


class TrainingTest(tf.test.TestCase, parameterized.TestCase):
    """About 80 steps of every loss family make the model better at its objective.

    Losses are noisy from epoch to epoch (fresh negatives, and the improved
    weight), and BCE's flattens within the first epoch (it learns popularity
    fast), so the measure is held-out Recall@10 against the untrained model's
    (2x for bce, gbce and full softmax; 1.5x for sampled softmax, whose 80
    steps of fresh negatives gave 2.1-2.8x). Uncorrected in-batch negatives
    learn popularity bias, which can lower held-out recall on this catalog:
    there the logged mean P_hat of the positive, which rises as the model
    learns its objective, is the measure.
    """

    def _assert_learned(self, history):
        p_hat = history["mean_p_hat"]
        self.assertGreater(p_hat[-1], 1.1 * p_hat[0], msg=str(history))

    @staticmethod
    def _recall_at_10(model, split):
        queries = np.concatenate(
            [
                model.query_embeddings(batch["inputs"]).numpy()
                for batch in builders.eval_queries(split.test.histories, split.test.users, 20)
            ]
        )
        top = retrieval.exact_top_k(
            queries, model.item_embeddings().numpy(), 10, exclude=split.test.histories
        )
        return retrieval.recall_ndcg(top, split.test.targets, (10,))["recall@10"]

    @parameterized.named_parameters(
        ("bce", dict(loss="bce", num_negatives=8)),
        ("gbce", dict(loss="gbce")),
        ("full_softmax", dict(loss="full_softmax")),
        ("uniform", dict(negatives="uniform", correction="none")),
        ("in_batch_none", dict(negatives="in_batch", correction="none")),
        ("in_batch_standard", dict(negatives="in_batch", correction="standard")),
        ("in_batch_improved", dict(negatives="in_batch", correction="improved")),
        ("mixed_improved", dict(negatives="mixed", correction="improved")),
        (
            "mixed_estimator",
            dict(negatives="mixed", correction="improved", probabilities="count_min"),
        ),
    )
    def test_sasrec_loss_goes_down(self, kwargs):
        tf.keras.utils.set_random_seed(0)
        data, split, probabilities = _data()
        kwargs = dict(kwargs)
        if kwargs.get("probabilities") == "count_min":
            kwargs["probabilities"] = frequency.CountMinSketchEstimator(width=1024, depth=2)
        kwargs.setdefault("probabilities", probabilities)
        kwargs.setdefault("num_negatives", 32)
        model = SASRec(
            data.num_items,
            make_objective(data.num_items, seed=1, **kwargs),
            max_length=20,
            dim=16,
            num_blocks=1,
            dropout=0.0,
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(0.003 if kwargs.get("loss") == "gbce" else 0.01)
        )
        dataset = builders.sasrec_dataset(split.train, 20, 32, seed=0)
        model.compute_loss(next(iter(dataset)), training=False)  # Builds the model.
        untrained = self._recall_at_10(model, split)
        history = model.fit(dataset, steps_per_epoch=20, epochs=4, verbose=0).history
        if kwargs.get("negatives") == "in_batch" and kwargs.get("correction") == "none":
            self._assert_learned(history)  # Popularity-biased: held-out recall can fall.
        else:
            trained = self._recall_at_10(model, split)
            factor = 2.0 if "loss" in kwargs else 1.5
            self.assertGreater(trained, factor * untrained, msg=f"{untrained} -> {trained}")
        if kwargs.get("correction") == "improved":
            self.assertAllClose(history["mean_w"], 1.0 - np.array(history["mean_p_hat"]))

    def test_two_tower_loss_goes_down(self):
        tf.keras.utils.set_random_seed(0)
        data, split, probabilities = _data()
        model = TwoTower(
            data.num_users,
            data.num_items,
            make_objective(
                data.num_items,
                negatives="mixed",
                num_negatives=32,
                probabilities=probabilities,
                seed=1,
            ),
            dim=16,
        )
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
        dataset = builders.two_tower_dataset(split.train, 10, 64, seed=0)
        history = model.fit(dataset, steps_per_epoch=25, epochs=2, verbose=0).history
        self._assert_learned(history)
        self.assertEqual(model.item_embeddings().shape, (NUM_ITEMS + 1, 16))


class DropoutTest(tf.test.TestCase):
    """sasrec.Dropout: 16-bit draws from the layer's generator, Keras's Dropout otherwise."""

    def setUp(self):
        super().setUp()
        tf.keras.backend.experimental.enable_tf_random_generator()  # As the pipelines do.

    def test_mask_rate_scale_and_inference(self):
        from tfrs_logq.models import sasrec  # pylint: disable=import-outside-toplevel

        layer = sasrec.Dropout(0.3, seed=5)
        ones = tf.ones([400, 501])  # An odd number of units: the last 32-bit draw is split.
        out = layer(ones, training=True).numpy()
        dropped = np.mean(out == 0.0)
        # Keep probability 1 - ceil(0.3 * 2^16) / 2^16; 200,400 units: se 0.001.
        self.assertAllClose(dropped, np.ceil(0.3 * 65536) / 65536, atol=0.005)
        self.assertAllClose(np.unique(out), [0.0, 1.0 / 0.7])
        self.assertAllClose(out.mean(), 1.0, atol=0.01)
        self.assertAllEqual(layer(ones, training=False), ones)
        # Half the generator's draws of Keras's Dropout: its state advances by half as much.
        keras_layer = tf.keras.layers.Dropout(0.3, seed=5)
        keras_layer(ones, training=True)
        ours = layer._random_generator._generator  # pylint: disable=protected-access
        theirs = keras_layer._random_generator._generator  # pylint: disable=protected-access
        before = ours.state.numpy().copy()
        layer(ones, training=True)
        keras_before = theirs.state.numpy().copy()
        keras_layer(ones, training=True)
        ours_step = ours.state.numpy()[0] - before[0]
        theirs_step = theirs.state.numpy()[0] - keras_before[0]
        self.assertLess(ours_step, 0.6 * theirs_step)

    def test_same_state_same_mask_compiled_too(self):
        from tfrs_logq.models import sasrec  # pylint: disable=import-outside-toplevel

        layer = sasrec.Dropout(0.5, seed=1)
        x = tf.ones([8, 33])
        layer(x, training=True)
        generator = layer._random_generator._generator  # pylint: disable=protected-access
        state = generator.state.numpy().copy()
        compiled = tf.function(lambda t: layer(t, training=True), jit_compile=True)
        first = compiled(x).numpy()
        generator.state.assign(state)
        self.assertAllEqual(layer(x, training=True), first)
        self.assertFalse(np.all(first == first[0, 0]))

    def test_config_round_trip(self):
        from tfrs_logq.models import sasrec  # pylint: disable=import-outside-toplevel

        layer = sasrec.Dropout(0.25, seed=3, name="drop")
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(layer))
        self.assertIsInstance(restored, sasrec.Dropout)
        self.assertEqual(restored.get_config(), layer.get_config())


if __name__ == "__main__":
    tf.test.main()


class ReleasedAfterTrainingTest(tf.test.TestCase, parameterized.TestCase):
    """A trained model's graph, and so its tables and optimizer slots, are freed with it:
    tf-keras's cross-replica sum of one replica's gradients registered a custom gradient per
    traced step in TensorFlow's process-wide registry, which held the step's graph."""

    @parameterized.named_parameters(
        ("composite_legacy_adagrad", "adagrad"), ("keras_adam", "adam"), ("sasrec", "sasrec")
    )
    def test_the_step_graph_dies_with_the_model(self, optimizer):
        import gc  # pylint: disable=import-outside-toplevel
        import weakref  # pylint: disable=import-outside-toplevel

        from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel

        from pipelines import experiment  # pylint: disable=import-outside-toplevel

        def registered():
            return sum(k.startswith("CustomGradient") for k in ops._gradient_registry._registry)

        data, split, probabilities = _data()
        before = registered()

        def train():
            objective = make_objective(
                data.num_items, negatives="in_batch", probabilities=probabilities, seed=1
            )
            if optimizer == "sasrec":
                model = SASRec(data.num_items, objective, max_length=10, dim=8, num_blocks=1)
                dataset = builders.sasrec_dataset(split.train, 10, 32, seed=0)
                model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
            else:
                model = TwoTower(data.num_users, data.num_items, objective, dim=8)
                dataset = builders.two_tower_dataset(split.train, 10, 32, seed=0)
                model(dict(user=tf.zeros([1], tf.int32), history=tf.zeros([1, 10], tf.int32)))
                model.item_embeddings(tf.zeros([1], tf.int32))
                training = configs.TrainingConfig(
                    learning_rate=0.01, table_optimizer=optimizer, table_learning_rate=0.1
                )
                model.compile(optimizer=experiment.make_optimizer(training, model))
            history = model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0).history
            self.assertTrue(np.isfinite(history["loss"][-1]))
            steps = model.train_function._list_all_concrete_functions()  # pylint: disable=protected-access
            self.assertNotEmpty(steps)
            return [weakref.ref(step.graph) for step in steps]

        graphs = train()
        gc.collect()
        self.assertEqual(registered(), before)
        self.assertEqual([g() for g in graphs], [None] * len(graphs), "a step outlived its model")
