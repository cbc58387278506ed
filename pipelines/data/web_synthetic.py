r"""A web-scale synthetic event log: millions of items with string ids, a popularity that
drifts day by day, and a known next-item law, written as one Parquet file per day.

The law of user u's next item on day t, over the items d not in u's history H:

    P_t(d | u) = pi_u(c(d)) * w_t(d) / W_t(c(d)),        w_t(d) = exp(a_d + b_d * t),

renormalised over d not in H. Items fall into clusters c(d) of `cluster_size` items; each
user likes `user_clusters` clusters with Dirichlet(1) weights pi_u, drawn in proportion to
the clusters' popularity. Within a cluster an item's weight w_t(d) is a Zipf term
(a_d = -exponent * log rank, ranks a random permutation) with a per-item trend b_d, so the
popularity drifts: over the log's span an item's log weight moves by `drift` nats (standard
deviation). W_t(c) is the sum of w_t over the cluster.

Each user's events fall at uniform times over `num_days` days, each drawn from the law at
its day, items never repeated within a user (a repeat is drawn again), so a history H is
followed by P_t(. | u) restricted to d not in H: the oracle ranker and the model's KL to the
truth are exact. Ids are opaque strings (16 hex digits for items, "u" and 12 for users).

Deterministic by `seed`. `WebCatalog` holds the truth; `write_log` writes the log and the
truth (truth.npz) into a directory, through a temporary one renamed into place.
"""

import json
import os
import shutil
import tempfile
import time
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np

from pipelines.data import events as events_lib

START_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z: day 0 of every log.
DAY_SECONDS = 86_400


class WebCatalog(NamedTuple):
    """The truth of a web-scale log (generator indices: item j, user v, from 0)."""

    item_ids: np.ndarray  # [N] raw item ids (str)
    user_ids: np.ndarray  # [U] raw user ids (str)
    item_cluster: np.ndarray  # [N] int32
    base: np.ndarray  # [N] a_d
    trend: np.ndarray  # [N] b_d per day
    user_clusters: np.ndarray  # [U, C] int32
    user_weights: np.ndarray  # [U, C] pi_u
    num_days: int

    @property
    def num_clusters(self) -> int:
        return int(self.item_cluster.max()) + 1

    def log_weights(self, day: float) -> np.ndarray:
        """[N] log w_t(d)."""
        return self.base + self.trend * day

    def cluster_log_totals(self, day: float) -> np.ndarray:
        """[num_clusters] log W_t(c)."""
        logw = self.log_weights(day)
        peak = logw.max()
        totals = np.bincount(
            self.item_cluster, weights=np.exp(logw - peak), minlength=self.num_clusters
        )
        return np.log(totals) + peak

    def log_probabilities(self, users: np.ndarray, day: float) -> np.ndarray:
        """[len(users), N] log P_t(d | u) before any history is removed (-inf outside the
        user's clusters)."""
        within = self.log_weights(day) - self.cluster_log_totals(day)[self.item_cluster]
        result = np.full([len(users), len(self.item_cluster)], -np.inf)
        for slot in range(self.user_clusters.shape[1]):
            clusters = self.user_clusters[users, slot]
            member = self.item_cluster[np.newaxis, :] == clusters[:, np.newaxis]
            value = np.log(self.user_weights[users, slot])[:, np.newaxis] + within
            result = np.where(member, np.logaddexp(result, value), result)
        return result

    def item_marginal(self, day: float) -> np.ndarray:
        """[N] the law's share of each item among one day's events (users equally active)."""
        mass = np.bincount(
            self.user_clusters.ravel(),
            weights=self.user_weights.ravel(),
            minlength=self.num_clusters,
        ) / len(self.user_ids)
        within = np.exp(self.log_weights(day) - self.cluster_log_totals(day)[self.item_cluster])
        return mass[self.item_cluster] * within

    def oracle_top_k(
        self,
        users: np.ndarray,
        day: float,
        k: int,
        exclude: Sequence[np.ndarray],
        candidates: Optional[np.ndarray] = None,
    ) -> np.ndarray:
        """[len(users), k] generator item indices ranked by P_t(d | u), each row's `exclude`
        removed, among `candidates` (a boolean [N] mask; None: every item). Rows with fewer
        than k reachable items are padded with -1."""
        within = self.log_weights(day) - self.cluster_log_totals(day)[self.item_cluster]
        allowed = np.ones(len(within), bool) if candidates is None else candidates
        # Per cluster, its allowed items by decreasing weight.
        order = np.lexsort((-within, self.item_cluster))
        order = order[allowed[order]]
        starts = np.searchsorted(self.item_cluster[order], np.arange(self.num_clusters + 1))
        out = np.full([len(users), k], -1, np.int64)
        for row, user in enumerate(users):
            removed = np.asarray(exclude[row], np.int64)
            id_parts, score_parts = [], []
            for slot in range(self.user_clusters.shape[1]):
                cluster = self.user_clusters[user, slot]
                top = order[starts[cluster] : starts[cluster + 1]][: k + len(removed)]
                id_parts.append(top)
                score_parts.append(np.log(self.user_weights[user, slot]) + within[top])
            ids, scores = np.concatenate(id_parts), np.concatenate(score_parts)
            ids, first = np.unique(ids, return_index=True)  # A cluster listed twice.
            scores = scores[first]
            keep = ~np.isin(ids, removed)
            ids, scores = ids[keep], scores[keep]
            best = ids[np.argsort(-scores, kind="stable")[:k]]
            out[row, : len(best)] = best
        return out


