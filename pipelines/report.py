"""What a finished run reports and writes: test metrics, baselines, tables, exports.

`test_report` and `baselines` evaluate on the test split; `format_metrics` and
`describe_indexes` print them; `export_run` writes the serving SavedModels.
"""

import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from logq_core import samplers
from pipelines import configs
from pipelines import experiment
from pipelines import memory
from pipelines import per_query
from pipelines.data import logs
from pipelines.data import splits as splits_lib
from pipelines.run_files import RunFiles
from tfrs_logq import export as export_lib
from tfrs_logq import retrieval


def _by_popularity(top, split: splits_lib.Split, ks) -> Dict[str, float]:
    """Recall@k of head / torso / tail targets (thirds by training count), k = 10, 100 (when
    among `ks`) and the largest."""
    bands = retrieval.popularity_bands(split.train_counts())
    result = {}
    for k in sorted({min(10, max(ks)), max(ks)} | ({100} & set(ks))):
        result.update(retrieval.stratified_recall(top, split.test.targets, bands, k))
    return result


# The key of `test_report`'s per-query record (`per_query.save`'s form).
PER_QUERY = "per_query"


def test_report(model, config: configs.Config, split: splits_lib.Split, data=None) -> Dict:
    """Test metrics at `config.training.ks` by each index of `config.training.index`, over
    `test_index`; with both, the ANN overlap with exact search; Recall@k of head / torso /
    tail targets; the KL of the model's softmax to the true law (synthetic data; the
    web-scale log needs the run's `data`). The catalog is read a chunk at a time
    (`retrieval.ItemTable`): no copy of it beside the model's table."""
    ks = configs.ks(config.training)
    queries = experiment.query_embeddings(model, config, split.test)
    items = retrieval.ItemTable.of(model)
    candidates = experiment.test_index(config, split)
    indexes = ("exact", "scann") if config.training.index == "both" else (config.training.index,)
    report: Dict[str, Any]
    report, retrieved = {}, {}
    for index in indexes:
        started = time.time()
        retrieved[index] = retrieval.top_k(
            queries,
            items,
            max(ks),
            exclude=split.test.histories,
            index=index,
            candidates=candidates,
            min_items=config.training.scann_min_items,
        )
        report[f"test_{index}"] = retrieval.recall_ndcg(retrieved[index], split.test.targets, ks)
        report[f"search_seconds_{index}"] = round(time.time() - started, 2)
    report["test"] = report[f"test_{indexes[0]}"]
    # Each query's values by the first index: popped by the caller (`PER_QUERY`), not JSON.
    report[PER_QUERY] = {
        "users": np.asarray(split.test.users),
        "targets_digest": per_query.targets_digest(split.test.targets),
        "split": "test",
        "index": indexes[0],
        "description": f"{config.data.dataset}, split {config.data.split}",
        "values": retrieval.per_query_recall_ndcg(retrieved[indexes[0]], split.test.targets, ks),
    }
    searched = len(items) - 1 if candidates is None else len(candidates)
    report["index_items"] = searched
    if "scann" in indexes:
        report["scann_indexed"] = retrieval.uses_scann(searched, config.training.scann_min_items)
    if len(indexes) == 2:
        report[f"ann_overlap@{max(ks)}"] = retrieval.overlap_at_k(
            retrieved["scann"], retrieved["exact"], max(ks)
        )
    if config.data.dataset == "synthetic":
        # The true next-item law P(d | u) / (1 - P(H | u)) over d not in H: KL from the model's.
        # (The embedded catalog: thousands of items, read whole.)
        report["kl_to_truth"] = retrieval.kl_to_truth(
            experiment.synthetic_data(config)[1].logits(split.test.users),
            queries @ items.gather(np.arange(len(items))).T,
            exclude=split.test.histories,
        )
    elif config.data.dataset == "web_synthetic" and data is not None:
        counts = split.train_counts()
        report["kl_to_truth"], report["calibration"] = web_kl(
            experiment.web_truth(config, data),
            split.test,
            queries,
            items,
            bands=retrieval.popularity_bands(counts),
            draws=expected_draws(config, counts),
        )
    report["by_popularity"] = _by_popularity(retrieved[indexes[0]], split, ks)
    return report


