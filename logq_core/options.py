"""The choices and defaults of settings that the TensorFlow models and the pipelines' configs
(`pipelines.configs`, which imports no TensorFlow) share: each defined once here, re-exported
where it is used (`tfrs_logq.models.objective.LOSSES`, `tfrs_logq.retrieval.SCANN_MIN_ITEMS`).
The corrections and the samplers' names are the maths' own (`formulas.CORRECTIONS`,
`samplers.KINDS`)."""

# The training objective (`tfrs_logq.models.Objective`).
LOSSES = ("sampled_softmax", "full_softmax", "bce", "gbce")
# How bce / gbce reduce a row's 1 + n terms: their sum, or their mean (gSASRec's code).
BINARY_REDUCTIONS = ("sum", "mean")
# gBCE's alpha = n / (|D| - 1) (the gSASRec paper), or n / (|D| - 2) as gSASRec's code
# computes it (gbce.py: alpha = negatives / (pool_size - 1), train_gsasrec.py passes
# pool_size = num_items - 1).
GBCE_ALPHAS = ("paper", "released")

# The sequential model's blocks (`tfrs_logq.models.SASRec`).
ARCHITECTURES = ("sasrec", "gsasrec")

# Below this many items a ScaNN request is answered by exact search. Measured on 2 CPU cores
# (2,048 queries, dim 64, clustered embeddings, `scann_defaults`): at 3,000 items ScaNN was
# 2.8x faster than exact search but returned 88% of the exact top-100; from 10,000 items on it
# returned >= 99.7% at 4.6x (10k), 8.9x (30k), 17x (100k) and 37x (300k). Exact search over
# fewer items costs milliseconds, so the index is not worth its recall there.
SCANN_MIN_ITEMS = 10_000
