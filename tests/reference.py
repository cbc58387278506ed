"""Plain numpy references for the library's formulas (docs/design.md), written for clarity,
not speed."""

import numpy as np

# ------------------------------------------------------------------ shared test inputs
# tfrs_logq's tests and keras_logq's (tests_keras3/) run the same inputs and the same
# exact values against both libraries.


def sampled_inputs(seed, batch=6, num=9, mask_rate=0.3, per_row_log_q=False):
    """Random (positive logits, negative logits, negative log Q, positive log Q, mask);
    row 0 has no valid negative."""
    rng = np.random.default_rng(seed)
    pos = rng.normal(size=batch).astype(np.float32) * 2
    neg = rng.normal(size=(batch, num)).astype(np.float32) * 2
    q = rng.dirichlet(np.ones(40))
    shape = (batch, num) if per_row_log_q else (num,)
    neg_log_q = np.log(rng.choice(q, size=shape)).astype(np.float32)
    pos_log_q = np.log(rng.choice(q, size=batch)).astype(np.float32)
    mask = rng.random((batch, num)) > mask_rate
    mask[0] = False  # A row with no valid negative.
    return pos, neg, neg_log_q, pos_log_q, mask


# s_p = 0, two negatives with s = 0 and Q = 1/2, Q(p) = 1/4:
# none = log 3; standard = -log 4 + log(4 + 2 + 2) = log 2;
# standard_negatives = -0 + log(1 + 2 + 2) = log 5;
# improved: Q' = (1/2)/(3/4) = 2/3, LSE = log 3, P_hat = sigmoid(-log 1.5) = 0.4,
# loss = 0.6 * log 3 (weight 0.6).
EXACT_SAMPLED = dict(
    inputs=(np.zeros([1], np.float32), np.zeros([1, 2], np.float32)),
    kwargs=dict(
        negative_log_q=np.log([0.5, 0.5]).astype(np.float32),
        positive_log_q=np.log([0.25]).astype(np.float32),
    ),
    losses=dict(
        none=np.log(3.0),
        standard=np.log(2.0),
        standard_negatives=np.log(5.0),
        improved=0.6 * np.log(3.0),
    ),
    improved_weight=0.6,
)

# A known catalog for the samplers' unbiasedness: Zipf q over 50 items and fixed scores.
NUM_ITEMS = 50
ZIPF_Q = (1.0 / np.arange(1, NUM_ITEMS + 1)) / np.sum(1.0 / np.arange(1, NUM_ITEMS + 1))
SCORES = np.random.default_rng(0).normal(size=NUM_ITEMS).astype(np.float32)


def partition_without(positive):
    """sum_{d != p} e^{s_d} over the catalog: what every sampler's Z_hat must estimate."""
    return float(np.sum(np.exp(SCORES.astype(np.float64))) - np.exp(SCORES[positive]))


def z_hat(ids, mask, log_q_prime):
    """(1/n) sum_i m_i exp(s_i - log Q'_i) for one row, and n."""
    terms = np.where(
        mask,
        np.exp(SCORES[np.asarray(ids)].astype(np.float64) - np.asarray(log_q_prime, np.float64)),
        0.0,
    )
    count = float(np.sum(mask))
    return terms.sum() / max(count, 1.0), count


def logsumexp(x):
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return -np.inf
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def sampled_softmax(
    pos,
    neg,
    correction,
    neg_log_q=None,
    pos_log_q=None,
    mask=None,
    excludes=False,
    log_q_scale=1.0,
    num_hard=None,
):
    """Per-example loss and (for "improved") weight, row by row.

    `log_q_scale`: lambda, every log Q (log Q') subtracted is lambda log Q. `num_hard`: only
    the row's `num_hard` valid negatives with the largest corrected logits enter the loss;
    "improved"'s n still counts the valid negatives before that.
    """
    pos = np.asarray(pos, np.float64)
    neg = np.asarray(neg, np.float64)
    batch, num = neg.shape
    mask = np.ones((batch, num), bool) if mask is None else np.asarray(mask)
    if neg_log_q is not None:
        neg_log_q = np.broadcast_to(np.asarray(neg_log_q, np.float64), (batch, num))
    losses, weights = [], []
    for b in range(batch):
        valid = mask[b]
        n = valid.sum()
        if correction == "none":
            corrected = neg[b]
        else:
            log_q = neg_log_q[b]
            if correction == "improved" and not excludes:
                log_q = log_q - np.log1p(-np.exp(pos_log_q[b]))
            corrected = neg[b] - log_q_scale * log_q
        if num_hard is not None:  # The top num_hard valid corrected logits.
            order = np.argsort(-np.where(valid, corrected, -np.inf), kind="stable")
            keep = np.zeros(num, bool)
            keep[order[: min(num_hard, n)]] = True
            valid = valid & keep
        if correction == "none":
            losses.append(-pos[b] + logsumexp(np.concatenate([[pos[b]], neg[b][valid]])))
            weights.append(np.nan)
        elif correction in ("standard", "standard_negatives"):
            # standard_negatives (Yang et al. 2020): the positive enters raw.
            c_p = pos[b] - (log_q_scale * pos_log_q[b] if correction == "standard" else 0.0)
            losses.append(-c_p + logsumexp(np.concatenate([[c_p], corrected[valid]])))
            weights.append(np.nan)
        else:
            if n == 0:
                losses.append(0.0)
                weights.append(0.0)
                continue
            lse = logsumexp(corrected[valid])
            p_hat = 1.0 / (1.0 + np.exp(-(pos[b] - lse + np.log(n))))
            weights.append(1.0 - p_hat)
            losses.append((1.0 - p_hat) * (lse - pos[b]))
    return np.array(losses), np.array(weights)


