"""--synthetic_zipf: the web-scale log's popularity exponent (issue 48's skew sweep), validated,
in the cache directory's name only when it is not 1.0, and passed on to the log's draw."""

import hashlib
import json
import os
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from pipelines import configs
from pipelines.data import logs
from pipelines.data import web_synthetic


def _head_share(catalog: web_synthetic.WebCatalog, share: float = 0.01) -> float:
    """The law's share of one day's events on the top `share` of the items."""
    marginal = np.sort(catalog.item_marginal(0))[::-1]
    return float(marginal[: int(share * len(marginal))].sum() / marginal.sum())


class SyntheticZipfTest(tf.test.TestCase):
    def test_exponents_change_the_head_share(self):
        shares = [
            _head_share(web_synthetic.make_catalog(20000, 300, 5, exponent=exponent, seed=1))
            for exponent in (0.8, 1.0, 1.2)
        ]
        # The top 1% of 20,000 items: 0.28 of the events at 0.8, 0.69 at 1.2.
        self.assertLess(shares[0] + 0.2, shares[1])
        self.assertLess(shares[1] + 0.1, shares[2])

    def test_the_default_log_is_unchanged(self):
        # The digest of this log before --synthetic_zipf existed (commit 4722eff).
        catalog = web_synthetic.make_catalog(600, 300, 5, cluster_size=100, seed=1)
        events = web_synthetic.draw_events(catalog, 8.0, seed=1)
        digest = hashlib.sha256()
        for key in ("user", "item", "time"):
            digest.update(np.ascontiguousarray(events[key]).tobytes())
        digest.update(catalog.base.tobytes())
        self.assertEqual(
            digest.hexdigest(), "e29560e2c2f372ce4077669c498c4721ea057334f7e63bc1bbb2e19907628ff3"
        )
        np.testing.assert_array_equal(
            catalog.base,
            web_synthetic.make_catalog(600, 300, 5, cluster_size=100, exponent=1.0, seed=1).base,
        )

    def test_directory_name_carries_the_exponent_only_off_the_default(self):
        data = configs.PRESETS["industrial_smoke"].data
        with mock.patch.dict(os.environ, {logs.CACHE_ENV: "/cache"}):
            default = logs.web_synthetic_dir(data)
            skewed = logs.web_synthetic_dir(
                configs.PRESETS["industrial_smoke"].replace(synthetic_zipf=1.2).data
            )
        self.assertEqual(
            default, os.path.join("/cache", "web_synthetic", "items5000-users2000-days6-events12")
        )
        self.assertEqual(skewed, default + "-zipf1.2")

    def test_validated(self):
        base = configs.PRESETS["industrial_smoke"]
        self.assertEqual(
            configs.validate(base.replace(synthetic_zipf=0.8)).data.synthetic_zipf, 0.8
        )
        for bad in (0.0, -1.0, float("inf")):
            with self.assertRaisesRegex(ValueError, "--synthetic_zipf must be"):
                configs.validate(base.replace(synthetic_zipf=bad))
        with self.assertRaisesRegex(ValueError, "`exponent` must be a finite number > 0"):
            web_synthetic.make_catalog(100, 10, 3, exponent=0)

    def test_flows_to_the_log_and_a_log_of_another_exponent_is_refused(self):
        config = configs.PRESETS["industrial_smoke"].replace(
            synthetic_items=600,
            synthetic_users=200,
            synthetic_days=3,
            synthetic_events_per_user=4.0,
            synthetic_zipf=1.3,
        )
        with (
            tempfile.TemporaryDirectory() as cache,
            mock.patch.dict(os.environ, {logs.CACHE_ENV: cache}),
        ):
            logs.event_files(config.data)
            directory = logs.web_synthetic_dir(config.data)
            self.assertTrue(directory.endswith("-zipf1.3"))
            with open(os.path.join(directory, "log.json")) as f:
                self.assertEqual(json.load(f)["zipf_exponent"], 1.3)
            truth = web_synthetic.read_truth(directory)
            np.testing.assert_allclose(
                truth.base, web_synthetic.make_catalog(600, 200, 3, exponent=1.3).base
            )
            # The same directory given as --data_path with another exponent.
            other = config.replace(data_path=directory, synthetic_zipf=1.0)
            with self.assertRaisesRegex(
                ValueError, "drawn with Zipf exponent 1.3; received --synthetic_zipf=1"
            ):
                logs.event_files(other.data)

    def test_the_log_seed_draws_a_fresh_log_in_its_own_directory(self):
        config = configs.PRESETS["industrial_smoke"].replace(
            synthetic_items=600,
            synthetic_users=200,
            synthetic_days=3,
            synthetic_events_per_user=4.0,
        )
        with (
            tempfile.TemporaryDirectory() as cache,
            mock.patch.dict(os.environ, {logs.CACHE_ENV: cache}),
        ):
            logs.event_files(config.data)
            seeded = config.replace(synthetic_log_seed=7)
            logs.event_files(seeded.data)
            default = logs.web_synthetic_dir(config.data)
            directory = logs.web_synthetic_dir(seeded.data)
            self.assertEqual(directory, default + "-seed7")
            with open(os.path.join(directory, "log.json")) as f:
                self.assertEqual(json.load(f)["seed"], 7)
            base = web_synthetic.read_truth(default).base
            np.testing.assert_allclose(
                web_synthetic.read_truth(directory).base,
                web_synthetic.make_catalog(600, 200, 3, seed=7).base,
            )
            self.assertGreater(np.abs(web_synthetic.read_truth(directory).base - base).max(), 0.1)
            # The training seed leaves the log alone.
            self.assertEqual(logs.web_synthetic_dir(config.replace(seed=3).data), default)
            other = config.replace(data_path=directory)
            with self.assertRaisesRegex(
                ValueError, "drawn with seed 7; received --synthetic_log_seed=0"
            ):
                logs.event_files(other.data)
            with self.assertRaisesRegex(ValueError, "--synthetic_log_seed must be"):
                configs.validate(config.replace(synthetic_log_seed=-1))

    def test_a_log_written_twice_keeps_the_first(self):
        """Two runs starting together on a new cache both draw the log: the second to finish
        keeps the first's files (which the first may be reading), also when the first renames
        its copy into place between the second's check and its own rename."""
        catalog = web_synthetic.make_catalog(300, 100, 3)
        events = web_synthetic.draw_events(catalog, 3.0)
        with tempfile.TemporaryDirectory() as cache:
            directory = os.path.join(cache, "log")

            def written_in() -> float:
                with open(os.path.join(directory, "log.json")) as f:
                    return json.load(f)["seconds_draw_and_write"]

            web_synthetic.write_log(directory, catalog, events, seconds=1.0)
            first = os.stat(os.path.join(directory, "day-0000.parquet")).st_ino
            web_synthetic.write_log(directory, catalog, events, seconds=2.0)
            self.assertEqual(os.stat(os.path.join(directory, "day-0000.parquet")).st_ino, first)
            self.assertEqual(written_in(), 1.0)
            # The race: the other copy (log.json 1.0) lands just before this one's rename.
            winner = os.path.join(cache, "winner")
            os.rename(directory, winner)
            rename = os.rename

            def lose_the_race(source, target):
                rename(winner, target)
                rename(source, target)  # Raises: the target is there and not empty.

            with mock.patch.object(web_synthetic.os, "rename", side_effect=lose_the_race):
                web_synthetic.write_log(directory, catalog, events, seconds=3.0)
            self.assertEqual(written_in(), 1.0)
            self.assertEqual(sorted(os.listdir(cache)), ["log"])  # No temporary left.


if __name__ == "__main__":
    tf.test.main()
