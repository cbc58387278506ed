"""A synthetic catalog with a known ground truth P(d | u), the embedded default dataset.

P(d | u) = softmax_d(<x_u, y_d> / temperature - exponent * log rank(d)): user and
item latent vectors plus a Zipf popularity term. Each user's interactions are
successive draws from P(. | u) without replacement (as in MovieLens, an item is
rated once; Gumbel-top-k sampling), in time order at random times. So the next
item after a history H has the known law P(d | u) / (1 - P(H | u)) over d not in
H, both leave-one-out and temporal splits apply, and the oracle is exact.
"""

from typing import NamedTuple, Optional

import numpy as np

from pipelines.data.interactions import from_arrays


class SyntheticCatalog(NamedTuple):
    """The ground truth: latent vectors and popularity (dense ids; row 0 is padding)."""

    user_vectors: np.ndarray  # [num_users + 1, dim]
    item_vectors: np.ndarray  # [num_items + 1, dim]
    popularity: np.ndarray  # [num_items + 1] log-popularity term (-inf for padding)
    temperature: float

    def logits(self, users: np.ndarray) -> np.ndarray:
        """[len(users), num_items + 1] true logits; column 0 (padding) is -inf."""
        return (self.user_vectors[users] @ self.item_vectors.T) / self.temperature + self.popularity

    def log_probabilities(self, users: np.ndarray) -> np.ndarray:
        """[len(users), num_items + 1] log P(d | u), exact."""
        logits = self.logits(users)
        peak = logits.max(axis=1, keepdims=True)
        return logits - peak - np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))


def make_synthetic(
    num_users: int = 2000,
    num_items: int = 5000,
    dim: int = 16,
    exponent: float = 1.0,
    temperature: float = 0.1,
    min_length: int = 20,
    max_length: int = 100,
    time_span: int = 10**7,
    seed: int = 0,
    chunk: Optional[int] = None,
):
    """Draws a catalog and its interactions, deterministically from `seed`.

    Args:
      num_users, num_items: sizes (up to 1M items; cost O(num_users * num_items * dim)).
      dim: latent dimension.
      exponent: Zipf exponent of the popularity term (item 1 the most popular).
      temperature: divides the affinity; smaller is more personal.
      min_length, max_length: each user's number of interactions, uniform in between.
      time_span: timestamps are uniform in [0, time_span).
      seed: the seed of everything.
      chunk: users per vectorised block (default: ~2^24 logits per block).

    Returns:
      (Interactions, SyntheticCatalog).
    """
    for name, value in (
        ("num_users", num_users),
        ("num_items", num_items),
        ("dim", dim),
        ("min_length", min_length),
        ("max_length", max_length),
    ):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    if min_length > max_length or min_length < 3 or max_length > num_items:
        raise ValueError(
            "Need 3 <= min_length <= max_length <= num_items (leave-one-out takes "
            f"two; items are drawn without replacement); received min_length="
            f"{min_length}, max_length={max_length}, num_items={num_items}."
        )
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(dim)
    users = np.vstack([np.zeros([1, dim]), rng.normal(0, scale, [num_users, dim])])
    items = np.vstack([np.zeros([1, dim]), rng.normal(0, scale, [num_items, dim])])
    popularity = np.concatenate([[-np.inf], -exponent * np.log(np.arange(1, num_items + 1))])
    catalog = SyntheticCatalog(users, items, popularity, float(temperature))

    lengths = rng.integers(min_length, max_length + 1, size=num_users)
    chunk = chunk or max(1, 2**24 // (num_items + 1))
    user_parts, item_parts = [], []
    for start in range(1, num_users + 1, chunk):
        block = np.arange(start, min(start + chunk, num_users + 1))
        perturbed = catalog.logits(block) + rng.gumbel(size=[len(block), num_items + 1])
        for row, user in enumerate(block):
            length = lengths[user - 1]
            top = np.argpartition(-perturbed[row], length)[:length]
            # Decreasing perturbed logit = the order of successive draws.
            item_parts.append(top[np.argsort(-perturbed[row, top])])
            user_parts.append(np.full(length, user))
    user_col, item_col = np.concatenate(user_parts), np.concatenate(item_parts)
    # Each user's draws at increasing random times.
    times = np.concatenate([np.sort(rng.integers(0, time_span, size=n)) for n in lengths])
    interactions = from_arrays(user_col, item_col, times, keep_ids=True)
    # keep_ids numbers users/items by their largest id; make the sizes exact.
    interactions = interactions._replace(
        num_users=num_users,
        num_items=num_items,
        user_ids=np.array([""] + [str(i) for i in range(1, num_users + 1)]),
        item_ids=np.array([""] + [str(i) for i in range(1, num_items + 1)]),
    )
    return interactions, catalog
