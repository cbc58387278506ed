"""Tests of tfrs_logq.frequency: StaticFrequency and the derived inclusion probability."""

import numpy as np
import tensorflow as tf

from tfrs_logq import frequency


class StaticFrequencyTest(tf.test.TestCase):

    def test_log_q_and_inclusion_probability_match_numpy(self):
        q = np.array([0.5, 0.3, 0.15, 0.05])
        freq = frequency.StaticFrequency(probabilities=q)
        ids = tf.constant([2, 0, 3], tf.int64)
        self.assertAllClose(freq.log_q(ids), np.log(q[[2, 0, 3]]))
        self.assertAllClose(freq(ids), np.log(q[[2, 0, 3]]))
        for n in (1, 7, 1000):
            self.assertAllClose(freq.log_inclusion_probability(ids, n),
                                np.log(1 - (1 - q[[2, 0, 3]]) ** n), rtol=1e-5)
        # Exact: 1 - (1 - 1/2)^3 = 7/8.
        self.assertAllClose(freq.log_inclusion_probability(tf.constant([0]), 3), [np.log(7 / 8)])

    def test_inclusion_probability_is_accurate_for_tiny_q(self):
        freq = frequency.StaticFrequency(probabilities=[1e-9, 1.0 - 1e-9])
        # 1 - (1 - 1e-9)^10 = 1e-8 to first order; naive float32 arithmetic gives 0.
        self.assertAllClose(freq.log_inclusion_probability(tf.constant([0]), 10),
                            [np.log(1e-8)], rtol=1e-4)

    def test_from_counts(self):
        freq = frequency.StaticFrequency.from_counts([6, 3, 1])
        self.assertAllClose(tf.exp(freq.log_q(tf.constant([0, 1, 2]))), [0.6, 0.3, 0.1])

    def test_config_round_trip_and_checkpoint(self):
        freq = frequency.StaticFrequency(probabilities=[0.7, 0.2, 0.1], name="static")
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(freq))
        self.assertIsInstance(restored, frequency.StaticFrequency)
        self.assertEqual(restored.get_config(), freq.get_config())
        self.assertEqual(restored.num_items, 3)
        self.assertEqual(freq.trainable_weights, [])
        self.assertLen(freq.non_trainable_weights, 1)

    def test_as_frequency(self):
        self.assertIsNone(frequency.as_frequency(None))
        freq = frequency.StaticFrequency(probabilities=[0.5, 0.5])
        self.assertIs(frequency.as_frequency(freq), freq)
        self.assertIsInstance(frequency.as_frequency(np.array([0.5, 0.5])),
                              frequency.StaticFrequency)
        from_fn = frequency.as_frequency(lambda ids: tf.fill(tf.shape(ids), 0.25))
        self.assertAllClose(from_fn.log_q(tf.constant([1, 2])), np.log([0.25, 0.25]))

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"`counts` must be a non-empty 1-D array of "
                                    r"positive counts \(add a smoothing pseudo-count for unseen "
                                    r"items\); received counts=array\(\[2., 0.\]\)"):
            frequency.StaticFrequency.from_counts([2, 0])
        freq = frequency.StaticFrequency(probabilities=[0.5, 0.5])
        with self.assertRaisesRegex(TypeError, r"`ids` must be an integer tensor of item ids; "
                                    r"received ids with dtype float32"):
            freq.log_q(tf.constant([0.0]))
        with self.assertRaisesRegex(ValueError, r"`num_draws` must be a positive integer; "
                                    r"received num_draws=0"):
            freq.log_inclusion_probability(tf.constant([0]), 0)
        with self.assertRaisesRegex(ValueError, r"`probabilities` must have rank 1; received "
                                    r"probabilities with shape \(1, 2\)"):
            frequency.StaticFrequency(probabilities=[[0.5, 0.5]])
        with self.assertRaisesRegex(NotImplementedError, r"A sampler built with a callable "
                                    r"`probabilities` cannot be serialized"):
            frequency.as_frequency(lambda ids: ids).get_config()


if __name__ == "__main__":
    tf.test.main()