def make_catalog(
    num_items: int,
    num_users: int,
    num_days: int,
    cluster_size: int = 4000,
    user_clusters: int = 3,
    exponent: float = 1.0,
    drift: float = 1.5,
    seed: int = 0,
) -> WebCatalog:
    """Draws the truth (see the module's docstring)."""
    for name, value in (
        ("num_items", num_items),
        ("num_users", num_users),
        ("num_days", num_days),
        ("cluster_size", cluster_size),
        ("user_clusters", user_clusters),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    if num_days < 3:
        raise ValueError(
            f"`num_days` must be at least 3 (train, validation and test days); "
            f"received num_days={num_days}."
        )
    if (
        isinstance(exponent, bool)
        or not isinstance(exponent, (int, float, np.floating))
        or not (np.isfinite(exponent) and exponent > 0)
    ):
        raise ValueError(f"`exponent` must be a finite number > 0; received exponent={exponent!r}.")
    rng = np.random.default_rng(seed)
    num_clusters = max(1, -(-num_items // cluster_size))
    item_cluster = rng.permutation(np.arange(num_items) % num_clusters).astype(np.int32)
    # Zipf ranks within each cluster: a random order of its items.
    order = np.lexsort((rng.random(num_items), item_cluster))
    starts = np.searchsorted(item_cluster[order], np.arange(num_clusters))
    ranks = np.empty(num_items)
    ranks[order] = np.arange(num_items) - starts[item_cluster[order]] + 1
    base = -exponent * np.log(ranks) + rng.normal(0, 0.5, num_clusters)[item_cluster]
    trend = rng.normal(0, drift / max(num_days - 1, 1), num_items)
    catalog = WebCatalog(
        _hex_ids(rng, num_items, 16, ""),
        _hex_ids(rng, num_users, 12, "u"),
        item_cluster,
        base,
        trend,
        np.zeros([0, 0], np.int32),
        np.zeros([0, 0]),
        num_days,
    )
    cluster_mass = np.exp(catalog.cluster_log_totals(0) - catalog.cluster_log_totals(0).max())
    slots = min(user_clusters, num_clusters)
    chosen = (
        np.stack(
            [
                rng.choice(num_clusters, slots, replace=False, p=cluster_mass / cluster_mass.sum())
                for _ in range(num_users)
            ]
        )
        if num_users < 50_000
        else _distinct_clusters(rng, num_users, slots, cluster_mass / cluster_mass.sum())
    )
    return catalog._replace(
        user_clusters=chosen.astype(np.int32), user_weights=rng.dirichlet(np.ones(slots), num_users)
    )


def _distinct_clusters(rng, num_users: int, slots: int, p: np.ndarray) -> np.ndarray:
    """[num_users, slots] clusters drawn by `p`, distinct within a row (redrawn until so)."""
    chosen = rng.choice(len(p), [num_users, slots], p=p)
    for _ in range(100):
        repeated = np.zeros(num_users, bool)
        for a in range(slots):
            for b in range(a + 1, slots):
                repeated |= chosen[:, a] == chosen[:, b]
        if not repeated.any():
            return chosen
        chosen[repeated] = rng.choice(len(p), [int(repeated.sum()), slots], p=p)
    raise ValueError("Cannot draw distinct clusters per user; lower `user_clusters`.")


def _hex_ids(rng, count: int, digits: int, prefix: str) -> np.ndarray:
    values = np.unique(rng.integers(0, 16**digits, size=count + count // 10 + 16, dtype=np.uint64))
    values = rng.permutation(values)[:count]
    return np.array([f"{prefix}{v:0{digits}x}" for v in values.tolist()], dtype=object)


def draw_events(
    catalog: WebCatalog, events_per_user: float, seed: int = 0
) -> Dict[str, np.ndarray]:
    """{"user", "item" (generator indices), "time" (seconds)} sorted by time, each user's
    items distinct (see the module's docstring)."""
    rng = np.random.default_rng([seed, 1])
    threads = events_lib.workers()  # The days' draws on threads: the same log.
    num_users, num_items = len(catalog.user_ids), len(catalog.item_ids)
    lengths = np.minimum(1 + rng.poisson(max(events_per_user - 1, 0), num_users), num_items // 2)
    user = np.repeat(np.arange(num_users, dtype=np.int64), lengths)
    time = rng.integers(0, catalog.num_days * DAY_SECONDS, len(user))
    order = np.lexsort((time, user))
    user, time = user[order], time[order]
    day = time // DAY_SECONDS
    # The within-cluster law of each day, as one array: cluster c's cumulative shares run
    # from c to c + 1 over its items (sorted by cluster), so one search finds the item.
    by_cluster = np.argsort(catalog.item_cluster, kind="stable")
    sorted_cluster = catalog.item_cluster[by_cluster]
    cumulative_weights = np.cumsum(catalog.user_weights, axis=1)
    item = np.empty(len(user), np.int64)
    redraw = np.ones(len(user), bool)
    for _ in range(50):
        rows = np.flatnonzero(redraw)
        if not len(rows):
            break
        slot = (rng.random(len(rows))[:, np.newaxis] > cumulative_weights[user[rows]]).sum(axis=1)
        slot = np.minimum(slot, catalog.user_clusters.shape[1] - 1)
        cluster = catalog.user_clusters[user[rows], slot]
        uniform = rng.random(len(rows))
        row_days = day[rows]

        def draw_day(d, row_days=row_days, rows=rows, cluster=cluster, uniform=uniform):
            """Day d's rows of `item` (days apart: on threads)."""
            at = row_days == d
            share = np.exp(
                catalog.log_weights(d)[by_cluster] - catalog.cluster_log_totals(d)[sorted_cluster]
            )
            cumulative = np.cumsum(share)
            # Restart the sum at each cluster's start: c + its running share.
            starts = np.searchsorted(sorted_cluster, np.arange(catalog.num_clusters))
            cumulative -= np.concatenate([[0.0], cumulative[starts[1:] - 1]])[sorted_cluster]
            cumulative += sorted_cluster
            position = np.searchsorted(cumulative, cluster[at] + uniform[at] * (1 - 1e-12))
            item[rows[at]] = by_cluster[np.minimum(position, num_items - 1)]

        for _ in events_lib.ordered_map(draw_day, ((d,) for d in np.unique(row_days)), threads):
            pass
        # A user's repeat of an earlier item is drawn again (the earliest is kept).
        key = user * num_items + item
        first = np.zeros(len(key), bool)
        first[np.unique(key, return_index=True)[1]] = True
        redraw = ~first
    order = np.argsort(time, kind="stable")
    return {"user": user[order], "item": item[order], "time": time[order] + START_TIME}


def write_log(
    directory: str,
    catalog: WebCatalog,
    events: Dict[str, np.ndarray],
    seconds: float = 0.0,
    exponent: float = 1.0,
    seed: int = 0,
) -> None:
    """One Parquet file per day (columns user_id, item_id, timestamp), the truth (truth.npz)
    and log.json (sizes; `exponent`, the Zipf exponent `make_catalog` drew it with, and
    `seed`, the seed of its law and events; `seconds`,
    the time the log took to draw), written to a temporary directory renamed to
    `directory`. A finished log already there (log.json) is kept and this one dropped: two
    runs that start together on a new cache draw the same log (same settings, same seed), and
    the one that finishes second must not delete the files the first is reading."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=".web-synthetic-", dir=parent)
    try:
        item_ids = pa.array(list(catalog.item_ids), pa.string())
        user_ids = pa.array(list(catalog.user_ids), pa.string())
        day = (events["time"] - START_TIME) // DAY_SECONDS
        bounds = np.searchsorted(day, np.arange(catalog.num_days + 1))
        for d in range(catalog.num_days):
            rows = slice(bounds[d], bounds[d + 1])
            table = pa.table(
                {
                    "user_id": user_ids.take(pa.array(events["user"][rows])),
                    "item_id": item_ids.take(pa.array(events["item"][rows])),
                    "timestamp": pa.array(events["time"][rows], pa.int64()),
                }
            )
            pq.write_table(table, os.path.join(temporary, f"day-{d:04d}.parquet"))
        np.savez(
            os.path.join(temporary, "truth.npz"),
            item_ids=catalog.item_ids.astype(str),
            user_ids=catalog.user_ids.astype(str),
            item_cluster=catalog.item_cluster,
            base=catalog.base,
            trend=catalog.trend,
            user_clusters=catalog.user_clusters,
            user_weights=catalog.user_weights,
            num_days=catalog.num_days,
        )
        _write_catalog(os.path.join(temporary, CATALOG_FILE), catalog.item_ids.astype(str))
        with open(os.path.join(temporary, "log.json"), "w") as f:
            json.dump(
                {
                    "events": int(len(events["user"])),
                    "items": len(catalog.item_ids),
                    "users": len(catalog.user_ids),
                    "days": catalog.num_days,
                    "zipf_exponent": float(exponent),
                    "seed": int(seed),
                    "day_seconds": DAY_SECONDS,
                    "start_time": START_TIME,
                    "seconds_draw_and_write": round(seconds, 1),
                },
                f,
                indent=1,
            )
        finished = os.path.join(directory, "log.json")
        if os.path.exists(finished):
            return
        if os.path.exists(directory):  # Not a finished log (no log.json): replaced.
            shutil.rmtree(directory)
        try:
            os.rename(temporary, directory)
        except OSError:  # Another process renamed its own copy in between.
            if not os.path.exists(finished):
                raise
    finally:
        if os.path.exists(temporary):
            shutil.rmtree(temporary, ignore_errors=True)


def id_keys(ids, prefix: str = "", chunk: int = 1 << 20) -> np.ndarray:
    """The uint64 values of hex ids (`prefix` then the hex digits, as `make_catalog` writes
    them), converted a chunk at a time: 8 bytes an id where the strings take about 64 (a
    20M-item law's ids: 160 MB, not 1.3 GB)."""
    out = np.empty(len(ids), np.uint64)
    skip = len(prefix)

    def key(i) -> int:
        try:
            return int(str(i)[skip:], 16) if str(i).startswith(prefix) else _FOREIGN
        except ValueError:  # Not an id of the law (an --item_catalog's own item).
            return _FOREIGN

    for start in range(0, len(ids), chunk):
        out[start : start + chunk] = [key(i) for i in ids[start : start + chunk]]
    return out


# The key of an id that is no hex id of the law (`id_keys`): above every key the law draws.
_FOREIGN = 2**64 - 1


def read_truth(directory: str) -> WebCatalog:
    """The truth `write_log` saved (its ids as numpy's fixed-width strings)."""
    with np.load(os.path.join(directory, "truth.npz")) as saved:
        return WebCatalog(
            saved["item_ids"],  # Fixed-width strings (numpy's), not Python objects.
            saved["user_ids"],
            saved["item_cluster"],
            saved["base"],
            saved["trend"],
            saved["user_clusters"],
            saved["user_weights"],
            int(saved["num_days"]),
        )


CATALOG_FILE = "catalog.parquet"


def _write_catalog(path: str, item_ids) -> None:
    """catalog.parquet: column item_id, every item of the law (`--item_catalog=log`)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    temporary = path + ".partial"
    pq.write_table(pa.table({"item_id": pa.array(item_ids, pa.string())}), temporary)
    os.replace(temporary, path)


def catalog_file(directory: str) -> str:
    """The log's catalog file (every item of its law, column item_id), written from its
    truth when a log written before catalogs lacks it."""
    path = os.path.join(directory, CATALOG_FILE)
    if not os.path.exists(path):
        with np.load(os.path.join(directory, "truth.npz")) as saved:
            _write_catalog(path, saved["item_ids"])
    return path


def log_files(directory: str) -> str:
    """The glob of the log's Parquet files."""
    return os.path.join(directory, "day-*.parquet")


def ensure_log(
    directory: str,
    num_items: int,
    num_users: int,
    num_days: int,
    events_per_user: float,
    seed: int = 0,
    exponent: float = 1.0,
) -> str:
    """Writes the log of these settings (`exponent`: the Zipf exponent, `make_catalog`'s)
    into `directory` unless it is already there (a finished log has log.json); returns the
    glob of its files. A log already there drawn with another exponent or seed (log.json's
    "zipf_exponent" and "seed"; 1.0 and 0 for logs written before they were recorded) is a
    ValueError."""
    summary = os.path.join(directory, "log.json")
    if not os.path.exists(summary):
        started = time.time()
        catalog = make_catalog(num_items, num_users, num_days, exponent=exponent, seed=seed)
        write_log(
            directory,
            catalog,
            draw_events(catalog, events_per_user, seed=seed),
            seconds=time.time() - started,
            exponent=exponent,
            seed=seed,
        )
    else:
        with open(summary) as f:
            stored = json.load(f)
        written = stored.get("zipf_exponent", 1.0)
        if stored.get("seed", 0) != seed:
            raise ValueError(
                f"{directory} holds a log drawn with seed {stored.get('seed', 0)}; received "
                f"--synthetic_log_seed={seed}. Give another --data_path, or leave it empty "
                "for the cache's directory of these settings."
            )
        if written != exponent:
            raise ValueError(
                f"{directory} holds a log drawn with Zipf exponent {written:g}; "
                f"received --synthetic_zipf={exponent:g}. Give another "
                "--data_path, or leave it empty for the cache's directory of "
                "these settings."
            )
    return log_files(directory)