def expected_draws(config: configs.Config, counts: np.ndarray) -> Tuple[np.ndarray, float]:
    """(D, n): D[d] the expected draws of id d among a row's negatives under the run's
    sampler (the one `logq_core.samplers.sampler_arguments` makes of its flags), with q =
    `counts` / their sum (the training frequency its estimator learns), and n the row's
    expected draws in all: E_u uniform slots over the |D| ids plus E_b = kept (B - 1) / B
    q-draws among the kept in-batch slots (`logq_core.formulas.expected_in_batch_draws`;
    kept: the pool's cap, at most the batch B).

    They give each correction's implied P(p | u), the p_s of its row weight 1 - p_s
    (docs/design.md, the gradient view), from the model's softmax P = P(p | u): the
    corrected negatives' sum is about n Z (Z = sum over d != p of e^{s_d}), so standard's
    p_s = P / (P + D(p) (1 - P)) and standard_negatives' P / (P + n (1 - P)); improved's
    P_hat is P itself. Not none's: its draws' raw scores are not a function of P. That
    needs log Q = log D - log n: a deduplicated pool or the paper's mixture is refused."""
    loss, batch = config.loss, config.training.batch_size
    if loss.deduplicate or loss.mixture != "exact":
        raise ValueError(
            "expected_draws reads log Q as the exact mixture's (log D - log n): "
            "needs --nodeduplicate and --mixture=exact; received --deduplicate="
            f"{loss.deduplicate} --mixture={loss.mixture}."
        )
    counts = np.asarray(counts, np.float64)
    num_items = max(len(counts) - 1, 1)  # Id 0 is padding.
    kind, arguments = samplers.sampler_arguments(
        loss.negatives, num_items=num_items, num_negatives=loss.num_negatives
    )
    uniform = float(
        {"uniform": arguments.get("num_negatives"), "mixed": arguments.get("num_uniform")}.get(kind)
        or 0
    )
    kept = {"in_batch": arguments.get("max_pool_size"), "mixed": arguments.get("num_in_batch")}.get(
        kind, 0
    )
    kept = batch if kept is None else min(kept, batch)
    in_batch = kept * (batch - 1) / batch
    draws = uniform / num_items + in_batch * counts / max(counts.sum(), 1.0)
    draws[0] = 0.0
    return draws, uniform + in_batch


def calibration_targets(targets, history) -> np.ndarray:
    """The targets of a query that `web_kl`'s calibration reads, in order: those outside its
    history (a target also in the history is no candidate: -inf in both softmaxes)."""
    targets = np.asarray(targets, np.int64)
    return targets[~np.isin(targets, np.asarray(history, np.int64))]


# The web-scale log's KL is measured on this many test queries (a fixed sample).
KL_QUERIES = 256


def web_kl(
    truth,
    test: splits_lib.EvalSet,
    queries: np.ndarray,
    items,
    count: int = KL_QUERIES,
    bands: Optional[np.ndarray] = None,
    draws: Optional[Tuple[np.ndarray, float]] = None,
) -> Tuple[float, Dict[str, Any]]:
    """Mean KL(true law || model's softmax) over the vocabulary's items less each history,
    on `count` of the test queries (the law's mass on items outside the vocabulary is left
    out: both laws are renormalised over the same candidates: the whole vocabulary, not the
    test index); and the calibration of the model's P(p | u) on those queries' targets p:
    {"model_log_p", "true_log_p"[, "band", "model_mass", "true_mass"]}, one entry per
    (query, target), the log probabilities of both
    softmaxes (what improved's row weight 1 - P(p | u) estimates, against the truth), and the
    target's popularity band (0 head, 1 torso, 2 tail) with `bands`
    (`retrieval.popularity_bands`); with `bands`, also each softmax's mass on each band's
    items, averaged over the queries (where the model's probability goes, against the
    truth's: [head, torso, tail], each list summing to 1). With `draws` (`expected_draws`),
    also "draws": each target's expected draws D(p) among a row's negatives, and
    "negatives": the row's n (what each correction's implied P(p | u) needs).

    `items`: what `retrieval.ItemTable.of` reads. The model's normalisers are summed a chunk
    of the catalog at a time (`retrieval.log_normalizers`) and the truth is read where it
    has mass (`truth.support`: a user's clusters), so memory does not grow with the
    catalog."""
    table = retrieval.ItemTable.of(items)
    sample = splits_lib.subsample(test, count)
    rows = (
        np.searchsorted(test.users, sample.users)
        if len(sample.users) < len(test.users)
        else np.arange(len(test.users))
    )
    histories = [np.asarray(test.histories[r], np.int64) for r in rows]
    log_normalizer, model_mass = retrieval.log_normalizers(
        queries[rows],
        table,
        exclude=histories,
        groups=None if bands is None else np.maximum(np.asarray(bands, np.int64), 0),
        num_groups=3,
    )
    total = 0.0
    calibration: Dict[str, Any] = {"model_log_p": [], "true_log_p": []}
    true_mass = np.zeros(3)
    if bands is not None:
        calibration["band"] = []
    for block in _support_blocks(rows, truth.support(test.users[rows]), histories, test, table):
        # One read of the block's rows (a chunk's worth): per query, a remote table (a
        # parameter server's) would cost a round trip each.
        ids = np.unique(
            np.concatenate([np.r_[support, targets] for _, _, support, _, targets in block])
        )
        embedded = table.rows(ids).astype(np.float64)
        for row, query, support, raw_log_p, targets in block:
            raw_total = np.logaddexp.reduce(raw_log_p) if len(raw_log_p) else -np.inf
            log_true = raw_log_p - raw_total
            log_model = embedded[np.searchsorted(ids, support)] @ queries[query].astype(np.float64)
            log_model -= log_normalizer[row]
            total += float(np.sum(np.exp(log_true) * (log_true - log_model)))
            target_scores = embedded[np.searchsorted(ids, targets)] @ queries[query].astype(
                np.float64
            )
            calibration["model_log_p"] += np.round(target_scores - log_normalizer[row], 4).tolist()
            # A target outside the law's support: the -1e4 floor the dense form clipped it to.
            position = np.minimum(np.searchsorted(support, targets), max(len(support) - 1, 0))
            found = (support[position] == targets) if len(support) else np.zeros(len(targets), bool)
            true_at = np.where(found, log_true[position] if len(support) else 0.0, -1e4 - raw_total)
            calibration["true_log_p"] += np.round(true_at, 4).tolist()
            if bands is not None:
                calibration["band"] += np.asarray(bands)[targets].astype(int).tolist()
                true_mass += np.bincount(
                    np.asarray(bands)[support], weights=np.exp(log_true), minlength=3
                )[:3]
            if draws is not None:
                calibration.setdefault("draws", []).extend(
                    float(f"{value:.5g}") for value in draws[0][targets]
                )
    if bands is not None:
        assert model_mass is not None
        calibration["model_mass"] = np.round(model_mass.sum(axis=0) / len(rows), 6).tolist()
        calibration["true_mass"] = np.round(true_mass / len(rows), 6).tolist()
    if draws is not None:
        calibration["negatives"] = round(float(draws[1]), 3)
        calibration.setdefault("draws", [])
    return total / len(rows), calibration


