"""`LogQRetrieval.call`'s tensors checked before anything is scored: dtypes, ranks and every
size that would broadcast or slice silently, with errors that name the argument and the
shape received."""

import functools

import tensorflow as tf

from logq_core import checks
from tfrs_logq import _validation as v


def _shape(tensor: tf.Tensor) -> str:
    return checks._shape_text(  # pylint: disable=protected-access
        None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
    )


def checked_embeddings(query_embeddings, candidate_embeddings, sample_weight):
    """The task's float inputs, checked (dtype, rank, matching sizes) and cast to float32.

    Every size that would broadcast or slice silently is checked: fewer candidate rows than
    queries (the extra queries would have no positive, and a loss of 0), a "maxsim" query
    with no head (every score -inf), a `sample_weight` of another length (a [1] weight
    would broadcast over the batch).
    """
    query_embeddings = v.float_tensor("query_embeddings", query_embeddings)
    if query_embeddings.shape.rank not in (2, 3):
        raise ValueError(
            "`query_embeddings` must have shape [num_queries, dim] or "
            "[num_queries, num_heads, dim]; received query_embeddings with shape "
            f"{_shape(query_embeddings)}."
        )
    if query_embeddings.shape.rank == 3 and query_embeddings.shape[1] == 0:
        raise ValueError(
            "`query_embeddings` of shape [num_queries, num_heads, dim] are scored by their "
            'best head ("maxsim") and need num_heads >= 1; received query_embeddings with '
            f"shape {_shape(query_embeddings)}."
        )
    candidate_embeddings = v.float_tensor("candidate_embeddings", candidate_embeddings, rank=2)
    v.check_compatible_dim(
        "query_embeddings", query_embeddings, -1, "candidate_embeddings", candidate_embeddings, -1
    )
    candidate_embeddings = _check_enough_candidates(query_embeddings, candidate_embeddings)
    if sample_weight is not None:
        sample_weight = v.float_tensor("sample_weight", sample_weight, rank=1)
        v.check_compatible_dim(
            "sample_weight", sample_weight, 0, "query_embeddings", query_embeddings, 0
        )
    return query_embeddings, candidate_embeddings, sample_weight


def _check_enough_candidates(query_embeddings, candidate_embeddings):
    """`candidate_embeddings`, checked to hold a row (the positive) for every query: at trace
    time where both sizes are known, else by a graph assertion, and NaN where there are too
    few (XLA drops assertions: the loss is then NaN, never the 0 of the queries without a
    positive)."""
    message = (
        "`candidate_embeddings` must have at least one row per query (row i is query "
        "i's positive; extra rows are extra negatives)"
    )
    num_queries, num_candidates = query_embeddings.shape[0], candidate_embeddings.shape[0]
    if num_queries is not None and num_candidates is not None:
        if num_candidates < num_queries:
            raise ValueError(
                f"{message}; received candidate_embeddings with shape "
                f"{_shape(candidate_embeddings)} for query_embeddings with "
                f"shape {_shape(query_embeddings)}."
            )
        return candidate_embeddings
    enough = tf.shape(candidate_embeddings)[0] >= tf.shape(query_embeddings)[0]
    with tf.control_dependencies(
        [
            tf.debugging.assert_greater_equal(
                tf.shape(candidate_embeddings)[0],
                tf.shape(query_embeddings)[0],
                message=message + "; received fewer candidate rows than queries",
            )
        ]
    ):
        return v.nan_unless(enough, tf.identity(candidate_embeddings))


def checked_columns(
    query_embeddings, candidate_embeddings, candidate_ids, score_mask, candidate_mask
):
    """`candidate_ids`, `score_mask` and `candidate_mask` checked (dtype, rank) to match the
    queries and candidate columns: a [1]-sized one would broadcast silently. [N, 1]
    `candidate_ids` come back as [N]."""
    columns = ("candidate_embeddings", candidate_embeddings, 0)
    checked = []
    for name, value, convert, sizes in (
        ("candidate_ids", candidate_ids, v.id_vector, [(0, columns)]),
        (
            "score_mask",
            score_mask,
            functools.partial(v.bool_tensor, rank=2),
            [(0, ("query_embeddings", query_embeddings, 0)), (1, columns)],
        ),
        (
            "candidate_mask",
            candidate_mask,
            functools.partial(v.bool_tensor, rank=1),
            [(0, columns)],
        ),
    ):
        if value is not None:
            value = convert(name, value)
            for axis, other in sizes:
                v.check_compatible_dim(name, value, axis, *other)
        checked.append(value)
    return tuple(checked)


def checked_known_positives(
    query_embeddings,
    candidate_embeddings,
    candidate_ids,
    query_ids,
    known_positive_ids,
    known_positives,
    has_sampler,
):
    """`query_ids` [num_queries] (or [num_queries, 1], returned as [num_queries]),
    `known_positive_ids` [num_queries, k] and `known_positives` [num_queries, num_candidates]
    checked (dtype, rank, sizes; ids need `candidate_ids`; `known_positives` names candidate
    columns, which a sampler's negatives are not)."""
    for name, value in (("query_ids", query_ids), ("known_positive_ids", known_positive_ids)):
        if value is not None and candidate_ids is None:
            raise ValueError(
                f"`{name}` masks the candidates whose ids are known positives and "
                "needs `candidate_ids`; received candidate_ids=None."
            )
    queries = ("query_embeddings", query_embeddings, 0)
    if query_ids is not None:
        query_ids = v.id_vector("query_ids", query_ids)
        v.check_compatible_dim("query_ids", query_ids, 0, *queries)
    if known_positive_ids is not None:
        known_positive_ids = v.ids_tensor("known_positive_ids", known_positive_ids, rank=2)
        v.check_compatible_dim("known_positive_ids", known_positive_ids, 0, *queries)
        if (known_positive_ids.dtype == tf.string) != (
            tf.convert_to_tensor(candidate_ids).dtype == tf.string
        ):
            raise TypeError(
                "`known_positive_ids` must be ids of the kind of `candidate_ids`; received "
                f"known_positive_ids with dtype {known_positive_ids.dtype.name} and "
                f"candidate_ids with dtype {tf.convert_to_tensor(candidate_ids).dtype.name}."
            )
    if known_positives is not None:
        if has_sampler:
            raise ValueError(
                "`known_positives` marks candidate columns; a sampler's negatives are not "
                "the candidate columns: pass `query_ids` or `known_positive_ids` instead. "
                "Received known_positives that is not None."
            )
        known_positives = v.bool_tensor("known_positives", known_positives, rank=2)
        v.check_compatible_dim("known_positives", known_positives, 0, *queries)
        v.check_compatible_dim(
            "known_positives", known_positives, 1, "candidate_embeddings", candidate_embeddings, 0
        )
    return query_ids, known_positive_ids, known_positives
