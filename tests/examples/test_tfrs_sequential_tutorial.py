"""examples.tfrs_sequential_tutorial at tiny size on a synthetic ratings file."""

import os
import tempfile

import pytest
import tensorflow as tf

from examples import tfrs_sequential_tutorial as tutorial


class SequentialTutorialTest(tf.test.TestCase):
    @pytest.mark.integration
    def test_windows_and_every_task_runs(self):
        path = os.path.join(tempfile.mkdtemp(), "ratings.dat")
        with open(path, "w", encoding="utf-8") as f:  # User 1: 3 events, user 2: 12.
            for user, movies in ((1, [5, 7, 9]), (2, list(range(100, 112)))):
                for t, movie in enumerate(movies):
                    f.write(f"{user}::{movie}::4::{1000 + t}\n")
        train, test, movies = tutorial.examples(path)
        self.assertEqual(len(movies), 15)
        self.assertEqual(train["context"].shape, (11, 10))
        self.assertEqual(test["label"].tolist(), [["9"], ["111"]])
        self.assertEqual(test["context"][0].tolist(), ["0"] * 8 + ["5", "7"])
        self.assertEqual(test["context"][1].tolist(), [str(m) for m in range(101, 111)])
        for kind in tutorial.TASKS:
            result = tutorial.run(
                kind, train, test, movies, seed=0, epochs=1, batch_size=4, dim=4, num_uniform=4
            )
            self.assertEqual(sorted(result), [10, 50, 100])
            self.assertEqual(result[50], 1.0)  # 15 movies: the top 50 holds every one.
            self.assertTrue(0.0 <= result[10] <= 1.0)

    def test_results_resume_and_refuse_other_settings(self):
        path = os.path.join(tempfile.mkdtemp(), "results.json")
        settings = dict(epochs=3, batch_size=12800)
        self.assertEqual(tutorial.load_results(path, settings), {"settings": settings, "runs": {}})
        with open(path, "w", encoding="utf-8") as f:
            f.write(
                '{"settings": {"epochs": 3, "batch_size": 12800}, '
                '"runs": {"improved/0": {"top_10": 0.25}}}'
            )
        self.assertEqual(
            tutorial.load_results(path, settings)["runs"], {"improved/0": {"top_10": 0.25}}
        )
        with self.assertRaisesRegex(Exception, "batch_size.: 256"):
            tutorial.load_results(path, dict(epochs=3, batch_size=256))

    def test_summary_is_mean_and_sample_std_over_seeds(self):
        runs = {
            f"improved/{seed}": {"top_10": v, "top_50": 0.5, "top_100": 0.75}
            for seed, v in enumerate((0.1, 0.2, 0.3))
        }
        runs["tutorial/0"] = {"top_10": 0.125, "top_50": 0.25, "top_100": 0.5}
        self.assertEqual(
            tutorial.summary(runs)[2:],
            [
                "| tutorial | 1 | 0.1250 | 0.2500 | 0.5000 |",
                "| improved | 3 | 0.2000 ± 0.1000 | 0.5000 ± 0.0000 | 0.7500 ± 0.0000 |",
            ],
        )


@pytest.mark.slow
class MovieLensSubsetTest(tf.test.TestCase):
    """The example on the first 300 users of MovieLens-1M ($TFRS_LOGQ_DATA)."""

    def test_every_task_on_a_movielens_subset(self):
        try:
            path = tutorial.ratings_path()
        except FileNotFoundError as error:
            self.skipTest(f"MovieLens-1M is not here (it is not redistributed): {error}")
        train, test, movies = tutorial.examples(path, max_users=300)
        self.assertEqual(len(test["label"]), 300)
        self.assertEqual(train["context"].shape[1], 10)
        for kind in tutorial.TASKS:
            result = tutorial.run(
                kind, train, test, movies, seed=0, epochs=1, batch_size=256, dim=16, num_uniform=32
            )
            self.assertEqual(sorted(result), [10, 50, 100])
            # Better than chance: 100 of the subset's movies hold about 100 / |movies| of it.
            self.assertGreater(result[100], 100 / len(movies), kind)


if __name__ == "__main__":
    tf.test.main()
