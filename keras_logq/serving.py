"""A trained Keras 3 retrieval model, served with the source's raw ids, without TensorFlow.

`save` writes what serving needs as one version directory, `path/<version>/` (the layout of
`tfrs_logq.export`'s SavedModels, through a temporary directory renamed into place):

- `query.keras`: the query model, {"user": [B] int32, "history": [B, history_length]
  int32} -> [B, dim] (a functional model of stock layers and `keras.ops`: `keras.saving`
  reads it back on any backend);
- `candidates.npz`: the served candidates' dense ids and their [n, dim] float32
  embeddings (the item embeddings);
- `vocabularies.npz`: the raw user and item ids of dense ids 1, 2, ... (strings, or int64
  where the source's ids are integers), when given;
- `serving.json`: the format, `k`, `history_length` and which raw ids are integers.

`load` reads it back as a `Retriever`, which answers requests of raw ids as
`tfrs_logq.export`'s `serving_default` does: each request's top k candidates by exact
search on the backend's device (`keras_logq.ranking.exact_top_k`: ties to the lower id),
every item of its history excluded however long, the query reading the history's last
`history_length` known items; `num_found` slots hold an item (fewer than k when the history
leaves fewer), the others raw "" (-1 for integer ids, 0 for dense ids) with score -inf. A
raw item id the vocabulary lacks is skipped and counted (`unknown_history_ids`); an unknown
user is answered from the history alone (the padding user row) and said (`unknown_user`)::

    import keras_logq

    retriever = keras_logq.serving.load("runs/keras/export/keras/1")
    answer = retriever(users=["u17"], histories=[["i3", "i9"]])
    answer["ids"], answer["scores"], answer["num_found"]
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, Optional, Sequence

import keras
import numpy as np

from keras_logq import ranking

FORMAT = 1
QUERY_MODEL = "query.keras"
CANDIDATES = "candidates.npz"
VOCABULARIES = "vocabularies.npz"
SERVING = "serving.json"
KINDS = ("user", "item")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    return int(value)


def _vocabulary(kind: str, values, integer: bool) -> np.ndarray:
    """The raw ids of dense ids 1..n as saved: int64 for `integer`, else str; unique."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(
            f"`{kind}_vocabulary` must be 1-D raw ids; received shape {list(values.shape)}."
        )
    if integer:
        try:
            saved = np.asarray([int(str(value)) for value in values], np.int64)
        except ValueError as error:
            raise ValueError(
                f"integer_ids holds {kind!r}, but `{kind}_vocabulary` holds an id that is not "
                f"a decimal integer: {error}."
            ) from None
        if (saved < 0).any():
            raise ValueError(
                f"integer_ids holds {kind!r}, but `{kind}_vocabulary` holds a negative id "
                f"({int(saved.min())}): -1 marks an empty slot."
            )
    else:
        saved = values.astype(str)
    if len(np.unique(saved)) != len(saved):
        raise ValueError(f"`{kind}_vocabulary` must hold each raw id once.")
    return saved


