"""SavedModel export for serving: query tower + candidate index, and an item-embedding lookup.

The exported model stands alone: a process that imports only TensorFlow (and
`scann`, for the ScaNN index, whose custom ops it needs) loads it with
`tf.saved_model.load` and serves

- `serving_default`: the query model's inputs -> top-k item ids and scores
  ([batch, k] each, for every batch size, 0 included), every item of the
  request's history excluded (the query model reads its last `max_length`),
  and `num_found` ([batch] int32): how many of the k slots hold an item. It is
  k unless the history covers all but fewer than k items of the catalog; then
  the row's first `num_found` slots hold the unseen items, best first, and the
  rest are empty: id 0 (the padding id; "" or -1 in the raw signature) with
  score -inf;
- `item_embeddings`: item ids -> embeddings;
- `serving_raw`, when `export` is given the raw ids (`item_vocabulary`, and
  `user_vocabulary` for a two-tower model): the same answer with the source's
  ids as strings in and out (a GroupLens movie id "1193", not the dense id the
  model was trained on); unknown raw ids are skipped and counted
  (`unknown_history_ids`), and a user the vocabulary lacks is said
  (`unknown_user`: answered from the history alone). With `raw_ids="default"`
  (runs on an event log) the raw ids, strings or int64 as in the log
  (`integer_ids`), are `serving_default` and the dense signature is
  `serving_dense`;
- filtered requests: each of those answers again as `<name>_filtered`
  (`serving_filtered`, `serving_raw_filtered` or `serving_dense_filtered`), whose
  inputs add `allowed` and `exclude`, [batch, n] and [batch, m] item ids of the
  signature's kind padded like a history (0; "" or any negative id when raw). A
  row's answer then holds only ids of its allowed set (a row of padding only, or
  no columns, has none: the whole catalog is allowed) and none of its exclusions
  or history. An unknown id excludes nothing and allows nothing (a row whose
  allowed ids are all unknown is answered with no item); the raw signatures
  count them (`unknown_allowed_ids`, `unknown_exclude_ids`). Extra signatures,
  not optional inputs: TF Serving's REST and gRPC requests must send every input
  of the signature they name, so `serving_default` keeps its inputs.

It is written as `path/<version>/` (TensorFlow Serving's layout), through a
temporary directory renamed into place. Excluding the history costs one
[batch, catalog] mask, whatever the history's length; `allowed` and `exclude`
one each, and the ScaNN index asks for k plus the most blocked ids of any row
(a row's history, exclusions and everything outside its allowed set), a row
left with fewer than k usable ids being answered by exact search, alone.

Ids outside [1, num_items] are out of vocabulary: in a history they count as
padding, in `item_embeddings` they map to row 0 (the padding / OOV row), and
they never crash. A request of the wrong rank (a [length] history, say) fails
with a message naming the input (`history` must be [batch, length] item ids), as
does an input whose batch size is not the history's. A wrong dtype fails the
signature's own check, before the graph runs, with TensorFlow's message (TF
Serving's, over REST: the JSON value and the type expected): a signature called
from Python gives the input's position among its inputs sorted by name
(allowed, exclude, history, user), the restored tf.functions (`serve`,
`serve_filtered`, `serve_raw`, `serve_raw_filtered`) its name.

`export` refuses, before writing anything, what could not be served: a
`max_length` that is not a positive integer or exceeds a SASRec's positions, a
model with non-finite item embeddings or whose trial request (a history of
padding) fails or answers NaN, `raw_ids="default"` or `integer_ids` without
`item_vocabulary`, integer raw ids that are not non-negative decimal int64
strings, a ScaNN index over a catalog too small for ScaNN.

Stock TensorFlow Serving lacks ScaNN's ops: serve the `index="brute_force"`
export there, or the ScaNN one from TF Serving built with ScaNN (the
`google/tf-serving-scann` image) or from Python.
"""

import inspect
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import logging

from tfrs_logq import _scann
from tfrs_logq import retrieval

INDEXES = ("brute_force", "scann")
RAW_IDS = ("strings", "default")
# What ScaNN's ops need to be saved (TFRS's efficient-serving guide).
SCANN_SAVE_OPTIONS = tf.saved_model.SaveOptions(namespace_whitelist=["Scann"])