def _support_blocks(rows, supports, histories, test, table):
    """Lists of (row, query, support less the history, its raw log P, the targets), one per
    query of `rows`, in blocks of about one chunk of the table's ids (`web_kl`)."""
    block, size = [], 0
    for row, (query, (support, raw_log_p)) in enumerate(zip(rows, supports)):
        candidate = ~np.isin(support, histories[row])
        targets = calibration_targets(test.targets[query], test.histories[query])
        block.append((row, query, support[candidate], raw_log_p[candidate], targets))
        size += int(candidate.sum()) + len(targets)
        if size >= table.chunk_size():
            yield block
            block, size = [], 0
    if block:
        yield block


def baselines(
    config: configs.Config, split: splits_lib.Split, data=None
) -> Dict[str, Dict[str, float]]:
    """Test metrics of two reference rankers, on the same queries, index and filtering:
    training popularity, and (synthetic data; the web-scale log with the run's `data`) the
    oracle that ranks by the true P(d | u). Each also has `by_popularity`: Recall@k of
    head / torso / tail targets, as the model's."""
    ks = configs.ks(config.training)
    test = split.test
    candidates = experiment.test_index(config, split)

    def metrics(top):
        values = retrieval.recall_ndcg(top, test.targets, ks)
        values["by_popularity"] = _by_popularity(top, split, ks)
        return values

    # One ranking for every query: the catalog sorted once by training count (ties: lower id).
    counts = split.train_counts().astype(np.float32)
    top = retrieval.global_top_k(counts, max(ks), exclude=test.histories, candidates=candidates)
    result = {"popularity": metrics(top)}
    if config.data.dataset == "synthetic":
        catalog = experiment.synthetic_data(config)[1]
        # <[x_u / T, 1], [y_d, popularity_d]> is the true logit.
        queries = np.hstack(
            [catalog.user_vectors[test.users] / catalog.temperature, np.ones([len(test.users), 1])]
        )
        items = np.hstack(
            [catalog.item_vectors, np.nan_to_num(catalog.popularity, neginf=0.0)[:, np.newaxis]]
        )
        top = retrieval.top_k(
            queries, items, max(ks), exclude=test.histories, candidates=candidates
        )
        result["oracle"] = metrics(top)
    elif config.data.dataset == "web_synthetic" and data is not None:
        truth = experiment.web_truth(config, data)
        result["oracle"] = metrics(
            truth.oracle_top_k(test.users, max(ks), test.histories, candidates)
        )
    return result