def improved_gradients(pos, neg, neg_log_q, pos_log_q, mask):
    """d loss / d (pos, neg) of the improved loss: w * (softmax over valid c' - onehot(p))."""
    _, w = sampled_softmax(pos, neg, "improved", neg_log_q, pos_log_q, mask)
    batch, num = np.shape(neg)
    log_q = np.broadcast_to(neg_log_q, (batch, num)) - np.log1p(-np.exp(pos_log_q))[:, None]
    c = np.where(mask, np.asarray(neg, np.float64) - log_q, -np.inf)
    c_max = np.where(mask.any(axis=1, keepdims=True), c.max(axis=1, keepdims=True), 0.0)
    soft = np.exp(c - c_max)
    soft = np.where(mask, soft, 0.0)
    soft = soft / np.maximum(soft.sum(axis=1, keepdims=True), 1e-300)
    return -w, w[:, None] * soft


def bce(pos, neg, mask=None, beta=1.0):
    neg = np.asarray(neg, np.float64)
    mask = np.ones(neg.shape, bool) if mask is None else mask
    softplus = lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)  # noqa: E731
    return beta * softplus(-np.asarray(pos, np.float64)) + np.where(mask, softplus(neg), 0).sum(1)


def hashed_frequency(stream, buckets_of, alpha, first_gap=True):
    """Yi et al. (2019) algorithms 2-3, id by id, in float64.

    Args:
      stream: list of steps, each a list of ids.
      buckets_of: maps an id to its list of m flat bucket indices.

    Returns:
      A function mapping an id to (gap estimate, per-draw q reading).
    """
    last, gap = {}, {}
    step = num_ids = 0
    for ids in stream:
        step += 1
        num_ids += len(ids)
        new_last, new_gap = {}, {}
        for item in ids:
            for bucket in buckets_of(item):
                seen = last.get(bucket, 0)
                now = step - seen
                value = (
                    now
                    if (first_gap and seen == 0)
                    else ((1 - alpha) * gap.get(bucket, 0.0) + alpha * now)
                )
                new_last[bucket], new_gap[bucket] = step, value
        last.update(new_last)
        gap.update(new_gap)
    draws = max(num_ids / max(step, 1), 1.0)

    def estimate(item):
        gaps = [max(gap[b], 1.0) if last.get(b, 0) > 0 else step + 1.0 for b in buckets_of(item)]
        return max(gaps), 1.0 / max(gaps) / draws

    return estimate


def count_min(stream, buckets_of, decay, conservative=False, min_count=0.5):
    """Decayed count-min sketch, in float64 with the decay applied eagerly.

    The conservative update processes each distinct id of a step once, from the
    counters as they were before the step, with its number of occurrences.

    Returns:
      A function mapping an id to its per-draw q.
    """
    counts, total = {}, 0.0
    for ids in stream:
        counts = {b: c * decay for b, c in counts.items()}
        total = total * decay + len(ids)
        if conservative:
            before = dict(counts)
            distinct, occurrences = np.unique(np.asarray(ids), return_counts=True)
            for item, n in zip(distinct.tolist(), occurrences.tolist()):
                estimate = min(before.get(b, 0.0) for b in buckets_of(item)) + n
                for b in buckets_of(item):
                    counts[b] = max(counts.get(b, 0.0), estimate)
        else:
            for item in ids:
                for b in buckets_of(item):
                    counts[b] = counts.get(b, 0.0) + 1.0

    def estimate(item):
        count = min(counts.get(b, 0.0) for b in buckets_of(item))
        return max(count, min_count) / max(total, min_count)

    return estimate