def _item_variable(model, candidates: Optional[np.ndarray] = None):
    """(the number of items, the served item embeddings): `model`'s, filled into one
    variable a chunk at a time (`retrieval.ItemTable`), so that the export holds them once
    beside the model: every id's (row 0: padding), or with `candidates` only theirs (row j:
    candidates[j]).

    Raises:
      ValueError: not [num_items + 1, dim] with num_items >= 1, a candidate outside
        [1, num_items], or a non-finite row.
    """
    try:
        table = retrieval.ItemTable.of(model)
    except ValueError:
        table = None
    if table is None or table.num_ids < 2:
        shape = None if table is None else list(table.shape)
        raise ValueError(
            "`model.item_embeddings()` must be [num_items + 1, dim] (row 0: "
            f"padding) with num_items >= 1; received shape {shape}."
        )
    if candidates is not None:
        candidates = retrieval.searched_ids(table.num_ids, 1, candidates)
    served = table.num_ids if candidates is None else len(candidates)
    items = tf.Variable(
        tf.zeros([served, table.dim], tf.float32), trainable=False, name="item_embeddings"
    )
    bad: List[int] = []
    row = 0
    for ids, rows in (
        table.chunks(None, first_id=0) if candidates is None else table.chunks(candidates)
    ):
        finite = np.isfinite(rows).all(axis=1)
        if not finite.all():
            bad.extend(ids[~finite][: 7 - len(bad)].tolist())
        items[row : row + len(ids)].assign(rows)
        row += len(ids)
    if bad:
        raise ValueError(
            f"`model` has non-finite item embeddings (NaN or inf) in rows "
            f"{bad[:6]}{' ...' if len(bad) > 6 else ''} of {table.num_ids}: every answer "
            "would be NaN or arbitrary; not exported."
        )
    return table.num_ids - 1, items, candidates


