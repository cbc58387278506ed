"""The report's plot: each row's mean (± std over seeds), next to the paper's number."""

import math
import os
from typing import Dict

import numpy as np

from paper.plan import paper_numbers


def plot(summary: Dict[str, Dict], dataset: str, split: str, path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    done = [(k, v) for k, v in summary.items() if v["n"]]
    if not done:
        return
    metric = "ndcg@20" if dataset == "ml-1m" else "kl_to_truth"
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(done) + 1.5))
    labels = [
        v["row"].label + ("" if v["frequency"] == "static" else f" [{v['frequency']}]")
        for _, v in done
    ]
    means = [v[metric][0] for _, v in done]
    errors = [0.0 if math.isnan(v[metric][1]) else v[metric][1] for _, v in done]
    positions = np.arange(len(done))
    axis.barh(positions, means, xerr=errors, color="#4c72b0", alpha=0.8, label="ours (± std)")
    if dataset == "ml-1m":
        paper = [paper_numbers(v["row"].name, split) for _, v in done]
        axis.scatter(
            [p[0] if p else np.nan for p in paper],
            positions,
            color="#c44e52",
            marker="D",
            zorder=3,
            label="paper",
        )
        axis.set_xlabel("test NDCG@20")
    else:
        axis.set_xlabel("KL(truth || model), nats (lower is better)")
    axis.set_yticks(positions)
    axis.set_yticklabels(labels)
    axis.invert_yaxis()
    axis.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 if len(done) < 5 else -0.12),
        ncol=2,
        frameon=False,
    )
    axis.set_title(os.path.basename(path).rsplit(".", 1)[0])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
