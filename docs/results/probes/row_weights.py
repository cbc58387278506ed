"""Probe (analysis, not part of the library): the row weights that standard and improved logQ
give the same training rows at a run's best checkpoint.

With the same negatives both losses push a row along the same direction; standard weights it by
1 - p_s, improved by w (`tfrs_logq.losses.sampled_softmax_loss`). This reads the first BATCHES
training batches of each run (its own seed's order), in inference mode (no dropout, no estimator
update), captures the inputs of the task's loss, and prints both weights by the positive's
n Q(p) / (1 - Q(p)), the share of rows with a weight below 0.5, and the total variation between
the two weightings normalised to sum 1 (0: the same up to scale).

    python docs/results/probes/row_weights.py BATCHES RUN_DIR [RUN_DIR ...]
"""

import sys

import numpy as np
import tensorflow as tf

from pipelines import experiment
from tfrs_logq import losses as losses_lib

BINS = ((-9.0, -1.5), (-1.5, -1.0), (-1.0, -0.5), (-0.5, 0.0), (0.0, 9.0))


def row_weights(run_dir: str, num_batches: int):
    """[rows] arrays: 1 - p_s, w, and log10(n Q(p) / (1 - Q(p)))."""
    captured = []
    original = losses_lib.sampled_softmax_terms

    def capture(pos, neg, correction, log_q, pos_log_q, mask, excludes):
        captured.append((pos, neg, log_q, pos_log_q, mask))
        return original(pos, neg, correction, log_q, pos_log_q, mask, excludes)

    config, model, split = experiment.load_run(run_dir)
    stream, _ = experiment.training_stream(config, split)
    losses_lib.sampled_softmax_terms = capture
    try:
        for batch in stream.take(num_batches):
            model.compute_loss(batch, training=False)
    finally:
        losses_lib.sampled_softmax_terms = original
    standard, improved, log_odds = [], [], []
    for pos, neg, log_q, pos_log_q, mask in captured:
        kwargs = dict(negative_log_q=log_q, positive_log_q=pos_log_q, negative_mask=mask)
        loss = losses_lib.sampled_softmax_loss(pos, neg, correction="standard", **kwargs)
        standard.append(-np.expm1(-loss.numpy().astype(np.float64)))
        improved.append(losses_lib.improved_weight(pos, neg, **kwargs).numpy())
        n = tf.reduce_sum(tf.cast(mask, tf.float64), axis=1).numpy()
        q = np.exp(pos_log_q.numpy().astype(np.float64))
        log_odds.append(np.log10(n * q / (1.0 - q)))
    return tuple(np.concatenate(x) for x in (standard, improved, log_odds))


def main(argv):
    num_batches = int(argv[1])
    for run_dir in argv[2:]:
        standard, improved, log_odds = row_weights(run_dir, num_batches)
        print(
            f"{run_dir}: {len(standard)} rows; mean 1 - p_s {standard.mean():.4f}, "
            f"mean w {improved.mean():.4f}"
        )
        print(
            "  log10(n Q(p)/(1-Q(p)))  rows  mean(1-p_s)  mean(w)  "
            "share of sum(1-p_s)  share of sum(w)"
        )
        for low, high in BINS:
            rows = (log_odds >= low) & (log_odds < high)
            if rows.any():
                print(
                    f"  [{low:5.1f}, {high:4.1f})  {rows.mean():6.3f}  "
                    f"{standard[rows].mean():10.4f}  {improved[rows].mean():7.4f}  "
                    f"{standard[rows].sum() / standard.sum():18.3f}  "
                    f"{improved[rows].sum() / improved.sum():14.3f}"
                )
        variation = 0.5 * np.abs(standard / standard.sum() - improved / improved.sum()).sum()
        print(
            f"  rows with 1 - p_s < 0.5: {np.mean(standard < 0.5):.4f}; with w < 0.5: "
            f"{np.mean(improved < 0.5):.4f}; total variation between the normalised row "
            f"weights: {variation:.4f}"
        )


if __name__ == "__main__":
    main(sys.argv)
