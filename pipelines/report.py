"""What a finished run reports and writes: test metrics, baselines, tables, exports.

`test_report` and `baselines` evaluate on the test split; `format_metrics` and
`describe_indexes` print them; `export_run` writes the serving SavedModels.
"""

import os
import subprocess
import time
from typing import Dict

import numpy as np

from pipelines import configs
from pipelines import experiment
from pipelines.data import splits as splits_lib
from pipelines.run_files import RunFiles
from tfrs_logq import export as export_lib
from tfrs_logq import retrieval


def test_report(model, config: configs.Config, split: splits_lib.Split,
                ks=retrieval.DEFAULT_KS) -> Dict:
    """Test metrics by each index of `config.training.index`; with both, the ANN overlap with exact
    search; and Recall@k of head / torso / tail targets (thirds by training frequency)."""
    queries = experiment.query_embeddings(model, config, split.test)
    items = model.item_embeddings().numpy()
    indexes = ("exact", "scann") if config.training.index == "both" else (config.training.index,)
    report, retrieved = {}, {}
    for index in indexes:
        started = time.time()
        retrieved[index] = retrieval.top_k(queries, items, max(ks), exclude=split.test.histories,
                                           index=index,
                                           min_items=config.training.scann_min_items)
        report[f"test_{index}"] = retrieval.recall_ndcg(retrieved[index], split.test.targets, ks)
        report[f"search_seconds_{index}"] = round(time.time() - started, 2)
    report["test"] = report[f"test_{indexes[0]}"]
    if "scann" in indexes:
        report["scann_indexed"] = retrieval.uses_scann(len(items) - 1,
                                                       config.training.scann_min_items)
    if len(indexes) == 2:
        report[f"ann_overlap@{max(ks)}"] = retrieval.overlap_at_k(
            retrieved["scann"], retrieved["exact"], max(ks))
    if config.data.dataset == "synthetic":
        # The true next-item law P(d | u) / (1 - P(H | u)) over d not in H: KL from the model's.
        report["kl_to_truth"] = retrieval.kl_to_truth(
            experiment.synthetic_data(config)[1].logits(split.test.users), queries @ items.T,
            exclude=split.test.histories)
    bands = retrieval.popularity_bands(split.train_counts())
    report["by_popularity"] = {}
    for k in (10, max(ks)):
        report["by_popularity"].update(retrieval.stratified_recall(
            retrieved[indexes[0]], split.test.targets, bands, k))
    return report


def baselines(config: configs.Config, split: splits_lib.Split,
              ks=retrieval.DEFAULT_KS) -> Dict[str, Dict[str, float]]:
    """Test metrics of two reference rankers, on the same queries and filtering:
    training popularity, and (synthetic data) the oracle that ranks by the true P(d | u).
    Each also has `by_popularity`: Recall@k of head / torso / tail targets, as the model's."""
    test = split.test
    train_counts = split.train_counts()
    bands = retrieval.popularity_bands(train_counts)

    def metrics(top):
        values = retrieval.recall_ndcg(top, test.targets, ks)
        values["by_popularity"] = {}
        for k in (10, max(ks)):
            values["by_popularity"].update(
                retrieval.stratified_recall(top, test.targets, bands, k))
        return values

    counts = train_counts.astype(np.float32)[:, np.newaxis]
    top = retrieval.top_k(np.ones([len(test.users), 1], np.float32), counts, max(ks),
                          exclude=test.histories)
    result = {"popularity": metrics(top)}
    if config.data.dataset == "synthetic":
        catalog = experiment.synthetic_data(config)[1]
        # <[x_u / T, 1], [y_d, popularity_d]> is the true logit.
        queries = np.hstack([catalog.user_vectors[test.users] / catalog.temperature,
                             np.ones([len(test.users), 1])])
        items = np.hstack([catalog.item_vectors,
                           np.nan_to_num(catalog.popularity, neginf=0.0)[:, np.newaxis]])
        top = retrieval.top_k(queries, items, max(ks), exclude=test.histories)
        result["oracle"] = metrics(top)
    return result


def git_revision() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                  text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
        return revision + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"

def format_metrics(metrics: Dict) -> str:
    """A short markdown table of the test metrics (and of the baselines, when present)."""
    ks = sorted({int(k.split("@")[1]) for k in metrics["test"]})
    lines = ["| ranker | metric | " + " | ".join(f"@{k}" for k in ks) + " |",
             "|---|---|" + "---|" * len(ks)]
    rankers = {"model": metrics["test"]}
    rankers.update({f"{name} (baseline)": values
                    for name, values in metrics.get("baselines", {}).items()})
    for ranker, values in rankers.items():
        for name in ("recall", "ndcg"):
            lines.append(f"| {ranker} | {name} | " + " | ".join(
                f"{values[f'{name}@{k}']:.4f}" for k in ks) + " |")
    return "\n".join(lines)


def describe_indexes(metrics: Dict) -> str:
    """A line on the ANN gap and the popularity bands, when reported."""
    lines = []
    if "test_scann" in metrics and "test_exact" in metrics:
        e, a = metrics["test_exact"], metrics["test_scann"]
        overlap = next(v for k, v in metrics.items() if k.startswith("ann_overlap@"))
        lines.append(f"\nScaNN vs exact: Recall@10 {a['recall@10']:.4f} vs {e['recall@10']:.4f}, "
                     f"NDCG@10 {a['ndcg@10']:.4f} vs {e['ndcg@10']:.4f}; ScaNN returns "
                     f"{100 * overlap:.1f}% of the exact top-100.")
        if not metrics.get("scann_indexed", True):
            lines.append(f"(The catalog's {metrics['num_items']:,} items are fewer than "
                         "--scann_min_items: the ScaNN request searched exactly, which is "
                         "faster there.)")
    if "kl_to_truth" in metrics:
        lines.append(f"KL(true next-item law || model's softmax) on the test users: "
                     f"{metrics['kl_to_truth']:.4f} nats.")
    rankers = {"model": metrics.get("by_popularity", {})}
    rankers.update({name: values.get("by_popularity", {})
                    for name, values in metrics.get("baselines", {}).items()})
    rankers = {name: bands for name, bands in rankers.items() if bands}
    if rankers:
        lines.append("Recall@10 by target popularity (thirds of the catalog by training count): "
                     + "; ".join(f"{name} head {b['head_recall@10']:.4f}, torso "
                                 f"{b['torso_recall@10']:.4f}, tail {b['tail_recall@10']:.4f}"
                                 for name, b in rankers.items()) + ".")
    return "\n".join(lines)


def export_run(model, config: configs.Config, output_dir: str, index: str = "both",
               k: int = 100, data=None):
    """Exports `model` to OUTPUT/export/<index>/<version> for each index (the next version
    after any already there); returns the version directories. With the run's `data`
    (`Interactions`), the export also serves the source's raw ids (`serving_raw`)."""
    kinds = export_lib.INDEXES if index == "both" else (index,)
    vocabularies = {} if data is None else dict(item_vocabulary=data.item_ids[1:],
                                                user_vocabulary=data.user_ids[1:])
    return [export_lib.export(model, RunFiles(output_dir).export(kind), k=k, index=kind,
                              max_length=experiment.query_length(config),
                              scann_min_items=config.training.scann_min_items, **vocabularies)
            for kind in kinds]
