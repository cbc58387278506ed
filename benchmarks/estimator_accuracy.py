r"""How well each streaming frequency estimator tracks the true q, at equal memory, and at
what cost.

Each stream draws `batch_size` ids per step, i.i.d. from a Zipf catalog
(q(rank r) ~ r^-exponent, ranks assigned to ids by a random permutation), for
`steps` steps; at `drift_step` the ranking is permuted anew (popularity drift).
Every estimator (sized to the same state budget) is fed the stream one
`update` per step, and read by `log_q` (per draw) and
`log_inclusion_probability` (n = batch_size draws). Reported per stream and
estimator, just before the drift:

- the median |log q_hat - log q| over the top-100, the top-1,000 and a tail
  band of ranks;
- the total-variation distance 0.5 * sum_d |q_hat(d) - q(d)| of the raw
  per-draw reading (not renormalised: the corrections use it as it is);
- the median |log pi_hat - log pi| over the top-1,000, pi = 1 - (1 - q)^b, the
  quantity deduplicated pools need (what the hashed estimator measures);
- the steps after the drift until the top-1,000 error is back under 1.5x its
  pre-drift value, and that error at the end of the stream.

Then, for the Zipf 1.0 stream, the head items' readings next to the truth, and
for each estimator its throughput and its cost as a fraction of the two-tower
training step of `benchmarks.loss_overhead` (batch 1024), timed
interleaved in one run.

Usage:
  python -m benchmarks.estimator_accuracy --output_dir runs/estimator_accuracy
"""

import json
import os
import time
from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from tqdm import tqdm