def format_metrics(metrics: Dict) -> str:
    """A short markdown table of the test metrics (and of the baselines, when present)."""
    ks = sorted({int(k.split("@")[1]) for k in metrics["test"]})
    lines = [
        "| ranker | metric | " + " | ".join(f"@{k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    rankers = {"model": metrics["test"]}
    rankers.update(
        {f"{name} (baseline)": values for name, values in metrics.get("baselines", {}).items()}
    )
    for ranker, values in rankers.items():
        for name in ("recall", "ndcg"):
            lines.append(
                f"| {ranker} | {name} | "
                + " | ".join(f"{values[f'{name}@{k}']:.4f}" for k in ks)
                + " |"
            )
    return "\n".join(lines)


def describe_indexes(metrics: Dict) -> str:
    """A line on the ANN gap and the popularity bands, when reported."""
    lines = []
    if "test_scann" in metrics and "test_exact" in metrics:
        e, a = metrics["test_exact"], metrics["test_scann"]
        # @10 as before when the run reports it; else its smallest cutoff.
        k = 10 if "recall@10" in e else min(int(name.split("@")[1]) for name in e)
        overlap_name, overlap = next(
            (name, v) for name, v in metrics.items() if name.startswith("ann_overlap@")
        )
        lines.append(
            f"\nScaNN vs exact: Recall@{k} {a[f'recall@{k}']:.4f} vs "
            f"{e[f'recall@{k}']:.4f}, NDCG@{k} {a[f'ndcg@{k}']:.4f} vs "
            f"{e[f'ndcg@{k}']:.4f}; ScaNN returns {100 * overlap:.1f}% of the exact "
            f"top-{overlap_name.split('@')[1]}."
        )
        if not metrics.get("scann_indexed", True):
            lines.append(
                f"(The catalog's {metrics['num_items']:,} items are fewer than "
                "--scann_min_items: the ScaNN request searched exactly, which is "
                "faster there.)"
            )
    if "kl_to_truth" in metrics:
        lines.append(
            f"KL(true next-item law || model's softmax) on the test users: "
            f"{metrics['kl_to_truth']:.4f} nats."
        )
    rankers = {"model": metrics.get("by_popularity", {})}
    rankers.update(
        {
            name: values.get("by_popularity", {})
            for name, values in metrics.get("baselines", {}).items()
        }
    )
    rankers = {name: bands for name, bands in rankers.items() if bands}
    if rankers:
        k = min(int(key.split("@")[1]) for key in next(iter(rankers.values())))
        lines.append(
            f"Recall@{k} by target popularity (thirds of the catalog by training "
            "count): "
            + "; ".join(
                f"{name} head {b[f'head_recall@{k}']:.4f}, torso "
                f"{b[f'torso_recall@{k}']:.4f}, tail {b[f'tail_recall@{k}']:.4f}"
                for name, b in rankers.items()
            )
            + "."
        )
    if (
        metrics.get("index_items")
        and metrics.get("num_items")
        and (metrics["index_items"] < metrics["num_items"])
    ):
        lines.append(
            f"The test index held {metrics['index_items']:,} of the "
            f"{metrics['num_items']:,} items (the most trained plus every test "
            "positive)."
        )
    return "\n".join(lines)


def export_run(
    model,
    config: configs.Config,
    output_dir: str,
    index: str = "both",
    k: int = 100,
    data=None,
    version=None,
    split: Optional[splits_lib.Split] = None,
):
    """Exports `model` to OUTPUT/export/<index>/<version> for each index (by default the
    next version after any already there); returns the version directories. With the run's
    `data` (`Interactions`), the export also serves the source's raw ids (`serving_raw`).
    With the run's `split` and an `index_size`, the exports serve that many items, those
    with the most training events (`experiment.served_index`: the test index without the
    test day's positives, which a server cannot know)."""
    kinds = export_lib.INDEXES if index == "both" else (index,)
    vocabularies = (
        {}
        if data is None
        else dict(item_vocabulary=data.item_ids[1:], user_vocabulary=data.user_ids[1:])
    )
    if data is not None and config.data.dataset in configs.EVENT_LOGS:
        # An event log's own ids (strings, or int64 as the log has them) are the default.
        vocabularies["raw_ids"] = "default"
        vocabularies["integer_ids"] = tuple(logs.event_log_facts(config, output_dir)["integer_ids"])
    paths = []
    for kind in kinds:
        memory.release()  # The last export's module (and its index) freed first.
        try:
            paths.append(
                export_lib.export(
                    model,
                    RunFiles(output_dir).export(kind),
                    k=k,
                    index=kind,
                    max_length=experiment.query_length(config),
                    scann_min_items=config.training.scann_min_items,
                    version=version,
                    candidates=None if split is None else experiment.served_index(config, split),
                    **vocabularies,
                )
            )
        except export_lib.ScannOpsUnavailable as error:
            if index != "both":
                raise
            # TensorFlow 2.21: the exact-search export stands alone, and the run says why.
            print(f"Not exported through ScaNN: {error}")
    return paths