def save(
    path: str,
    query_model,
    candidate_ids,
    candidate_embeddings,
    *,
    history_length: int,
    k: int = 100,
    user_vocabulary: Optional[Sequence] = None,
    item_vocabulary: Optional[Sequence] = None,
    integer_ids: Sequence[str] = (),
    num_users: Optional[int] = None,
    num_items: Optional[int] = None,
    version: Optional[int] = None,
) -> str:
    """Writes a servable version of a retrieval model to `path/<version>/` (see the module):
    a two-tower, or a sequence model whose query reads the history alone (its query model
    takes the "user" input and does not read it).

    Args:
      path: the model's base directory (created if missing).
      query_model: a Keras model {"user": [B], "history": [B, history_length]} ->
        [B, dim], dense ids in (0: padding).
      candidate_ids: [n] the served items' dense ids (unique, from 1).
      candidate_embeddings: [n, dim] their embeddings (finite), row i of candidate_ids[i].
      history_length: the history entries the query model reads.
      k: items an answer holds at most.
      user_vocabulary, item_vocabulary: the raw ids of dense ids 1, 2, ...; both or
        neither (then requests carry dense ids).
      integer_ids: the kinds ("user", "item") whose raw ids are integers (served as int64).
      num_users, num_items: the dense ids the query model's tables hold (1..n; default: the
        vocabularies' lengths, needed without them); a request's dense id past them is
        unknown.
      version: the version's number (default: one more than the highest in `path`, else 1).

    Returns:
      The version directory written.

    Raises:
      ValueError: an argument that could not be served, named, before anything is written.
    """
    k = _positive_int("k", k)
    history_length = _positive_int("history_length", history_length)
    ids = np.asarray(candidate_ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or (ids < 1).any():
        smallest = f", smallest {ids.min()}" if ids.size and ids.dtype.kind in "iu" else ""
        raise ValueError(
            "`candidate_ids` must be 1-D dense item ids from 1; received dtype "
            f"{ids.dtype}, shape {list(ids.shape)}{smallest}."
        )
    if len(np.unique(ids)) != len(ids):
        raise ValueError("`candidate_ids` must hold each id once.")
    embeddings = np.asarray(keras.ops.convert_to_numpy(candidate_embeddings), np.float32)
    if embeddings.ndim != 2 or len(embeddings) != len(ids):
        raise ValueError(
            f"`candidate_embeddings` must be [len(candidate_ids), dim] = [{len(ids)}, dim]; "
            f"received shape {list(embeddings.shape)}."
        )
    if not np.isfinite(embeddings).all():
        raise ValueError("`candidate_embeddings` holds NaN or infinite values: not servable.")
    if (user_vocabulary is None) != (item_vocabulary is None):
        raise ValueError(
            "`user_vocabulary` and `item_vocabulary` go together (raw ids in and out) or not "
            "at all (dense ids)."
        )
    if user_vocabulary is not None and item_vocabulary is not None:
        num_users = len(user_vocabulary) if num_users is None else num_users
        num_items = len(item_vocabulary) if num_items is None else num_items
    if num_users is None or num_items is None:
        raise ValueError(
            "Without vocabularies, `num_users` and `num_items` are needed: requests of dense "
            "ids past the query model's tables are then answered as unknown ids."
        )
    num_users, num_items = (
        _positive_int("num_users", num_users),
        _positive_int("num_items", num_items),
    )
    unknown = sorted(set(integer_ids) - set(KINDS))
    if unknown:
        raise ValueError(f"`integer_ids` holds {unknown}; it takes {list(KINDS)}.")
    vocabularies = {}
    if item_vocabulary is not None:
        vocabularies = {
            kind: _vocabulary(kind, values, kind in integer_ids)
            for kind, values in (("user", user_vocabulary), ("item", item_vocabulary))
        }
        if ids.max() > len(vocabularies["item"]):
            raise ValueError(
                f"`candidate_ids` holds {int(ids.max())}, past the item vocabulary's "
                f"{len(vocabularies['item'])} ids."
            )
    trial = query_model(
        {"user": np.zeros([1], np.int32), "history": np.zeros([1, history_length], np.int32)}
    )
    if tuple(trial.shape) != (1, embeddings.shape[1]):
        raise ValueError(
            f"The query model answers shape {list(trial.shape)} for one request; the "
            f"candidates' embeddings are {embeddings.shape[1]}-dimensional."
        )
    os.makedirs(path, exist_ok=True)
    if version is None:
        numbered = [int(name) for name in os.listdir(path) if name.isdigit()]
        version = max(numbered, default=0) + 1
    version = _positive_int("version", version)
    target = os.path.join(path, str(version))
    if os.path.exists(target):
        raise ValueError(f"{target} exists: give another `version`.")
    partial = tempfile.mkdtemp(prefix=f".{version}-", dir=path)
    try:
        with _tensorflow_unimported():
            query_model.save(os.path.join(partial, QUERY_MODEL))
        np.savez(os.path.join(partial, CANDIDATES), ids=ids.astype(np.int64), embeddings=embeddings)
        if vocabularies:
            np.savez(os.path.join(partial, VOCABULARIES), **vocabularies)  # type: ignore[arg-type]
        with open(os.path.join(partial, SERVING), "w") as f:
            json.dump(
                dict(
                    format=FORMAT,
                    k=k,
                    history_length=history_length,
                    raw_ids=bool(vocabularies),
                    integer_ids=sorted(integer_ids) if vocabularies else [],
                    num_users=num_users,
                    num_items=num_items,
                ),
                f,
                indent=1,
            )
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


@contextlib.contextmanager
def _tensorflow_unimported():
    """Keras's serialisation asks whether TensorFlow is importable (to handle its types) by
    importing it: a Keras export from a process without TensorFlow stays without it (TensorFlow
    marked unimportable while the model is written, where it is not imported already)."""
    if "tensorflow" in sys.modules:
        yield
        return
    sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError.
    try:
        yield
    finally:
        if sys.modules.get("tensorflow", 0) is None:
            del sys.modules["tensorflow"]


class _Lookup:
    """Raw id -> dense id (0: unknown) by binary search over the sorted vocabulary."""

    def __init__(self, vocabulary: np.ndarray):
        self.vocabulary = vocabulary
        self.order = np.argsort(vocabulary, kind="stable")
        self.sorted = vocabulary[self.order]

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        # Each request id whole (a fixed-width cast would cut a longer unknown id down to a
        # known one); numpy compares strings of any widths.
        raw = np.asarray(raw).astype(str if self.sorted.dtype.kind == "U" else np.int64)
        if not len(raw) or not len(self.sorted):
            return np.zeros(len(raw), np.int64)
        found = np.searchsorted(self.sorted, raw).clip(max=len(self.sorted) - 1)
        known = self.sorted[found] == raw
        return np.where(known, self.order[found] + 1, 0).astype(np.int64)


class Retriever:
    """A version directory `save` wrote, served (see the module). Attributes: `k`,
    `history_length`, `raw_ids` (requests carry raw ids), `integer_ids`, `query_model`,
    `candidate_ids`, `candidate_embeddings` (on the backend's device)."""

    def __init__(self, directory: str):
        settings_path = os.path.join(directory, SERVING)
        if not os.path.exists(settings_path):
            raise FileNotFoundError(
                f"{directory} holds no {SERVING}: not a version directory that "
                "keras_logq.serving.save wrote (give path/<version>)."
            )
        with open(settings_path) as f:
            settings = json.load(f)
        if settings.get("format") != FORMAT:
            raise ValueError(
                f"{settings_path}: format {settings.get('format')!r}; this library reads "
                f"format {FORMAT}."
            )
        self.k = settings["k"]
        self.history_length = settings["history_length"]
        self.raw_ids = settings["raw_ids"]
        self.integer_ids = tuple(settings["integer_ids"])
        self.sizes = {"user": settings["num_users"], "item": settings["num_items"]}
        self.query_model = keras.saving.load_model(os.path.join(directory, QUERY_MODEL))
        with np.load(os.path.join(directory, CANDIDATES)) as candidates:
            self.candidate_ids = candidates["ids"]
            self.candidate_embeddings = keras.ops.convert_to_tensor(candidates["embeddings"])
        self._lookups: Dict[str, _Lookup] = {}
        if self.raw_ids:
            with np.load(os.path.join(directory, VOCABULARIES)) as vocabularies:
                self._lookups = {kind: _Lookup(vocabularies[kind]) for kind in KINDS}

    def _dense(self, kind: str, raw) -> np.ndarray:
        """Raw ids (or dense ids, without vocabularies) -> dense ids, 0 where unknown (a dense
        id outside 1..the table's last row included)."""
        raw = np.asarray(raw)
        if not self.raw_ids:
            if raw.dtype.kind not in "iu":
                raise ValueError(
                    f"The {kind} ids are dense integer ids in this model; received dtype "
                    f"{raw.dtype}."
                )
            dense = raw.astype(np.int64)
            return np.where((dense > 0) & (dense <= self.sizes[kind]), dense, 0)
        if kind in self.integer_ids:
            if raw.dtype.kind not in "iu":
                raise ValueError(
                    f"The {kind} ids are integers in this model; received dtype {raw.dtype}."
                )
            return self._lookups[kind](raw.astype(np.int64))
        return self._lookups[kind](raw.astype(str))

    def _padding(self, history: np.ndarray) -> np.ndarray:
        """Where a history holds padding: "" or a negative id raw, 0 (or less) dense."""
        if history.dtype.kind in "USO":
            return history.astype(str) == ""
        if self.raw_ids and "item" in self.integer_ids:
            return history < 0
        return history <= 0 if not self.raw_ids else np.zeros(len(history), bool)

    def __call__(self, users, histories, k: Optional[int] = None) -> Dict[str, Any]:
        """The answer to a batch of requests.

        Args:
          users: [B] user ids (raw, or dense without vocabularies).
          histories: B sequences of item ids, each any length (padding: "" or a negative id
            raw, 0 dense, skipped); every one is excluded from its row's answer.
          k: items a row holds at most (default: the saved `k`).

        Returns:
          {"ids": [B, k] item ids, "scores": [B, k] float32, "num_found": [B] int32,
          "unknown_history_ids": [B] int32, "unknown_user": [B] bool}.
        """
        k = self.k if k is None else _positive_int("k", k)
        users = np.asarray(users)
        if users.ndim != 1 or len(users) != len(histories):
            raise ValueError(
                f"`users` must be [B] ids and `histories` B sequences; received users of shape "
                f"{list(users.shape)} and {len(histories)} histories."
            )
        dense_users = self._dense("user", users) if len(users) else np.zeros(0, np.int64)
        known_histories, unknown = [], np.zeros(len(users), np.int32)
        for row, history in enumerate(histories):
            history = np.asarray(history)
            if history.ndim != 1:
                raise ValueError(
                    f"Each history must be a sequence of item ids; row {row} has shape "
                    f"{list(history.shape)}."
                )
            history = history[~self._padding(history)]
            dense = self._dense("item", history) if len(history) else np.zeros(0, np.int64)
            unknown[row] = int((dense == 0).sum())
            known_histories.append(dense[dense > 0])
        queries = np.zeros((len(users), self.history_length), np.int32)
        for row, dense in enumerate(known_histories):
            recent = dense[-self.history_length :]
            queries[row, self.history_length - len(recent) :] = recent
        embedded = self.query_model({"user": dense_users.astype(np.int32), "history": queries})
        ids, scores = ranking.exact_top_k(
            embedded,
            self.candidate_ids,
            self.candidate_embeddings,
            k,
            known_histories,
            return_scores=True,
        )
        found = ids != ranking.NO_ITEM
        if self.raw_ids:
            vocabulary = self._lookups["item"].vocabulary
            empty = -1 if "item" in self.integer_ids else ""
            answer = np.full(ids.shape, empty, vocabulary.dtype if empty == -1 else object)
            answer[found] = vocabulary[ids[found] - 1]
        else:
            answer = np.where(found, ids, 0)
        return dict(
            ids=answer,
            scores=scores,
            num_found=found.sum(axis=1).astype(np.int32),
            unknown_history_ids=unknown,
            unknown_user=(dense_users == 0) if len(users) else np.zeros(0, bool),
        )


def load(directory: str) -> Retriever:
    """The `Retriever` of a version directory `save` wrote."""
    return Retriever(directory)


__all__ = ["Retriever", "load", "save"]