from benchmarks import catalog
from benchmarks import steps as steps_lib
from tfrs_logq import frequency
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program, so tests may import this)."""
    flags.DEFINE_string(
        "output_dir", "runs/estimator_accuracy", "Where the table, JSON and PNG go."
    )
    flags.DEFINE_list("exponents", ["0.8", "1.0", "1.2"], "Zipf exponents of the streams.")
    flags.DEFINE_list("catalogs", ["100000", "1000000"], "Catalog sizes of the streams.")
    flags.DEFINE_integer("batch_size", 1024, "Ids per step.", lower_bound=1)
    flags.DEFINE_integer("steps", 4000, "Steps per stream.", lower_bound=2)
    flags.DEFINE_integer(
        "drift_step", 2000, "Step after which the ranking is permuted; 0: none.", lower_bound=0
    )
    flags.DEFINE_float(
        "memory_mb", 4.0, "State budget of every estimator, in MB (10^6 bytes).", lower_bound=0.001
    )
    flags.DEFINE_integer(
        "eval_every", 25, "Steps between readings of the top-1,000 error.", lower_bound=1
    )
    flags.DEFINE_list("tail_band", ["10000", "20000"], "Tail band of popularity ranks [from, to).")
    flags.DEFINE_list("estimators", None, "Estimators to run (default: all of ESTIMATORS).")
    flags.DEFINE_integer(
        "timing_items", 100_000, "Catalog of the timed two-tower step.", lower_bound=2
    )
    flags.DEFINE_integer(
        "timing_rounds", 7, "Interleaved timing rounds (0: skip timing).", lower_bound=0
    )
    flags.DEFINE_integer("timing_steps", 20, "Steps per variant and timing round.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the streams and the hash functions.")


HEAD_RANKS = (1, 10, 100, 1000)


def _hashed(budget: int, **kwargs):
    # A and B: 12 bytes per bucket, plus one sink slot and two int64 counters.
    num_hashes = 2
    return frequency.HashedFrequencyEstimator(
        num_buckets=(budget - 28) // (12 * num_hashes), num_hashes=num_hashes, **kwargs
    )


def _count_min(budget: int, **kwargs):
    depth = 4  # float32 counters, plus a float32 total and two int64 counters.
    return frequency.CountMinSketchEstimator(
        width=(budget - 20) // (4 * depth), depth=depth, **kwargs
    )


# name -> factory(state budget in bytes, seed)
ESTIMATORS: Dict[str, Callable[[int, int], frequency.StreamingFrequencyEstimator]] = {
    "hashed m=2 alpha=0.01": lambda b, s: _hashed(b, alpha=0.01, seed=s),
    "count-min d=4 decay=0.999": lambda b, s: _count_min(b, decay=0.999, seed=s),
    "count-min d=4 decay=0.999 conservative": lambda b, s: _count_min(
        b, decay=0.999, conservative=True, seed=s
    ),
    "count-min d=4 decay=0.995": lambda b, s: _count_min(b, decay=0.995, seed=s),
}


class Stream:
    """A Zipf stream with known truth: ids per step, and q by rank before and after the drift."""

    def __init__(
        self, num_items: int, exponent: float, batch_size: int, drift_step: int, seed: int
    ):
        rng = np.random.default_rng(seed)
        self.num_items, self.exponent, self.batch_size = num_items, exponent, batch_size
        self.drift_step = drift_step
        self.q = catalog.zipf_probabilities(num_items, exponent)  # By rank.
        self._cdf = np.cumsum(self.q)
        self._rng = rng
        # ids_of_rank[phase][r]: the id of popularity rank r before / after the drift.
        self.ids_of_rank = [rng.permutation(num_items), rng.permutation(num_items)]

    def phase(self, step: int) -> int:
        """0 before the drift, 1 after (step counts from 1)."""
        return int(self.drift_step > 0 and step > self.drift_step)

    def chunk(self, first_step: int, count: int) -> np.ndarray:
        """[count, batch_size] ids of steps first_step .. first_step + count - 1."""
        ranks = np.minimum(
            np.searchsorted(self._cdf, self._rng.random((count, self.batch_size))),
            self.num_items - 1,
        )
        phases = [self.phase(first_step + i) for i in range(count)]
        return np.stack([self.ids_of_rank[p][r] for p, r in zip(phases, ranks)])


def _median_abs_log_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(np.median(np.abs(estimate - np.log(truth))))


def evaluate(estimator, stream: Stream, step: int, tail_band, full: bool) -> Dict[str, float]:
    """Errors of the estimator's readings against the truth at `step`."""
    ids_of_rank = stream.ids_of_rank[stream.phase(step)]
    top = tf.constant(ids_of_rank[:1000], tf.int64)
    b = stream.batch_size
    log_q = estimator.log_q(top).numpy()
    result = {"top1000": _median_abs_log_error(log_q, stream.q[:1000])}
    if not full:
        return result
    result["top100"] = _median_abs_log_error(log_q[:100], stream.q[:100])
    low, high = (min(x, stream.num_items) for x in tail_band)
    if high > low:
        tail = estimator.log_q(tf.constant(ids_of_rank[low:high], tf.int64)).numpy()
        result["tail"] = _median_abs_log_error(tail, stream.q[low:high])
    all_q = np.exp(estimator.log_q(tf.constant(ids_of_rank, tf.int64)).numpy().astype(np.float64))
    result["tv"] = float(0.5 * np.abs(all_q - stream.q).sum())
    pi = -np.expm1(b * np.log1p(-stream.q[:1000]))
    result["inclusion_top1000"] = _median_abs_log_error(
        estimator.log_inclusion_probability(top, b).numpy(), pi
    )
    head = np.array(HEAD_RANKS) - 1
    head_ids = tf.constant(ids_of_rank[head], tf.int64)
    result["head"] = [
        {
            "rank": int(r + 1),
            "q": float(stream.q[r]),
            "q_hat": float(np.exp(qh)),
            "pi": float(-np.expm1(b * np.log1p(-stream.q[r]))),
            "pi_hat": float(np.exp(ph)),
        }
        for r, qh, ph in zip(
            head,
            estimator.log_q(head_ids).numpy(),
            estimator.log_inclusion_probability(head_ids, b).numpy(),
        )
    ]
    return result


def run_stream(make_estimator, stream: Stream, steps: int, eval_every: int, tail_band) -> Dict:
    """Feeds the stream; returns the pre-drift and final readings and the top-1,000 curve."""
    estimator = make_estimator()

    @tf.function
    def feed(chunk):
        for i in tf.range(tf.shape(chunk)[0]):
            estimator.update(chunk[i])

    checkpoints = sorted(
        set(
            list(range(eval_every, steps + 1, eval_every))
            + ([stream.drift_step] if 0 < stream.drift_step <= steps else [])
            + [steps]
        )
    )
    curve, step, before_drift = [], 0, None
    started = time.perf_counter()
    for checkpoint in checkpoints:
        feed(tf.constant(stream.chunk(step + 1, checkpoint - step), tf.int64))
        step = checkpoint
        full = step in (stream.drift_step, steps)
        reading = evaluate(estimator, stream, step, tail_band, full)
        curve.append((step, reading["top1000"]))
        if step == stream.drift_step:
            before_drift = reading
        if step == steps:
            final = reading
    seconds = time.perf_counter() - started
    recovery = None
    if before_drift is not None:
        threshold = 1.5 * before_drift["top1000"]
        recovery = next(
            (s - stream.drift_step for s, e in curve if s > stream.drift_step and e <= threshold),
            None,
        )
    return {
        "state_bytes": estimator.state_bytes,
        "before_drift": before_drift or final,
        "final": final,
        "recovery_steps": recovery,
        "curve": curve,
        "seconds": seconds,
    }