class _Serving(tf.Module):
    """The exported module: the model's variables, the item table, the index, two signatures."""

    def __init__(
        self,
        model,
        num_items: int,
        item_embeddings: tf.Variable,
        k: int,
        index: str,
        max_length: int,
        takes_user: bool,
        item_vocabulary=None,
        user_vocabulary=None,
        scann_min_items: int = retrieval.SCANN_MIN_ITEMS,
        candidates: Optional[np.ndarray] = None,
        asset_dir: Optional[str] = None,
    ):
        super().__init__()
        # Raw (source) ids <-> dense ids; unknown raw ids map to 0, out of vocabulary. The
        # vocabularies are asset files (one id a line, in `asset_dir` until saved), not
        # constants of the graph: a catalog of millions of ids would be copied into the
        # GraphDef (and held by the exporting process) several times over.
        item_file = _vocabulary_file(asset_dir, "items.txt", item_vocabulary)
        self.item_dense = _lookup(item_file)
        self.user_dense = _lookup(_vocabulary_file(asset_dir, "users.txt", user_vocabulary))
        self.item_raw = _lookup(item_file, to_raw=True)
        self.model = model
        self.num_items = num_items
        # The ids answers come from: every item (rows 1.. of `items`; row 0 is padding), or
        # `candidates` (row j of `items` is candidates[j]).
        # A variable, not a constant: the graph stays small whatever the index's size.
        self.candidates = (
            None
            if candidates is None
            else tf.Variable(np.asarray(candidates, np.int64), trainable=False, name="candidates")
        )
        self.num_served = num_items if candidates is None else len(candidates)
        self.k = min(k, self.num_served)  # The static width of every answer.
        self.max_length, self.takes_user = max_length, takes_user
        self.items = item_embeddings  # `_item_variable`'s: the served items' one copy.
        # A catalog below `scann_min_items` is served by exact search whatever the index asked
        # for (see `retrieval.SCANN_MIN_ITEMS`); `export` says so.
        self.index_kind = (
            index if retrieval.uses_scann(self.num_served, scann_min_items) else "brute_force"
        )
        if self.index_kind == "scann":
            settings = retrieval.scann_defaults(self.num_served, self.k)
            # The request's history can be longer than any fixed over-fetch: the search asks
            # for k plus the longest history in the batch (`final_num_neighbors` is a tensor),
            # and a batch with a row left short after the exclusion is answered exactly.
            self.scann = tfrs.layers.factorized_top_k.ScaNN(
                k=self.k,
                num_leaves=min(settings["num_leaves"], max(self.num_served // 2, 1)),
                num_leaves_to_search=min(
                    settings["num_leaves_to_search"], max(self.num_served // 2, 1)
                ),
                num_reordering_candidates=max(settings["reorder"], self.k),
            )
            if self.candidates is None:
                self.scann.index(
                    item_embeddings[1:],
                    identifiers=tf.range(1, self.num_items + 1, dtype=tf.int64),
                )
            else:
                self.scann.index(item_embeddings.value(), identifiers=self.candidates.value())

    def _in_vocabulary(self, ids):
        return tf.logical_and(ids >= 1, ids <= self.num_items)

    def _history(self, history):
        """Known ids kept in order and moved right (unknown ids and any padding dropped);
        the last max_length of them, left-padded with 0: what the query model reads."""
        # A leading padding column keeps an empty history well-formed.
        history = tf.concat([tf.zeros_like(history[:, :1]), history], axis=1)
        known = self._in_vocabulary(history)
        order = tf.argsort(tf.cast(known, tf.int32), axis=1, stable=True)
        history = tf.where(
            tf.gather(known, order, batch_dims=1),
            tf.gather(history, order, batch_dims=1),
            tf.zeros_like(history),
        )
        history = history[:, -self.max_length :]
        pad = self.max_length - tf.shape(history)[1]
        return tf.cast(tf.pad(history, [[0, 0], [pad, 0]]), tf.int32)

    def _present(self, ids):
        """[batch, num_items + 1] bool: the known ids anywhere in each row of `ids` ([batch,
        n]). One scatter: memory O(batch x catalog), whatever n."""
        known = self._in_vocabulary(ids)
        positions = tf.where(known)  # [n, 2]: (row, column) of every known entry.
        ids = tf.gather_nd(ids, positions)
        indices = tf.stack([positions[:, 0], ids], axis=1)
        shape = tf.stack(
            [tf.shape(known, out_type=tf.int64)[0], tf.constant(self.num_items + 1, tf.int64)]
        )
        return tf.tensor_scatter_nd_update(
            tf.zeros(shape, tf.bool), indices, tf.ones_like(ids, tf.bool)
        )

    def _blocked(self, history, allowed=None, exclude=None):
        """[batch, num_items + 1] bool: the ids a row's answer may not hold: every id of its
        history (all of it, not only the last max_length), its `exclude` ids and, in a row
        whose `allowed` holds any id but the padding 0, every id outside them (so an unknown
        allowed id allows nothing). The one place a request's filters meet the index."""
        blocked = self._present(history)
        if exclude is not None:
            blocked = blocked | self._present(exclude)
        if allowed is not None:
            restricted = tf.reduce_any(tf.not_equal(allowed, 0), axis=1, keepdims=True)
            blocked = blocked | (restricted & tf.logical_not(self._present(allowed)))
        return blocked

    def _usable(self, ids, blocked):
        """[batch, n] bool: which of `ids` ([batch, n]) an answer may hold: known, not blocked."""
        known = self._in_vocabulary(ids)
        return tf.logical_and(
            known,
            tf.logical_not(
                tf.gather(blocked, tf.where(known, ids, tf.zeros_like(ids)), batch_dims=1)
            ),
        )

    def _exact(self, queries, blocked):
        scores = tf.matmul(queries, self.items, transpose_b=True)
        if self.candidates is not None:  # Row j: candidates[j].
            blocked = tf.gather(blocked, self.candidates, axis=1)
            scores = tf.where(blocked, tf.constant(-np.inf, scores.dtype), scores)
            scores, columns = tf.math.top_k(scores, k=self.k)
            return scores, tf.gather(self.candidates, columns)
        scores = tf.where(blocked, tf.constant(-np.inf, scores.dtype), scores)[:, 1:]
        scores, columns = tf.math.top_k(scores, k=self.k)
        return scores, tf.cast(columns, tf.int64) + 1

    def _approximate(self, queries, blocked):
        """The index's top k of each row's usable ids. It asks for k plus the most blocked
        ids of any row (it returns at most its re-scoring budget); a row left with fewer
        than k usable ids (a long history, a small allowed set) is answered by exact search,
        and only that row."""
        longest = tf.maximum(
            tf.reduce_max(tf.reduce_sum(tf.cast(blocked[:, 1:], tf.int32), axis=1)), 0
        )
        wanted = tf.minimum(self.k + longest, self.num_served)
        scores, ids = self.scann(queries, k=wanted)
        batch = tf.shape(queries)[0]
        scores = tf.reshape(scores, [batch, -1])
        ids = tf.reshape(tf.cast(ids, tf.int64), [batch, -1])
        # Slots the index could not fill (its searched partitions hold fewer ids than asked:
        # ScaNN pads them with its first id at a NaN score) count as unusable, like blocked
        # ids.
        usable = tf.logical_and(self._usable(ids, blocked), tf.logical_not(tf.math.is_nan(scores)))
        missing = [[0, 0], [0, tf.maximum(self.k - tf.shape(ids)[1], 0)]]  # At least k columns.
        scores = tf.pad(
            tf.where(usable, scores, tf.constant(-np.inf, scores.dtype)),
            missing,
            constant_values=-np.inf,
        )
        scores, columns = tf.math.top_k(scores, k=self.k)
        ids = tf.gather(tf.pad(ids, missing), columns, batch_dims=1)
        short = tf.where(tf.reduce_sum(tf.cast(usable, tf.int32), axis=1) < self.k)  # [rows, 1]
        exact_scores, exact_ids = self._exact(
            tf.gather_nd(queries, short), tf.gather_nd(blocked, short)
        )
        return (
            tf.tensor_scatter_nd_update(scores, short, exact_scores),
            tf.tensor_scatter_nd_update(ids, short, exact_ids),
        )

    def _top_k(self, queries, blocked):
        """Top-k (scores, ids) by the index, no blocked id among them, and how many of the k
        slots hold an item (`num_found`): when fewer than k ids are left (a history that
        covers all but j < k items, an allowed set of j unseen items), k - j slots are empty,
        id 0 (the padding id) and score -inf."""
        find = self._approximate if self.index_kind == "scann" else self._exact
        scores, ids = find(queries, blocked)
        found = self._usable(ids, blocked)
        ids = tf.where(found, ids, tf.zeros_like(ids))
        scores = tf.where(found, scores, tf.constant(-np.inf, scores.dtype))
        # Static width k for every batch size, 0 included.
        return {
            "ids": tf.ensure_shape(ids, [None, self.k]),
            "scores": tf.ensure_shape(scores, [None, self.k]),
            "num_found": tf.reduce_sum(tf.cast(found, tf.int32), axis=1),
        }

    def recommend(self, user, history, allowed=None, exclude=None):
        """The answer to a request of dense ids: `history` [batch, length] (padding 0), `user`
        [batch] for a two-tower model and, in the filtered signatures, `allowed` and `exclude`
        [batch, n] (padding 0; see `_blocked`)."""
        # Dtypes are enforced by the signature; the ranks (left unknown there, so that a
        # wrong one gets this message, naming the input) and the batch sizes here.
        history = _ranked(history, 2, "`history` must be [batch, length] item ids")
        if user is not None:
            user = _ranked(user, 1, "`user` must be [batch] user ids")
        allowed, exclude = _filters(allowed, exclude)
        with tf.control_dependencies(
            [
                tf.debugging.assert_equal(
                    tf.shape(tensor)[0],
                    tf.shape(history)[0],
                    message=f"`{name}` and `history` must have the same batch size",
                )
                for name, tensor in (("user", user), ("allowed", allowed), ("exclude", exclude))
                if tensor is not None
            ]
        ):
            history = tf.identity(history)
        padded = self._history(history)
        if self.takes_user:
            user = tf.where(self._in_vocabulary(user) | (user > 0), user, tf.zeros_like(user))
            user = tf.where(
                user < tf.cast(self.model.user_embedding.input_dim, tf.int64),
                user,
                tf.zeros_like(user),
            )
            queries = self.model.query_embeddings(
                {"user": tf.cast(user, tf.int32), "history": padded}
            )
        else:
            queries = self.model.query_embeddings(padded)
        return self._top_k(
            tf.cast(queries, self.items.dtype), self._blocked(history, allowed, exclude)
        )

    def _dense_items(self, ids, integer_ids: Sequence[str]):
        """Raw item ids -> (dense ids, 0 for padding and unknown ids; which ids are unknown).
        Padding is "" (strings) or any negative id (integers, `integer_ids`)."""
        if "item" in integer_ids:
            present = ids >= 0
            ids = tf.strings.as_string(ids)
        else:
            present = tf.not_equal(ids, "")
        dense = self.item_dense.lookup(ids)
        return dense, present & tf.equal(dense, 0)

    def recommend_raw(
        self, user, history, allowed=None, exclude=None, integer_ids: Sequence[str] = ()
    ):
        """`recommend` with raw ids in and out: strings, or int64 for the kinds ("user",
        "item") in `integer_ids` (their decimal strings are the vocabulary's keys). Item
        padding is "" (strings) or any negative id (integers); every other id the vocabulary
        lacks is counted (`unknown_<input>_ids`): skipped in `history` and `exclude`, and in
        `allowed` an id that allows nothing. A user the vocabulary lacks is answered from the
        user table's padding row and the history alone, and said (`unknown_user`, [batch]
        bool): with an empty history too, every such request gets the same answer."""
        history = _ranked(history, 2, "`history` must be [batch, length] item ids")
        if user is not None:
            user = _ranked(user, 1, "`user` must be [batch] user ids")
        if user is not None and "user" in integer_ids:
            user = tf.strings.as_string(user)
        dense_user = None if user is None else self.user_dense.lookup(user)
        allowed, exclude = _filters(allowed, exclude)
        dense, unknown = {}, {}
        for name, ids in (("history", history), ("allowed", allowed), ("exclude", exclude)):
            if ids is not None:
                dense[name], unknown[name] = self._dense_items(ids, integer_ids)
        if allowed is not None:  # -1: out of vocabulary, yet not padding.
            dense["allowed"] = tf.where(
                unknown["allowed"], tf.constant(-1, tf.int64), dense["allowed"]
            )
        answer = self.recommend(
            dense_user, dense["history"], dense.get("allowed"), dense.get("exclude")
        )
        ids = self.item_raw.lookup(answer["ids"] - 1)
        if "item" in integer_ids:
            ids = tf.strings.to_number(tf.where(tf.equal(ids, ""), "-1", ids), tf.int64)
        return {
            "ids": ids,
            "scores": answer["scores"],
            "num_found": answer["num_found"],
            **({} if dense_user is None else {"unknown_user": tf.equal(dense_user, 0)}),
            **{
                f"unknown_{name}_ids": tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
                for name, mask in unknown.items()
            },
        }

    @tf.function(input_signature=[tf.TensorSpec(None, tf.int64, name="item_ids")])
    def item_embeddings(self, item_ids):
        item_ids = _ranked(item_ids, 1, "`item_ids` must be [batch] item ids")
        rows = tf.where(self._in_vocabulary(item_ids), item_ids, tf.zeros_like(item_ids))
        if self.candidates is not None:  # Any item's, served or not: the model's own.
            return {"embeddings": tf.cast(self.model.item_embeddings(rows), self.items.dtype)}
        return {"embeddings": tf.gather(self.items, rows)}


def _ranked(tensor, rank: int, message: str):
    """`tensor` with its static rank set, behind a run-time check that it has `rank` (which
    every later op waits for, so the check's message is the error; TensorFlow appends the
    shape received)."""
    with tf.control_dependencies([tf.debugging.assert_rank(tensor, rank, message=message)]):
        tensor = tf.identity(tensor)
    tensor.set_shape([None] * rank)
    return tensor


def _filters(allowed, exclude):
    """The filtered signatures' `allowed` and `exclude` ([batch, n] item ids each, or None),
    their ranks checked."""
    return tuple(
        None
        if ids is None
        else _ranked(
            ids, 2, f"`{name}` must be [batch, n] item ids (padding where a row has fewer)"
        )
        for name, ids in (("allowed", allowed), ("exclude", exclude))
    )


def _vocabulary(name: str, values, size: int):
    """`values` as a list of `size` distinct strings (raw ids of dense ids 1..size), or None."""
    if values is None:
        return None
    values = [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).ravel()]
    if len(values) != size or len(set(values)) != size:
        raise ValueError(
            f"`{name}` must hold {size} distinct raw ids, one per dense id 1..{size}; received "
            f"{len(values)} ids ({len(set(values))} distinct)."
        )
    bad = next((v for v in values if not v or "\n" in v or "\r" in v), None)
    if bad is not None:  # The export's vocabulary files hold one id a line.
        raise ValueError(
            f"`{name}` holds the raw id {bad!r}; an exported raw id is a non-empty string "
            "without line breaks."
        )
    return values


def _max_length(model, max_length) -> int:
    """The history length the query model reads: `max_length`, checked to be a positive
    integer the model takes (at most a SASRec's `max_length`, its learned positions), or by
    default the model's `max_length`, else 50."""
    accepted = getattr(model, "max_length", None)
    if max_length is None:
        return accepted or 50
    if (
        isinstance(max_length, bool)
        or not isinstance(max_length, (int, np.integer))
        or (max_length < 1)
    ):
        raise ValueError(
            f"`max_length` must be a positive integer; received max_length={max_length!r}."
        )
    if accepted is not None and max_length > accepted:
        raise ValueError(
            f"`max_length` must be at most the model's max_length={accepted} (the "
            f"positions it learned); received max_length={max_length!r}."
        )
    return int(max_length)


def _check_integer_ids(name: str, vocabulary: Sequence[str]) -> None:
    """Raw ids served as int64 must be the decimal strings non-negative int64 ids print as
    ("7", not "07", "x7" or "-7"): the request's ids are printed to be looked up (a negative
    one is padding), the answer's parsed back."""
    bad = []
    for value in vocabulary:
        try:
            ok = str(int(value)) == value and 0 <= int(value) < 2**63
        except ValueError:  # Not a number, or too many digits for int().
            ok = False
        if not ok:
            bad.append(value)
            if len(bad) == 3:
                break
    if bad:
        raise ValueError(
            f"`integer_ids` serves the {name.split('_')[0]} ids as int64, so `{name}` must "
            "hold non-negative int64 ids as decimal strings (as str(int) prints them; a "
            "negative id is padding in a request); received "
            f"{name} with {', '.join(repr(b) for b in bad)}. Serve them as strings (leave "
            f'"{name.split("_")[0]}" out of integer_ids).'
        )


def _serving_function(
    answer, takes_user: bool, user_dtype: tf.DType, item_dtype: tf.DType, filtered: bool
):
    """`answer(user, history, allowed, exclude)` as a tf.function of a signature's named
    inputs: `user` (a two-tower model's), `history` and, if `filtered`, `allowed` and
    `exclude`. Ranks are left open: `recommend` checks them with a message naming the input
    (a signature's own shape check names neither it nor the expected shape)."""
    specs = [tf.TensorSpec(None, user_dtype, name="user")] if takes_user else []
    specs += [
        tf.TensorSpec(None, item_dtype, name=name)
        for name in ("history", "allowed", "exclude")[: 3 if filtered else 1]
    ]
    function: Callable[..., Any]  # The signature's arguments, by name.
    if takes_user and filtered:
        function = lambda user, history, allowed, exclude: answer(user, history, allowed, exclude)
    elif takes_user:
        function = lambda user, history: answer(user, history, None, None)
    elif filtered:
        function = lambda history, allowed, exclude: answer(None, history, allowed, exclude)
    else:
        function = lambda history: answer(None, history, None, None)
    return tf.function(function, input_signature=specs)


def _trial_request(serve, serve_filtered, takes_user: bool, max_length: int) -> None:
    """Answers one request (a history of `max_length` padding ids), plain and filtered (an
    allowed set and exclusions of padding), before anything is written: an export that
    cannot answer it, or answers NaN, is refused."""
    request = {"history": tf.zeros([1, max_length], tf.int64)}
    if takes_user:
        request["user"] = tf.zeros([1], tf.int64)
    filters = {"allowed": tf.zeros([1, 1], tf.int64), "exclude": tf.zeros([1, 1], tf.int64)}
    try:
        answers = [serve(**request), serve_filtered(**request, **filters)]
    except (tf.errors.OpError, ValueError) as error:
        raise ValueError(
            f"The export fails a trial request (a history of max_length={max_length} padding "
            f"ids), so it is not written: {str(error).splitlines()[0][:300]}"
        ) from error
    if any(np.isnan(answer["scores"].numpy()).any() for answer in answers):
        raise ValueError(
            "The export answers a trial request (a history of padding ids) with "
            "NaN scores: the query model gives NaN; not exported."
        )


def _vocabulary_file(directory: Optional[str], name: str, vocabulary) -> Optional[str]:
    """`vocabulary` (raw ids of dense ids 1..N) written to directory/name, one id a line
    (line i: dense id i + 1); None without a vocabulary."""
    if vocabulary is None:
        return None
    if directory is None:
        raise ValueError("`asset_dir` is needed to export a vocabulary.")
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for start in range(0, len(vocabulary), 1 << 16):
            f.write("".join(f"{value}\n" for value in vocabulary[start : start + (1 << 16)]))
    return path


def _lookup(path: Optional[str], to_raw: bool = False):
    """A table over the vocabulary file `path` (line i: dense id i + 1): raw id -> dense id
    1..N (0 for any other string); with `to_raw`, line number (dense id - 1) -> raw id (""
    for any other). None without a file."""
    if path is None:
        return None
    line, whole = tf.lookup.TextFileIndex.LINE_NUMBER, tf.lookup.TextFileIndex.WHOLE_LINE
    if to_raw:
        initializer = tf.lookup.TextFileInitializer(path, tf.int64, line, tf.string, whole)
        return tf.lookup.StaticHashTable(initializer, default_value="")
    initializer = tf.lookup.TextFileInitializer(
        path, tf.string, whole, tf.int64, line, value_index_offset=1
    )
    return tf.lookup.StaticHashTable(initializer, default_value=0)


def _next_version(path: str) -> int:
    versions = [
        int(name) for name in (os.listdir(path) if os.path.isdir(path) else []) if name.isdigit()
    ]
    return max(versions, default=0) + 1


class ScannOpsUnavailable(ImportError):
    """`export(index="scann")` where ScaNN is installed but its TensorFlow ops do not load on
    this TensorFlow (scann 1.4.2 builds them for TensorFlow 2.20)."""


def _require_scann_ops(what: str) -> None:
    """Raises `ScannOpsUnavailable` naming the fix when ScaNN's TensorFlow ops did not load."""
    if _scann.TF_OPS_ERROR is None:
        return
    raise ScannOpsUnavailable(
        f"{what} needs ScaNN's TensorFlow ops, which scann 1.4.2 builds for TensorFlow 2.20 "
        f"only; this is TensorFlow {tf.__version__} "
        f"({_scann.TF_OPS_ERROR.splitlines()[0][:300]}). Use exact search "
        "(index='brute_force', --index=exact), which works on every TensorFlow, or install "
        "TensorFlow 2.20 (pip install 'tensorflow~=2.20.0' 'tf-keras~=2.20.0'). Evaluation "
        "through ScaNN's own index works on both."
    )


def scann_export_available() -> bool:
    """Whether `export(index="scann")` can run here: ScaNN's TensorFlow ops loaded (scann
    1.4.2 builds them for TensorFlow 2.20; on 2.21 only its Python index, which evaluation
    uses, loads). False also where scann is not installed."""
    if _scann.TF_OPS_ERROR is not None:
        return False
    try:
        from scann.scann_ops.py import scann_ops  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return False
    return True


def export(
    model,
    path: str,
    *,
    k: int = 100,
    index: str = "brute_force",
    max_length: Optional[int] = None,
    version: Optional[int] = None,
    item_vocabulary: Optional[Sequence[str]] = None,
    user_vocabulary: Optional[Sequence[str]] = None,
    scann_min_items: int = retrieval.SCANN_MIN_ITEMS,
    raw_ids: str = "strings",
    integer_ids: Sequence[str] = (),
    candidates: Optional[Any] = None,
) -> str:
    """Writes a SavedModel of `model` (a `tfrs_logq.models.SASRec` or `TwoTower`) to
    `path/<version>/`, the layout TensorFlow Serving reads (`path` is its model base path).

    The SavedModel is written to a temporary directory beside it and renamed into place, so a
    process killed during the export leaves no partial version for a server to load.

    Args:
      model: a trained model with `query_embeddings` and `item_embeddings`.
      path: the model's base directory (created if missing).
      k: items returned per request (at most the catalog's size).
      index: "brute_force" (exact; plain TensorFlow) or "scann" (needs ScaNN's ops).
      max_length: history entries the query model reads (default: the model's
        `max_length`, else 50): a positive integer, at most a SASRec's `max_length`. The
        whole history a request carries is excluded from the answer, however long.
      version: the version number (default: one more than the highest in `path`, else 1).
      item_vocabulary: optional [num_items] raw ids of dense item ids 1..num_items (e.g.
        `Interactions.item_ids[1:]`): adds the `serving_raw` signature.
      user_vocabulary: optional [num_users] raw user ids of dense ids 1..num_users; needed
        with `item_vocabulary` by a two-tower model.
      raw_ids: with the vocabularies, where the raw ids are served: "strings" adds the
        `serving_raw` signature; "default" makes them `serving_default`, the dense one
        moving to `serving_dense`. The raw answer also holds `unknown_history_ids`, the count
        per request of history ids the vocabulary lacks (skipped, not an error).
      integer_ids: the raw ids ("user", "item") served as int64 (the source's own integer
        ids, whose decimal strings the vocabularies hold); the others are strings.
      scann_min_items: catalogs below it are served by exact search.
      candidates: the item ids answers come from (an index over part of the catalog, such
        as the items with the most training events); None: every item. The export holds
        their embeddings once; `item_embeddings` still answers for every item (from the
        model), and the history and filters still read every item.

    Returns:
      The version directory written (`path/<version>`). Its `serving_default` answers
      `ids` and `scores` ([batch, k]) and `num_found` ([batch] int32, the slots that hold
      an item: fewer than k when the history leaves fewer than k unseen items, the other
      slots then holding id 0, raw "" or -1, with score -inf). Its `serving_filtered`
      (and each raw or dense signature's `_filtered` twin) also takes `allowed` and
      `exclude` (see the module docstring).

    Raises:
      ValueError: an argument would give a model that cannot be served (see the module
        docstring), before anything is written.
      ScannOpsUnavailable: (an ImportError) index="scann" for a catalog of at least
        `scann_min_items` where ScaNN's TensorFlow ops do not load (scann 1.4.2's are built
        for TensorFlow 2.20; see `scann_export_available`), before anything is written.
    """
    if index not in INDEXES:
        raise ValueError(f"`index` must be one of {', '.join(INDEXES)}; received index={index!r}.")
    if raw_ids not in RAW_IDS:
        raise ValueError(
            f"`raw_ids` must be one of {', '.join(RAW_IDS)}; received raw_ids={raw_ids!r}."
        )
    if not set(integer_ids) <= {"user", "item"}:
        raise ValueError(
            f'`integer_ids` names kinds of ids, "user" and "item"; received '
            f"integer_ids={integer_ids!r}."
        )
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive integer; received k={k!r}.")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 1
    ):
        raise ValueError(f"`version` must be a positive integer; received version={version!r}.")
    if (
        isinstance(scann_min_items, bool)
        or not isinstance(scann_min_items, int)
        or (scann_min_items < 0)
    ):
        raise ValueError(
            "`scann_min_items` must be a non-negative integer; received "
            f"scann_min_items={scann_min_items!r}."
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            f"`path` must be a directory (the model's base path); received "
            f"path={path!r}, which is a file."
        )
    if raw_ids == "default" and item_vocabulary is None:
        raise ValueError(
            "raw_ids='default' serves the raw ids of `item_vocabulary` by default; "
            "received item_vocabulary=None (pass it, or raw_ids='strings')."
        )
    if integer_ids and item_vocabulary is None:
        raise ValueError(
            "`integer_ids` says which raw ids are served as int64 and needs "
            f"`item_vocabulary`; received integer_ids={integer_ids!r} and "
            "item_vocabulary=None."
        )
    version = version or _next_version(path)
    target = os.path.join(path, str(version))
    if os.path.exists(target):
        raise ValueError(f"{target} exists: pass another `version`, or none for the next one.")
    takes_user = hasattr(model, "user_embedding")
    max_length = _max_length(model, max_length)
    if candidates is not None and not (
        hasattr(model, "num_items") and "ids" in inspect.signature(model.item_embeddings).parameters
    ):
        raise ValueError(
            "`candidates` needs a model whose `item_embeddings` takes `ids` and that has "
            "`num_items` (tfrs_logq's SASRec and TwoTower): the export serves any item's "
            f"embedding from it; received a {type(model).__name__}."
        )
    num_items, item_table, served_ids = _item_variable(
        model, None if candidates is None else np.asarray(candidates, np.int64)
    )
    item_vocabulary = _vocabulary("item_vocabulary", item_vocabulary, num_items)
    if "item" in integer_ids:
        _check_integer_ids("item_vocabulary", item_vocabulary)
    if takes_user and item_vocabulary is not None:
        if user_vocabulary is None:
            raise ValueError(
                "A two-tower model needs `user_vocabulary` with `item_vocabulary` "
                "(the raw signature takes raw user ids); received "
                "user_vocabulary=None."
            )
        user_vocabulary = _vocabulary(
            "user_vocabulary", user_vocabulary, model.user_embedding.input_dim - 1
        )
        if "user" in integer_ids:
            _check_integer_ids("user_vocabulary", user_vocabulary)
    served = num_items if served_ids is None else len(served_ids)
    if index == "scann" and retrieval.uses_scann(served, scann_min_items):
        _require_scann_ops("index='scann'")
    # The vocabularies' files, until the SavedModel copies them into its assets.
    asset_dir = tempfile.mkdtemp(prefix="tfrs_logq-vocabulary-")
    try:
        try:
            module = _Serving(
                model,
                num_items,
                item_table,
                k,
                index,
                max_length,
                takes_user,
                item_vocabulary,
                user_vocabulary if takes_user else None,
                scann_min_items,
                served_ids,
                asset_dir,
            )
        except tf.errors.InvalidArgumentError as error:
            if index != "scann":
                raise
            raise ValueError(
                f"index='scann' cannot index this catalog of {served} items "
                f"(ScaNN: {str(error).splitlines()[0].split('}} ')[-1][:200]}); export it with "
                "index='brute_force', or raise scann_min_items above the catalog's size "
                f"(received scann_min_items={scann_min_items})."
            ) from error
        if module.index_kind != index:
            logging.warning(
                "index=%r: the catalog's %d items are fewer than scann_min_items=%d, "
                "so this export searches exactly (brute force), which is faster there "
                "and exact.",
                index,
                module.num_served,
                scann_min_items,
            )
        # Each answer twice: plain, and filtered (`allowed`, `exclude`: extra inputs, since a
        # TF Serving request must send every input of its signature).
        serve, serve_filtered = (
            _serving_function(module.recommend, takes_user, tf.int64, tf.int64, filtered)
            for filtered in (False, True)
        )
        module.serve, module.serve_filtered = serve, serve_filtered
        # The functions themselves, traced by the save (a parameter-server model's tables are
        # read whole there: `tfrs_logq.models._tables.saved_table`).
        signatures: Dict[str, tf.types.experimental.PolymorphicFunction] = {
            "serving_default": serve,
            "serving_filtered": serve_filtered,
            "item_embeddings": module.item_embeddings,
        }
        if item_vocabulary is not None:
            dtypes = {
                kind: tf.int64 if kind in integer_ids else tf.string for kind in ("user", "item")
            }
            integer_ids = tuple(integer_ids)
            serve_raw, serve_raw_filtered = (
                _serving_function(
                    lambda user, history, allowed, exclude: module.recommend_raw(
                        user, history, allowed, exclude, integer_ids
                    ),
                    takes_user,
                    dtypes["user"],
                    dtypes["item"],
                    filtered,
                )
                for filtered in (False, True)
            )
            module.serve_raw, module.serve_raw_filtered = serve_raw, serve_raw_filtered
            raw = {"serving_raw": serve_raw, "serving_raw_filtered": serve_raw_filtered}
            if raw_ids == "strings":
                signatures.update(raw)
            else:  # The log's own ids are the default; dense ids stay reachable.
                signatures["serving_dense"] = signatures["serving_default"]
                signatures["serving_dense_filtered"] = signatures["serving_filtered"]
                signatures["serving_default"] = raw["serving_raw"]
                signatures["serving_filtered"] = raw["serving_raw_filtered"]
        _trial_request(serve, serve_filtered, takes_user, max_length)
        os.makedirs(path, exist_ok=True)
        # A name TF Serving ignores (not a number), in the same directory so the rename is atomic.
        # One left by a process killed while writing this version (SIGKILL skips the `finally`
        # below) is removed first.
        for name in os.listdir(path):
            if name.startswith(f".{version}-partial-"):
                shutil.rmtree(os.path.join(path, name), ignore_errors=True)
        temporary = tempfile.mkdtemp(prefix=f".{version}-partial-", dir=path)
        try:
            tf.saved_model.save(
                module,
                temporary,
                signatures=signatures,
                options=SCANN_SAVE_OPTIONS if module.index_kind == "scann" else None,
            )
            os.rename(temporary, target)
        finally:
            if os.path.exists(temporary):
                shutil.rmtree(temporary, ignore_errors=True)
        return target
    finally:
        shutil.rmtree(asset_dir, ignore_errors=True)