def gsasrec_forward(inputs, weights, num_heads, epsilon=1e-5):
    """gSASRec's forward pass (`NonameUntitled/logq` gsasrec.py `forward`, gSASRec-pytorch
    transformer_decoder.py), line by line in float64, without dropout. Padding is id 0.

    Args:
      inputs: [batch, L] ids.
      weights: {"items", "positions", "final_norm": (gain, bias), "blocks": [{"first_norm",
        "second_norm": (gain, bias), "query", "key", "value", "dense1", "dense2":
        (kernel [in, out], bias)}]}.
    """

    def layer_norm(x, norm):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + epsilon) * norm[0] + norm[1]

    def linear(x, layer):
        return x @ layer[0] + layer[1]

    def heads(x):  # torch.cat(x.chunk(num_heads, dim=2), dim=0)
        return np.concatenate(np.split(x, num_heads, axis=2), axis=0)

    mask = (inputs != 0).astype(np.float64)[..., None]
    seq = weights["items"][inputs] + weights["positions"][np.arange(inputs.shape[1])][None]
    seq = seq * mask
    for block in weights["blocks"]:
        x = layer_norm(seq, block["first_norm"])
        queries, keys = x, seq
        q, k, v = (
            heads(linear(queries, block["query"])),
            heads(linear(keys, block["key"])),
            heads(linear(keys, block["value"])),
        )
        outputs = q @ k.transpose(0, 2, 1) / np.sqrt(k.shape[-1])
        key_masks = np.tile(np.sign(np.abs(keys).sum(-1)), [num_heads, 1])
        key_masks = np.repeat(key_masks[:, None, :], queries.shape[1], axis=1)
        outputs = np.where(key_masks == 0, -np.inf, outputs)
        tril = np.tril(np.ones(outputs.shape[1:]))
        outputs = np.where(tril[None] == 0, -np.inf, outputs)
        with np.errstate(invalid="ignore"):
            top = outputs.max(-1, keepdims=True)
            outputs = np.exp(outputs - top)
            outputs = outputs / outputs.sum(-1, keepdims=True)
        outputs = np.nan_to_num(outputs, nan=0.0, posinf=0.0, neginf=0.0)
        query_masks = np.tile(np.sign(np.abs(queries).sum(-1)), [num_heads, 1])
        outputs = outputs * query_masks[..., None]
        outputs = outputs @ v
        x = np.concatenate(np.split(outputs, num_heads, axis=0), axis=2)
        x = layer_norm(x + queries, block["second_norm"])
        residual = x
        x = linear(np.maximum(linear(x, block["dense1"]), 0.0), block["dense2"])
        seq = (x + residual) * mask
    return layer_norm(seq, weights["final_norm"])


def top_k_cases():
    """Cases for every framework's `logq_core.ranking.device_top_k`, each (name, queries, ids,
    embeddings, k, exclude, chunk, block): integer scores (many ties, which must go to the
    lower id whichever chunk holds them), unsorted ids that are not 0 .. n, a last chunk
    shorter than the others, histories (one excluding every candidate, one with ids outside
    the index), NaN and infinite embeddings, a NaN query, k above the number of candidates."""
    rng = np.random.default_rng(7)
    ids = rng.permutation(np.arange(3, 90))[:31]
    embeddings = rng.integers(-2, 3, size=(31, 3)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(11, 3)).astype(np.float32)
    exclude = [rng.choice(ids, rng.integers(0, 12), replace=False) for _ in range(11)]
    exclude[2] = ids  # Every candidate excluded: a row of NO_ITEM.
    exclude[5] = np.array([0, 1, 2, 1000])  # None in the index.
    broken = embeddings.copy()
    broken[4] = np.nan
    broken[9, 0] = np.inf
    cases = []
    for chunk, block, k in ((31, None, 5), (7, 3, 5), (4, 2, 12), (1, 5, 3), (10, 1, 40)):
        cases.append(
            (f"chunk{chunk}_block{block}_k{k}", queries, ids, embeddings, k, exclude, chunk, block)
        )
    cases.append(("no_history", queries, ids, embeddings, 6, None, 8, 4))
    cases.append(("nan_inf", queries, ids, broken, 8, exclude, 8, 4))
    nan_query = queries.copy()
    nan_query[6, 1] = np.nan  # A row of NaN scores: NO_ITEM throughout.
    cases.append(("nan_query", nan_query, ids, embeddings, 8, exclude, 8, 4))
    return cases