def time_costs(names: List[str], budget: int) -> Dict[str, Dict[str, float]]:
    """Update + lookup time of each estimator against the two-tower training step."""
    batches, _ = steps_lib.zipf_batches(FLAGS.timing_items, FLAGS.batch_size, 16, FLAGS.seed)
    variants = {}
    model = steps_lib.TwoTower(FLAGS.timing_items, FLAGS.timing_items, 64, FLAGS.seed)
    variants["train step"] = steps_lib.make_train_step(
        model, LogQRetrieval(correction="standard", remove_accidental_hits=True), True
    )
    for name in names:
        alone = ESTIMATORS[name](budget, FLAGS.seed)

        @tf.function
        def update_and_lookup(users, items, probability, estimator=alone):
            del users, probability
            estimator.update(items)
            return tf.reduce_sum(estimator.log_q(items))

        variants[f"{name}: update + lookup"] = update_and_lookup
        wired = LogQRetrieval(
            correction="standard",
            remove_accidental_hits=True,
            frequency=ESTIMATORS[name](budget, FLAGS.seed),
        )
        variants[f"{name}: train step"] = steps_lib.make_train_step(model, wired, False)
    medians = steps_lib.time_interleaved(variants, batches, FLAGS.timing_rounds, FLAGS.timing_steps)
    base = medians["train step"]
    costs = {"train_step_seconds": base}
    for name in names:
        alone = medians[f"{name}: update + lookup"]
        costs[name] = {
            "update_lookup_seconds": alone,
            "ids_per_second": FLAGS.batch_size / alone,
            "fraction_of_train_step": alone / base,
            "wired_step_ratio": medians[f"{name}: train step"] / base,
        }
    return costs


