r"""How far each correction's expected gradient lies from the full-softmax gradient.

A fixed score vector s over a Zipf catalog stands in for one query's logits.
The full-softmax loss -s_p + log sum_d e^{s_d} has gradient softmax(s) - onehot(p).
For each sampler (the library's own), correction, number of negatives n and
positive (a head item and a tail item), the expected gradient of the sampled
loss is estimated by averaging the exact per-draw gradient over many draws,
and compared with the full-softmax gradient by relative L2 error
||E[g_hat] - g|| / ||g||. The Monte Carlo noise floor of that estimate is
printed beside it.

Usage:
  python -m benchmarks.gradient_bias --output_dir runs/gradient_bias
"""

import json
import os
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from tqdm import tqdm

from benchmarks import catalog
from tfrs_logq import losses
from tfrs_logq import negatives

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/gradient_bias", "Where the table, JSON and PNG go.")
flags.DEFINE_integer("num_items", 2000, "Catalog size.", lower_bound=10)
flags.DEFINE_float("zipf_exponent", 1.0, "Popularity q(d) ~ rank^-exponent.", lower_bound=0.0)
flags.DEFINE_list("num_negatives", ["4", "16", "64", "256"], "Values of n to study.")
flags.DEFINE_integer("trials", 3000, "Draws averaged per configuration.", lower_bound=10)
flags.DEFINE_float(
    "tail_quantile",
    0.75,
    "The tail positive is the item at this popularity rank quantile (0 = most popular).",
    lower_bound=0.0,
    upper_bound=1.0,
)
flags.DEFINE_list("samplers", ["in_batch", "uniform", "mixed"], "Samplers to study.")
flags.DEFINE_integer("seed", 0, "Seed of the score vector and of the draws.")

CORRECTIONS = losses.CORRECTIONS


# For each sampler kind, the library sampler that yields n negatives per row.
SAMPLER_BUILDERS = {
    "in_batch": lambda num_items, n, q, seed: negatives.InBatchSampler(probabilities=q, seed=seed),
    "uniform": lambda num_items, n, q, seed: negatives.UniformSampler(num_items, n, seed=seed),
    "mixed": lambda num_items, n, q, seed: negatives.MixedSampler(
        num_items, n - n // 2, n // 2, probabilities=q, seed=seed
    ),
}


