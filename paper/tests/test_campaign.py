"""paper/campaign.sh, the campaign's queue, and paper/campaign_status.py."""

import json
import os
import re
import subprocess
import sys
import tempfile
from unittest import mock

import pytest
import tensorflow as tf

from paper import campaign_status
from paper import park
from paper import plan
from paper import report


@pytest.mark.integration
class CampaignScriptTest(tf.test.TestCase):
    """paper/campaign.sh: it parses, and every step and report it hands to paper.reproduce
    names a known profile and known rows."""

    SCRIPT = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "campaign.sh"
    )

    def test_parses_and_refuses_an_unknown_command(self):
        subprocess.run(["bash", "-n", self.SCRIPT], check=True)
        unknown = subprocess.run(
            ["bash", self.SCRIPT, "start"], capture_output=True, text=True, check=False
        )
        self.assertEqual(unknown.returncode, 2)
        self.assertIn("usage:", unknown.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            core = subprocess.run(
                ["bash", self.SCRIPT, "queue", "2"],
                capture_output=True,
                text=True,
                check=False,
                env=dict(os.environ, CAMPAIGN_DIR=tmp, LOG_DIR=tmp),
            )
        self.assertEqual(core.returncode, 2)
        self.assertIn("queue takes 0, 1 or nothing (both cores); received 2", core.stderr)
        # Only the commands that write files to keep take --commit.
        commit = subprocess.run(
            ["bash", self.SCRIPT, "status", "--commit"], capture_output=True, text=True, check=False
        )
        self.assertEqual(commit.returncode, 2)
        self.assertIn("watch [--commit]", commit.stderr)

    def test_park_dir_default_is_park_pys(self):
        env = {k: v for k, v in os.environ.items() if k != "TFRS_LOGQ_PARK_DIR"}
        shell = subprocess.run(
            ["bash", "-c", f'eval "$(grep "^PARK_DIR=" {self.SCRIPT})"; echo "$PARK_DIR"'],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        with mock.patch.dict(os.environ, {"TFRS_LOGQ_PARK_DIR": ""}):
            self.assertEqual(shell, os.path.realpath(park.park_dir()))

    def test_setup_takes_this_trees_head_and_park_keeps_archives_out_of_the_repository(self):
        with tempfile.TemporaryDirectory() as tmp:
            main, campaign = os.path.join(tmp, "main"), os.path.join(tmp, "campaign")
            parked = os.path.join(tmp, "parked")
            os.makedirs(main)
            git = ["git", "-C", main, "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(git + ["init", "-q"], check=True)
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "start"], check=True)
            head = subprocess.run(
                git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True
            ).stdout.strip()
            env = dict(
                os.environ,
                MAIN_DIR=main,
                CAMPAIGN_DIR=campaign,
                LOG_DIR=tmp,
                TFRS_LOGQ_PARK_DIR=parked,
                PYTHONPATH=os.path.dirname(os.path.dirname(self.SCRIPT)),
            )
            env.pop("CAMPAIGN_COMMIT", None)
            setup = subprocess.run(
                ["bash", self.SCRIPT, "setup"], capture_output=True, text=True, check=True, env=env
            )
            self.assertIn(f"campaign code: {head[:7]}", setup.stdout)
            self.assertIn(f"parked runs in {parked}", setup.stdout)
            self.assertEqual(
                subprocess.run(
                    ["git", "-C", campaign, "rev-parse", "HEAD"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip(),
                head,
            )
            # A parked run that has finished since: `park` removes its archive, commits nothing.
            name = os.path.join("ml1m_loo_official", "mixed-improved", "seed1")
            run = os.path.join(campaign, "runs", "reproduce", name)
            os.makedirs(run)
            with open(os.path.join(run, "metrics.json"), "w") as f:
                f.write("{}")
            archive = os.path.join(parked, name + ".tar.gz")
            os.makedirs(os.path.dirname(archive))
            with open(archive, "wb") as f:
                f.write(b"parked")
            park = subprocess.run(
                ["bash", self.SCRIPT, "park"], capture_output=True, text=True, check=True, env=env
            )
            self.assertIn(f"finished: {name} (its archive removed)", park.stdout)
            self.assertFalse(os.path.exists(archive))
            self.assertEqual(
                subprocess.run(
                    git + ["log", "--format=%s"], check=True, capture_output=True, text=True
                ).stdout,
                "start\n",
            )

    def test_steps_and_reports_name_known_profiles_and_rows(self):
        with open(self.SCRIPT) as f:
            text = f.read()
        tiers = dict(re.findall(r"^(TIER\d)=(\S+)$", text, re.M))
        text = re.sub(r"\$(TIER\d)", lambda m: tiers[m.group(1)], text)
        steps = re.findall(r'^  "(--profile=\w+ [^"|]*)\|([^"|]+)\|([^"|]+)"$', text, re.M)
        reports = re.findall(r'^  "(ml1m_\w+)\|(--profile=\w+ [^"]*)"$', text, re.M)
        self.assertLen(steps, 6)
        self.assertLen(reports, 4)
        names = set()
        for flags_part, *rows in steps + [
            (f, r) for _, f in reports for r in re.findall(r"--rows=(\S+)", f)
        ]:
            self.assertIn(re.search(r"--profile=(\w+)", flags_part).group(1), plan.PROFILES)
            names.update(",".join(rows).split(","))
        names.discard("-")  # A core with no rows in a step.
        self.assertContainsSubset(names, set(plan.ROWS_BY_NAME))

        # Within one experiment a row stays on one core: on both, the two drivers could train
        # one seed's directory at once.
        def experiment(flags_part):
            return re.sub(r"--seeds=\d+", "", flags_part)

        for step in steps:
            for other in steps:
                if experiment(step[0]) == experiment(other[0]):
                    self.assertEmpty(
                        set(step[1].split(",")) & set(other[2].split(",")) - {"-"}, (step, other)
                    )
        self.assertContainsSubset(
            {
                "mixed-standard",
                "mixed-improved",
                "mixed-standard_tfrs",
                "full_softmax",
                "in_batch-none",
                "in_batch-standard",
                "in_batch-improved_pool",
                "in_batch-standard_tfrs",
                "mixed-none",
                "uniform",
                "bce",
                "gbce",
            },
            names,
        )
        # The per-query files go where the reports look for them.
        self.assertIn(f"PER_QUERY_DIR=docs/results/{report.PER_QUERY_DIR} ", text)
        # Each report's file is the one its flags make reproduce write.
        for name, flags_part in reports:
            profile = re.search(r"--profile=(\w+)", flags_part).group(1)
            split = re.search(r"--split=(\w+)", flags_part).group(1)
            targets = re.search(r"--temporal_targets=(\w+)", flags_part)
            self.assertEqual(
                name,
                plan.experiment_name(
                    "ml-1m",
                    split,
                    profile,
                    temporal_targets=targets.group(1) if targets else "first",
                ),
            )

    def test_drive_skips_a_core_with_no_rows_in_a_step(self):
        # `--rows=` empty would make reproduce train every row of the split.
        script = (
            f'set -euo pipefail; eval "$(sed -n "/^STEPS=(/,/^)/p" {self.SCRIPT})"; '
            f'eval "$(sed -n "/^drive() {{/,/^}}/p" {self.SCRIPT})"; '
            'run() { echo "$*"; }; drive 1 a 2'
        )
        calls = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        self.assertLen(calls, 5)  # Six steps, one of them "-" on core 1.
        for call in calls:
            self.assertRegex(call, r"--rows=[a-z]")

    def test_status_lists_runs_in_progress_with_the_fewest_epochs_left(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs = os.path.join(tmp, "runs", "reproduce", "ml1m_loo_official")
            for row, progress in [
                (
                    "mixed-improved",
                    {"epochs": 91, "best": 0.1794, "best_epoch": 85, "seconds": 1.0},
                ),
                ("mixed-standard", {"epochs": 1, "best": None, "best_epoch": None, "seconds": 1.0}),
                ("full_softmax", {"epochs": 300, "best": 0.2, "best_epoch": 99, "finished": True}),
            ]:
                run = os.path.join(runs, row, "seed0")
                os.makedirs(run)
                for name, content in [
                    ("progress.json", progress),
                    ("config.json", {"patience": 200}),
                ]:
                    with open(os.path.join(run, name), "w") as f:
                        json.dump(content, f)
            with open(os.path.join(runs, "mixed-improved", "seed0", "train.log"), "w") as f:
                f.write("48/48 - 100s - loss: 1 - 100s/epoch\n48/48 - 200s - 200s/epoch\n")
            status = subprocess.run(
                ["bash", self.SCRIPT, "status"],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, CAMPAIGN_DIR=tmp, LOG_DIR=tmp),
            )
        # Best after epoch 86 (1-based), then 200 epochs of patience: 286, 195 after the 91st.
        self.assertEqual(
            status.stdout.splitlines(),
            [
                "ml1m_loo_official/mixed-improved/seed0: 91 epochs, "
                "best validation 0.1794 after 86;"
                " stops after 286 at the earliest (195 more); 150 s an epoch over the last 2,"
                " so at least 8.1 h",
                "ml1m_loo_official/mixed-standard/seed0: 1 epochs, no validation value yet",
            ],
        )

    def test_status_pairs_runs_of_one_seed_over_the_epochs_both_logged(self):
        with tempfile.TemporaryDirectory() as runs:
            # Improved has logged validation epochs 0-29 and the test curve at 9, 19, 29;
            # standard (finished) validation 0-19 and the test curve at 9, 19.
            for row, epochs, level, test_level in [
                ("mixed-improved", 30, 0.150, 0.190),
                ("mixed-standard", 20, 0.148, 0.1915),
            ]:
                run = os.path.join(runs, "ml1m_loo_official", row, "seed0")
                progress = {
                    "epochs": epochs,
                    "best": level,
                    "best_epoch": epochs - 1,
                    "finished": row == "mixed-standard",
                }
                for name, content in [
                    ("progress.json", progress),
                    ("config.json", {"patience": 200}),
                ]:
                    os.makedirs(run, exist_ok=True)
                    with open(os.path.join(run, name), "w") as f:
                        json.dump(content, f)
                for writer_name, tag, logged, value in [
                    ("validation", "epoch_ndcg@10", range(epochs), level),
                    ("train", "epoch_test_ndcg@20", range(9, epochs, 10), test_level),
                ]:
                    writer = tf.summary.create_file_writer(os.path.join(run, "logs", writer_name))
                    with writer.as_default():
                        for epoch in logged:
                            # The epochs only one run logged would move the mean by 0.01.
                            tf.summary.scalar(tag, value + 0.01 * (epoch >= 20), step=epoch)
                    writer.close()
            # Another report's improved run, with no standard one to pair and no progress yet.
            os.makedirs(os.path.join(runs, "ml1m_loo_official_cpu", "mixed-improved", "seed1"))
            lines = campaign_status.status(runs)
        self.assertEqual(
            lines,
            [
                "ml1m_loo_official/mixed-improved/seed0: 30 epochs, "
                "best validation 0.1500 after 30;"
                " stops after 230 at the earliest (200 more)",
                "ml1m_loo_official seed0, improved vs the paper's standard (negatives only) "
                "(mixed-improved - mixed-standard): validation NDCG@10 +0.0020 over 20 epochs "
                "(1 to 20); test curve NDCG@20 -0.0015 over 2 epochs (10 to 20)",
            ],
        )
        with tempfile.TemporaryDirectory() as empty:
            self.assertEqual(campaign_status.status(empty), [f"no run in progress under {empty}"])

    def test_per_query_writes_each_finished_runs_metrics_once_and_commits_on_request(self):
        from pipelines import evaluate  # pylint: disable=import-outside-toplevel

        root = os.path.dirname(os.path.dirname(self.SCRIPT))
        with tempfile.TemporaryDirectory() as tmp:
            main, campaign = os.path.join(tmp, "main"), os.path.join(tmp, "campaign")
            runs = os.path.join(campaign, "runs", "reproduce", "synthetic_loo_smoke")
            finished = os.path.join(runs, "mixed-improved", "seed0")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pipelines.train",
                    "--preset=smoke",
                    "--epochs=1",
                    "--steps_per_epoch=5",
                    "--index=exact",
                    f"--output_dir={finished}",
                ],
                cwd=root,
                check=True,
                capture_output=True,
            )
            with open(os.path.join(finished, "metrics.json")) as f:
                metrics = json.load(f)
            os.makedirs(os.path.join(runs, "mixed-standard", "seed0"))  # In progress: skipped.
            os.makedirs(main)
            os.symlink(os.path.join(root, ".venv"), os.path.join(main, ".venv"))
            git = ["git", "-C", main, "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(git + ["init", "-q"], check=True)
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "start"], check=True)
            env = dict(
                os.environ,
                MAIN_DIR=main,
                CAMPAIGN_DIR=campaign,
                LOG_DIR=tmp,
                PYTHONPATH=root,
                GIT_AUTHOR_NAME="t",
                GIT_AUTHOR_EMAIL="t@t",
                GIT_COMMITTER_NAME="t",
                GIT_COMMITTER_EMAIL="t@t",
            )

            def per_query(*flags):
                return subprocess.run(
                    ["bash", self.SCRIPT, "per_query", *flags],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                ).stdout

            def log():
                return subprocess.run(
                    git + ["log", "--format=%s", "--name-only"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.split("\n")

            saved = "docs/results/per_query/synthetic_loo_smoke/mixed-improved/seed0.npz"
            message = "results: per-query test metrics of 1 finished campaign runs"
            # By default it writes the file, commits nothing, and prints the command that would.
            printed = per_query()
            self.assertTrue(os.path.exists(os.path.join(main, saved)))
            self.assertEqual(log()[0], "start")
            self.assertIn(" to keep them in git: git -C ", printed)
            subprocess.run(
                ["bash", "-c", printed.split(" to keep them in git: ", 1)[1]],
                env=env,
                check=True,
                capture_output=True,
            )
            self.assertEqual(log()[:3], [message, "", saved])
            self.assertEqual(per_query(), "")  # The file is there: nothing to do.
            # With --commit it commits the files it writes itself.
            subprocess.run(git + ["rm", "-q", saved], check=True)
            subprocess.run(git + ["commit", "-q", "-m", "removed"], check=True)
            self.assertIn(f"committed: {message}", per_query("--commit"))
            self.assertEqual(log()[:3], [message, "", saved])
            values = evaluate.per_query_values(os.path.join(main, saved))
            self.assertEqual(len(values["users"]), 300)
            for name, value in metrics["test"].items():
                self.assertAlmostEqual(float(values["values"][name].mean()), value, places=5)


if __name__ == "__main__":
    tf.test.main()