def format_tables(results: Dict, costs: Dict, names: List[str]) -> str:
    """Markdown tables of accuracy, head readings and cost."""
    lines = [
        "| stream | estimator | state MB | top-100 | top-1k | tail | TV | incl. top-1k "
        "| recovery steps | top-1k at end |",
        "|" + "---|" * 10,
    ]
    for stream_name, by_estimator in results.items():
        for name in names:
            r = by_estimator[name]
            b = r["before_drift"]
            recovery = (
                "-"
                if r["recovery_steps"] is None and b is r["final"]
                else f"> {FLAGS.steps - FLAGS.drift_step}"
                if r["recovery_steps"] is None
                else str(r["recovery_steps"])
            )
            lines.append(
                f"| {stream_name} | {name} | {r['state_bytes'] / 1e6:.2f} | {b['top100']:.3f} | "
                f"{b['top1000']:.3f} | {b.get('tail', float('nan')):.3f} | {b['tv']:.3f} | "
                f"{b['inclusion_top1000']:.3f} | {recovery} | {r['final']['top1000']:.3f} |"
            )
    # The head table on Zipf 1 (the example of docs/design.md), else on the first stream.
    first = next((s for s in results if s.startswith("Zipf 1 /")), next(iter(results)))
    lines += [
        "",
        f"Head items on {first}, before the drift (per-draw q and per-step pi = "
        f"1 - (1 - q)^{FLAGS.batch_size}):",
        "",
        "| estimator | rank | q | q_hat | log(q_hat / q) | pi | pi_hat |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        for h in results[first][name]["before_drift"]["head"]:
            lines.append(
                f"| {name} | {h['rank']} | {h['q']:.3g} | {h['q_hat']:.3g} | "
                f"{np.log(h['q_hat'] / h['q']):+.2f} | {h['pi']:.3f} | "
                f"{h['pi_hat']:.3f} |"
            )
    if costs:
        lines += [
            "",
            f"Cost at batch {FLAGS.batch_size} (two-tower step: "
            f"{costs['train_step_seconds'] * 1e3:.1f} ms, {FLAGS.timing_items} items):",
            "",
            "| estimator | ids/s | update + lookup ms | fraction of step | "
            "wired step / plain step |",
            "|---|---|---|---|---|",
        ]
        for name in names:
            c = costs[name]
            lines.append(
                f"| {name} | {c['ids_per_second']:,.0f} | "
                f"{c['update_lookup_seconds'] * 1e3:.2f} | "
                f"{100 * c['fraction_of_train_step']:.2f}% | "
                f"{c['wired_step_ratio']:.3f}x |"
            )
    return "\n".join(lines)


def plot(results: Dict, names: List[str], path: str) -> None:
    """Top-1,000 median log-q error against the step, one panel per stream."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    columns = min(3, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.8 * columns, 3.4 * rows), squeeze=False, sharey=True
    )
    for ax in axes.ravel()[len(results) :]:
        ax.set_visible(False)
    for ax, (stream_name, by_estimator) in zip(axes.ravel(), results.items()):
        for name in names:
            steps, errors = zip(*by_estimator[name]["curve"])
            ax.plot(steps, errors, label=name)
        if FLAGS.drift_step:
            ax.axvline(FLAGS.drift_step, color="grey", linestyle=":")
        ax.set_yscale("log")
        ax.set_title(stream_name, fontsize=9)
        ax.set_xlabel("step")
    for row in axes:
        row[0].set_ylabel("median |log q_hat - log q|, top-1,000", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parse_flags():
    names = FLAGS.estimators or list(ESTIMATORS)
    for name in names:
        if name not in ESTIMATORS:
            raise app.UsageError(
                f"--estimators: unknown estimator {name!r}; choose from {', '.join(ESTIMATORS)}."
            )
    try:
        exponents = [float(x) for x in FLAGS.exponents]
        catalogs = [int(x) for x in FLAGS.catalogs]
        tail_band = [int(x) for x in FLAGS.tail_band]
    except ValueError as error:
        raise app.UsageError(
            f"--exponents, --catalogs and --tail_band take numbers: {error}"
        ) from None
    if any(e <= 0 for e in exponents) or any(c < 2 for c in catalogs) or len(tail_band) != 2:
        raise app.UsageError(
            f"--exponents must be positive, --catalogs at least 2 and --tail_band two ranks; "
            f"received --exponents={FLAGS.exponents} --catalogs={FLAGS.catalogs} "
            f"--tail_band={FLAGS.tail_band}."
        )
    if FLAGS.drift_step >= FLAGS.steps:
        raise app.UsageError(
            f"--drift_step must be below --steps={FLAGS.steps}; received "
            f"--drift_step={FLAGS.drift_step}."
        )
    return names, exponents, catalogs, tail_band


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    names, exponents, catalogs, tail_band = _parse_flags()
    budget = int(FLAGS.memory_mb * 1e6)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    results = {}
    jobs = [(n, e) for n in catalogs for e in exponents]
    with tqdm(total=len(jobs) * len(names), desc="streams x estimators", unit="run") as bar:
        for num_items, exponent in jobs:
            stream_name = f"Zipf {exponent:g} / {num_items:,} items"
            results[stream_name] = {}
            for name in names:
                stream = Stream(
                    num_items, exponent, FLAGS.batch_size, FLAGS.drift_step, FLAGS.seed
                )  # The same ids for every estimator.
                results[stream_name][name] = run_stream(
                    lambda name=name: ESTIMATORS[name](budget, FLAGS.seed),
                    stream,
                    FLAGS.steps,
                    FLAGS.eval_every,
                    tail_band,
                )
                bar.update()
    costs = time_costs(names, budget) if FLAGS.timing_rounds else {}
    table = format_tables(results, costs, names)
    print(
        f"\n{FLAGS.steps} steps of {FLAGS.batch_size} ids; ranking permuted after step "
        f"{FLAGS.drift_step}; state budget {FLAGS.memory_mb:g} MB; errors are medians of "
        "|log estimate - log truth| just before the drift.\n"
    )
    print(table)
    reference = next((r for s, r in results.items() if s.startswith("Zipf 1 /")), None)
    if reference is not None:
        best = min(
            names,
            key=lambda n: (
                reference[n]["before_drift"]["top1000"] if n.startswith("count-min") else np.inf
            ),
        )
        if best.startswith("count-min"):
            print(
                f"\nBest per-draw estimator on Zipf 1: {best}: median top-1,000 log-q error "
                f"{reference[best]['before_drift']['top1000']:.3f} nats at "
                f"{reference[best]['state_bytes'] / 1e6:.2f} MB (target <= 0.15 at <= 4 MB)."
            )
    if costs:
        worst = max(costs[n]["fraction_of_train_step"] for n in names)
        print(
            f"Largest update + lookup cost: {100 * worst:.2f}% of the training step (target <= 2%)."
        )
    with open(os.path.join(FLAGS.output_dir, "estimator_accuracy.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(FLAGS.output_dir, "estimator_accuracy.json"), "w") as f:
        json.dump(
            {
                "flags": {
                    k: FLAGS[k].value
                    for k in (
                        "exponents",
                        "catalogs",
                        "batch_size",
                        "steps",
                        "drift_step",
                        "memory_mb",
                        "eval_every",
                        "tail_band",
                        "seed",
                    )
                },
                "results": results,
                "costs": costs,
            },
            f,
            indent=1,
        )
    plot(results, names, os.path.join(FLAGS.output_dir, "estimator_accuracy.png"))
    print(f"\nWrote {FLAGS.output_dir}/estimator_accuracy.{{md,json,png}}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