def expected_gradient(
    sampler,
    kind: str,
    correction: str,
    scores: np.ndarray,
    q: np.ndarray,
    positive: int,
    n: int,
    trials: int,
):
    """Mean and per-coordinate variance of d loss / d s over `trials` draws."""
    num_items = scores.shape[0]
    scores = tf.constant(scores, tf.float32)
    log_q_table = tf.constant(np.log(q)[np.newaxis, :], tf.float32)
    # In-batch rows: the fixed positive plus the other rows' positives, drawn
    # from q; n of them for in-batch, the in-batch half for mixed.
    num_batch_draws = {"in_batch": n, "mixed": n // 2, "uniform": 0}[kind]

    @tf.function
    def run():
        def body(step, total, total_sq):
            batch = tf.concat(
                [
                    tf.constant([positive], tf.int64),
                    tf.random.categorical(log_q_table, num_batch_draws)[0],
                ],
                axis=0,
            )
            with tf.GradientTape() as tape:
                tape.watch(scores)
                neg = sampler(batch, batch)
                loss = losses.sampled_softmax_loss(
                    tf.gather(scores, batch[:1]),
                    tf.gather(scores, neg.ids)[tf.newaxis, :],
                    correction=correction,
                    negative_log_q=(
                        neg.log_q
                        if neg.log_q is None or neg.log_q.shape.rank == 1
                        else neg.log_q[:1]
                    ),
                    positive_log_q=None if neg.positive_log_q is None else neg.positive_log_q[:1],
                    negative_mask=neg.mask[:1],
                    log_q_excludes_positive=neg.log_q_excludes_positive,
                )
            grad = tf.convert_to_tensor(tape.gradient(loss, scores))
            return step + 1, total + grad, total_sq + grad * grad

        zeros = tf.zeros([num_items])
        _, total, total_sq = tf.while_loop(
            lambda step, *_: step < trials, body, (tf.constant(0), zeros, zeros)
        )
        return total / trials, total_sq / trials

    mean, mean_sq = run()
    return mean.numpy().astype(np.float64), (mean_sq.numpy() - mean.numpy() ** 2)


def full_softmax_gradient(scores: np.ndarray, positive: int) -> np.ndarray:
    s = scores.astype(np.float64)
    grad = np.exp(s - s.max())
    grad /= grad.sum()
    grad[positive] -= 1.0
    return grad


def run_study(num_items, exponent, num_negatives, trials, tail_quantile, samplers, seed):
    """Returns one dict per (sampler, correction, n, positive) with the relative errors."""
    rng = np.random.default_rng(seed)
    q = catalog.zipf_probabilities(num_items, exponent)
    scores = rng.normal(size=num_items).astype(np.float32)
    positives = {"head": 0, "tail": int(round(tail_quantile * (num_items - 1)))}
    tf.random.set_seed(seed)
    configs = [
        (kind, n, correction, label)
        for kind in samplers
        for n in num_negatives
        for correction in CORRECTIONS
        for label in positives
    ]
    rows = []
    for kind, n, correction, label in tqdm(configs, desc="gradient bias", unit="config"):
        positive = positives[label]
        sampler = SAMPLER_BUILDERS[kind](num_items, n, q, seed)
        started = time.perf_counter()
        mean, variance = expected_gradient(
            sampler, kind, correction, scores, q, positive, n, trials
        )
        truth = full_softmax_gradient(scores, positive)
        norm = np.linalg.norm(truth)
        error = np.linalg.norm(mean - truth) / norm
        noise = np.sqrt(variance.clip(min=0).sum() / trials) / norm
        rows.append(
            dict(
                sampler=kind,
                n=n,
                correction=correction,
                positive=label,
                positive_id=positive,
                positive_q=float(q[positive]),
                relative_error=float(error),
                noise_floor=float(noise),
                seconds=time.perf_counter() - started,
            )
        )
    return rows


def format_table(rows) -> str:
    """Markdown table: one line per (sampler, n), one column per (correction, positive)."""
    index = {(r["sampler"], r["n"], r["correction"], r["positive"]): r for r in rows}
    samplers = list(dict.fromkeys(r["sampler"] for r in rows))
    ns = sorted({r["n"] for r in rows})
    header = ["sampler", "n"] + [f"{c} {p}" for p in ("head", "tail") for c in CORRECTIONS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for kind in samplers:
        for n in ns:
            cells = []
            for p in ("head", "tail"):
                for c in CORRECTIONS:
                    r = index[(kind, n, c, p)]
                    cells.append(f"{r['relative_error']:.3f} (±{r['noise_floor']:.3f})")
            lines.append(f"| {kind} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    samplers = list(dict.fromkeys(r["sampler"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), sharey=True)
    styles = {"none": ":", "standard": "--", "standard_negatives": "-.", "improved": "-"}
    for ax, label in zip(axes, ("head", "tail")):
        for color, kind in zip(("C0", "C1", "C2", "C3"), samplers):
            for correction in CORRECTIONS:
                sel = sorted(
                    (
                        r
                        for r in rows
                        if r["sampler"] == kind
                        and r["positive"] == label
                        and r["correction"] == correction
                    ),
                    key=lambda r: r["n"],
                )
                ax.plot(
                    [r["n"] for r in sel],
                    [r["relative_error"] for r in sel],
                    styles[correction],
                    color=color,
                    marker="o",
                    ms=3,
                    label=f"{kind}, {correction}",
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("negatives per example n")
        ax.set_title(f"{label} positive (q(p) = {sel[0]['positive_q']:.2e})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("relative L2 error of E[gradient]")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("Expected sampled-softmax gradient vs full softmax")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    del argv
    try:
        num_negatives = [int(x) for x in FLAGS.num_negatives]
    except ValueError as error:
        raise app.UsageError(
            f"--num_negatives must be integers; received {FLAGS.num_negatives!r}."
        ) from error
    if any(n < 2 for n in num_negatives):
        raise app.UsageError(f"--num_negatives must be >= 2; received {FLAGS.num_negatives!r}.")
    for kind in FLAGS.samplers:
        if kind not in SAMPLER_BUILDERS:
            raise app.UsageError(
                f"--samplers must name in_batch, uniform or mixed; received {kind!r}."
            )
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    started = time.perf_counter()
    rows = run_study(
        FLAGS.num_items,
        FLAGS.zipf_exponent,
        num_negatives,
        FLAGS.trials,
        FLAGS.tail_quantile,
        FLAGS.samplers,
        FLAGS.seed,
    )
    table = format_table(rows)
    with open(os.path.join(FLAGS.output_dir, "gradient_bias.json"), "w") as f:
        json.dump(
            dict(
                flags={
                    k: getattr(FLAGS, k)
                    for k in ("num_items", "zipf_exponent", "trials", "tail_quantile", "seed")
                },
                rows=rows,
            ),
            f,
            indent=1,
        )
    with open(os.path.join(FLAGS.output_dir, "gradient_bias.md"), "w") as f:
        f.write(table + "\n")
    png = os.path.join(FLAGS.output_dir, "gradient_bias.png")
    plot(rows, png)
    print(
        f"\nRelative L2 error of the expected gradient vs full softmax "
        f"({FLAGS.num_items} items, Zipf({FLAGS.zipf_exponent}), {FLAGS.trials} draws each; "
        "Monte Carlo noise floor in brackets)\n"
    )
    print(table)
    print(
        f"\nWrote {png} and gradient_bias.{{json,md}} in {FLAGS.output_dir} "
        f"({time.perf_counter() - started:.0f} s)."
    )


if __name__ == "__main__":
    app.run(main)
