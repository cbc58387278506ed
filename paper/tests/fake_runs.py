"""A finished run without the training: the metrics.json `pipelines.train` would leave."""

import json
import os


def fake_run(run, ndcg, recall=0.3, kl=None, best_epoch=None, bands=(0.3, 0.2, 0.1)):
    """Writes the metrics.json a finished pipelines.train run would leave."""
    os.makedirs(run.directory, exist_ok=True)
    metrics = {
        "test": {
            "ndcg@20": ndcg,
            "recall@20": recall,
            "ndcg@10": ndcg / 2,
            "recall@10": recall / 2,
        },
        "epochs_run": 40,
        "train_seconds": 100.0 + run.seed,
        "steps": 1000,
        "baselines": {"popularity": {"ndcg@20": 0.05}, "oracle": {"recall@10": 0.5}},
        "by_popularity": (
            {"head_recall@10": bands[0], "torso_recall@10": bands[1], "tail_recall@10": bands[2]}
            if bands
            else {}
        ),
        "git_revision": "abc",
    }
    if kl is not None:
        metrics["kl_to_truth"] = kl
    if best_epoch is not None:
        metrics["best_epoch"] = best_epoch
    with open(os.path.join(run.directory, "metrics.json"), "w") as f:
        json.dump(metrics, f)
