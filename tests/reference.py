"""Plain numpy references for the library's formulas (DESIGN.md), written for clarity, not speed."""

import numpy as np


def logsumexp(x):
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return -np.inf
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def sampled_softmax(pos, neg, correction, neg_log_q=None, pos_log_q=None, mask=None,
                    excludes=False):
    """Per-example loss and (for "improved") weight, row by row."""
    pos = np.asarray(pos, np.float64)
    neg = np.asarray(neg, np.float64)
    batch, num = neg.shape
    mask = np.ones((batch, num), bool) if mask is None else np.asarray(mask)
    if neg_log_q is not None:
        neg_log_q = np.broadcast_to(np.asarray(neg_log_q, np.float64), (batch, num))
    losses, weights = [], []
    for b in range(batch):
        valid = mask[b]
        if correction == "none":
            losses.append(-pos[b] + logsumexp(np.concatenate([[pos[b]], neg[b][valid]])))
            weights.append(np.nan)
        elif correction == "standard":
            c_p = pos[b] - pos_log_q[b]
            c = neg[b] - neg_log_q[b]
            losses.append(-c_p + logsumexp(np.concatenate([[c_p], c[valid]])))
            weights.append(np.nan)
        else:
            log_q = neg_log_q[b] if excludes else neg_log_q[b] - np.log1p(-np.exp(pos_log_q[b]))
            n = valid.sum()
            if n == 0:
                losses.append(0.0)
                weights.append(0.0)
                continue
            lse = logsumexp((neg[b] - log_q)[valid])
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
